"""benchmarks/blind_view_probe.py: its channel groups, and a run on a small generated set that
scores each view as the shipped sequence network reads it (its constant-modulus filter is
rfclassify.dsp.power_lines', tested in test_dsp_power_lines.py)."""

from __future__ import annotations

import math

from benchmark_modules import load_benchmark

bvp = load_benchmark("blind_view_probe")


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
    assert out["rate_rule"] == "coherence_cyclic"     # the shipped refiner's serving clock (model.json serve_rate_rule)
    assert table["all"]["raw"] >= 50.0      # the shipped network on clean-ish high-order bursts
