"""The symbol-domain DC offset estimate of benchmarks/dc_estimate_probe.py: far closer to the
offset than the burst's mean, near zero without an offset, zero for a burst with no clock."""

from __future__ import annotations

import numpy as np

from benchmark_modules import load_benchmark

from rfclassify.dsp.synth import ChannelConfig, synthesize

dep = load_benchmark("dc_estimate_probe")


def test_the_estimate_finds_an_offset_the_mean_cannot_and_none_where_there_is_none():
    rng = np.random.default_rng(7)
    iq = synthesize(["64QAM", "16QAM", "32APSK", "256QAM"], 1024, rng, snr_db=np.full(4, 25.0),
                    channel=ChannelConfig(p_dc_offset=0.0, p_multipath=0.0)).iq.astype(np.complex128)
    x = iq[0]                                                    # 64QAM, 9.1 samples/symbol; no multipath, the rest on
    power = np.mean(np.abs(x) ** 2)
    offset = np.sqrt(power * 10 ** -1.5) * np.exp(1j)            # -15 dB of the signal
    def error_db(estimate):
        return 10 * np.log10(abs(estimate - offset) ** 2 / power)
    assert error_db(dep.estimate_offset(x + offset)) < -40       # -50.8 here
    assert error_db((x + offset).mean()) > -25                   # the mean: -18.2 (the signal's own 0 Hz content)
    assert abs(dep.estimate_offset(x)) ** 2 / power < 1e-4       # no offset: -51.5 dB
    assert dep.estimate_offset(np.zeros(50, complex)) == 0.0     # no clock: nothing to take out
