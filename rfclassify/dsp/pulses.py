"""Pulse shapes and the fractional-rate pulse-shaping engine shared by linear and CPM modulators.

Time is measured in symbols (``u = t / T``). A pulse is evaluated once per burst on a
polyphase grid (``PHASES`` phases per symbol, ``2 * span`` taps), and every output sample
picks the phase nearest its fractional symbol time. That makes any real samples-per-symbol
(and any sample-rate offset or timing offset) cost the same as an integer one: a gather of
``2 * span`` taps and ``2 * span`` symbols per sample, with no per-sample Python loop.
Nearest-phase quantization at 128 phases is a timing error below 1/256 symbol (EVM < -45 dB).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from scipy.special import erfc

PHASES = 128  # polyphase resolution per symbol

PulseFn = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (u (B, M), param (B, 1)) -> (B, M)


def rrc(u: np.ndarray, rolloff: np.ndarray) -> np.ndarray:
    """Root-raised-cosine pulse at symbol times u, unit energy (integral of p^2 du == 1)."""
    u, b = np.broadcast_arrays(np.asarray(u, dtype=np.float64), np.asarray(rolloff, dtype=np.float64))
    num = np.sin(np.pi * u * (1 - b)) + 4 * b * u * np.cos(np.pi * u * (1 + b))
    den = np.pi * u * (1 - (4 * b * u) ** 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = num / den
    # The two removable singularities of the closed form.
    at0 = np.abs(u) < 1e-9
    p = np.where(at0, 1 - b + 4 * b / np.pi, p)
    sing = np.abs(np.abs(4 * b * u) - 1) < 1e-9
    with np.errstate(divide="ignore", invalid="ignore"):
        p_sing = (b / np.sqrt(2)) * ((1 + 2 / np.pi) * np.sin(np.pi / (4 * b))
                                     + (1 - 2 / np.pi) * np.cos(np.pi / (4 * b)))
    return np.where(sing & ~at0, p_sing, p)


def gaussian_frequency(u: np.ndarray, bt: np.ndarray) -> np.ndarray:
    """GMSK/GFSK frequency pulse g(u): a unit-symbol rectangle through a Gaussian filter of
    bandwidth-time product bt, centred at 0, integral 1/2 (so phase moves h*pi per symbol)."""
    k = 2 * np.pi * np.asarray(bt, dtype=np.float64) / np.sqrt(np.log(2))

    def q(x: np.ndarray) -> np.ndarray:
        return 0.5 * erfc(x / np.sqrt(2))

    return 0.5 * (q(k * (u - 0.5)) - q(k * (u + 0.5)))


def rect_frequency(u: np.ndarray, _unused: np.ndarray) -> np.ndarray:
    """CPFSK frequency pulse: 1/2 over one symbol centred at 0 (integral 1/2)."""
    u = np.broadcast_arrays(u, _unused)[0]
    return np.where(np.abs(u) < 0.5, 0.5, np.where(np.abs(u) == 0.5, 0.25, 0.0))


def polyphase_table(pulse: PulseFn, param: np.ndarray, span: int) -> np.ndarray:
    """(B, PHASES + 1, 2 * span) float32 taps: table[b, p, j] = pulse(p / PHASES + span - 1 - j).

    Tap j multiplies symbol k0 - span + 1 + j, where k0 = floor(u) for the sample's symbol time u.
    """
    phase = np.arange(PHASES + 1) / PHASES
    j = np.arange(2 * span)
    u = phase[:, None] + (span - 1 - j)[None, :]  # (P+1, 2L)
    param = np.asarray(param, dtype=np.float64).reshape(-1, 1, 1)
    return pulse(u[None, :, :], param).astype(np.float32)


ROLLOFF_STEP = 1e-3  # roll-offs are drawn on this grid so their tables can be cached


@lru_cache(maxsize=1024)
def _rrc_row(rolloff_steps: int, span: int) -> np.ndarray:
    return polyphase_table(rrc, np.array([rolloff_steps * ROLLOFF_STEP]), span)[0]


def rrc_table(rolloff: np.ndarray, span: int) -> np.ndarray:
    """polyphase_table(rrc, rolloff, span) for roll-offs on the ROLLOFF_STEP grid, cached."""
    steps = np.rint(np.asarray(rolloff) / ROLLOFF_STEP).astype(int)
    return np.stack([_rrc_row(int(k), span) for k in steps])


def shape(symbols: np.ndarray, u: np.ndarray, table: np.ndarray, span: int,
          first_symbol: int) -> np.ndarray:
    """Sum_k symbols[:, k] * pulse(u - k) for every sample symbol time u (B, N).

    symbols[:, i] is symbol number ``first_symbol + i``; the caller provides enough symbols
    on both sides (``span`` beyond the first and last sample's symbol).
    """
    k0 = np.floor(u)
    phase = np.rint((u - k0) * PHASES).astype(np.intp)
    start = k0.astype(np.intp) - (span - 1) - first_symbol  # index of tap 0's symbol
    b = np.arange(u.shape[0])[:, None]
    taps = table[b, phase]  # (B, N, 2L)
    if not np.iscomplexobj(symbols):
        return _gather_dot(symbols, taps, b, start, span)
    # Real taps on the I and Q planes apart: half the multiplies of complex taps.
    out = np.empty(u.shape, symbols.dtype)
    out.real = _gather_dot(np.ascontiguousarray(symbols.real), taps, b, start, span)
    out.imag = _gather_dot(np.ascontiguousarray(symbols.imag), taps, b, start, span)
    return out


def _gather_dot(symbols: np.ndarray, taps: np.ndarray, b: np.ndarray, start: np.ndarray,
                span: int) -> np.ndarray:
    """(B, N): the 2 * span symbols from index start on, dotted with taps (B, N, 2L)."""
    windows = sliding_window_view(symbols, 2 * span, axis=1)  # (B, K - 2L + 1, 2L)
    syms = windows[b, start]  # (B, N, 2L)
    return np.einsum("bnj,bnj->bn", syms, taps.astype(syms.dtype, copy=False))
