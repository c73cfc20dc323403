"""The whitening of benchmarks/sequence_net_limits.py: a linear predictor that undoes a
minimum-phase two-tap channel (forward) or a maximum-phase one (backward), and the
kurtosis pick that tells which."""

from __future__ import annotations

import numpy as np

from benchmark_modules import load_benchmark

snl = load_benchmark("sequence_net_limits")


def _qpsk(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.exp(1j * (np.pi / 4 + np.pi / 2 * rng.integers(0, 4, n)))


def test_forward_whitening_undoes_a_minimum_phase_channel() -> None:
    s = _qpsk(2000, 1)
    y = s + (0.5 + 0.3j) * np.concatenate([[0], s[:-1]])          # first tap strongest
    assert snl.kurtosis(y) > 1.2                                   # QPSK alone has 1: the ISI shows
    e = snl.whiten_forward(y, order=8)
    assert snl.kurtosis(e) < 1.02
    gain = np.vdot(e, s[8:]) / np.vdot(e, e)                       # the symbols back, up to one gain
    assert np.sqrt(np.mean(np.abs(gain * e - s[8:]) ** 2)) < 0.1     # against 0.58 before it
    assert np.sqrt(np.mean(np.abs(y - s) ** 2)) > 0.5


def test_the_kurtosis_pick_turns_to_the_backward_predictor_for_a_late_strong_tap() -> None:
    s = _qpsk(2000, 2)
    y = 0.4 * s + np.concatenate([[0], s[:-1]])                    # second tap strongest
    out = snl.variants(y)
    assert snl.kurtosis(snl.whiten_backward(y, order=8)) < 1.05
    assert out["lowest kurtosis"] is out["backward"]
    clean = snl.variants(_qpsk(2000, 3))
    assert snl.kurtosis(clean["lowest kurtosis"]) < 1.01


def test_clocking_at_the_true_rate_finds_the_blind_clocks_timing_where_that_rate_is_right() -> None:
    """symbols_at_true_rate takes the timing from the |x|^2 line at the rate it is given: on
    a clean wide-roll-off burst, whose blind rate is right, it lands on the blind timing."""
    from rfclassify.dsp import symbol_clock as sc
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.synth import synthesize

    batch = synthesize(["16QAM"], 2048, np.random.default_rng(6), 30.0, ChannelConfig.clean())
    sps = float(batch.params["samples_per_symbol"][0])
    blind = sc.blind_symbols(batch.iq[0])
    assert abs(blind.sps / sps - 1) < 0.005
    genie = snl.symbols_at_true_rate(batch.iq[0], sps)
    assert genie.sps == sps
    offset = (genie.timing_samples - blind.timing_samples + sps / 2) % sps - sps / 2
    assert abs(offset) < 0.1 * sps
    assert genie.symbols.size == blind.symbols.size
