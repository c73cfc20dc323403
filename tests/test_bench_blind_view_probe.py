"""benchmarks/blind_view_probe.py: its constant-modulus filter, its channel groups, and a run on a
small generated set that scores each view as the shipped sequence network reads it."""

from __future__ import annotations

import math

import numpy as np

from benchmark_modules import load_benchmark

bvp = load_benchmark("blind_view_probe")


def test_the_constant_modulus_filter_turns_8psk_through_a_channel_back_into_a_circle():
    rng = np.random.default_rng(0)
    s = np.exp(2j * np.pi * rng.integers(0, 8, 600) / 8)
    y = np.convolve(s, [0.35j, 1.0, -0.25], mode="same")
    z = bvp.constant_modulus(y)
    spread = lambda v: float(np.std(np.abs(v) ** 2) / np.mean(np.abs(v) ** 2))   # noqa: E731
    assert z.shape == y.shape and spread(y) > 0.3 and spread(z) < 0.05


def test_bursts_are_grouped_by_fading_and_delay_spread_in_symbols():
    from rfclassify.dsp.channel import FADING_NONE, FADING_RAYLEIGH

    assert bvp.condition(FADING_NONE, math.nan) == "unfaded"
    assert bvp.condition(FADING_RAYLEIGH, 0.05) == "faded 0-0.1"
    assert bvp.condition(FADING_RAYLEIGH, 0.2) == "faded 0.2-0.5"
    assert bvp.condition(FADING_RAYLEIGH, 3.0) == "faded 0.5-inf"


def test_the_probe_scores_every_view_of_the_same_bursts(tmp_path):
    """On 1024-sample high-order bursts at 20-30 dB: every burst lands in one channel group,
    every view is scored, 'either' is at least the better of raw and blind, and the shipped
    network reads the raw view of these bursts mostly right."""
    from rfclassify.data.generate import GenerateSpec, generate_dataset
    from rfclassify.labels import HIGH_ORDER_LABELS

    spec = GenerateSpec(classes=tuple(HIGH_ORDER_LABELS), snr_grid_db=(20.0, 30.0), per_cell=2,
                        lengths_samples=(1024,), seed=5)
    path = generate_dataset(spec, tmp_path / "h.h5", command_line="test").path
    out = bvp.probe(str(path), "models", 1024, (20.0, 30.0), per_class=3, seed=0, cma=True)
    table = out["accuracy_percent"]
    assert table["all"]["bursts"] == 36 == sum(v["bursts"] for k, v in table.items() if k != "all")
    for row in table.values():
        assert set(row) == {"bursts", "raw", "blind", "sum", "cma", "either_raw_or_blind"}
        assert row["either_raw_or_blind"] >= max(row["raw"], row["blind"])
    assert out["rate_rule"] == "alphabet_fit_3_low_snr"
    assert table["all"]["raw"] >= 50.0      # the shipped network on clean-ish high-order bursts
