"""Coherent power lines of clocked symbols: how strongly the k-th powers of their phases hold one tone.

Raised to the power M, the symbol phases of an M-PSK burst all land on one point, so the
unit-magnitude symbols' M-th power is a tone (at M times the carrier left after the blind
derotation): 16PSK's 16th power holds a line that 32PSK's does not, 8PSK's 8th one that
16PSK's does not, and a square QAM's 4th power a weaker one. The refiner's invariants hold
lag-one products and local means of the same powers, which a carrier left over and phase
noise spare; a line held over the whole burst tells more where the symbols are clean, and
multipath, which smears the phases, takes it away first. So the lines are read from three
views of the same symbols: as clocked, after the class-blind filter (blind_equalizer, the
refiner's blind view), and after a constant-modulus filter, which pulls every symbol
towards one circle: that undoes a PSK burst's channel (16PSK read right by the sequence
network 58.8 -> 71.2 % at >= 10 dB) and wrecks the rings of the others, so it is a view for
the PSK classes alone (docs/model.md, twenty-fifth and thirtieth sessions).
"""

from __future__ import annotations

import numpy as np

from rfclassify.dsp.class_equalizer import filter_inputs

POWERS = (4, 8, 16, 32)           # the powers whose lines are read
VIEWS = ("raw", "blind", "constant_modulus")
N_FEATURES = len(POWERS) * len(VIEWS)
LINE_NFFT = 4096                  # the line search's transform (8x the 512 symbols a refiner clocks at most)
FLOOR = 1e-4                      # line strengths are kept as log(max(strength, FLOOR)); none: log(FLOOR)
CM_TAPS, CM_PASSES = 9, 15        # the constant-modulus filter's length (symbol-spaced) and its passes


def constant_modulus(y: np.ndarray, taps: int = CM_TAPS, passes: int = CM_PASSES) -> np.ndarray:
    """Clocked symbols y through the least-squares constant-modulus filter (Agee's iteration:
    each output projected onto the unit circle, the taps refitted to those targets by least
    squares), centred, at unit power. Fewer than 4 x taps symbols come back at unit power,
    unfiltered."""
    y = np.asarray(y, np.complex128)
    y = y / np.sqrt(max(float(np.mean(np.abs(y) ** 2)), 1e-30))
    if y.size < 4 * taps:
        return y
    x = filter_inputs(y, taps)
    w = np.zeros(taps, np.complex128)
    w[taps // 2] = 1.0
    solve = np.linalg.pinv(x)
    for _ in range(passes):
        z = x @ w
        w = solve @ (z / np.maximum(np.abs(z), 1e-12))
    z = x @ w
    return z / np.sqrt(max(float(np.mean(np.abs(z) ** 2)), 1e-30))


def line_strengths(v: np.ndarray) -> np.ndarray:
    """(len(POWERS),) log of the strongest line of each power of v's unit-magnitude symbols:
    max over frequency of |mean(u^k exp(-2 pi i f t))|, which is 1 for a pure tone and about
    1 / sqrt(n) for noise; log(FLOOR) each where v has no nonzero symbol."""
    v = np.asarray(v, np.complex128)
    mag = np.abs(v)
    if v.size == 0 or not np.any(mag > 0):
        return np.full(len(POWERS), np.log(FLOOR))
    u = v / np.maximum(mag, 1e-30)
    out = np.empty(len(POWERS))
    for j, k in enumerate(POWERS):
        out[j] = np.abs(np.fft.fft(u ** k, max(LINE_NFFT, u.size))).max() / u.size
    return np.log(np.maximum(out, FLOOR))


def power_line_features(y: np.ndarray | None, filtered: np.ndarray | None) -> np.ndarray:
    """(N_FEATURES,) float32: line_strengths of clocked symbols y, of `filtered` (the blind
    filter's output for them; None where it gave none) and of y through constant_modulus, in
    VIEWS' order; log(FLOOR) for a view that has no symbols or nothing finite."""
    none = np.full(len(POWERS), np.log(FLOOR))
    views = [none] * len(VIEWS)
    if y is not None and np.size(y) and np.all(np.isfinite(y)):
        with np.errstate(all="ignore"):
            cm = constant_modulus(y)
        views = [line_strengths(y),
                 line_strengths(filtered) if filtered is not None else none,
                 line_strengths(cm) if np.all(np.isfinite(cm)) else none]
    return np.concatenate(views).astype(np.float32)
