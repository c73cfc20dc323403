"""The per-class decision-directed equalizer of benchmarks/dd_equalizer_probe.py: with the
right alphabet it undoes a two-tap channel, and the per-class scores then prefer the right
class."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from rfclassify.model.evaluate import HIGH_ORDER_LABELS

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "dd_equalizer_probe.py"
_spec = importlib.util.spec_from_file_location("dd_equalizer_probe", _PATH)
ddp = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = ddp
_spec.loader.exec_module(ddp)


def _qam16(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    levels = np.array([-3, -1, 1, 3])
    alphabet = (levels[:, None] + 1j * levels[None, :]).ravel() / np.sqrt(10)
    return alphabet[rng.integers(0, 16, n)], alphabet


def test_the_equalizer_undoes_a_two_tap_channel_with_the_right_alphabet() -> None:
    rng = np.random.default_rng(4)
    s, alphabet = _qam16(600, rng)
    y = s + 0.35 * np.concatenate([[0], s[:-1]]) + 0.01 * (rng.standard_normal(600) + 1j * rng.standard_normal(600))
    raw_errors = np.mean(alphabet[np.argmin(np.abs(y[:, None] - alphabet), 1)] != s)
    z, d = ddp.fit_equalizer(y, alphabet, taps=5, iterations=30)   # from a poor start turn: slow to converge
    assert raw_errors > 0.2                        # the channel smears the grid
    def errors(dec):   # up to the grid's own quarter turns, which no blind receiver can tell apart
        return min(np.mean(~np.isclose(dec[5:-5], s[5:-5] * 1j ** r)) for r in range(4))
    assert errors(d) < 0.01                        # equalized: the decisions are the symbols
    _, d1 = ddp.fit_equalizer(y, alphabet, taps=1, iterations=30)
    assert errors(d1) > 0.1                        # a gain alone cannot


def test_the_class_scores_prefer_the_true_class_on_a_clean_burst() -> None:
    rng = np.random.default_rng(5)
    s, _ = _qam16(500, rng)
    y = s * np.exp(0.3j) + 0.02 * (rng.standard_normal(500) + 1j * rng.standard_normal(500))
    scores = ddp.class_scores(y / np.sqrt(np.mean(np.abs(y) ** 2)), ddp.hob.hypotheses(), taps=5)
    assert HIGH_ORDER_LABELS[int(np.argmax(scores))] == "16QAM"
    assert ddp.carrier_power("32PSK") == 32 and ddp.carrier_power("32APSK") == 4 and ddp.carrier_power("64QAM") == 4
