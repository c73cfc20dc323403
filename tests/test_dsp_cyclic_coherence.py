"""The symbol rate from a burst's spectral coherence (rfclassify.dsp.cyclic_coherence)."""

from __future__ import annotations

import numpy as np
import pytest

from rfclassify.dsp import cyclic_coherence as cc
from rfclassify.dsp import symbol_clock as sc
from rfclassify.dsp.channel import ChannelConfig
from rfclassify.dsp.synth import synthesize
from rfclassify.labels import HIGH_ORDER_LABELS


def _brute_force(x: np.ndarray, bins: int) -> np.ndarray:
    """S(m) straight from its definition: one product per (shift, bin), circular."""
    spec = np.fft.fft(x, cc.PAD * x.size)
    n = spec.size
    k = np.arange(n)

    def banded(v: np.ndarray) -> np.ndarray:      # Sum_{j<bins} v(k + j)
        return sum(v[(k + j) % n] for j in range(bins))
    power = banded(np.abs(spec) ** 2)
    out = np.zeros(n)
    for m in range(n):
        summed = banded(spec[(k + m) % n] * np.conj(spec))
        out[m] = np.sum(np.abs(summed) ** 2) / np.sum(power[(k + m) % n] * power)
    return out


def test_the_fast_coherence_is_its_definition():
    """The L transform pairs give what one product per shift and bin gives."""
    x = np.random.default_rng(3).standard_normal(40) + 1j * np.random.default_rng(4).standard_normal(40)
    for bins in (1, 3, 8):
        np.testing.assert_allclose(cc.coherence(x, bins), _brute_force(x, bins), rtol=1e-9, atol=1e-12)


def test_the_smoothing_band_is_a_fixed_width_in_frequency_within_its_bounds():
    assert cc.smoothing_bins(cc.PAD * 128) == cc.MIN_BINS
    assert cc.smoothing_bins(cc.PAD * 1024) == 32          # 1/64 cycle
    assert cc.smoothing_bins(cc.PAD * 4096) == cc.MAX_BINS


@pytest.mark.parametrize("sps", [2.3, 4.0, 7.7, 15.0])
def test_the_strongest_coherence_line_is_the_symbol_rate_of_a_clean_burst(sps):
    """64QAM at roll-off 0.15, where the |x|^2 line is weakest, 25 dB: the rate within 0.3 %."""
    from rfclassify.dsp.linear import modulate_linear

    rng = np.random.default_rng(int(sps * 10))
    t = np.arange(1024, dtype=np.float64)[None, :]
    iq, _ = modulate_linear("64QAM", t, np.array([sps]), np.array([0.15]), np.array([0.37 * sps]), rng)
    x = iq[0] * np.exp(2j * np.pi * 0.013 * t[0] + 1.0j)
    x = x + 10 ** (-25 / 20) * (rng.standard_normal(1024) + 1j * rng.standard_normal(1024)) / np.sqrt(2)
    (found, strength), = cc.coherence_lines(x)
    assert found == pytest.approx(sps, rel=3e-3)
    assert strength > 2.0


def test_the_coherence_rule_misses_far_fewer_rates_than_the_lines_of_x_squared():
    """Full impairments (multipath on most bursts, roll-offs down to 0.15) at 10-30 dB: the
    served rule of the shipped refiner misses the rate by more than 2 % several times as often
    (thirty-first session: 6.8 % of high-order bursts against 0.5 %)."""
    rng = np.random.default_rng(31)
    n = 160
    labels = [HIGH_ORDER_LABELS[c] for c in rng.integers(0, len(HIGH_ORDER_LABELS), n)]
    batch = synthesize(labels, 1024, rng, rng.uniform(10.0, 30.0, n), ChannelConfig())
    missed = {sc.COHERENCE: 0, sc.ALPHABET_FIT_3_LOW_SNR: 0}
    for i in range(n):
        x = sc.remove_dc_line(batch.iq[i])
        for rule in missed:
            clock = sc.blind_clock(x, rule)
            missed[rule] += clock is None or abs(batch.params["samples_per_symbol"][i] / clock[0] - 1) > 0.02
    assert missed[sc.ALPHABET_FIT_3_LOW_SNR] >= 5
    assert missed[sc.COHERENCE] <= missed[sc.ALPHABET_FIT_3_LOW_SNR] / 3


@pytest.mark.parametrize("x", [
    np.zeros(700, np.complex64),
    np.ones(8, np.complex64),
    np.exp(2j * np.pi * 0.1 * np.arange(700)),
    np.concatenate([np.random.default_rng(6).standard_normal(300), np.full(300, np.inf)]),
])
def test_a_burst_without_a_rate_gives_no_line_or_a_finite_one(x):
    lines = cc.coherence_lines(x, 3)
    assert all(np.isfinite(s) and np.isfinite(r) and s > 0 for s, r in lines)
    for rule in (sc.COHERENCE, sc.COHERENCE_CYCLIC):
        found = sc.blind_symbols(x, rule)
        assert found is None or (np.all(np.isfinite(found.symbols)) and np.isfinite(found.carrier))


def test_a_silent_burst_has_carrier_zero():
    assert cc.cyclic_carrier(np.zeros(512, complex), 4.0) == 0.0


@pytest.mark.parametrize("sps", [2.3, 4.0, 7.7, 15.0])
def test_the_cyclic_carrier_of_a_clean_burst_is_its_carrier(sps):
    """64QAM at roll-off 0.25, 4096 samples, 30 dB, 0.013 cycles/sample off: found within 0.01
    cycles a symbol (the residual the refiner's carrier fits take out; they search 0.07)."""
    from rfclassify.dsp.linear import modulate_linear

    rng = np.random.default_rng(int(sps * 10) + 1)
    t = np.arange(4096, dtype=np.float64)[None, :]
    iq, _ = modulate_linear("64QAM", t, np.array([sps]), np.array([0.25]), np.array([0.37 * sps]), rng)
    x = iq[0] * np.exp(2j * np.pi * 0.013 * t[0] + 1.0j)
    x = x + 10 ** (-30 / 20) * (rng.standard_normal(4096) + 1j * rng.standard_normal(4096)) / np.sqrt(2)
    assert abs(cc.cyclic_carrier(x, sps) - 0.013) * sps < 0.01


def test_the_cyclic_carrier_holds_where_multipath_moves_the_band_centroid():
    """Faded high-order bursts (>= 0.1 symbols of delay spread) with a carrier offset at 10-30
    dB, at the blind rate: the band's power centroid is more than 0.07 cycles a symbol off (out
    of the refiner's carrier fits' reach) on a third of them or more, the cyclic carrier on
    few (forty-first session, big1024: 34-58 % against 1-5 %). COHERENCE_CYCLIC clocks as
    COHERENCE does, with that carrier."""
    rng = np.random.default_rng(41)
    n = 160
    cfg = ChannelConfig.only("timing", "multipath", "cfo")
    labels = [HIGH_ORDER_LABELS[c] for c in rng.integers(0, len(HIGH_ORDER_LABELS), n)]
    batch = synthesize(labels, 1024, rng, rng.uniform(10.0, 30.0, n), cfg)
    p = batch.params
    faded = p["delay_spread_samples"] / p["samples_per_symbol"] >= 0.1
    off = {sc.COHERENCE: 0, sc.COHERENCE_CYCLIC: 0}
    for i in np.flatnonzero(faded):
        x = sc.remove_dc_line(batch.iq[i])
        truth = p["cfo_cyc_per_sample"][i] + p["cfo_drift_cyc_per_sample2"][i] * 512
        clocks = {rule: sc.blind_clock(x, rule) for rule in off}
        assert clocks[sc.COHERENCE][:2] == clocks[sc.COHERENCE_CYCLIC][:2]
        sps, _, f0 = clocks[sc.COHERENCE_CYCLIC]
        assert f0 == cc.cyclic_carrier(x, sps)
        for rule, (_, _, f) in clocks.items():
            off[rule] += abs(((f - truth + 0.5) % 1.0 - 0.5) * p["samples_per_symbol"][i]) > 0.07
    assert faded.sum() >= 40
    assert off[sc.COHERENCE] >= faded.sum() / 4
    assert off[sc.COHERENCE_CYCLIC] <= off[sc.COHERENCE] / 4
