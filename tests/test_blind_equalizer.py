"""The class-blind equalizer: it undoes a multipath channel without knowing the alphabet, and
leaves symbols it cannot help (too few, or none) as they are."""

import numpy as np
import pytest

from rfclassify.dsp.blind_equalizer import SYMBOLS_PER_TAP, fourth_moment, kurtosis_equalize
from rfclassify.dsp.constellations import constellation


def _symbols(label: str, n: int, rng: np.random.Generator) -> np.ndarray:
    points = constellation(label)
    return points[rng.integers(0, points.size, n)]


def _decision_error_rate(z: np.ndarray, s: np.ndarray, label: str) -> float:
    """Symbol error rate of nearest-point decisions on z after the best complex gain (the
    equalizer leaves the phase, gain and a delay of up to 2 symbols free)."""
    points = constellation(label)
    best = 1.0
    for d in range(-2, 3):
        zz, ss = (z[2 + d:z.size - 2 + d], s[2:s.size - 2])
        g = np.vdot(zz, ss) / np.vdot(zz, zz)
        dec = points[np.argmin(np.abs((g * zz)[:, None] - points[None, :]), axis=1)]
        best = min(best, float(np.mean(np.abs(dec - ss) > 1e-6)))
    return best


def test_fourth_moment_reads_a_circle_as_1_and_complex_noise_as_2():
    rng = np.random.default_rng(0)
    assert fourth_moment(np.exp(2j * np.pi * rng.random(4000))) == pytest.approx(1.0)
    noise = rng.standard_normal(200_000) + 1j * rng.standard_normal(200_000)
    assert fourth_moment(noise) == pytest.approx(2.0, abs=0.03)
    assert np.isnan(fourth_moment(np.zeros(8)))


@pytest.mark.parametrize("label", ["8PSK", "16PSK", "16QAM", "64QAM"])
def test_it_undoes_a_multipath_channel_whatever_the_alphabet(label):
    """Paths a symbol before and after the main one (0.4 and 0.3 of it) close the eye of each
    alphabet; the filter lowers the fourth moment and opens it again."""
    rng = np.random.default_rng(1)
    s = _symbols(label, 400, rng)
    y = np.convolve(s, [0.4 * np.exp(0.7j), 1.0, 0.3 * np.exp(-1.9j)], mode="same")
    y += 0.01 * (rng.standard_normal(y.size) + 1j * rng.standard_normal(y.size))
    z, before, after = kurtosis_equalize(3.0 * y)
    assert z.shape == y.shape and np.mean(np.abs(z) ** 2) == pytest.approx(1.0)
    assert after < before - 0.05
    raw, equalized = _decision_error_rate(y, s, label), _decision_error_rate(z, s, label)
    assert raw > 0.3 and equalized < 0.05


def test_symbols_without_multipath_come_back_nearly_as_they_are():
    rng = np.random.default_rng(2)
    s = _symbols("64QAM", 512, rng)
    y = s + 0.02 * (rng.standard_normal(s.size) + 1j * rng.standard_normal(s.size))
    z, _, _ = kurtosis_equalize(y)
    assert abs(np.vdot(z, y)) / (np.linalg.norm(z) * np.linalg.norm(y)) > 0.99


def test_too_few_symbols_for_a_filter_come_back_unfiltered_at_unit_power():
    rng = np.random.default_rng(3)
    y = 5.0 * _symbols("16QAM", 2 * SYMBOLS_PER_TAP - 1, rng)
    z, before, after = kurtosis_equalize(y)
    np.testing.assert_allclose(z, y / np.sqrt(np.mean(np.abs(y) ** 2)))
    assert before == after == pytest.approx(fourth_moment(y))


def test_no_signal_gives_nan_moments_and_no_error():
    z, before, after = kurtosis_equalize(np.zeros(300, np.complex64))
    assert z.shape == (300,) and np.isnan(before) and np.isnan(after)
    z, before, after = kurtosis_equalize(np.zeros(0, np.complex64))
    assert z.size == 0 and np.isnan(before)
