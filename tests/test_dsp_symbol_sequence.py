"""The clocked symbol sequence (rfclassify.dsp.symbol_sequence): the carrier-recovered channels
put a clean burst's symbols back on its constellation, long bursts are capped, a burst the
clock cannot take gives no sequence, and the fitted second carrier pass stops what the lines
cannot."""

from __future__ import annotations

import numpy as np
import pytest

from rfclassify.dsp import symbol_clock as sc
from rfclassify.dsp import symbol_sequence as ss
from rfclassify.dsp.carrier_lines import residual_carrier
from rfclassify.dsp.channel import ChannelConfig
from rfclassify.dsp.constellations import constellation
from rfclassify.dsp.synth import synthesize

CLEAN = ChannelConfig(p_cfo=1.0, p_phase=1.0, p_multipath=0.0, p_pa=0.0, p_phase_noise=0.0,
                      p_iq_imbalance=0.0, p_dc_offset=0.0, p_quantization=0.0, p_sro=0.0)


def _mer_db(d: np.ndarray, alphabet: np.ndarray) -> float:
    """Modulation error ratio of unit-power points d against the alphabet, at the best of a
    fixed 0..90 degree rotation (the 4th-power line leaves a quarter-turn ambiguity)."""
    d = d / np.sqrt(np.mean(np.abs(d) ** 2))
    err = min(np.mean(np.min(np.abs(d[:, None] * np.exp(1j * a) - alphabet[None, :]) ** 2, axis=1))
              for a in np.linspace(0, np.pi / 2, 91))
    return float(-10 * np.log10(err))


def test_the_carrier_recovered_channels_sit_on_the_constellation():
    """Clean 16QAM at 30 dB with a carrier offset and phase: the whole-burst 4th-power channel
    is within a few dB of the genie clock's (about 30 dB); the first pass's symbols, with only
    the band-centroid carrier removed, still turn and are far off the grid."""
    alphabet = constellation("16QAM")
    alphabet = alphabet / np.sqrt(np.mean(np.abs(alphabet) ** 2))
    batch = synthesize(["16QAM"] * 6, 1024, np.random.default_rng(4), 30.0, CLEAN)
    recovered, raw = [], []
    for x in batch.iq:
        seq = ss.burst_sequence(x)
        assert seq is not None and seq.dtype == np.float32
        assert seq.shape[0] == ss.N_CHANNELS and seq.shape[1] >= 40 and np.all(np.isfinite(seq))
        recovered.append(_mer_db(seq[2] + 1j * seq[3], alphabet))      # 4th power, whole burst
        raw.append(_mer_db(sc.blind_symbols(x).symbols, alphabet))
    assert np.median(recovered) > 22.0, recovered
    assert np.median(raw) < 15.0, raw  # about what points spread over the plane score


def test_long_bursts_keep_their_central_symbols():
    x = synthesize(["8PSK"], 8192, np.random.default_rng(1), 25.0, CLEAN).iq[0]
    whole = ss.burst_sequence(x, max_symbols=None)
    capped = ss.burst_sequence(x, max_symbols=100)
    assert whole is not None and whole.shape[1] > 300
    assert capped is not None and capped.shape == (ss.N_CHANNELS, 100)
    found = sc.blind_symbols(x)
    all_symbols, central = ss.clocked_symbols(found, None), ss.clocked_symbols(found, 100)
    start = (all_symbols.size - 100) // 2
    np.testing.assert_array_equal(central, all_symbols[start:start + 100])    # the middle, as the sequence keeps


def test_a_burst_without_a_clock_gives_no_sequence():
    for bad in (np.zeros(1024, np.complex64), np.ones(16, np.complex64), np.full(1024, np.nan, np.complex64),
                np.zeros(0, np.complex64)):
        assert ss.burst_sequence(bad) is None
    assert ss.clocked_sequence(None) is None and ss.clocked_symbols(None) is None
    assert ss.clocked_symbols(sc.blind_symbols(np.zeros(1024, np.complex64))) is None


def _spin_free(y: np.ndarray, order: int) -> float:
    """|mean of the unit-magnitude order-th power|: near 1 for an M-PSK (M = order) that
    does not turn over the burst, near 0 for one that turns a few cycles."""
    u = y / np.maximum(np.abs(y), 1e-30)
    return float(np.abs(np.mean(u ** order)))


def test_the_fitted_carrier_pass_stops_a_16psk_the_lines_leave_turning():
    """16PSK has no 4th- or 8th-power line, so the lines pass mostly cannot take out a residual
    carrier of 0.012 cycles/symbol that the first pass left (1-4 turns over the burst); the
    fitted pass, whose alphabets include 16PSK's, does every time, and the constellation holds
    still.
    (Bursts whose blind rate is wrong have no constellation to hold: they are left out.)"""
    fitted, lines = [], []
    batch = synthesize(["16PSK"] * 5, 1024, np.random.default_rng(6), 30.0, CLEAN)
    for x, params in zip(batch.iq, batch.params, strict=True):
        found = sc.blind_symbols(x)
        if abs(found.sps / params["samples_per_symbol"] - 1) > 0.01:
            continue
        turned = found.baseband * np.exp(2j * np.pi * 0.012 / found.sps * np.arange(found.baseband.size))
        off = found._replace(baseband=turned, symbols=sc.symbols_at(turned, found.sps, sc.BLIND_ROLLOFF,
                                                                     found.timing_samples))
        fitted.append(_spin_free(ss.clocked_symbols(off, carrier=ss.CARRIER_FIT), 16))
        lines.append(_spin_free(ss.clocked_symbols(off, carrier=ss.CARRIER_LINES), 16))
    assert len(fitted) >= 3 and min(fitted) > 0.6, fitted
    assert np.median(lines) < 0.4, lines


def test_the_fitted_pass_falls_back_to_the_lines_on_few_symbols_and_an_unknown_pass_is_refused():
    y = np.exp(1j * np.pi / 2 * np.arange(10) + 0.3j)        # 10 QPSK symbols: too few to fit
    assert ss.fitted_carrier(y) == pytest.approx(residual_carrier(y))
    found = sc.blind_symbols(synthesize(["8PSK"], 1024, np.random.default_rng(2), 25.0, CLEAN).iq[0])
    with pytest.raises(ValueError, match="unknown carrier pass 'loudest'"):
        ss.clocked_symbols(found, carrier="loudest")
