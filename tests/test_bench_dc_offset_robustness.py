"""The DC removal rules of benchmarks/dc_offset_robustness.py's paired mode: a leak is taken
out, a carrier and a burst without a line are left alone."""

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


def test_the_leak_rule_removes_a_leak_and_keeps_a_carrier():
    qam, ook = _bursts(["64QAM", "OOK"], 2)                                        # 2.0 and 6.3 samples/symbol
    leak = 10 ** (-12 / 20) * np.sqrt(np.mean(np.abs(qam) ** 2))                   # -12 dB of the signal
    assert dcr.zero_hz_line_ratio(qam + leak) > dcr.LINE_RATIO                     # 503 symbols: it stands out
    fixed = dcr.remove_dc(qam + leak, "leak line")
    assert abs(fixed.mean()) < 0.1 * leak                                          # the leak is gone
    np.testing.assert_allclose(fixed, qam + leak - (qam + leak).mean())
    # OOK at zero carrier offset holds its carrier at 0 Hz, -3 dB of its power: a carrier, kept
    assert dcr.zero_hz_line_ratio(ook) > dcr.LINE_RATIO
    np.testing.assert_array_equal(dcr.remove_dc(ook, "leak line"), ook)
    # without a line nothing is removed; the plain mean rule always removes it
    np.testing.assert_array_equal(dcr.remove_dc(qam, "leak line"), qam)
    assert abs(dcr.remove_dc(qam, "mean").mean()) < 1e-12
    with pytest.raises(ValueError, match="unknown rule"):
        dcr.remove_dc(qam, "median")
