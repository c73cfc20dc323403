"""The sequence network's forward pass in numpy: class log-probabilities of one burst's clocked symbols.

A small residual network over the per-symbol channels of its front
(rfclassify.dsp.sequence_fronts: the clocked symbols' channels, or those and an equalized
or a blindly filtered view; stored with it, the clocked front where it says none) of
bursts clocked by its rate rule (rfclassify.dsp.symbol_clock.RATE_RULES; stored with it,
the strongest line where it says none), their residual carrier taken out by its second
carrier pass (rfclassify.dsp.symbol_sequence.CARRIER_PASSES; stored with it, the lines
where it says none): two 1x1 convolutions, residual blocks of two k-wide convolutions
(batch norm folded into them), the mean and the maximum over the symbols and log(symbol
count) / 6, then a two-layer head.
Optionally each block's output passes a squeeze-and-excitation gate (channel gains from its
mean over the burst), which lets the blocks act on what the whole burst shows (its
multipath, say) as well as on the symbols within a kernel's reach.
It is trained with torch by rfclassify.model.sequence_fit (``rfclassify fit-sequence``) and
stored as an .npz of float32 arrays plus a JSON description; serving runs it here, without
torch or onnxruntime, on the CPU beside the refiner's statistics (one burst at a time, in the
refiner's worker processes). A refiner takes its log-probabilities, or with with_features
(``fit-refiner --sequence-features``) those and the pooled features its head reads
(outputs). A sequence is zero-padded at both ends of every convolution, exactly as the
masked batches it was trained on, so one burst here gives what it gave there.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rfclassify._atomic import replacing
from rfclassify._exceptions import ModelNotFoundError
from rfclassify._npz import open_npz
from rfclassify.dsp.power_lines import N_FEATURES as N_POWER_LINE_FEATURES
from rfclassify.dsp.sequence_fronts import BLIND_MOMENTS, FRONTS, front_channels
from rfclassify.dsp.symbol_clock import RATE_RULES, STRONGEST_LINE
from rfclassify.dsp.symbol_sequence import CARRIER_LINES, CARRIER_PASSES

LOG_COUNT_SCALE = 6.0       # the pooled log(symbol count) is divided by this
PREFIX = "seq_"             # array names when stored inside another .npz (the refiner's)


def _conv(h: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(out, n) 'same' convolution of h (in, n) with w (out, in, k), zero-padded, plus b."""
    k = w.shape[2]
    if k == 1:
        return w[:, :, 0] @ h + b[:, None]
    pad = k // 2
    hp = np.pad(h, ((0, 0), (pad, k - 1 - pad)))
    cols = np.lib.stride_tricks.sliding_window_view(hp, k, axis=1)      # (in, n, k)
    cols = cols.transpose(0, 2, 1).reshape(-1, h.shape[1])              # (in * k, n)
    return w.reshape(w.shape[0], -1) @ cols + b[:, None]


def _gate(u: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray) -> np.ndarray:
    """(width,) per-channel gains in (0, 1) of a block's output u (width, n), from its mean over
    the burst's symbols: a squeeze-and-excitation gate, so what a block passes on depends on
    the whole burst (its channel, say) and not only on the symbols its kernel sees."""
    z = w2 @ np.maximum(w1 @ u.mean(1) + b1, 0.0) + b2
    return 1.0 / (1.0 + np.exp(-z))


@dataclass(frozen=True)
class SequenceNet:
    """Weights (float32, batch norm folded) and what the network was trained on."""

    embed: tuple[tuple[np.ndarray, np.ndarray], ...]             # 1x1 convolutions: (w (out, in, 1), b)
    blocks: tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], ...]  # (wa, ba, wb, bb)
    head: tuple[tuple[np.ndarray, np.ndarray], ...]              # linear layers: (w (out, in), b)
    labels: tuple[str, ...]                                      # its outputs, in order
    info: dict[str, Any]                                         # fit report (sequence_fit)
    gates: tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], ...] = ()  # per block or none: (w1, b1, w2, b2)
    front: str = "clocked"                                       # what its input is (sequence_fronts.FRONTS)
    rate_rule: str = STRONGEST_LINE                              # its training bursts' clock (symbol_clock.RATE_RULES)
    carrier: str = CARRIER_LINES                                 # their second carrier pass (symbol_sequence)
    #: what a refiner takes from it (not stored with the network, by the refiner that uses it):
    #: its log-probabilities, or those and then the pooled features its head reads (pooled)
    with_features: bool = False
    #: and with blind_view, after those its log-probabilities for the same symbols through the
    #: class-blind equalizer (rfclassify.dsp.blind_equalizer) and that filter's fourth moments
    #: before and after (not stored with the network either)
    blind_view: bool = False
    #: what reads the blind view's filtered symbols: a network of the filtered front with the
    #: same labels (stored by the refiner beside this one), or None for this network itself
    blind_reader: SequenceNet | None = None
    #: and with power_lines, last, the coherent power lines of the same symbols, raw, through
    #: the blind filter and through a constant-modulus filter (rfclassify.dsp.power_lines;
    #: not stored with the network either)
    power_lines: bool = False

    def __post_init__(self) -> None:
        if self.blind_view and self.front == "blind":
            raise ValueError("a network of the blind front reads the filtered symbols already; "
                             "it takes no blind view")
        reader = self.blind_reader
        if reader is not None:
            if not self.blind_view:
                raise ValueError("a blind reader reads the blind view; this network takes none")
            if reader.front != "filtered" or reader.labels != self.labels or reader.carrier != self.carrier:
                raise ValueError(f"the blind view's reader must be a network of the filtered front with the "
                                 f"same labels ({', '.join(self.labels)}) and carrier pass ({self.carrier}); got "
                                 f"the {reader.front} front over {', '.join(reader.labels)}, {reader.carrier}")

    @property
    def n_channels(self) -> int:
        """Channels per symbol its input has (its front's)."""
        return front_channels(self.front)

    @property
    def n_params(self) -> int:
        arrays = ([a for pair in self.embed + self.head for a in pair] + [a for blk in self.blocks for a in blk]
                  + [a for gate in self.gates for a in gate])
        return int(sum(a.size for a in arrays))

    @property
    def n_features(self) -> int:
        """Pooled features its head reads: the mean and maximum of each channel, and the count."""
        return int(self.head[0][0].shape[1])

    @property
    def n_outputs(self) -> int:
        """What outputs() gives a refiner per burst."""
        own = len(self.labels) + (self.n_features if self.with_features else 0)
        return (own + (len(self.labels) + BLIND_MOMENTS if self.blind_view else 0)
                + (N_POWER_LINE_FEATURES if self.power_lines else 0))

    def outputs(self, seq: np.ndarray | None) -> np.ndarray:
        """What a refiner takes from one (n_channels, n) sequence, float32: its log-probabilities,
        then with with_features its pooled features; for a burst without a sequence (None) the
        uniform log-probabilities and zero features."""
        if seq is None:
            feats = np.zeros(self.n_features if self.with_features else 0, np.float32)
            return np.concatenate([self.uniform(), feats])
        z = self.pooled(seq)
        lp = self.head_log_probs(z)
        return np.concatenate([lp, z]) if self.with_features else lp

    def log_probs(self, seq: np.ndarray) -> np.ndarray:
        """(len(labels),) float32 log-probabilities of one (n_channels, n) sequence."""
        return self.head_log_probs(self.pooled(seq))

    def pooled(self, seq: np.ndarray) -> np.ndarray:
        """(n_features,) float32: the mean and maximum over the symbols of the last block's
        channels and log(symbol count) / LOG_COUNT_SCALE, what the head reads."""
        h = np.asarray(seq, np.float32)
        if h.ndim != 2 or h.shape[0] != self.n_channels or h.shape[1] < 1:
            raise ValueError(f"a sequence is ({self.n_channels}, n >= 1) for the {self.front} front, got {h.shape}")
        for w, b in self.embed:
            h = np.maximum(_conv(h, w, b), 0.0)
        for i, (wa, ba, wb, bb) in enumerate(self.blocks):
            t = np.maximum(_conv(h, wa, ba), 0.0)
            u = _conv(t, wb, bb)
            if self.gates:
                u = u * _gate(u, *self.gates[i])[:, None]
            h = np.maximum(h + u, 0.0)
        return np.concatenate([h.mean(1), h.max(1), [math.log(h.shape[1]) / LOG_COUNT_SCALE]]).astype(np.float32)

    def head_log_probs(self, z: np.ndarray) -> np.ndarray:
        """(len(labels),) float32 log-probabilities from pooled features z (pooled)."""
        for i, (w, b) in enumerate(self.head):
            z = w @ z + b
            if i < len(self.head) - 1:
                z = np.maximum(z, 0.0)
        z = z - z.max()
        return (z - np.log(np.sum(np.exp(z)))).astype(np.float32)

    def uniform(self) -> np.ndarray:
        """What a burst without a sequence gets: the uniform log-probabilities."""
        return np.full(len(self.labels), -math.log(len(self.labels)), np.float32)

    # -- storage ------------------------------------------------------------------------
    def arrays(self, prefix: str = PREFIX) -> dict[str, np.ndarray]:
        """Everything needed to rebuild it, as named arrays (names start with prefix)."""
        out: dict[str, np.ndarray] = {}
        for i, (w, b) in enumerate(self.embed):
            out[f"{prefix}embed{i}_w"], out[f"{prefix}embed{i}_b"] = w, b
        for i, blk in enumerate(self.blocks):
            for name, a in zip(("wa", "ba", "wb", "bb"), blk, strict=True):
                out[f"{prefix}block{i}_{name}"] = a
        for i, gate in enumerate(self.gates):
            for name, a in zip(("w1", "b1", "w2", "b2"), gate, strict=True):
                out[f"{prefix}gate{i}_{name}"] = a
        for i, (w, b) in enumerate(self.head):
            out[f"{prefix}head{i}_w"], out[f"{prefix}head{i}_b"] = w, b
        out[f"{prefix}labels"] = np.array(self.labels)
        out[f"{prefix}front"] = np.array(self.front)
        out[f"{prefix}rate_rule"] = np.array(self.rate_rule)
        out[f"{prefix}carrier"] = np.array(self.carrier)
        out[f"{prefix}info"] = np.array(json.dumps(self.info))
        return out

    def save(self, path: str | Path) -> Path:
        """Write the arrays to exactly `path` (np.savez given a name appends ".npz" where it lacks one,
        and fit-sequence then named a file that was not there)."""
        path = Path(path)
        with replacing(path) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, **self.arrays())
        return path

    @classmethod
    def from_arrays(cls, z: Any, source: str, prefix: str = PREFIX) -> SequenceNet:
        """Rebuild from named arrays whose names start with prefix (an open .npz or a dict);
        ModelNotFoundError naming `source` when they are missing or do not fit together."""
        def layers(stem: str, names: tuple[str, ...]) -> list[tuple[np.ndarray, ...]]:
            out, i = [], 0
            while f"{prefix}{stem}{i}_{names[0]}" in z:
                out.append(tuple(np.asarray(z[f"{prefix}{stem}{i}_{n}"], np.float32) for n in names))
                i += 1
            return out
        try:
            embed, head = layers("embed", ("w", "b")), layers("head", ("w", "b"))
            blocks = layers("block", ("wa", "ba", "wb", "bb"))
            gates = layers("gate", ("w1", "b1", "w2", "b2"))
            labels = tuple(str(s) for s in z[f"{prefix}labels"])
            info = json.loads(str(z[f"{prefix}info"]))
            front = str(z[f"{prefix}front"]) if f"{prefix}front" in z else "clocked"
            rate_rule = str(z[f"{prefix}rate_rule"]) if f"{prefix}rate_rule" in z else STRONGEST_LINE
            carrier = str(z[f"{prefix}carrier"]) if f"{prefix}carrier" in z else CARRIER_LINES
        except (KeyError, ValueError, OSError) as exc:
            raise ModelNotFoundError(f"cannot read the sequence network in {source}: {exc}") from None
        if front not in FRONTS:
            raise ModelNotFoundError(f"the sequence network in {source} reads an unknown front {front!r} "
                                     f"(this version knows {', '.join(FRONTS)})")
        if rate_rule not in RATE_RULES:
            raise ModelNotFoundError(f"the sequence network in {source} was trained on an unknown rate rule "
                                     f"{rate_rule!r} (this version knows {', '.join(RATE_RULES)})")
        if carrier not in CARRIER_PASSES:
            raise ModelNotFoundError(f"the sequence network in {source} was trained on an unknown carrier pass "
                                     f"{carrier!r} (this version knows {', '.join(CARRIER_PASSES)})")
        net = cls(tuple(embed), tuple(blocks), tuple(head), labels, info, tuple(gates),  # type: ignore[arg-type]
                  front, rate_rule, carrier)
        net.check(source)
        return net

    def check(self, source: str) -> None:
        """ModelNotFoundError unless the layers chain: its front's channels in, len(labels) out."""
        width = self.n_channels
        ok = bool(self.embed) and bool(self.head) and len(self.labels) >= 2
        for w, b in self.embed:
            ok &= w.ndim == 3 and w.shape[1:] == (width, 1) and b.shape == (w.shape[0],)
            width = w.shape[0]
        for wa, ba, wb, bb in self.blocks:
            ok &= (wa.ndim == 3 and wa.shape[:2] == (width, width) and wb.shape == wa.shape
                   and ba.shape == bb.shape == (width,))
        ok &= len(self.gates) in (0, len(self.blocks))
        for w1, b1, w2, b2 in self.gates:
            ok &= (w1.ndim == 2 and w1.shape[1] == width and b1.shape == (w1.shape[0],)
                   and w2.shape == (width, w1.shape[0]) and b2.shape == (width,))
        features = 2 * width + 1
        for w, b in self.head:
            ok &= w.ndim == 2 and w.shape[1] == features and b.shape == (w.shape[0],)
            features = w.shape[0]
        ok &= features == len(self.labels)
        if not ok:
            raise ModelNotFoundError(f"the sequence network in {source} has layers that do not fit together "
                                     f"({self.n_channels} channels in, {len(self.labels)} classes out)")

    @classmethod
    def load(cls, path: str | Path) -> SequenceNet:
        path = Path(path)
        if not path.is_file():
            raise ModelNotFoundError(f"no sequence network at {path}; train one with `rfclassify fit-sequence`")
        try:
            with open_npz(path) as z:
                return cls.from_arrays(z, str(path))
        except (OSError, ValueError) as exc:
            raise ModelNotFoundError(f"cannot read the sequence network {path}: {exc}") from None
