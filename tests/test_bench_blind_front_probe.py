"""benchmarks/blind_front_probe.py: the EM receiver alone at the blind clock and at clocks that
know the rate, timing or carrier."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark_modules import load_benchmark

probe = load_benchmark("blind_front_probe")
from rfclassify.dsp import em_channel  # noqa: E402
from rfclassify.dsp.channel import ChannelConfig  # noqa: E402
from rfclassify.dsp.synth import synthesize  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402


def test_the_variants_switch_on_what_they_name():
    frozen = probe.variant_config("frozen")
    assert frozen.p_multipath == 1.0 and frozen.p_timing == 1.0 and frozen.p_cfo == 0.0
    assert frozen.doppler_cyc_per_sample_range == probe.FROZEN_DOPPLER
    assert probe.variant_config("doppler").doppler_cyc_per_sample_range == ChannelConfig().doppler_cyc_per_sample_range
    with_cfo = probe.variant_config("frozen+cfo")
    assert with_cfo.p_cfo == 1.0 and with_cfo.p_pa == 0.0
    full = probe.variant_config("full")
    assert full.p_multipath == 1.0 and full.p_cfo == ChannelConfig().p_cfo
    with pytest.raises(SystemExit):
        probe.variant_config("frozen+nothing")


def test_every_arm_reads_a_clean_burst_and_the_clock_errors_are_small():
    """16QAM, no multipath, a carrier offset, 30 dB: every arm decides 16QAM, and the blind
    rate, timing and carriers are near the recorded ones (errors in cycles a symbol)."""
    rng = np.random.default_rng(5)
    cfg = ChannelConfig.only("timing", "cfo")
    batch = synthesize(["16QAM"], 1024, rng, np.array([30.0]), cfg)
    out = probe.read_burst((batch.iq[0], batch.params[0], em_channel.FAST_PASSES, probe.ARMS))
    assert set(out["decisions"]) == set(probe.ARMS)
    assert all(HIGH_ORDER_LABELS[d] == "16QAM" for d in out["decisions"].values())
    assert abs(out["rate_error"]) < 0.01
    assert abs(out["timing_error"]) < 0.1
    assert abs(out["cyclic_carrier_error"]) < 0.02
    assert abs(out["carrier_error"]) < 0.07


def test_the_summary_counts_each_step_burst_for_burst():
    truth = np.array([0, 1, 2, 3])
    spread = np.array([0.0, 0.05, 0.2, 0.5])
    arms = ("blind", "cyclic_carrier", "rate_and_carrier")
    rows = [{"decisions": {"blind": 0, "cyclic_carrier": 0, "rate_and_carrier": 0}},
            {"decisions": {"blind": 0, "cyclic_carrier": 1, "rate_and_carrier": 1}},
            {"decisions": {"blind": 2, "cyclic_carrier": 0, "rate_and_carrier": 2}},
            {"decisions": {"blind": 0, "cyclic_carrier": 3, "rate_and_carrier": 3}}]
    for r in rows:
        r |= {"rate_error": 0.0, "timing_error": 0.01, "carrier_error": 0.02, "cyclic_carrier_error": 0.01}
    out = probe.summarize(truth, spread, rows, arms)
    assert out["table"]["all"] == {"bursts": 4, "blind": 50.0, "cyclic_carrier": 75.0, "rate_and_carrier": 100.0}
    assert out["table"][">= 0.3"]["blind"] == 0.0 and out["table"]["unfaded"]["blind"] == 100.0
    step = out["steps"]["blind -> cyclic_carrier"]
    assert (step["won"], step["lost"], step["points"]) == (2, 1, 25.0)
    assert set(out["steps"]) == {"blind -> cyclic_carrier", "cyclic_carrier -> rate_and_carrier"}
