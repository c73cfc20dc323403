"""benchmarks/rate_candidates_probe.py: the candidate rule keeps the strongest line unless
another candidate's symbols fit an alphabet clearly better, and the fit tells the true rate
from a wrong one."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from rfclassify.dsp import symbol_clock as sc
from rfclassify.dsp.channel import ChannelConfig
from rfclassify.dsp.synth import synthesize

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "rate_candidates_probe.py"
_spec = importlib.util.spec_from_file_location("rate_candidates_probe", _PATH)
rcp = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = rcp
_spec.loader.exec_module(rcp)


def test_the_rule_keeps_the_strongest_line_unless_another_fits_by_the_margin() -> None:
    assert rcp.pick([-1.0, -0.97, -2.0], 0.05) == 0
    assert rcp.pick([-1.0, -0.9, -2.0], 0.05) == 1
    assert rcp.pick([-1.0, -np.inf], 0.0) == 0


def test_symbols_at_the_true_rate_fit_an_alphabet_better_than_at_a_wrong_one() -> None:
    batch = synthesize(["16QAM"], 1024, np.random.default_rng(2), 30.0, ChannelConfig.clean())
    sps = float(batch.params["samples_per_symbol"][0])
    x = sc.remove_dc_line(np.asarray(batch.iq[0], np.complex128))
    found = sc.blind_symbols(batch.iq[0])
    assert abs(found.sps / sps - 1) < 0.005
    right = rcp.candidate_fit(x, found.sps, found.timing_samples)
    wrong = rcp.candidate_fit(x, 1.3 * found.sps, found.timing_samples)
    assert right > wrong + 0.3


def test_the_candidate_clock_keeps_a_right_rate_and_fixes_a_low_roll_off_miss() -> None:
    """candidate_blind_clock agrees with the product's clock where the strongest line is
    right (seed 2: roll-off 0.5), and finds the true rate of clean narrow-pulse 16QAM bursts
    whose strongest line is wrong (seeds 4 and 85: roll-off 0.21 and 0.18, lines 54 % and
    26 % too slow)."""
    def clocks(seed: int) -> tuple[float, float, float]:
        batch = synthesize(["16QAM"], 1024, np.random.default_rng(seed), 25.0, ChannelConfig.clean())
        x = sc.remove_dc_line(np.asarray(batch.iq[0], np.complex128))
        return float(batch.params["samples_per_symbol"][0]), sc.blind_clock(x)[0], rcp.candidate_blind_clock(x)[0]

    sps, product, ours = clocks(2)
    assert abs(product / sps - 1) < 0.005 and abs(ours / sps - 1) < 0.005
    for seed in (4, 85):
        sps, product, ours = clocks(seed)
        assert product / sps > 1.2                  # the product's clock misses
        assert abs(ours / sps - 1) < 0.005          # the candidates' best fit does not
