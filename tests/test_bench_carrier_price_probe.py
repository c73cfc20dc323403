"""benchmarks/carrier_price_probe.py: a likelihood classifier of the high-order classes at the
synthesizer's own clock, with the carrier known, its phase fitted, or its frequency fitted too."""

from __future__ import annotations

import json

import numpy as np

from benchmark_modules import load_benchmark

probe = load_benchmark("carrier_price_probe")
from rfclassify.dsp.channel import ChannelConfig  # noqa: E402
from rfclassify.dsp.synth import synthesize  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402


def test_the_genie_clock_puts_a_clean_burst_on_its_alphabet_and_every_arm_reads_it():
    """A clean 16QAM burst at 30 dB through a CFO and a timing offset: the recorded clock and
    carrier give symbols on a 16QAM grid, a few degrees from its phase (the timing's
    interpolation), so the known-carrier arm and the fitted ones all decide 16QAM."""
    rng = np.random.default_rng(11)
    cfg = ChannelConfig.only("timing", "cfo")
    b = synthesize(["16QAM"], 1024, rng, np.array([30.0]), cfg)
    y = probe.genie_symbols(b.iq[0], b.params[0])
    y = y / np.sqrt(np.mean(np.abs(y) ** 2))
    levels = np.array([-3, -1, 1, 3]) / np.sqrt(10)
    off_grid = np.abs(y.real[:, None] - levels).min(axis=1) + np.abs(y.imag[:, None] - levels).min(axis=1)
    assert np.median(off_grid) < 0.1                 # the grid's half spacing is 0.32
    assert abs(np.angle(-np.mean(y ** 4)) / 4) < 0.1  # the carrier is taken out: a few degrees left
    index = HIGH_ORDER_LABELS.index("16QAM")
    assert probe.decide(y, None) == index
    assert probe.decide(y, 0.0) == index
    assert probe.decide(y, 0.07) == index
    assert probe.decide(None, 0.07) == -1


def test_a_run_writes_every_arm_for_every_snr(tmp_path):
    out = tmp_path / "r.json"
    assert probe.main(["--channel", "clean", "--snrs", "24", "--per-class", "1", "--reaches", "0.07",
                       "--workers", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert list(result["accuracy"]) == ["known", "phase", "reach0.07", "served_clock"]
    assert set(result["accuracy"]["known"]) == {"all", "24 dB"}
    assert result["accuracy"]["known"]["all"] >= 75.0          # 12 clean bursts at 24 dB, carrier known
    assert set(result["steps"]) == {"known -> phase", "phase -> reach0.07", "reach0.07 -> served_clock"}
    assert probe.main(["--per-class", "0"]) == 2


def test_the_integrated_arms_follow_their_fitted_arm_and_are_paired_with_it():
    arms = probe.arm_names("clean", (0.007, 0.07), integrate=True)
    assert arms == ["known", "phase", "phase_integrated", "reach0.007", "reach0.007_integrated", "reach0.07",
                    "served_clock"]
    assert probe.steps(arms) == [("known", "phase"), ("phase", "reach0.007"), ("reach0.007", "reach0.07"),
                                 ("reach0.07", "served_clock"), ("phase", "phase_integrated"),
                                 ("reach0.007", "reach0.007_integrated")]
    assert probe.arm_names("full", (0.07,)) == ["phase", "reach0.07", "served_clock"]


def test_the_likelihood_averaged_over_the_carrier_still_reads_a_clean_burst():
    """Clean 32APSK symbols at a small residual carrier: averaged over the phase, and over
    the phase and the frequencies within 0.007, the true class still scores best."""
    from rfclassify.dsp.class_equalizer import class_alphabets
    rng = np.random.default_rng(4)
    n = 128
    alphabet = class_alphabets("32APSK")[0]
    y = alphabet[rng.integers(0, alphabet.size, n)] * np.exp(1j * (2 * np.pi * 0.002 * np.arange(n) + 0.2))
    y = probe.unit_symbols(y + 0.02 * (rng.standard_normal(n) + 1j * rng.standard_normal(n)))
    index = HIGH_ORDER_LABELS.index("32APSK")
    assert probe.decide_integrated(y, 0.007) == index
    assert probe.decide_integrated(y * np.exp(-2j * np.pi * 0.002 * np.arange(n)), 0.0) == index
    assert probe.decide_integrated(None, 0.007) == -1
    assert probe.unit_symbols(np.ones(3)) is None
