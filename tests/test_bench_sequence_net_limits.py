"""The whitening of benchmarks/sequence_net_limits.py: a linear predictor that undoes a
minimum-phase two-tap channel (forward) or a maximum-phase one (backward), and the
kurtosis pick that tells which."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "sequence_net_limits.py"
_spec = importlib.util.spec_from_file_location("sequence_net_limits", _PATH)
snl = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = snl
_spec.loader.exec_module(snl)


def _qpsk(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.exp(1j * (np.pi / 4 + np.pi / 2 * rng.integers(0, 4, n)))


def test_forward_whitening_undoes_a_minimum_phase_channel() -> None:
    s = _qpsk(2000, 1)
    y = s + (0.5 + 0.3j) * np.concatenate([[0], s[:-1]])          # first tap strongest
    assert snl.kurtosis(y) > 1.2                                   # QPSK alone has 1: the ISI shows
    e = snl.whiten_forward(y, order=8)
    assert snl.kurtosis(e) < 1.02
    gain = np.vdot(e, s[8:]) / np.vdot(e, e)                       # the symbols back, up to one gain
    assert np.sqrt(np.mean(np.abs(gain * e - s[8:]) ** 2)) < 0.1     # against 0.58 before it
    assert np.sqrt(np.mean(np.abs(y - s) ** 2)) > 0.5


def test_the_kurtosis_pick_turns_to_the_backward_predictor_for_a_late_strong_tap() -> None:
    s = _qpsk(2000, 2)
    y = 0.4 * s + np.concatenate([[0], s[:-1]])                    # second tap strongest
    out = snl.variants(y)
    assert snl.kurtosis(snl.whiten_backward(y, order=8)) < 1.05
    assert out["lowest kurtosis"] is out["backward"]
    clean = snl.variants(_qpsk(2000, 3))
    assert snl.kurtosis(clean["lowest kurtosis"]) < 1.01
