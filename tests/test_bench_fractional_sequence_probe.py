"""The half-symbol channels of benchmarks/fractional_sequence_probe.py: the product's 21
channels first, unchanged, then samples that lie half a symbol after each symbol instant."""

from __future__ import annotations

import numpy as np

from rfclassify.dsp.channel import ChannelConfig
from rfclassify.dsp.symbol_sequence import N_CHANNELS, burst_sequence
from rfclassify.dsp.synth import synthesize

from benchmark_modules import load_benchmark

fsp = load_benchmark("fractional_sequence_probe")


def test_half_symbol_samples_lie_between_their_symbol_and_the_next() -> None:
    """On clean QPSK the sample half a symbol after symbol k is close to the mean of symbols k
    and k + 1 (a Nyquist pulse midway), and not to that of k - 1 and k."""
    batch = synthesize(["QPSK"] * 6, 1024, np.random.default_rng(2), 30.0, ChannelConfig.clean())
    for iq in batch.iq:
        seq = fsp.half_symbol_sequence(iq)
        assert seq is not None and seq.shape[0] == N_CHANNELS + fsp.HALF_CHANNELS and seq.dtype == np.float16
        product = burst_sequence(iq)
        n = seq.shape[1]
        assert n in (product.shape[1], product.shape[1] - 1)       # one fewer at most (the far edge)
        # the same symbols as the product's sequence (|y|^2, channel 8; the phase channels move a
        # little with the one symbol fewer their line searches see)
        np.testing.assert_allclose(seq[8].astype(np.float32), product[8, :n], atol=3e-2, rtol=2e-2)
        y = seq[2].astype(np.float32) + 1j * seq[3].astype(np.float32)    # whole-burst 4th-power derotated symbols
        h = seq[N_CHANNELS].astype(np.float32) + 1j * seq[N_CHANNELS + 1].astype(np.float32)

        def match(a, b):
            return abs(np.vdot(a, b)) / (np.linalg.norm(a) * np.linalg.norm(b))
        assert match(h[1:-1], (y[1:-1] + y[2:]) / 2) > 0.9
        assert match(h[1:-1], (y[:-2] + y[1:-1]) / 2) < 0.6


def test_the_equalized_channels_are_the_best_alphabets_filtered_symbols() -> None:
    """--front equalized: the product's 21 channels unchanged, then I, Q and |.|^2 of the symbols
    as the best-fitting alphabet's equalizer leaves them; on clean 16QAM they sit on its grid."""
    from rfclassify.dsp.class_equalizer import class_alphabets

    grid = class_alphabets("16QAM")[0]
    iq = synthesize(["16QAM"], 2048, np.random.default_rng(3), 30.0, ChannelConfig.clean()).iq[0]
    seq = fsp.equalized_sequence(iq)
    product = burst_sequence(iq)
    assert seq.shape == (N_CHANNELS + fsp.HALF_CHANNELS, product.shape[1]) and seq.dtype == np.float16
    np.testing.assert_allclose(seq[:N_CHANNELS].astype(np.float32), product, atol=2e-2, rtol=1e-2)
    z = seq[N_CHANNELS].astype(np.float32) + 1j * seq[N_CHANNELS + 1].astype(np.float32)
    np.testing.assert_allclose(seq[N_CHANNELS + 2].astype(np.float32), np.abs(z) ** 2, atol=1e-2, rtol=1e-2)
    assert np.median(np.min(np.abs(z[:, None] - grid[None, :]), axis=1)) < 0.05    # on the 16QAM grid
    assert fsp.equalized_sequence(np.zeros(500, np.complex64)) is None
