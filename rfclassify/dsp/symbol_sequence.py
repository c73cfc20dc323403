"""A burst's clocked symbols, carrier-recovered, as per-symbol channels for the sequence network.

The refiner's invariants (rfclassify.dsp.symbol_clock.clock_invariants) are 27 numbers that no
carrier phase or small residual offset moves; they throw away where each symbol lies. This
module keeps it. From a burst at its blind clock (``blind_symbols``) it takes out what is left
of the carrier and runs the matched filter again (``second_pass_symbols``, ``clocked_symbols``),
by one of two second passes (CARRIER_PASSES; a sequence network stores the one it was
trained on):

- CARRIER_LINES: the strongest line of the symbols' 4th or 8th power. On 64-512 symbols of
  a dense QAM a noise peak often beats that line, and the 12- and 16-fold alphabets have
  none of those orders (docs/model.md, "Seventeenth session");
- CARRIER_FIT: the frequency under which the best-fitting of FIT_CLASSES' alphabets explains
  the symbols (rfclassify.dsp.class_equalizer's carrier fit, then its equalizer's
  likelihood to pick the alphabet). 8PSK is among them because 16PSK alone leaves the
  frequency ambiguous by 1/16 cycle a symbol; 32APSK's six alphabets added nothing
  measurable for 2.6x the cost (eighteenth session);

then gives every symbol ``N_CHANNELS`` numbers (``sequence_from_symbols``):

- the symbols derotated by the 4th-power line's local phase (rfclassify.dsp.carrier_lines),
  and by the 4th-, 8th- and 16th-power lines' whole-burst phases (I and Q each): the
  constellation's amplitude structure, which no invariant keeps;
- |y|^2 and the one-symbol lag product y_n conj(y_{n-1}) (I/Q);
- the unit-magnitude 8th/16th/32nd powers against their LOCAL_SYMBOLS-symbol local means (I/Q);
- the squared magnitudes of the local means of the 4th..32nd powers.

Built and measured in benchmarks/sequence_refiner_probe.py (ninth session); the serving
refiner (rfclassify.engine.refiner) runs the sequence network (rfclassify.engine.sequence_net)
on it. ``burst_sequence`` is the whole chain for one raw burst; it never raises on a bad one.
"""

from __future__ import annotations

import math

import numpy as np

from rfclassify.dsp import class_equalizer as ce
from rfclassify.dsp import symbol_clock as sc
from rfclassify.dsp.carrier_lines import derotations, local_mean, residual_carrier
from rfclassify.dsp.windows import central

LOCAL_SYMBOLS = 16          # local means of the unit-magnitude powers
N_CHANNELS = 21             # per-symbol channels
MIN_SYMBOLS = 3             # fewer symbols: no sequence
MAX_SYMBOLS = 1024          # burst_sequence keeps the central symbols of longer bursts
CARRIER_LINES, CARRIER_FIT = "lines", "fit"     # the second carrier pass (module docstring)
CARRIER_PASSES = (CARRIER_LINES, CARRIER_FIT)
FIT_CLASSES = ("8PSK", "16PSK", "64QAM")   # whose alphabets CARRIER_FIT fits


def sequence_from_symbols(y: np.ndarray) -> np.ndarray:
    """(N_CHANNELS, n) float32 per-symbol channels of matched-filter symbols y (any scale)."""
    y = np.asarray(y, np.complex128)
    y = y / math.sqrt(max(float(np.mean(np.abs(y) ** 2)), 1e-30))
    u = y / np.maximum(np.abs(y), 1e-30)
    ch: list[np.ndarray] = []
    near4, whole4 = derotations(y, 4)
    for d in (near4, whole4, derotations(y, 8, local=False)[1], derotations(y, 16, local=False)[1]):
        ch += [d.real, d.imag]
    ch.append(np.abs(y) ** 2)
    lag = np.concatenate([[0], y[1:] * np.conj(y[:-1])])
    ch += [lag.real, lag.imag]
    means = {k: local_mean(u ** k, LOCAL_SYMBOLS) for k in (4, 8, 16, 32)}
    for k in (8, 16, 32):
        v = u ** k * np.exp(-1j * np.angle(means[k]))
        ch += [v.real, v.imag]
    ch += [np.abs(means[k]) ** 2 for k in (4, 8, 16, 32)]
    return np.stack(ch).astype(np.float32)


def check_carrier_pass(carrier: str) -> str:
    """carrier, or ValueError when it is not one of CARRIER_PASSES."""
    if carrier not in CARRIER_PASSES:
        raise ValueError(f"unknown carrier pass {carrier!r} (one of {', '.join(CARRIER_PASSES)})")
    return carrier


def fitted_carrier(y: np.ndarray) -> float:
    """Cycles per symbol: the residual carrier of unit-power symbols y under which the
    best-fitting of FIT_CLASSES' alphabets explains their central symbols
    (class_equalizer.best_carrier); the strongest-line estimate (residual_carrier) where it
    has none (too few symbols, or no alphabet fits)."""
    f = ce.best_carrier(y, FIT_CLASSES)
    return residual_carrier(y) if f is None else f


def second_pass_baseband(found: sc.BlindSymbols, carrier: str = CARRIER_LINES) -> np.ndarray:
    """The burst's baseband with the residual carrier of the first pass's symbols taken out,
    found by the `carrier` pass (CARRIER_PASSES)."""
    y = found.symbols / math.sqrt(max(float(np.mean(np.abs(found.symbols) ** 2)), 1e-30))
    f = fitted_carrier(y) if check_carrier_pass(carrier) == CARRIER_FIT else residual_carrier(y)
    return found.baseband * np.exp(-2j * np.pi * f / found.sps * np.arange(found.baseband.size))


def second_pass_symbols(found: sc.BlindSymbols, carrier: str = CARRIER_LINES) -> np.ndarray:
    """The symbols again, from the `carrier` second pass's baseband, at the first pass's clock."""
    return sc.symbols_at(second_pass_baseband(found, carrier), found.sps, sc.BLIND_ROLLOFF, found.timing_samples,
                         pulse=sc.rrc_lookup(sc.BLIND_ROLLOFF))


_DEGENERATE = (ValueError, IndexError, ZeroDivisionError, FloatingPointError)   # what a degenerate burst raises


def clocked_symbols(found: sc.BlindSymbols | None, max_symbols: int | None = MAX_SYMBOLS,
                    carrier: str = CARRIER_LINES) -> np.ndarray | None:
    """The central max_symbols of the `carrier` second pass's symbols of a burst found at its
    blind clock, or None where there are fewer than MIN_SYMBOLS usable ones (or no clock).
    Never raises for a degenerate burst (ValueError for an unknown pass)."""
    check_carrier_pass(carrier)
    if found is None or found.symbols.size < MIN_SYMBOLS:
        return None
    try:
        with np.errstate(all="ignore"):
            y = second_pass_symbols(found, carrier)
    except _DEGENERATE:
        return None
    if max_symbols is not None:
        y = central(y, max_symbols)
    if y.size < MIN_SYMBOLS or not np.all(np.isfinite(y)) or np.count_nonzero(y) < MIN_SYMBOLS:
        return None
    return y


def clocked_sequence(found: sc.BlindSymbols | None, max_symbols: int | None = MAX_SYMBOLS) -> np.ndarray | None:
    """(N_CHANNELS, n) channels of clocked_symbols, or None where there are none (or the
    channels are not finite). Never raises for a degenerate burst."""
    y = clocked_symbols(found, max_symbols)
    return None if y is None else finite_sequence(y)


def finite_sequence(y: np.ndarray) -> np.ndarray | None:
    """sequence_from_symbols of clocked symbols, or None where the channels are not finite.
    Never raises for degenerate symbols."""
    try:
        with np.errstate(all="ignore"):
            seq = sequence_from_symbols(y)
    except _DEGENERATE:
        return None
    return seq if np.all(np.isfinite(seq)) else None


def burst_sequence(iq: np.ndarray, max_symbols: int | None = MAX_SYMBOLS) -> np.ndarray | None:
    """clocked_sequence of one raw burst (blind_symbols, then the second carrier pass)."""
    return clocked_sequence(sc.blind_symbols(iq), max_symbols)
