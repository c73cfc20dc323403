"""The DC removal rules of benchmarks/dc_offset_robustness.py's paired mode (the leak rule
itself is dc_estimate.leak_line_offset, tested with it)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark_modules import load_benchmark

from rfclassify.dsp.synth import ChannelConfig, synthesize

dcr = load_benchmark("dc_offset_robustness")


def _bursts(labels: list[str], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    clean = ChannelConfig(p_dc_offset=0.0, p_cfo=0.0, p_multipath=0.0, p_quantization=0.0)
    return synthesize(labels, 1024, rng, snr_db=np.full(len(labels), 30.0), channel=clean).iq.astype(np.complex128)


def test_the_removal_rules():
    qam, ook = _bursts(["64QAM", "OOK"], 2)
    leak = 10 ** (-12 / 20) * np.sqrt(np.mean(np.abs(qam) ** 2))                   # -12 dB of the signal
    np.testing.assert_allclose(dcr.remove_dc(qam + leak, "leak line"), qam + leak - (qam + leak).mean())
    np.testing.assert_array_equal(dcr.remove_dc(ook, "leak line"), ook)            # a carrier, kept
    np.testing.assert_array_equal(dcr.remove_dc(qam, "none"), qam)
    assert abs(dcr.remove_dc(qam, "mean").mean()) < 1e-12
    with pytest.raises(ValueError, match="unknown rule"):
        dcr.remove_dc(qam, "median")
