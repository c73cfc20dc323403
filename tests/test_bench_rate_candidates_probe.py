"""benchmarks/rate_candidates_probe.py: the candidate rule keeps the strongest line unless
another candidate's symbols fit an alphabet clearly better, and the fit tells the true rate
from a wrong one."""

from __future__ import annotations

import numpy as np

from rfclassify.dsp import symbol_clock as sc
from rfclassify.dsp.channel import ChannelConfig
from rfclassify.dsp.synth import synthesize

from benchmark_modules import load_benchmark

rcp = load_benchmark("rate_candidates_probe")


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

