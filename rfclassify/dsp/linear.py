"""Linear modulators (ASK/PAM/PSK/APSK/QAM, OQPSK) with root-raised-cosine shaping at any rate.

Symbol k of a burst is centred at sample time ``k * sps + timing_offset_samples`` and the
sample clock may run fast or slow by ``sro_ppm``; both enter only through the symbol time of
each output sample (see ``pulses.shape``), so fractional rates and offsets are exact.
"""

from __future__ import annotations

import numpy as np

from rfclassify.dsp import pulses
from rfclassify.dsp.constellations import (APSK16_RATIOS, APSK32_RATIOS, APSK64, APSK128, apsk,
                                          constellation)

RRC_SPAN_SYMBOLS = 8  # taps on each side; truncation costs < -40 dB at roll-off 0.15
LINEAR_LABELS = ("OOK", "4ASK", "8ASK", "PAM4", "BPSK", "QPSK", "OQPSK", "8PSK", "16PSK",
                 "32PSK", "16APSK", "32APSK", "64APSK", "128APSK", "16QAM", "32QAM", "64QAM",
                 "128QAM", "256QAM")


def symbol_times(sample_times: np.ndarray, sps: np.ndarray, timing_offset_samples: np.ndarray
                 ) -> np.ndarray:
    """Symbol time u (in symbols) of every sample: (t - timing) / sps, shape (B, N)."""
    return (sample_times - timing_offset_samples[:, None]) / sps[:, None]


def symbol_range(u: np.ndarray, span: int) -> tuple[int, int]:
    """(first symbol number, count) covering every pulse that touches the samples at times u."""
    first = int(np.floor(u.min())) - span + 1
    last = int(np.floor(u.max())) + span
    return first, last - first + 1


def _draw_symbols(label: str, shape: tuple[int, int], rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random symbols (B, K) complex64 plus the per-burst APSK ring ratios r2/r1, r3/r1."""
    b = shape[0]
    ratio2 = np.full(b, np.nan, np.float32)
    ratio3 = np.full(b, np.nan, np.float32)
    if label in ("16APSK", "32APSK"):
        table = APSK16_RATIOS if label == "16APSK" else APSK32_RATIOS
        pick = rng.integers(0, len(table), size=b)
        out = np.empty(shape, np.complex64)
        for i in np.unique(pick):
            rows = pick == i
            if label == "16APSK":
                alphabet = apsk((4, 12), (1.0, table[i]))
                ratio2[rows] = table[i]
            else:
                alphabet = apsk((4, 12, 16), (1.0, *table[i]))
                ratio2[rows], ratio3[rows] = table[i]
            out[rows] = alphabet[rng.integers(0, alphabet.size, size=(int(rows.sum()), shape[1]))]
        return out, ratio2, ratio3
    alphabet = constellation(label)
    if label in ("64APSK", "128APSK"):
        radii = (APSK64 if label == "64APSK" else APSK128)[1]
        ratio2[:] = radii[1]
        ratio3[:] = radii[2]
    return alphabet[rng.integers(0, alphabet.size, size=shape)], ratio2, ratio3


def modulate_linear(label: str, sample_times: np.ndarray, sps: np.ndarray, rolloff: np.ndarray,
                    timing_offset_samples: np.ndarray, rng: np.random.Generator
                    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """RRC-shaped random symbols at the given sample times; returns (iq (B, N), params).

    Average power is ~1 (unit-energy alphabet, unit-energy pulse). Roll-offs are used
    rounded to pulses.ROLLOFF_STEP. OQPSK delays the Q rail
    by half a symbol relative to I.
    """
    span = RRC_SPAN_SYMBOLS
    table = pulses.rrc_table(rolloff, span)
    u = symbol_times(sample_times, sps, timing_offset_samples)
    if label == "OQPSK":
        u_q = u - 0.5
        first, count = symbol_range(np.concatenate([u, u_q], axis=1), span)
        bits = rng.integers(0, 2, size=(u.shape[0], 2, count)).astype(np.float32) * 2 - 1
        rails = bits / np.float32(np.sqrt(2))
        i = pulses.shape(rails[:, 0], u, table, span, first)
        q = pulses.shape(rails[:, 1], u_q, table, span, first)
        iq = (i + 1j * q).astype(np.complex64)
        nan = np.full(u.shape[0], np.nan, np.float32)
        return iq, {"apsk_ring_ratio_2": nan, "apsk_ring_ratio_3": nan}
    first, count = symbol_range(u, span)
    symbols, r2, r3 = _draw_symbols(label, (u.shape[0], count), rng)
    iq = pulses.shape(symbols, u, table, span, first).astype(np.complex64)
    return iq, {"apsk_ring_ratio_2": r2, "apsk_ring_ratio_3": r3}
