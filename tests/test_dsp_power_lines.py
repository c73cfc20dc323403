"""Coherent power lines of clocked symbols (rfclassify.dsp.power_lines)."""

from __future__ import annotations

import numpy as np
import pytest

from rfclassify.dsp.power_lines import (FLOOR, N_FEATURES, POWERS, VIEWS, constant_modulus, line_strengths,
                                        power_line_features)


def psk(m: int, n: int, rng: np.random.Generator, carrier: float = 0.0) -> np.ndarray:
    """n M-PSK symbols, turned by `carrier` cycles a symbol."""
    return np.exp(2j * np.pi * (rng.integers(0, m, n) / m + carrier * np.arange(n)))


def strength(v: np.ndarray, power: int) -> float:
    return float(np.exp(line_strengths(v)[POWERS.index(power)]))


def test_a_psk_bursts_own_power_holds_a_line_wherever_its_carrier_and_a_denser_psks_does_not():
    rng = np.random.default_rng(0)
    sixteen, thirty_two = psk(16, 400, rng, carrier=0.0013), psk(32, 400, rng, carrier=-0.0021)
    assert strength(sixteen, 16) == pytest.approx(1.0, abs=1e-3)     # its 16th power: one tone, found off 0 Hz
    assert strength(thirty_two, 32) == pytest.approx(1.0, abs=1e-3)
    assert strength(thirty_two, 16) < 0.2                           # 32PSK's 16th power: two points, half each
    assert strength(sixteen, 8) < 0.2 and strength(sixteen, 4) < 0.2
    noise = (rng.standard_normal(400) + 1j * rng.standard_normal(400))
    assert all(strength(noise, k) < 5 / np.sqrt(400) for k in POWERS)


def test_silent_or_empty_symbols_have_no_line():
    for v in (np.zeros(50, complex), np.zeros(0, complex)):
        np.testing.assert_array_equal(line_strengths(v), np.full(len(POWERS), np.log(FLOOR)))


def test_the_constant_modulus_filter_undoes_a_channel_that_smears_a_psk_bursts_phases():
    rng = np.random.default_rng(1)
    s = psk(8, 500, rng)
    smeared = np.convolve(s, [1.0, 0.45j, -0.2], mode="same")     # intersymbol interference
    assert strength(smeared, 8) < 0.6
    assert strength(constant_modulus(smeared), 8) > 0.95
    short = smeared[:20]                                             # too few symbols for 9 taps: left as it is
    np.testing.assert_allclose(constant_modulus(short), short / np.sqrt(np.mean(np.abs(short) ** 2)))


def test_the_features_are_each_views_lines_in_order_and_none_where_a_view_has_nothing():
    rng = np.random.default_rng(2)
    y = np.convolve(psk(16, 300, rng), [1.0, 0.3], mode="same")
    filtered = y * np.exp(0.4j)
    f = power_line_features(y, filtered)
    assert f.dtype == np.float32 and f.shape == (N_FEATURES,) == (len(VIEWS) * len(POWERS),)
    k = len(POWERS)
    np.testing.assert_allclose(f[:k], line_strengths(y), rtol=1e-6)
    np.testing.assert_allclose(f[k:2 * k], line_strengths(filtered), rtol=1e-6)
    np.testing.assert_allclose(f[2 * k:], line_strengths(constant_modulus(y)), rtol=1e-6)
    none = np.full(k, np.log(FLOOR), np.float32)
    np.testing.assert_array_equal(power_line_features(y, None)[k:2 * k], none)
    np.testing.assert_array_equal(power_line_features(None, None), np.tile(none, len(VIEWS)))
    np.testing.assert_array_equal(power_line_features(np.full(40, np.nan + 0j), None), np.tile(none, len(VIEWS)))
