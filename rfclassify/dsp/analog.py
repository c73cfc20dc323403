"""Analog modulators: AM (DSB/SSB, with or without carrier) and FM, on peak-normalized messages.

* AM-DSB-WC: 1 + m * x(t)                      (m = modulation index, carrier present)
* AM-DSB-SC: x(t)
* AM-SSB-WC: 1 + m * (x + j H{x})  upper, or its conjugate sideband (lower)
* AM-SSB-SC: x + j H{x}            upper, or conjugate (lower)
* FM:        exp(j 2 pi f_dev sum x)   f_dev = peak deviation, cycles/sample; beta = f_dev / W
H is the Hilbert transform (FFT based; the messages are zero-mean and band-limited).
"""

from __future__ import annotations

import numpy as np
from scipy.signal import hilbert

AM_LABELS = ("AM-DSB-WC", "AM-DSB-SC", "AM-SSB-WC", "AM-SSB-SC")
ANALOG_MOD_LABELS = AM_LABELS + ("FM",)


def am(label: str, message: np.ndarray, mod_index: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """AM burst (B, N) complex64 from messages (B, N) real, peak 1."""
    if label in ("AM-SSB-WC", "AM-SSB-SC"):
        x = hilbert(message, axis=1)
        x = np.where(upper[:, None], x, np.conj(x))
    else:
        x = message.astype(np.complex128)
    if label.endswith("-WC"):
        x = 1.0 + mod_index[:, None] * x
    return x.astype(np.complex64)


def fm(message: np.ndarray, deviation_cyc_per_sample: np.ndarray) -> np.ndarray:
    """FM burst (B, N) complex64: phase = 2 pi f_dev * running sum of the message."""
    phase = 2 * np.pi * deviation_cyc_per_sample[:, None] * np.cumsum(message, axis=1)
    return np.exp(1j * phase).astype(np.complex64)
