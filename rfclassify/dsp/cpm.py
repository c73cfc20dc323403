"""Continuous-phase modulators: GMSK, CPFSK (rectangular) and GFSK, binary symbols.

Instantaneous frequency (cycles/sample) is h * sum_k a_k g(u - k) / sps with g the frequency
pulse (integral 1/2), so the peak deviation of a long run of equal symbols is h / (2 sps);
the phase is its running sum, hence continuous by construction at any rate.
"""

from __future__ import annotations

import numpy as np

from rfclassify.dsp import pulses
from rfclassify.dsp.linear import symbol_range, symbol_times

CPM_LABELS = ("GMSK", "CPFSK", "GFSK")
GAUSS_SPAN_SYMBOLS = 3  # g(u) of BT >= 0.2 is < 1e-6 beyond 3 symbols


def modulate_cpm(label: str, sample_times: np.ndarray, sps: np.ndarray, h: np.ndarray,
                 bt: np.ndarray, timing_offset_samples: np.ndarray, sro_ppm: np.ndarray,
                 rng: np.random.Generator) -> np.ndarray:
    """Unit-amplitude CPM burst (B, N) complex64 at the given sample times."""
    if label == "CPFSK":
        table = pulses.polyphase_table(pulses.rect_frequency, np.zeros_like(sps), 1)
        span = 1
    else:
        span = GAUSS_SPAN_SYMBOLS
        table = pulses.polyphase_table(pulses.gaussian_frequency, bt, span)
    u = symbol_times(sample_times, sps, timing_offset_samples)
    first, count = symbol_range(u, span)
    a = (rng.integers(0, 2, size=(u.shape[0], count)) * 2 - 1).astype(np.float32)
    # Time per sample is (1 + sro) samples of the transmitter's clock.
    step = (1 + 1e-6 * sro_ppm) / sps
    freq = pulses.shape(a, u, table, span, first).astype(np.float64) * (h * step)[:, None]
    phase = 2 * np.pi * np.cumsum(freq, axis=1)
    return np.exp(1j * phase).astype(np.complex64)
