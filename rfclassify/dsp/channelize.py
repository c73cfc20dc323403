"""One signal's band cut out of a wideband recording: mixed to 0 Hz, low-passed and decimated.

A wideband capture holds a narrowband burst at many samples per symbol (a 50 kBd signal in a
10 MHz capture is at 200), far past the 2-16 the model was trained on, beside other signals
and the capture's wide noise. When a recording says where a burst lies in frequency (SigMF's
``core:freq_lower_edge`` / ``core:freq_upper_edge``), the burst is mixed from the band's
centre to 0 Hz and decimated by the largest whole factor that keeps the new sample rate at
least ``OVERSAMPLE`` times the band's width; scipy's ``resample_poly`` low-passes to the new
Nyquist rate first (Kaiser window, beta 5), so what lies beyond it, other signals included,
does not fold in. The band then fills 1/8 to 1/4 of the new rate (the factor is whole): a
root-raised-cosine signal whose band is its occupied width, (1 + roll-off) x its symbol rate,
lands at 4 / (1 + roll-off) to 8 / (1 + roll-off) samples per symbol, about 3 to 7, inside
the trained range and away from its crowded low end; a band drawn wider than the signal gives
more. A band so narrow that this would leave fewer than MIN_SAMPLES of the burst is
decimated less, to MIN_SAMPLES (the burst then reaches the model above 16 samples per symbol,
but as a burst, not a too_short reject of a few samples).
"""

from __future__ import annotations

import math
import sys

import numpy as np

OVERSAMPLE = 4.0
MIN_SAMPLES = 1024   # decimation leaves at least this many samples of a burst that has them


def decimation(sample_rate_hz: float, bandwidth_hz: float) -> int:
    """The largest whole factor that leaves at least OVERSAMPLE x bandwidth of sample rate (>= 1)."""
    if not bandwidth_hz > 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth_hz}")
    # capped: a band of a few subnormal Hz makes the ratio inf (channelize keeps MIN_SAMPLES anyway)
    return max(1, math.floor(min(sample_rate_hz / (OVERSAMPLE * bandwidth_hz), sys.maxsize)))


def channelize(iq: np.ndarray, sample_rate_hz: float, offset_hz: float, bandwidth_hz: float
               ) -> tuple[np.ndarray, float]:
    """(the band's samples as complex64, their sample rate): the band centred offset_hz from
    the capture's centre, bandwidth_hz wide, mixed to 0 Hz and decimated (module docstring)."""
    x = np.asarray(iq)
    n = np.arange(x.shape[0], dtype=np.float64)
    mixed = x * np.exp(-2j * np.pi * (offset_hz / sample_rate_hz) * n)
    factor = max(1, min(decimation(sample_rate_hz, bandwidth_hz), x.shape[0] // MIN_SAMPLES))
    if factor == 1:
        return mixed.astype(np.complex64), float(sample_rate_hz)
    return _decimate(mixed, factor), sample_rate_hz / factor


def real_to_baseband(x: np.ndarray, first_index: int = 0) -> np.ndarray:
    """A real signal as complex baseband at half its rate, as a complex receiver records it: the
    positive half of its spectrum (0..fs/2, centred on fs/4: its analytic signal) mixed to 0 Hz,
    low-passed to +-fs/4 and decimated by 2, as channelize cuts a band (the negative half, the
    mirror image, is filtered out). Output sample k is input sample 2k; first_index, the index of
    x[0] in its recording, keeps the mixer's phase continuous across pieces of one recording."""
    # e^(-j pi n / 2) is exactly 1, -j, -1, j: no rounding of a long recording's phase
    turn = np.array([1, -1j, -1, 1j], np.complex64)[(first_index + np.arange(x.shape[0])) % 4]
    return _decimate(np.asarray(x, np.float32) * turn, 2)


def _decimate(x: np.ndarray, factor: int) -> np.ndarray:
    """x low-passed to the new Nyquist rate and decimated by factor, complex64 (scipy resample_poly,
    Kaiser window beta 5; output sample k is input sample factor * k)."""
    from scipy.signal import resample_poly

    return resample_poly(x, 1, factor, window=("kaiser", 5.0)).astype(np.complex64, copy=False)
