"""The per-symbol channels a sequence network reads, by its front.

- ``clocked``: the N_CHANNELS channels of the burst's clocked, carrier-recovered symbols
  (rfclassify.dsp.symbol_sequence.sequence_from_symbols): the shipped network's input.
- ``equalized``: those, then EQUALIZED_CHANNELS more: I, Q and |.|^2 of the symbols as the
  decision-directed equalizer of the best-fitting of the network's classes' alphabets leaves
  them (rfclassify.dsp.class_equalizer.best_equalized; zeros for fewer than its
  MIN_SYMBOLS). A view with the multipath undone where the equalizer converges, which the
  network could not learn to make itself (benchmarks/fractional_sequence_probe.py).
- ``blind``: the clocked channels, then BLIND_CHANNELS more: the same N_CHANNELS channels of
  the symbols after the class-blind equalizer (rfclassify.dsp.blind_equalizer), then that
  filter's fourth moments before and after, constant over the symbols (zeros where the filter
  gives nothing finite). The network learns the raw and the filtered reading side by side, and
  when to trust which, where the refiner's blind view (SequenceNet.blind_view) shows a network
  trained on raw symbols the filtered ones.
- ``filtered``: the N_CHANNELS channels of the symbols after the class-blind filter alone (of
  the clocked symbols where the filter gives nothing finite): a network trained on them is a
  reader for the refiner's blind view (SequenceNet.blind_reader), in place of the clocked
  network reading symbols it was never trained on.

The front is part of a trained network (rfclassify.engine.sequence_net stores it) and the
same function makes its training data (rfclassify.model.sequence_fit) and its served input
(rfclassify.engine.refiner).
"""

from __future__ import annotations

import numpy as np

from rfclassify.dsp import symbol_clock as sc
from rfclassify.dsp.blind_equalizer import kurtosis_equalize
from rfclassify.dsp.class_equalizer import best_equalized
from rfclassify.dsp.symbol_sequence import CARRIER_LINES, MAX_SYMBOLS, N_CHANNELS, clocked_symbols, finite_sequence

FRONTS = ("clocked", "equalized", "blind", "filtered")
EQUALIZED_CHANNELS = 3
BLIND_MOMENTS = 2                            # the blind filter's fourth moments, before and after
BLIND_CHANNELS = N_CHANNELS + BLIND_MOMENTS
_EXTRA_CHANNELS = {"clocked": 0, "equalized": EQUALIZED_CHANNELS, "blind": BLIND_CHANNELS, "filtered": 0}


def front_channels(front: str) -> int:
    """How many channels per symbol a front gives; ValueError for an unknown front."""
    if front not in FRONTS:
        raise ValueError(f"unknown sequence front {front!r} (one of {', '.join(FRONTS)})")
    return N_CHANNELS + _EXTRA_CHANNELS[front]


def front_sequence(y: np.ndarray, front: str, labels: tuple[str, ...]) -> np.ndarray | None:
    """(front_channels(front), n) float32 channels of clocked symbols y (any scale), the
    equalized front's alphabets those of `labels`; None where the clocked channels are not
    finite. Never raises for degenerate symbols."""
    extra = front_channels(front) - N_CHANNELS
    if front == "filtered":
        filtered = blind_filtered(y)
        seq = None if filtered is None else finite_sequence(filtered[0])
        return seq if seq is not None else finite_sequence(y)
    seq = finite_sequence(y)
    if seq is None or not extra:
        return seq
    view = _blind_view(y) if front == "blind" else _equalized_view(y, labels)
    if view is None or not np.all(np.isfinite(view)):
        view = np.zeros((extra, seq.shape[1]), np.float32)
    return np.concatenate([seq, view])


def blind_filtered(y: np.ndarray) -> tuple[np.ndarray, float, float] | None:
    """blind_equalizer.kurtosis_equalize of clocked symbols y (filtered symbols, fourth moment
    before, after), or None where any of them is not finite."""
    with np.errstate(all="ignore"):
        z, before, after = kurtosis_equalize(y)
    if not (np.isfinite(before) and np.isfinite(after) and np.all(np.isfinite(z))):
        return None
    return z, before, after


def _blind_view(y: np.ndarray) -> np.ndarray | None:
    filtered = blind_filtered(y)
    if filtered is None:
        return None
    z, before, after = filtered
    seq = finite_sequence(z)
    if seq is None:
        return None
    moments = np.repeat(np.array([[before], [after]], np.float32), seq.shape[1], axis=1)
    return np.concatenate([seq, moments]).astype(np.float32)


def _equalized_view(y: np.ndarray, labels: tuple[str, ...]) -> np.ndarray | None:
    with np.errstate(all="ignore"):
        z = best_equalized(y, labels)
    return None if z is None else np.stack([z.real, z.imag, np.abs(z) ** 2]).astype(np.float32)


def burst_front_sequence(iq: np.ndarray, front: str, labels: tuple[str, ...], max_symbols: int | None = MAX_SYMBOLS,
                         rate_rule: str = sc.STRONGEST_LINE, carrier: str = CARRIER_LINES) -> np.ndarray | None:
    """front_sequence of one raw burst's clocked symbols (blind_symbols by rate_rule, the
    `carrier` second pass, the central max_symbols), or None where it has none."""
    y = clocked_symbols(sc.blind_symbols(iq, rate_rule), max_symbols, carrier)
    return None if y is None else front_sequence(y, front, labels)
