"""The sequence probe (benchmarks/sequence_refiner_probe.py): its features are the product's
sequence (tests/test_dsp_symbol_sequence.py checks those), a burst the clock cannot take
gives none, and its network takes any length."""

from __future__ import annotations

import numpy as np
import pytest

from rfclassify.dsp.channel import ChannelConfig
from rfclassify.dsp.synth import synthesize

from benchmark_modules import load_benchmark

srp = load_benchmark("sequence_refiner_probe")


def test_the_probes_features_are_the_products_sequence_and_the_same_symbols_invariants():
    from rfclassify.dsp import symbol_clock as sc
    from rfclassify.dsp.symbol_sequence import burst_sequence

    x = synthesize(["16QAM"], 1024, np.random.default_rng(4), 30.0, ChannelConfig()).iq[0]
    seq, inv = srp.clocked_sequence(x)
    np.testing.assert_array_equal(seq, burst_sequence(x))
    assert inv.shape == (sc.N_INVARIANTS,) and inv[0] == 1.0


def test_a_burst_without_a_clock_gives_no_sequence_and_the_net_takes_any_length():
    assert srp.clocked_sequence(np.zeros(1024, np.complex64)) is None
    assert srp.clocked_sequence(np.ones(16, np.complex64)) is None
    assert srp.clocked_sequence(np.full(1024, np.nan, np.complex64)) is None
    pytest.importorskip("torch")
    model = srp.make_seqnet()
    rng = np.random.default_rng(0)
    seqs = [rng.standard_normal((srp.N_CHANNELS, n)).astype(np.float32) for n in (5, 64, 300)] + [None]
    lp = srp.log_probs(model, seqs)
    assert lp.shape == (4, 12) and np.allclose(np.exp(lp).sum(1), 1.0, atol=1e-5)
    assert np.allclose(lp[3], np.log(1 / 12))  # no sequence: uniform
