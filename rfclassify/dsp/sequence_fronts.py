"""The per-symbol channels a sequence network reads, by its front.

- ``clocked``: the N_CHANNELS channels of the burst's clocked, carrier-recovered symbols
  (rfclassify.dsp.symbol_sequence.sequence_from_symbols): the shipped network's input.
- ``equalized``: those, then EQUALIZED_CHANNELS more: I, Q and |.|^2 of the symbols as the
  decision-directed equalizer of the best-fitting of the network's classes' alphabets leaves
  them (rfclassify.dsp.class_equalizer.best_equalized; zeros for fewer than its
  MIN_SYMBOLS). A view with the multipath undone where the equalizer converges, which the
  network could not learn to make itself (benchmarks/fractional_sequence_probe.py).

The front is part of a trained network (rfclassify.engine.sequence_net stores it) and the
same function makes its training data (rfclassify.model.sequence_fit) and its served input
(rfclassify.engine.refiner).
"""

from __future__ import annotations

import numpy as np

from rfclassify.dsp import symbol_clock as sc
from rfclassify.dsp.class_equalizer import best_equalized
from rfclassify.dsp.symbol_sequence import CARRIER_LINES, MAX_SYMBOLS, N_CHANNELS, clocked_symbols, finite_sequence

FRONTS = ("clocked", "equalized")
EQUALIZED_CHANNELS = 3


def front_channels(front: str) -> int:
    """How many channels per symbol a front gives; ValueError for an unknown front."""
    if front not in FRONTS:
        raise ValueError(f"unknown sequence front {front!r} (one of {', '.join(FRONTS)})")
    return N_CHANNELS + (EQUALIZED_CHANNELS if front == "equalized" else 0)


def front_sequence(y: np.ndarray, front: str, labels: tuple[str, ...]) -> np.ndarray | None:
    """(front_channels(front), n) float32 channels of clocked symbols y (any scale), the
    equalized front's alphabets those of `labels`; None where the clocked channels are not
    finite. Never raises for degenerate symbols."""
    extra = front_channels(front) - N_CHANNELS
    seq = finite_sequence(y)
    if seq is None or not extra:
        return seq
    with np.errstate(all="ignore"):
        z = best_equalized(y, labels)
        view = (np.zeros((extra, seq.shape[1]), np.float32) if z is None
                else np.stack([z.real, z.imag, np.abs(z) ** 2]).astype(np.float32))
    if not np.all(np.isfinite(view)):
        view = np.zeros_like(view)
    return np.concatenate([seq, view])


def burst_front_sequence(iq: np.ndarray, front: str, labels: tuple[str, ...], max_symbols: int | None = MAX_SYMBOLS,
                         rate_rule: str = sc.STRONGEST_LINE, carrier: str = CARRIER_LINES) -> np.ndarray | None:
    """front_sequence of one raw burst's clocked symbols (blind_symbols by rate_rule, the
    `carrier` second pass, the central max_symbols), or None where it has none."""
    y = clocked_symbols(sc.blind_symbols(iq, rate_rule), max_symbols, carrier)
    return None if y is None else front_sequence(y, front, labels)
