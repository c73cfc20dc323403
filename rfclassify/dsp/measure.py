"""Measurements on synthesized bursts: matched filtering, EVM, instantaneous frequency,
occupied bandwidth, sideband balance. Used by the physics tests and dataset sanity checks."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rfclassify.dsp import pulses


def matched_filter(iq: np.ndarray, sps: float, rolloff: float, timing_offset_samples: float = 0.0,
                   sro_ppm: float = 0.0, symbol_shift: float = 0.0,
                   pulse: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """RRC matched-filter outputs at the symbol instants of one burst (1-D iq).

    Symbol k is taken at sample time k * sps + timing_offset_samples (+ symbol_shift symbols),
    with the receiver clock off by sro_ppm; only symbols whose whole pulse lies inside the
    burst (8 symbols margin) are returned. With unit-energy symbols the output is the symbol.
    pulse: the RRC of this roll-off as a function of symbol time (e.g. symbol_clock.rrc_lookup,
    much faster); default the closed form.
    """
    margin = 8
    scale = 1 + 1e-6 * sro_ppm
    last = (iq.size - 1) * scale
    k = np.arange(margin, int((last - timing_offset_samples) / sps) - margin)
    centre = (k + symbol_shift) * sps + timing_offset_samples  # receiver time of each symbol
    width = int(np.ceil(2 * margin * sps / scale)) + 3
    idx = np.floor((centre - margin * sps) / scale).astype(np.intp)[:, None] + np.arange(width)
    valid = (idx >= 0) & (idx < iq.size)
    u = (idx * scale - timing_offset_samples) / sps - symbol_shift - k[:, None]
    if pulse is None:
        def pulse(v: np.ndarray) -> np.ndarray:
            return pulses.rrc(v, rolloff)
    taps = pulse(np.clip(u, -margin, margin)) * ((np.abs(u) <= margin) & valid)
    x = iq.astype(np.complex128)[np.clip(idx, 0, iq.size - 1)]
    return np.sum(taps * x, axis=1) / sps


def evm_db(received: np.ndarray, alphabet: np.ndarray) -> float:
    """Error vector magnitude (dB) against the nearest alphabet point, relative to alphabet rms."""
    ref = alphabet[np.argmin(np.abs(received[:, None] - alphabet[None, :]), axis=1)]
    err = np.mean(np.abs(received - ref) ** 2)
    return float(10 * np.log10(err / np.mean(np.abs(alphabet) ** 2)))


def instantaneous_frequency(iq: np.ndarray) -> np.ndarray:
    """Frequency between consecutive samples in cycles/sample (last axis), from phase steps."""
    return np.angle(iq[..., 1:] * np.conj(iq[..., :-1])) / (2 * np.pi)


def power_spectrum(iq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(frequency cycles/sample ascending, Hann-windowed power spectrum summed over leading axes)."""
    x = np.atleast_2d(iq)
    w = np.hanning(x.shape[-1])
    spec = np.abs(np.fft.fftshift(np.fft.fft(x * w, axis=-1), axes=-1)) ** 2
    return np.fft.fftshift(np.fft.fftfreq(x.shape[-1])), spec.reshape(-1, x.shape[-1]).sum(axis=0)


def occupied_bandwidth(iq: np.ndarray, fraction: float = 0.99) -> float:
    """Width (cycles/sample) of the band holding `fraction` of the power, equal tails cut."""
    f, p = power_spectrum(iq)
    c = np.cumsum(p) / p.sum()
    lo = f[np.searchsorted(c, (1 - fraction) / 2)]
    hi = f[np.searchsorted(c, 1 - (1 - fraction) / 2)]
    return float(hi - lo)


def sideband_ratio_db(iq: np.ndarray) -> float:
    """Power above the carrier (f > 0) over power below (f < 0), dB; DC bins excluded."""
    f, p = power_spectrum(iq)
    guard = 2.0 / f.size
    return float(10 * np.log10(p[f > guard].sum() / p[f < -guard].sum()))
