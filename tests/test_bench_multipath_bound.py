"""The known-channel receivers of benchmarks/multipath_bound.py: the MMSE filter's gain and
residual, the unequalized receiver's interference, and the table by delay spread."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmark_modules import load_benchmark

mpb = load_benchmark("multipath_bound")


def _qpsk(n: int, rng: np.random.Generator) -> np.ndarray:
    return ((rng.integers(0, 2, n) * 2 - 1) + 1j * (rng.integers(0, 2, n) * 2 - 1)) / math.sqrt(2)


def _through(s: np.ndarray, g: np.ndarray, sps: int, n0: float, rng: np.random.Generator) -> np.ndarray:
    up = np.zeros(s.size * sps, complex)
    up[::sps] = s
    x = np.convolve(up, g)
    return x + math.sqrt(n0 / 2) * (rng.standard_normal(x.size) + 1j * rng.standard_normal(x.size))


@pytest.mark.parametrize("sps", [2, 7])
def test_the_mmse_filter_on_a_flat_channel_is_the_matched_filter(sps):
    """No interference: the gain is Es/N0 / (1 + Es/N0) with Es/N0 = 1 / n0 per matched-filter output."""
    g = mpb.composite_pulse(sps, 0.25, np.array([1.0 + 0j]))
    _, _, beta = mpb.mmse_filter(g, sps, 0.01)
    assert beta == pytest.approx(1 / 1.01, abs=2e-3)


@pytest.mark.parametrize("sps", [2, 5])
def test_the_receivers_predicted_noise_is_what_their_outputs_carry(sps):
    """On a four-tap channel: the MMSE output's error is (1 - beta) / beta once scaled by
    1 / beta, and the unequalized matched filter's error is the interference it predicts."""
    rng = np.random.default_rng(sps)
    h = np.array([0.8, 0.5j, -0.3, 0.2])
    g = mpb.composite_pulse(sps, 0.3, h)
    n0 = 0.01
    s = _qpsk(4000, rng)
    r = _through(s, g, sps, n0, rng)
    w, offset, beta = mpb.mmse_filter(g, sps, n0)
    z = mpb.equalized(r, s.size, w, offset, sps)
    skip = sum(1 for k in range(s.size) if k * sps + offset < 0)
    z = z[:s.size - skip - 40] / beta
    measured = np.mean(np.abs(z - s[skip:skip + z.size]) ** 2)
    assert measured == pytest.approx((1 - beta) / beta, rel=0.1)
    assert beta < 0.99                              # the channel costs something
    y, predicted = mpb.unequalized(r, s.size, g, sps, 0.3, n0)
    inner = slice(20, s.size - 60)
    assert np.mean(np.abs(y[inner] - s[inner]) ** 2) == pytest.approx(predicted, rel=0.1)
    assert predicted > 2 * (1 - beta) / beta        # and the equalizer wins most of it back


def test_the_table_counts_bursts_by_their_delay_spread_in_symbols():
    rows = [{"class": 0, "spread_symbols": 0.0, **{rx: 0 for rx in mpb.RECEIVERS}},
            {"class": 1, "spread_symbols": 0.15, **{rx: 1 for rx in mpb.RECEIVERS}},
            {"class": 2, "spread_symbols": 0.5, **{rx: 0 for rx in mpb.RECEIVERS}}]
    table = mpb.summarize(rows)
    assert table["0.1-0.2"]["n"] == 1 and table["0.1-0.2"]["MMSE"] == 1.0
    assert table["0.4-inf"]["n"] == 1 and table["0.4-inf"]["MMSE"] == 0.0
    assert table["all"]["n"] == 3 and table["all"]["no channel"] == pytest.approx(2 / 3)
    assert math.isnan(table["0.2-0.4"]["MMSE"])


def test_a_quick_run_decides_every_burst():
    rows = mpb.run(1, np.random.default_rng(0), mpb.hob.hypotheses())
    assert len(rows) == 12
    for r in rows:
        assert all(-1 <= r[rx] < 12 for rx in mpb.RECEIVERS) and r["spread_symbols"] > 0


def test_a_filter_trained_on_the_true_symbols_undoes_symbol_spaced_interference():
    rng = np.random.default_rng(4)
    s = _qpsk(300, rng)
    y = s + 0.5 * np.concatenate([[0], s[:-1]]) - 0.2j * np.concatenate([[0, 0], s[:-2]])
    z = mpb.trained(y, s, mpb.TRAINED_TAPS)
    assert np.mean(np.abs(z[10:] - s[10:]) ** 2) < 1e-2 < np.mean(np.abs(y - s) ** 2)


def test_the_soft_fit_names_a_clean_constellation():
    from rfclassify.dsp.constellations import constellation
    from rfclassify.labels import HIGH_ORDER_LABELS

    rng = np.random.default_rng(8)
    for label in ("16QAM", "32PSK"):
        a = constellation(label)
        y = a[rng.integers(0, a.size, 400)] * np.exp(0.7j)
        y = y + 0.01 * (rng.standard_normal(400) + 1j * rng.standard_normal(400))
        assert mpb._soft_class_equalizer_decision(y) == HIGH_ORDER_LABELS.index(label)
