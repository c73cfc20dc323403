"""The k-th power lines of a burst's symbols, and the symbols turned back by them.

A linear modulation's symbols raised to the k-th power (k a multiple of the alphabet's
rotational symmetry) hold a spectral line at k times the residual carrier, whose phase is
k times the carrier phase. ``strongest_line`` finds it, ``residual_carrier`` takes the
residual frequency from the 4th or 8th power, and ``derotations`` turns the symbols back by
a line's frequency and phase (over the burst, and locally to follow phase noise). Used by
the sequence network's channels (rfclassify.dsp.symbol_sequence) and the per-alphabet
equalizer (rfclassify.dsp.class_equalizer); this module depends on neither, nor on the
symbol clock, so the clock may use both.
"""

from __future__ import annotations

import math

import numpy as np

PHASE_SYMBOLS = 64          # local carrier phase of the 4th-power line


def local_mean(z: np.ndarray, w: int) -> np.ndarray:
    """The w-symbol running mean of complex z (edges: the nearest value repeated)."""
    from scipy.ndimage import uniform_filter1d

    return uniform_filter1d(z.real, w, mode="nearest") + 1j * uniform_filter1d(z.imag, w, mode="nearest")


def power_line(y: np.ndarray, k: int) -> np.ndarray:
    """y^k with the amplitude kept for k = 4 (QAM, APSK: |y|^2 y^2 phase weighting) and unit
    magnitude above (PSK)."""
    if k == 4:
        return y ** 4 / np.maximum(np.abs(y) ** 2, 1e-30)
    return (y / np.maximum(np.abs(y), 1e-30)) ** k


def strongest_line(z: np.ndarray, k: int, strength: bool = True) -> tuple[float, float]:
    """(frequency in cycles/symbol, strength against the spectrum's median) of the strongest
    line of z, the k-th power line of some symbols, searched within |f| <= 0.07 k (at most 0.5).
    strength=False skips the median (the strength is then nan)."""
    nfft = 1 << int(math.ceil(math.log2(8 * z.size)))
    f = np.fft.fftfreq(nfft)
    s = np.abs(np.fft.fft(z, nfft))
    i = int(np.argmax(np.where(np.abs(f) <= min(0.5, 0.07 * k), s, -1.0)))
    return float(f[i]), float(s[i] / (np.median(s) + 1e-12 * z.size)) if strength else math.nan


def residual_carrier(y: np.ndarray) -> float:
    """Cycles per symbol: the strongest line of the 4th or 8th power of the symbols, over k."""
    lines = [(*strongest_line(power_line(y, k), k), k) for k in (4, 8)]
    f, _, k = max(lines, key=lambda line: line[1])
    return f / k


def derotations(y: np.ndarray, k: int, local: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
    """y turned back by the k-th power line (one line search): its frequency over the whole
    burst, and its phase over PHASE_SYMBOLS symbols (local, follows phase noise; None when
    local is False) and over the whole burst."""
    z = power_line(y, k)
    fk, _ = strongest_line(z, k, strength=False)
    t = np.arange(z.size)
    zc = z * np.exp(-2j * np.pi * fk * t)
    ramp = 2 * np.pi * fk * t
    near = y * np.exp(-1j * (ramp + np.angle(local_mean(zc, PHASE_SYMBOLS))) / k) if local else None
    return near, y * np.exp(-1j * (ramp + np.angle(np.mean(zc))) / k)
