"""Symbol-rate normalization: resample every burst to about the same samples per symbol.

Bursts arrive at 2-16 samples per symbol. A network that must recognize a constellation at
any of those rates spends its capacity on the rate; the high-order classes (16PSK, 64QAM...)
suffer most (a CPU A/B in benchmarks/high_order_cpu_ab.md: +7.6 points when every burst had
one rate). So, when a model asks for it (``target_sps`` in model.json), each normalized burst
is resampled by est_sps / target_sps before bucketing, in training and serving alike:

* ``estimate_sps``: blind, from the occupied bandwidth. A root-raised-cosine burst holds
  91-97 % of its power (rolloff 0.5-0.15) in a band as wide as its symbol rate wherever its
  carrier sits, so: the periodogram, smoothed, minus a noise floor (a low percentile of the
  bins), then the fewest bins that hold 94 % of the rest; sps = 1 / that width, clipped to
  2..16. Within 25 % of the true rate for 95-98 % of high-order bursts at >= 10 dB; below
  about 0 dB the floor takes in signal and the estimate is poor. Analog and CPM bursts get an
  estimate with no symbol meaning: harmless, because training applies the same rule.
* the resampling factor is rounded to a quarter-octave grid (13 rational factors from 2x up
  to 4x down), so the network sees 4 sps +-9 % where the estimate is right, and a training
  batch needs at most 13 ``resample_poly`` calls.
* ``snr_offset_db``: decimating by d > 1 with an anti-alias filter removes (d - 1) / d of
  white noise but none of an in-band signal, so the network sees an SNR 10*log10(d) dB higher
  than the full-band SNR the product reports. Training adds the offset to the SNR target,
  serving subtracts it from the estimate. Interpolation (d < 1) changes no SNR.

After resampling the burst is scaled to unit RMS again (the filter removed noise power).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from rfclassify._exceptions import ConfigError

#: (up, down) for resample_poly, for downsampling factors d = 2**(k/4), k = -4..8 (each within 1.1 %)
RESAMPLE_GRID: tuple[tuple[int, int], ...] = (
    (2, 1), (5, 3), (7, 5), (6, 5), (1, 1), (5, 6), (5, 7), (3, 5), (1, 2), (5, 12), (6, 17),
    (3, 10), (1, 4))
SPS_CLIP = (2.0, 16.0)        # the synthesizer's range: estimates outside it are clipped
MAX_ESTIMATE_SAMPLES = 8192   # a longer burst is estimated from its middle 8192 samples
_POWER_FRACTION = 0.94
_FLOOR_PERCENTILE = 30.0
_SMOOTH_BINS = 4              # smoothing width, in bins of an n-point transform


def estimate_sps(iq: np.ndarray) -> np.ndarray:
    """Blind samples-per-symbol of each row of a (B, n) complex array (see module docstring)."""
    from scipy.ndimage import uniform_filter1d

    x = np.asarray(iq)
    if x.ndim != 2:
        raise ValueError(f"estimate_sps takes a (bursts, samples) array, got shape {x.shape}")
    n = x.shape[1]
    if n > MAX_ESTIMATE_SAMPLES:
        start = (n - MAX_ESTIMATE_SAMPLES) // 2
        x, n = x[:, start:start + MAX_ESTIMATE_SAMPLES], MAX_ESTIMATE_SAMPLES
    nfft = max(1024, n)
    spec = np.fft.fft(x * _hann(n), n=nfft, axis=1)
    psd = spec.real**2 + spec.imag**2
    psd = uniform_filter1d(psd, max(1, round(_SMOOTH_BINS * nfft / n)), axis=1, mode="wrap")
    signal = np.clip(psd - np.percentile(psd, _FLOOR_PERCENTILE, axis=1, keepdims=True), 0, None)
    ranked = -np.sort(-signal, axis=1)
    held = np.cumsum(ranked, axis=1) / np.maximum(ranked.sum(axis=1, keepdims=True), 1e-30)
    width = (np.argmax(held >= _POWER_FRACTION, axis=1) + 1) / nfft
    return np.clip(1.0 / width, *SPS_CLIP)


@lru_cache(maxsize=64)
def _hann(n: int) -> np.ndarray:
    return np.hanning(n).astype(np.float32)


@lru_cache(maxsize=None)
def _antialias_taps(up: int, down: int) -> np.ndarray:
    """The low-pass resample_poly designs by default for (up, down) and complex64 input, designed once.

    (Designing it took a fifth of the front end's time per burst.)"""
    from scipy.signal import firwin

    rate = max(up, down)
    taps = firwin(2 * 10 * rate + 1, 1.0 / rate, window=("kaiser", 5.0)).astype(np.complex64)
    taps.flags.writeable = False
    return taps


@dataclass(frozen=True)
class SymbolRateNormalizer:
    """Resample bursts to about `target_sps` samples per symbol (recorded in model.json)."""

    target_sps: float = 4.0

    def __post_init__(self) -> None:
        if not 1.0 <= float(self.target_sps) <= 8.0:
            raise ConfigError(f"target_sps must be in 1..8, got {self.target_sps}")

    def grid_index(self, iq: np.ndarray) -> np.ndarray:
        """Index into RESAMPLE_GRID of each row of a (B, n) burst array."""
        d = estimate_sps(iq) / float(self.target_sps)
        k = np.rint(4.0 * np.log2(np.maximum(d, 1e-9))).astype(np.int64)
        return np.clip(k + 4, 0, len(RESAMPLE_GRID) - 1)

    def resample(self, iq: np.ndarray, grid_index: int) -> np.ndarray:
        """Rows of a (B, n) array resampled by RESAMPLE_GRID[grid_index], each back at unit RMS."""
        from scipy.signal import resample_poly

        up, down = RESAMPLE_GRID[grid_index]
        y = iq if up == down else resample_poly(iq, up, down, axis=1, window=_antialias_taps(up, down))
        power = np.mean(y.real**2 + y.imag**2, axis=1, keepdims=True)
        return (y / np.sqrt(np.maximum(power, 1e-30))).astype(np.complex64)

    def apply(self, x: np.ndarray) -> tuple[np.ndarray, float]:
        """(resampled unit-RMS burst, SNR offset in dB) of one normalized 1-D burst."""
        k = int(self.grid_index(x[None, :])[0])
        return self.resample(x[None, :], k)[0], snr_offset_db(k)

    def to_dict(self) -> dict[str, Any]:
        return {"target_sps": float(self.target_sps)}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SymbolRateNormalizer | None:
        """The normalizer model.json asks for, or None for a model trained without one."""
        if not d:
            return None
        try:
            return cls(float(d["target_sps"]))
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"model.json: symbol_rate must look like {{\"target_sps\": 4.0}}, got {d!r}") from None


def snr_offset_db(grid_index: int) -> float:
    """dB by which decimation raises the SNR the network sees (0 when interpolating)."""
    up, down = RESAMPLE_GRID[grid_index]
    return 10.0 * math.log10(down / up) if down > up else 0.0
