"""Cut a continuous complex stream (GNU Radio pub_sink) into bursts: by energy, or at length tags.

Energy detector (EnergyCutter). The stream is split into blocks of `block_samples`, aligned
to the stream's first sample, and each block's mean power is measured. Blocks are decided an
epoch (`epoch_blocks` blocks) at a time: the noise floor for an epoch is the
`floor_percentile` percentile of the powers of the last `history_blocks` blocks including
that epoch (but at least `floor_min_db`), and a block is "on" when its power exceeds the
floor by `threshold_db`. A burst opens at its first "on" block and closes once
`hangover_samples` have passed without one; it spans its on-blocks plus `pad_samples` on
each side. Bursts whose on-span is shorter than `min_burst_samples` are dropped (counted as
`cutter_short_dropped`); longer than `max_burst_samples` are split into pieces of that length
(a last piece shorter than `min_burst_samples` is dropped too).
Because block boundaries and epochs are fixed in stream samples, how the stream was chunked
into messages never changes the result. The cost is latency: a block is decided only when
its epoch is complete (epoch_blocks * block_samples samples, 2048 by default) or at flush().
The floor assumes the channel is idle (noise only) at least floor_percentile % of the time.

Cold start. A stream that begins inside a burst gives a first epoch whose percentile is the
burst's own power: decided then, none of it was on, and the burst was lost until noise made
up floor_percentile % of the history. So nothing is decided until some block held is on
against the floor of the history as it grows (quiet blocks have come into view); then every
held block is decided against that floor. A burst on at the stream's first block (or the first
after a reset) is marked `truncated`: it may have begun before. At most max_burst_samples (or
one epoch) are held; a stream that looked alike throughout them is decided as it stands (a
channel busy from the start is taken as the floor, as before). For a stream that starts quiet
the held blocks are released in the epoch of the first burst, the one that decided it before:
the same bursts, at the same time.

Dead blocks. A block whose samples are one value repeated (they vary by less than
DEAD_VARIATION of its power) and whose power is DEAD_BELOW_FLOOR or less of the floor of the
blocks that were not dead holds no receiver noise: a zero-filled dropout, or the constant the
DC blocker leaves of one. It is never on and does not move the floor: it enters the history
at the floor in force (zeros took the percentile down to floor_min, and the noise after a
50,000-sample dropout was cut as a 117,152-sample burst). A dropout longer than the hangover
inside a burst ends it; the rest after the dropout is a burst of its own. While cold, dead
blocks are left out of the percentile, unless they are half the history or more: a stream of
digital silence between bursts (a simulation, a squelch that outputs zeros), whose floor is
floor_min as before.

Tag cutter (TagCutter). A stream tag whose key is `tag_key` (GNU Radio's `packet_len`) with
an integer value L at stream offset o makes the burst [o, o + L); samples outside tagged
packets are ignored. Packets do not overlap (GNU Radio's next packet starts where one ends, or
later): a length tag whose packet would overlap one already waiting is refused and the earlier
packet kept. Each waiting packet is copied out whole once its samples come: 256 overlapping
packets of a million samples turned 8 MiB of samples into 2 GiB of bursts at once; disjoint,
the bursts of one feed() hold at most the samples held.

Start/end tag cutter (StartEndCutter). A tag `start_tag` at offset a opens a burst and a tag
`end_tag` at offset b closes it: the burst is [a, b). GNU Radio's power squelch
(`analog.pwr_squelch_cc`) writes `squelch_sob` / `squelch_eob` (the defaults);
`blocks.burst_tagger` writes one key, `burst`, valued #t at the start and #f at the end: with
start_tag == end_tag the value decides. A start while a burst is open closes it there; an end
with none open (a stream joined mid-burst) is ignored; an open burst is cut into pieces of
`max_burst_samples`.

All three report stream tags inside a burst (`tags`), and the last `rx_time`, `rx_rate` and
`rx_freq` tags (what a UHD source writes) at or before the burst's first sample (else the first
inside it), so the caller can stamp times, rates, frequencies and ids.

What the tag log keeps is bounded in bytes as well as in count (a tag's value can be a vector of
megabytes, and a count alone let 4096 of them hold gigabytes): at most MAX_TAGS tags, a value
over MAX_TAG_VALUE_BYTES kept as a summary (`TagSummary`, its text what the meta echo shows for
a long vector), a key over MAX_TAG_KEY_CHARS characters cut, and all of them together within
MAX_TAG_LOG_BYTES (the oldest go first). A burst reports only tags still held.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from rfclassify.serve.config import CutterConfig   # the settings live with the daemon's others
from rfclassify.serve.pmt import Pair, vector_summary

MAX_TAGS = 4096                  # tags the log holds for bursts still being cut
MAX_TAG_VALUE_BYTES = 4096       # a value larger than this (estimated) is held as a TagSummary
MAX_TAG_KEY_CHARS = 256          # a longer key (the text of a PMT list, say) is held cut
MAX_TAG_LOG_BYTES = 4 << 20      # all held tags together, estimated; the oldest go first
RX_KEYS = ("rx_time", "rx_rate", "rx_freq")   # UHD's stream tags, held apart (the newest few each)


@dataclass(frozen=True)
class StreamTag:
    """A GNU Radio stream tag at an absolute sample offset."""

    offset: int
    key: str
    value: Any


@dataclass(frozen=True)
class Segment:
    """A burst cut from the stream: samples [start_sample, start_sample + len(iq))."""

    start_sample: int
    iq: np.ndarray
    tags: tuple[StreamTag, ...] = ()
    rx_time: StreamTag | None = None
    truncated: bool = False
    rx_rate: StreamTag | None = None     # the tags that say the burst's sample rate and centre frequency
    rx_freq: StreamTag | None = None

    @property
    def n_samples(self) -> int:
        return int(self.iq.shape[0])


class SampleBuffer:
    """Samples addressed by absolute stream offset, kept as the chunks they arrived in."""

    def __init__(self, start: int = 0) -> None:
        self.start = start          # offset of the first sample held
        self.end = start            # offset after the last sample held
        self._chunks: deque[np.ndarray] = deque()

    def append(self, x: np.ndarray) -> None:
        if x.shape[0]:
            self._chunks.append(x)
            self.end += x.shape[0]

    def get(self, start: int, end: int) -> np.ndarray:
        """A new complex64 array of samples [start, end), clipped to what is held."""
        start, end = max(start, self.start), min(end, self.end)
        parts, pos = [], self.start
        for chunk in self._chunks:
            lo, hi = max(start - pos, 0), min(end - pos, chunk.shape[0])
            if lo < hi:
                parts.append(chunk[lo:hi])
            pos += chunk.shape[0]
            if pos >= end:
                break
        if not parts:
            return np.zeros(0, np.complex64)
        return np.concatenate(parts).astype(np.complex64, copy=False)

    def trim(self, keep_from: int) -> None:
        """Forget samples before keep_from."""
        keep_from = min(keep_from, self.end)
        while self._chunks and self.start + self._chunks[0].shape[0] <= keep_from:
            self.start += self._chunks.popleft().shape[0]
        if self._chunks and self.start < keep_from:
            self._chunks[0] = self._chunks[0][keep_from - self.start:]
            self.start = keep_from
        if not self._chunks:
            self.start = self.end = max(self.end, keep_from)


@dataclass(frozen=True)
class TagSummary:
    """What the tag log holds in place of a large tag value: its description, not its bytes."""

    text: str

    def __str__(self) -> str:
        return self.text


def value_bytes(value: Any, limit: int) -> int:
    """About how many bytes of memory value holds, counted until past limit (then a number > limit)."""
    total, stack = 0, [value]
    while stack and total <= limit:
        v = stack.pop()
        if isinstance(v, np.ndarray):
            total += 112 + v.nbytes
        elif isinstance(v, (str, bytes)):
            total += 56 + len(v)
        elif isinstance(v, dict):
            total += 64 + 16 * len(v)
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            total += 56 + 8 * len(v)
            stack.extend(v)
        elif isinstance(v, Pair):
            total += 48
            stack.extend((v.car, v.cdr))
        else:
            total += 32
    return total


def _held(tag: StreamTag) -> tuple[StreamTag, int]:
    """The tag as the log holds it (a large value summarized, a long key cut), and its estimated bytes."""
    key, value = tag.key, tag.value
    if len(key) > MAX_TAG_KEY_CHARS:
        key = key[:MAX_TAG_KEY_CHARS] + "..."
    size = value_bytes(value, MAX_TAG_VALUE_BYTES)
    if size > MAX_TAG_VALUE_BYTES:
        if isinstance(value, np.ndarray):
            value = TagSummary(vector_summary(value))
        elif isinstance(value, str):
            value = TagSummary(f"<symbol of {len(value)} characters>")
        else:
            value = TagSummary(f"<{type(value).__name__} of more than {MAX_TAG_VALUE_BYTES} bytes>")
        size = value_bytes(value, MAX_TAG_VALUE_BYTES)
    if key is not tag.key or value is not tag.value:
        tag = StreamTag(tag.offset, key, value)
    return tag, size + len(key) + 64


class _TagLog:
    """Recent stream tags, so a burst can report the tags it spans and its rx_time, rx_rate and
    rx_freq; bounded in count and in bytes (the module docstring)."""

    # a few of each, not the newest alone: a newer rx_time can come before a burst that started
    # under the one before it is cut
    MAX_RX_TIMES = 16

    def __init__(self) -> None:
        self.tags: deque[tuple[StreamTag, int]] = deque()   # (tag, its estimated bytes), by arrival
        self.held_bytes = 0
        self.rx: dict[str, list[StreamTag]] = {key: [] for key in RX_KEYS}   # each by offset

    @property
    def rx_times(self) -> list[StreamTag]:
        return self.rx["rx_time"]

    def add(self, tag: StreamTag) -> None:
        tag, size = _held(tag)
        if tag.key in self.rx:
            held = self.rx[tag.key]
            held.append(tag)
            held.sort(key=lambda t: t.offset)
            del held[:-self.MAX_RX_TIMES]
            return
        self.tags.append((tag, size))
        self.held_bytes += size
        while len(self.tags) > MAX_TAGS or self.held_bytes > MAX_TAG_LOG_BYTES:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        self.held_bytes -= self.tags.popleft()[1]

    def clear(self) -> None:
        self.tags.clear()
        self.held_bytes = 0
        self.rx = {key: [] for key in RX_KEYS}

    def latest(self, key: str, start: int, end: int) -> StreamTag | None:
        """The last `key` tag (one of RX_KEYS) at or before start, else the first inside [start, end)."""
        held = self.rx[key]
        before = [t for t in held if t.offset <= start]
        if before:
            return before[-1]
        if held and held[0].offset < end:
            return held[0]
        return None

    def rx_time(self, start: int, end: int) -> StreamTag | None:
        """The last rx_time at or before start, else the first inside [start, end)."""
        return self.latest("rx_time", start, end)

    def segment(self, start: int, iq: np.ndarray, truncated: bool = False) -> Segment:
        end = start + iq.shape[0]
        inside = tuple(t for t, _ in self.tags if start <= t.offset < end)
        while self.tags and self.tags[0][0].offset < start:
            self._drop_oldest()
        return Segment(start, iq, inside, self.latest("rx_time", start, end), truncated,
                       rx_rate=self.latest("rx_rate", start, end), rx_freq=self.latest("rx_freq", start, end))


def block_power(x: np.ndarray) -> np.ndarray:
    """Mean power (float64) of each block: x is (n_blocks, block_samples), or one block (1-D).

    The full blocks of feed() and the partial last block of flush() both use this, so a
    block's power (and its on/off decision) does not depend on which of them measured it.
    """
    return np.mean(x.real.astype(np.float64) ** 2 + x.imag.astype(np.float64) ** 2, axis=-1)


def block_variation(x: np.ndarray) -> np.ndarray:
    """Mean power (float64) of each block about its own mean: 0 for a block of one value repeated."""
    y = x.astype(np.complex128)
    d = y - np.mean(y, axis=-1, keepdims=True)
    return np.mean(d.real ** 2 + d.imag ** 2, axis=-1)


DEAD_BELOW_FLOOR = 0.01   # a dead block's power is 20 dB or more under the floor of the live blocks ...
DEAD_VARIATION = 1e-3     # ... and its samples vary by less than 30 dB under its power: a constant
_FLOAT_MAX = float(np.finfo(np.float64).max)


@dataclass
class _BurstState:
    on_start: int          # first sample of the first on-block
    emit_start: int        # first sample of the next piece to emit (includes the pre-pad)
    last_on_end: int       # sample after the last on-block
    split: bool = False
    truncated: bool = False   # its first on-block is the stream's first: it may have begun before


class EnergyCutter:
    """Energy-detector burst cutter; feed() samples in any chunking, get Segments."""

    def __init__(self, config: CutterConfig = CutterConfig(), start_offset: int = 0) -> None:
        self.config = config
        self.dropped_short = 0
        self._floor_min = 10.0 ** (config.floor_min_db / 10.0)
        self._threshold = 10.0 ** (config.threshold_db / 10.0)
        self._history = np.zeros(config.history_blocks, np.float64)
        self._history_dead = np.zeros(config.history_blocks, bool)   # which were dead blocks
        self._history_dead_n = 0
        self._history_n = 0
        self._floor = self._floor_min          # the floor in force: the last epoch's
        self._live_floor = self._floor_min     # the same percentile of the history's blocks that were not dead
        # cold start: nothing is decided until the history holds quiet blocks under some block
        # (or the stream has given max_burst_samples); see the module docstring
        self._cold = True
        self._cold_blocks = 0
        self._cold_limit = max(-(-config.max_burst_samples // config.block_samples), config.epoch_blocks)
        self._tags = _TagLog()
        self.reset(start_offset)

    def reset(self, offset: int) -> bool:
        """Restart at stream offset (after a gap); True if an open burst was lost."""
        lost = getattr(self, "_burst", None) is not None
        if hasattr(self, "_buf") and offset < self._buf.end:
            self._tags.clear()   # offsets went back (a restarted flowgraph): its tags are the old run's
        self._buf = SampleBuffer(offset)
        self._block_pos = offset      # start of the first block not yet measured
        self._epoch_pos = offset      # start of the first block not yet taken into an epoch
        self._decided = offset        # start of the first block not yet decided
        self._edge = offset           # a burst on from here on may have begun before: truncated
        self._powers: list[np.ndarray] = []
        self._n_powers = 0
        self._held: list[tuple[np.ndarray, np.ndarray | None]] = []   # cold: (powers, dead) of the epochs taken
        self._held_peak = -np.inf     # the highest held power that may be "on"
        self._burst: _BurstState | None = None
        return lost

    @property
    def offset(self) -> int:
        """The stream offset of the next sample to be fed."""
        return self._buf.end

    def add_tag(self, tag: StreamTag) -> None:
        self._tags.add(tag)

    def feed(self, x: np.ndarray) -> list[Segment]:
        """Append samples; returns the bursts that closed."""
        cfg = self.config
        self._buf.append(x)
        n_blocks = (self._buf.end - self._block_pos) // cfg.block_samples
        if n_blocks:
            end = self._block_pos + n_blocks * cfg.block_samples
            blocks = self._buf.get(self._block_pos, end).reshape(n_blocks, cfg.block_samples)
            self._powers.append(block_power(blocks))
            self._n_powers += n_blocks
            self._block_pos = end
        out: list[Segment] = []
        if self._n_powers >= cfg.epoch_blocks:
            powers = np.concatenate(self._powers)
            n_epochs = powers.shape[0] // cfg.epoch_blocks
            for k in range(n_epochs):
                out += self._epoch(powers[k * cfg.epoch_blocks:(k + 1) * cfg.epoch_blocks], cfg.block_samples)
            rest = powers[n_epochs * cfg.epoch_blocks:]
            self._powers, self._n_powers = [rest], rest.shape[0]
        self._trim()
        return out

    def flush(self) -> list[Segment]:
        """Decide everything fed so far (a partial last block counts) and close an open burst."""
        cfg = self.config
        out: list[Segment] = []
        powers = np.concatenate(self._powers) if self._n_powers else np.zeros(0)
        tail = self._buf.end - self._block_pos
        if tail:
            x = self._buf.get(self._block_pos, self._buf.end)
            powers = np.append(powers, block_power(x))
        if powers.shape[0]:
            out += self._epoch(powers, cfg.block_samples, last_width=tail or None)
        if self._held:   # still cold: what is held is decided against the floor as it stands
            out += self._release(cfg.block_samples, last_width=tail or None)
        if self._burst is not None:
            out += self._close(self._buf.end)
        self._powers, self._n_powers = [], 0
        self._block_pos = self._epoch_pos = self._decided = self._buf.end
        self._trim()
        return out

    def _epoch(self, powers: np.ndarray, width: int, last_width: int | None = None) -> list[Segment]:
        """Take the next consecutive blocks (from self._epoch_pos) into the history and decide
        them, or while cold hold them until a block among those held is on."""
        dead = self._dead(powers, width, last_width)
        n = powers.shape[0]
        self._epoch_pos += (n - 1) * width + (last_width or width)
        if not self._cold:   # a dead block enters the history at the floor in force: it does not move it
            self._push_history(powers if dead is None else np.where(dead, self._floor, powers), dead)
            return self._apply(powers, dead, width, last_width)
        self._push_history(powers, dead)
        self._held.append((powers, dead))
        live = powers if dead is None else powers[~dead]
        if live.shape[0]:
            self._held_peak = max(self._held_peak, float(np.fmax.reduce(live)))   # NaN is never on
        self._cold_blocks += n
        if self._held_peak > self._floor * self._threshold or self._cold_blocks >= self._cold_limit:
            # quiet blocks are in view now, or the stream looked alike throughout its first
            # max_burst_samples (a channel busy all the time): decide what is held as it stands
            self._warm_up()
            return self._release(width, last_width)
        return []

    def _warm_up(self) -> None:
        """Leave the cold start: dead blocks in the history take the floor in force, as they do from now."""
        self._cold = False
        self._history[self._history_dead] = self._floor

    def _release(self, width: int, last_width: int | None) -> list[Segment]:
        """Decide every held block against the floor in force."""
        powers = np.concatenate([p for p, _ in self._held])
        dead = None
        if any(d is not None for _, d in self._held):
            dead = np.concatenate([np.zeros(p.shape[0], bool) if d is None else d for p, d in self._held])
        self._held, self._held_peak = [], -np.inf
        return self._apply(powers, dead, width, last_width)

    def _dead(self, powers: np.ndarray, width: int, last_width: int | None) -> np.ndarray | None:
        """Which of the blocks at self._epoch_pos hold no noise (None: none do): a constant far
        under the live floor (a zero-filled dropout, or the DC blocker's small constant in its
        place). Only blocks low enough are looked at again, so a stream without dropouts pays
        next to nothing; NaN and infinite powers are never dead (their bursts are rejected later)."""
        dead = powers <= min(self._live_floor * DEAD_BELOW_FLOOR, _FLOAT_MAX)
        low = np.flatnonzero(dead)
        if not low.shape[0]:
            return None
        n = powers.shape[0]
        n_full = n - 1 if last_width is not None else n
        x = self._buf.get(self._epoch_pos, self._epoch_pos + n_full * width + (last_width or 0))
        variation = np.zeros(n)
        full = low[low < n_full]
        if full.shape[0]:
            variation[full] = block_variation(x[:n_full * width].reshape(n_full, width)[full])
        if n_full < n and dead[-1]:
            variation[-1] = block_variation(x[n_full * width:])
        dead &= variation <= powers * DEAD_VARIATION
        return dead if dead.any() else None

    def _push_history(self, values: np.ndarray, dead: np.ndarray | None) -> None:
        """Append block powers to the history and set the floors they give. The floor in force is
        their percentile; while cold, dead blocks are left out of it unless they are half the
        history or more (a stream mostly of digital silence: its floor is floor_min)."""
        n, h = values.shape[0], self._history
        if n >= h.shape[0]:
            h[:] = values[-h.shape[0]:]
        else:
            h[:-n] = h[n:]
            h[-n:] = values
        self._history_n = min(self._history_n + n, h.shape[0])
        recent = h[-self._history_n:]
        if dead is None and not self._history_dead_n:   # no dead block in view: the marks are all clear
            self._floor = self._live_floor = self._percentile(recent)
            return
        marks = self._history_dead
        if dead is None:
            dead = np.zeros(n, bool)
        if n >= marks.shape[0]:
            marks[:] = dead[-marks.shape[0]:]
        else:
            marks[:-n] = marks[n:]
            marks[-n:] = dead
        gone = marks[-self._history_n:]
        self._history_dead_n = n_dead = int(np.count_nonzero(marks))
        if not n_dead:
            self._floor = self._live_floor = self._percentile(recent)
            return
        if n_dead < recent.shape[0]:   # else (a dropout longer than the history) it stays as it was
            self._live_floor = self._percentile(recent[~gone])
        if not self._cold:
            self._floor = self._percentile(recent)
        else:
            self._floor = self._floor_min if 2 * n_dead >= recent.shape[0] else self._live_floor

    def _percentile(self, powers: np.ndarray) -> float:
        k = int(self.config.floor_percentile / 100.0 * (powers.shape[0] - 1))  # nearest-rank percentile:
        return max(float(np.partition(powers, k)[k]), self._floor_min)     # np.percentile costs 3x

    def _apply(self, powers: np.ndarray, dead: np.ndarray | None, width: int,
               last_width: int | None) -> list[Segment]:
        """Decide consecutive blocks starting at self._decided against the floor in force."""
        cfg = self.config
        n = powers.shape[0]
        on = powers > self._floor * self._threshold
        if dead is not None:
            on &= ~dead
        starts = self._decided + np.arange(n, dtype=np.int64) * width
        ends = starts + width
        if last_width is not None:
            ends[-1] = starts[-1] + last_width
        out: list[Segment] = []
        # walk runs of equal on/off, not single blocks
        edges = np.flatnonzero(np.diff(on.astype(np.int8))) + 1
        bounds = np.concatenate(([0], edges, [n]))
        for a, b in zip(bounds[:-1], bounds[1:]):
            if on[a]:
                if self._burst is None:
                    s = int(starts[a])
                    self._burst = _BurstState(s, max(s - cfg.pad_samples, self._buf.start), int(ends[b - 1]),
                                              truncated=s == self._edge)
                self._burst.last_on_end = int(ends[b - 1])
                out += self._split_long()
            elif self._burst is not None:
                closes_at = self._burst.last_on_end + cfg.hangover_samples
                if closes_at <= ends[b - 1]:
                    out += self._close(int(ends[b - 1]))
        self._decided = int(ends[-1])
        return out

    def _split_long(self) -> list[Segment]:
        out = []
        st, limit = self._burst, self.config.max_burst_samples
        while st.last_on_end - st.emit_start >= limit:
            iq = self._buf.get(st.emit_start, st.emit_start + limit)
            out.append(self._tags.segment(st.emit_start, iq, truncated=st.truncated and not st.split))
            st.emit_start += limit
            st.split = True
        return out

    def _close(self, decided_end: int) -> list[Segment]:
        st, cfg = self._burst, self.config
        self._burst = None
        end = min(st.last_on_end + cfg.pad_samples, decided_end)
        # a blip, or the short tail left after splitting a long burst
        on_samples = end - st.emit_start if st.split else st.last_on_end - st.on_start
        if on_samples < cfg.min_burst_samples:
            self.dropped_short += 1
            return []
        return [self._tags.segment(st.emit_start, self._buf.get(st.emit_start, end),
                                   truncated=st.truncated and not st.split)]

    def _trim(self) -> None:
        keep = self._burst.emit_start if self._burst is not None else self._decided - self.config.pad_samples
        self._buf.trim(keep)


class TagCutter:
    """Cuts [offset, offset + value) at each length tag (key config tag_key)."""

    MAX_PENDING = 4096   # length tags waiting for their samples

    def __init__(self, tag_key: str, max_burst_samples: int, start_offset: int = 0) -> None:
        self.tag_key = tag_key
        self.max_burst_samples = max_burst_samples
        self._tags = _TagLog()
        self.reset(start_offset)

    def reset(self, offset: int) -> bool:
        """Restart at stream offset (after a gap); True if a tagged packet was lost."""
        lost = bool(getattr(self, "_pending", None))
        if hasattr(self, "_buf") and offset < self._buf.end:
            self._tags.clear()   # offsets went back (a restarted flowgraph): its tags are the old run's
        self._buf = SampleBuffer(offset)
        self._pending: list[tuple[int, int]] = []   # (start, length): disjoint, by start
        return lost

    @property
    def offset(self) -> int:
        return self._buf.end

    def add_tag(self, tag: StreamTag) -> str | None:
        """Record a tag; a length tag opens a packet. Returns a problem description, or None."""
        if tag.key != self.tag_key:
            self._tags.add(tag)
            return None
        value = tag.value
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{self.tag_key} tag at {tag.offset} has a non-integer value {value!r}"
        if not 0 < value <= self.max_burst_samples:
            return f"{self.tag_key} tag at {tag.offset} has length {value}, outside 1..{self.max_burst_samples}"
        if tag.offset < self._buf.start:
            return f"{self.tag_key} tag at {tag.offset} refers to samples already gone"
        # waiting packets are disjoint and sorted by start (so by end too): only the neighbours can overlap
        at = bisect_right(self._pending, (tag.offset, value))
        for start, length in self._pending[max(at - 1, 0):at + 1]:
            if start < tag.offset + value and tag.offset < start + length:
                return (f"{self.tag_key} tag at {tag.offset} (length {value}) overlaps the packet "
                        f"[{start}, {start + length}) already waiting; a tagged stream's packets do not overlap")
        if len(self._pending) >= self.MAX_PENDING:
            return f"{self.tag_key} tag at {tag.offset}: {self.MAX_PENDING} packets already wait for their samples"
        self._pending.insert(at, (tag.offset, value))
        return None

    def feed(self, x: np.ndarray) -> list[Segment]:
        self._buf.append(x)
        out, waiting = [], []
        for start, length in self._pending:
            if start + length <= self._buf.end:
                out.append(self._tags.segment(start, self._buf.get(start, start + length)))
            else:
                waiting.append((start, length))
        self._pending = waiting
        self._buf.trim(min([s for s, _ in waiting], default=self._buf.end))
        return out

    def flush(self) -> list[Segment]:
        """Emit packets still waiting for samples, truncated to what arrived."""
        out = [self._tags.segment(s, self._buf.get(s, s + n), truncated=True)
               for s, n in self._pending if self._buf.end > s]
        self._pending = []
        self._buf.trim(self._buf.end)
        return out


class StartEndCutter:
    """Cuts [start tag, end tag) bursts (see the module docstring); feed() samples in any chunking."""

    MAX_PENDING = 4096   # start/end tags waiting for their samples

    def __init__(self, start_tag: str, end_tag: str, max_burst_samples: int, start_offset: int = 0) -> None:
        self.start_tag, self.end_tag = start_tag, end_tag
        self.max_burst_samples = max_burst_samples
        self._tags = _TagLog()
        self.reset(start_offset)

    def reset(self, offset: int) -> bool:
        """Restart at stream offset (after a gap); True if an open burst was lost."""
        lost = getattr(self, "_open", None) is not None
        if hasattr(self, "_buf") and offset < self._buf.end:
            self._tags.clear()   # offsets went back (a restarted flowgraph): its tags are the old run's
        self._buf = SampleBuffer(offset)
        self._edges: list[tuple[int, bool]] = []   # (offset, is a start), not yet reached by the samples
        self._open: int | None = None              # first sample of the open burst
        return lost

    @property
    def offset(self) -> int:
        return self._buf.end

    def add_tag(self, tag: StreamTag) -> str | None:
        """Record a tag; a start or end tag is kept until the samples reach it. Returns a problem, or None."""
        if tag.key not in (self.start_tag, self.end_tag):
            self._tags.add(tag)
            return None
        if self.start_tag == self.end_tag:
            if tag.value is not True and tag.value is not False:
                return f"{tag.key} tag at {tag.offset} has value {tag.value!r}; expected #t (start) or #f (end)"
            is_start = tag.value
        else:
            is_start = tag.key == self.start_tag
        if tag.offset < self._buf.start:
            return f"{tag.key} tag at {tag.offset} refers to samples already gone"
        if len(self._edges) >= self.MAX_PENDING:
            return f"{tag.key} tag at {tag.offset}: {self.MAX_PENDING} start/end tags already wait for their samples"
        self._edges.append((tag.offset, is_start))
        self._edges.sort()
        return None

    def feed(self, x: np.ndarray) -> list[Segment]:
        self._buf.append(x)
        out = []
        while True:
            edge = self._edges[0] if self._edges and self._edges[0][0] <= self._buf.end else None
            if self._open is not None:
                cut = self._open + self.max_burst_samples
                if cut <= self._buf.end and (edge is None or cut < edge[0]):
                    out.append(self._tags.segment(self._open, self._buf.get(self._open, cut)))
                    self._open = cut
                    continue
            if edge is None:
                break
            offset, is_start = self._edges.pop(0)
            if self._open is not None and offset >= self._open:
                if offset > self._open:
                    out.append(self._tags.segment(self._open, self._buf.get(self._open, offset)))
                self._open = None
            if is_start:
                self._open = offset
        self._buf.trim(self._buf.end if self._open is None else self._open)
        return out

    def flush(self) -> list[Segment]:
        """Emit the open burst, truncated to what arrived."""
        out = []
        if self._open is not None and self._buf.end > self._open:
            out.append(self._tags.segment(self._open, self._buf.get(self._open, self._buf.end), truncated=True))
        self._open = None
        self._edges = []
        self._buf.trim(self._buf.end)
        return out
