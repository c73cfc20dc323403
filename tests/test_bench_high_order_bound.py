"""The genie bound of benchmarks/high_order_bound.py: the likelihood, the decisions at the SNR
extremes, and the Es/N0 conversion against the real synthesizer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rfclassify.dsp.constellations import apsk
from rfclassify.labels import HIGH_ORDER_LABELS

from benchmark_modules import load_benchmark

hob = load_benchmark("high_order_bound")

HYP = hob.hypotheses()
N_CLASS = len(HIGH_ORDER_LABELS)


def test_hypotheses_are_the_products_alphabets() -> None:
    assert HYP.sizes.size == 10 + 6 + 5  # one alphabet per DVB-S2 ring ratio of 16/32APSK
    assert np.allclose([np.mean(np.abs(a) ** 2) for a in HYP.alphabets], 1.0, atol=1e-6)
    i16 = HIGH_ORDER_LABELS.index("16APSK")
    first = np.flatnonzero(HYP.variant_class == i16)[0]
    assert np.allclose(HYP.alphabets[first], apsk((4, 12), (1.0, 3.15)))
    sizes = {HIGH_ORDER_LABELS[c]: int(HYP.sizes[HYP.variant_class == c][0]) for c in range(N_CLASS)}
    assert sizes == {"8PSK": 8, "16PSK": 16, "32PSK": 32, "16APSK": 16, "32APSK": 32, "64APSK": 64,
                     "128APSK": 128, "16QAM": 16, "32QAM": 32, "64QAM": 64, "128QAM": 128, "256QAM": 256}


def test_symbol_loglik_matches_a_direct_evaluation() -> None:
    rng = np.random.default_rng(3)
    y = rng.standard_normal(37) + 1j * rng.standard_normal(37)
    inv_n0 = rng.uniform(0.5, 50.0, 37)
    got = hob.symbol_loglik(y, inv_n0, HYP)
    for v, a in enumerate(HYP.alphabets):
        d = -np.abs(y[:, None] - a[None, :]) ** 2 * inv_n0[:, None]
        direct = np.log(np.mean(np.exp(d), axis=1))
        # symbol_loglik drops the per-symbol constant -|y|^2 / N0, shared by every alphabet.
        assert np.allclose(got[:, v] - np.abs(y) ** 2 * inv_n0, direct, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("c", range(N_CLASS))
def test_likelihood_picks_the_true_constellation_on_noiseless_symbols(c: int) -> None:
    rng = np.random.default_rng(c)
    counts = np.array([400])
    y = hob.draw_symbols(np.array([c]), counts, HYP, rng)
    # N0 tiny: an exact point scores log(1/M); a subset alphabet (8PSK in 16PSK) still wins by 1/M.
    ll = hob.class_loglik(hob.symbol_loglik(y, np.full(y.size, 1e6), HYP), counts, HYP)
    assert ll.argmax(axis=1)[0] == c


def test_genie_is_nearly_perfect_at_40_db_es_n0_with_512_symbols() -> None:
    rng = np.random.default_rng(1)
    classes = np.repeat(np.arange(N_CLASS), 4)
    sps = np.full(classes.size, 4.0)  # SNR 34 dB + 10 log10(4) = 40 dB Es/N0
    tight, every = hob.genie_decide(classes, 34.0, sps, np.full(classes.size, 512), 0, HYP, rng)
    assert np.mean(tight == classes) >= 0.97
    assert np.array_equal(tight, every)  # no extra symbols: both decisions see the same data


def test_genie_is_at_chance_at_minus_20_db() -> None:
    rng = np.random.default_rng(2)
    cell = hob.run_cell(128, -20.0, 40, HYP, rng)
    # 480 bursts: chance 1/12 = 8.3 %, binomial sd 1.3 %; with so few symbols nothing separates.
    assert abs(cell["accuracy"] - 1 / N_CLASS) < 0.05


def test_accuracy_rises_with_snr_and_all_symbols_never_hurts_much() -> None:
    rng = np.random.default_rng(4)
    low = hob.run_cell(256, 0.0, 20, HYP, rng)
    high = hob.run_cell(256, 16.0, 20, HYP, rng)
    assert high["accuracy"] > low["accuracy"] + 0.3
    assert high["accuracy_all_symbols"] >= high["accuracy"] - 0.05


def test_es_n0_conversion_matches_the_synthesizer_matched_filter() -> None:
    # 8PSK: constant symbol energy, so only the noise estimate scatters (sd ~4.3/sqrt(K) dB).
    rows = hob.measure_es_n0(6.0, 4096, 8, np.random.default_rng(5), label="8PSK")
    err = np.array([r["measured_es_n0_db"] - r["predicted_es_n0_db"] for r in rows])
    for r, e in zip(rows, err, strict=True):
        # The conversion the genie uses, pinned against the textbook SNR * sps.
        assert hob.es_n0_db(6.0, r["sps"]) == pytest.approx(6.0 + 10 * math.log10(r["sps"]))
        assert r["predicted_es_n0_db"] == pytest.approx(hob.es_n0_db(6.0, r["sps"]))
        assert abs(e) < 4 * 4.34 / math.sqrt(r["n_symbols"]), r
        assert r["noise_lag1_correlation"] < 4 / math.sqrt(r["n_symbols"])  # root-Nyquist: white
    assert abs(err.mean()) < 0.25  # a wrong conversion (e.g. sps/2 or 1/sps) is off by >= 3 dB
    assert np.ptp([r["sps"] for r in rows]) > 3  # the check spans several symbol rates


def test_summary_implied_28_class_cap() -> None:
    cells = [{"snr_db": s, "accuracy": a, "se": 0.0} for s, a in ((0.0, 0.2), (10.0, 0.8), (20.0, 1.0))]
    s = hob.summarize(cells, "accuracy")
    assert s["mean_over_snr"] == pytest.approx(2.0 / 3)
    assert s["snr_ge_10db"] == pytest.approx(0.9)
    assert s["implied_28_class_snr_ge_10db_cap"] == pytest.approx((12 * 0.9 + 16) / 28)
