"""The sequence network's input fronts: the clocked channels unchanged, the equalized
front's view of the symbols with a multipath echo undone, the blind front's view of the
same symbols through the class-blind filter, and the filtered front's view alone."""

from __future__ import annotations

import numpy as np
import pytest

from rfclassify.dsp.class_equalizer import MIN_SYMBOLS, class_alphabets
from rfclassify.dsp.blind_equalizer import kurtosis_equalize
from rfclassify.dsp.sequence_fronts import (BLIND_CHANNELS, BLIND_MOMENTS, EQUALIZED_CHANNELS, FRONTS, blind_filtered,
                                            front_channels, front_sequence)
from rfclassify.dsp.symbol_sequence import N_CHANNELS, finite_sequence
from rfclassify.labels import HIGH_ORDER_LABELS


def _echoed_16qam(n: int, echo: float, seed: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    grid = class_alphabets("16QAM")[0]
    s = grid[rng.integers(0, grid.size, n)]
    y = s + echo * np.concatenate([[0], s[:-1]]) + 0.01 * (rng.standard_normal(n) + 1j * rng.standard_normal(n))
    return y * np.exp(0.4j) * 3.0, grid      # any phase, any scale


def _off_grid(z: np.ndarray, grid: np.ndarray) -> float:
    return float(np.median(np.min(np.abs(z[:, None] - grid[None, :]), axis=1)))


def test_each_front_has_its_channel_count_and_an_unknown_one_is_refused() -> None:
    assert FRONTS == ("clocked", "equalized", "blind", "filtered")
    assert front_channels("clocked") == N_CHANNELS
    assert front_channels("equalized") == N_CHANNELS + EQUALIZED_CHANNELS
    assert front_channels("blind") == 2 * N_CHANNELS + BLIND_MOMENTS == N_CHANNELS + BLIND_CHANNELS
    assert front_channels("filtered") == N_CHANNELS
    with pytest.raises(ValueError, match="unknown sequence front"):
        front_channels("fractional")


def test_the_equalized_front_undoes_an_echo_the_clocked_channels_keep() -> None:
    y, grid = _echoed_16qam(400, 0.35)
    clocked = front_sequence(y, "clocked", HIGH_ORDER_LABELS)
    eq = front_sequence(y, "equalized", HIGH_ORDER_LABELS)
    np.testing.assert_array_equal(clocked, finite_sequence(y))
    assert eq.shape == (N_CHANNELS + 3, y.size) and eq.dtype == np.float32
    np.testing.assert_array_equal(eq[:N_CHANNELS], clocked)
    z = eq[N_CHANNELS] + 1j * eq[N_CHANNELS + 1]
    np.testing.assert_allclose(eq[N_CHANNELS + 2], np.abs(z) ** 2, rtol=1e-5)
    raw = y / np.sqrt(np.mean(np.abs(y) ** 2)) * np.exp(-0.4j)     # even turned back exactly
    assert _off_grid(raw, grid) > 0.25                             # the echo smears the grid (0.31)
    # equalized: back on it, up to its quarter turns (0.058 from the carrier fit's start; 0.04 from the
    # line start, which finds 16QAM under this echo in 8 of 12 seeds where the fit does in 11)
    assert _off_grid(z, grid) < 0.08


def test_too_few_symbols_give_zeros_for_the_view_and_degenerate_ones_no_sequence() -> None:
    y, _ = _echoed_16qam(MIN_SYMBOLS - 1, 0.0)
    eq = front_sequence(y, "equalized", HIGH_ORDER_LABELS)
    assert eq.shape == (N_CHANNELS + 3, y.size) and not eq[N_CHANNELS:].any()
    np.testing.assert_array_equal(eq[:N_CHANNELS], finite_sequence(y))
    assert front_sequence(np.full(64, np.nan + 0j), "equalized", HIGH_ORDER_LABELS) is None


def test_the_blind_front_adds_the_filtered_symbols_channels_and_the_filters_moments() -> None:
    """After the clocked channels: the same channels of the symbols the class-blind filter
    leaves, then its fourth moments before and after, constant over the symbols; the echo
    made the symbols more Gaussian and the filter made them less so again."""
    y, grid = _echoed_16qam(400, 0.35)
    seq = front_sequence(y, "blind", HIGH_ORDER_LABELS)
    assert seq.shape == (2 * N_CHANNELS + BLIND_MOMENTS, y.size) and seq.dtype == np.float32
    np.testing.assert_array_equal(seq[:N_CHANNELS], finite_sequence(y))
    z, before, after = kurtosis_equalize(y)
    np.testing.assert_allclose(seq[N_CHANNELS:2 * N_CHANNELS], finite_sequence(z), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(seq[2 * N_CHANNELS], np.float32(before))
    np.testing.assert_allclose(seq[2 * N_CHANNELS + 1], np.float32(after))
    assert after < before - 0.1                    # 16QAM's own is 1.32; the echo raised it
    assert blind_filtered(y)[1:] == (before, after)


def test_the_blind_front_passes_too_few_symbols_unfiltered_and_zeros_a_view_it_cannot_make() -> None:
    """Fewer symbols than a 3-tap filter needs: the view repeats the clocked channels (the
    filter leaves them as they are, moments equal). Symbols the filter gives nothing finite
    for: zeros, the clocked channels kept; degenerate symbols: no sequence."""
    y, _ = _echoed_16qam(50, 0.35)
    seq = front_sequence(y, "blind", HIGH_ORDER_LABELS)
    np.testing.assert_allclose(seq[N_CHANNELS:2 * N_CHANNELS], seq[:N_CHANNELS], rtol=1e-5, atol=1e-6)
    assert seq[2 * N_CHANNELS, 0] == seq[2 * N_CHANNELS + 1, 0] > 1.0
    assert blind_filtered(np.zeros(64, complex)) is None
    assert front_sequence(np.full(64, np.nan + 0j), "blind", HIGH_ORDER_LABELS) is None


def test_the_filtered_front_is_the_filtered_symbols_channels_alone_and_falls_back_to_the_clocked_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The filtered front: the clocked channels of the symbols the class-blind filter leaves
    (the blind front's middle block), not of the symbols as clocked; where the filter gives
    nothing finite, the clocked channels, and degenerate symbols still give no sequence."""
    y, _ = _echoed_16qam(400, 0.35)
    seq = front_sequence(y, "filtered", HIGH_ORDER_LABELS)
    assert seq.shape == (N_CHANNELS, y.size) and seq.dtype == np.float32
    np.testing.assert_array_equal(seq, finite_sequence(blind_filtered(y)[0]))
    np.testing.assert_array_equal(seq, front_sequence(y, "blind", HIGH_ORDER_LABELS)[N_CHANNELS:2 * N_CHANNELS])
    assert not np.allclose(seq, finite_sequence(y), atol=1e-3)
    assert front_sequence(np.full(64, np.nan + 0j), "filtered", HIGH_ORDER_LABELS) is None
    import rfclassify.dsp.sequence_fronts as fronts
    monkeypatch.setattr(fronts, "blind_filtered", lambda _y: None)    # a filter that gives nothing finite
    np.testing.assert_array_equal(front_sequence(y, "filtered", HIGH_ORDER_LABELS), finite_sequence(y))
