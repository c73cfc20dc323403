"""Bounded hand-off queues between the daemon's threads, and per-bucket batch assembly.

`BoundedQueue` caps both the number of items and their bytes, so memory stays bounded
whatever arrives; when full it applies the overload policy (drop the oldest, drop the newest,
or block the producer) and reports every drop through a callback. `BucketBatcher` groups
windowed bursts of the same length bucket into backend batches, flushing a bucket when it
holds `max_batch` windows or its oldest burst has waited `max_wait_ms`. `ByteBudget` counts
the bytes of the bursts past the ingest queue (the batcher's, the infer queue's and the batch
inference runs), which the batcher keeps under `queues.infer_max_bytes`.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from rfclassify.dsp.windows import BurstWindows
from rfclassify.serve.bursts import Burst
from rfclassify.serve.config import BatchingConfig


class BoundedQueue:
    """A FIFO bounded in items and bytes with a drop policy; safe for many producers/consumers."""

    def __init__(self, name: str, max_items: int, max_bytes: int, policy: str,
                 on_drop: Callable[[str, Any], None] | None = None) -> None:
        self.name = name
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.policy = policy                # may be changed at run time (SIGHUP)
        self._on_drop = on_drop or (lambda stage, item: None)
        self._items: deque[tuple[Any, int]] = deque()
        self._bytes = 0
        self._peak_bytes = 0                # the most bytes held since take_peak()
        self._cond = threading.Condition()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def take_peak(self) -> int:
        """The most bytes held since the last call (or since made); starts over from now."""
        with self._cond:
            peak, self._peak_bytes = max(self._peak_bytes, self._bytes), self._bytes
            return peak

    def _fits(self, nbytes: int) -> bool:
        return len(self._items) < self.max_items and self._bytes + nbytes <= self.max_bytes

    def put(self, item: Any, nbytes: int = 0, timeout: float | None = None) -> bool:
        """Enqueue; False when the item was dropped (or, with policy 'block', timed out)."""
        with self._cond:
            if nbytes > self.max_bytes:
                self._on_drop(self.name, item)         # could never fit
                return False
            if not self._fits(nbytes):
                if self.policy == "drop_newest":
                    self._on_drop(self.name, item)
                    return False
                if self.policy == "drop_oldest":
                    while not self._fits(nbytes):
                        old, old_bytes = self._items.popleft()
                        self._bytes -= old_bytes
                        self._on_drop(self.name, old)
                else:  # block: wait for room (backpressure on the producer)
                    if not self._cond.wait_for(lambda: self._fits(nbytes), timeout):
                        return False
            self._items.append((item, nbytes))
            self._bytes += nbytes
            self._peak_bytes = max(self._peak_bytes, self._bytes)
            self._cond.notify_all()
            return True

    def get(self, timeout: float | None = None, until: Callable[[], bool] | None = None,
            sized: bool = False) -> Any | None:
        """Dequeue the oldest item, or None after `timeout` seconds with nothing to take, or
        as soon as `until()` is true with nothing to take (it is looked at when the wait
        starts and on each wake(), so whoever makes it true calls wake() after). With
        `sized`, (item, the bytes it was counted as) instead of the item."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._items or (until is not None and until()), timeout) \
                    or not self._items:
                return None
            item, nbytes = self._items.popleft()
            self._bytes -= nbytes
            self._cond.notify_all()
            return (item, nbytes) if sized else item

    def wake(self) -> None:
        """Wake a get() that waits, so that it looks at its `until` again."""
        with self._cond:
            self._cond.notify_all()

    def drain(self) -> list[Any]:
        """Remove and return everything queued (used when shutdown gives up)."""
        with self._cond:
            out = [it for it, _ in self._items]
            self._items.clear()
            self._bytes = 0
            self._cond.notify_all()
            return out


class ByteBudget:
    """Bytes held by bursts between two points of the pipeline, and whether more may come.

    Not a hard cap: `has_room` is looked at before a burst is taken, so what is held stays
    under `max_bytes` plus the last burst let in (a burst larger than the whole budget still
    passes alone, rather than never)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._held = 0
        self._peak = 0
        self._cond = threading.Condition()

    @property
    def held(self) -> int:
        return self._held

    def has_room(self) -> bool:
        return self._held < self.max_bytes

    def take(self, nbytes: int) -> None:
        with self._cond:
            self._held += nbytes
            self._peak = max(self._peak, self._held)

    def give_back(self, nbytes: int) -> None:
        with self._cond:
            self._held -= nbytes
            self._cond.notify_all()

    def wait_for_room(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for give_back() to leave room; whether there is."""
        with self._cond:
            return self._cond.wait_for(self.has_room, timeout)

    def take_peak(self) -> int:
        """The most bytes held since the last call (or since made); starts over from now."""
        with self._cond:
            peak, self._peak = max(self._peak, self._held), self._held
            return peak


@dataclass
class Pending:
    """A burst ready for inference and its normalized windows (arrival time: burst.received_s);
    `nbytes`: what it holds, its samples and message as the ingest queue counted them plus its
    windows."""

    burst: Burst
    windows: BurstWindows
    nbytes: int = 0


@dataclass
class Batch:
    """Bursts of one bucket whose windows run through the backend in one call."""

    bucket_samples: int
    items: list[Pending]

    @property
    def n_windows(self) -> int:
        return sum(p.windows.n_windows for p in self.items)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.items)

    def windows(self) -> np.ndarray:
        """(n_windows, bucket) complex64, the bursts' windows in item order."""
        return np.concatenate([p.windows.windows for p in self.items], axis=0)

    def counts(self) -> list[int]:
        return [p.windows.n_windows for p in self.items]


class BucketBatcher:
    """Per-bucket accumulation with size and wait limits (used by one thread only)."""

    def __init__(self, config: BatchingConfig) -> None:
        self.config = config                 # replaced on SIGHUP
        self._pending: dict[int, list[Pending]] = {}
        self._windows: dict[int, int] = {}
        self._oldest: dict[int, float] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._pending.values())

    def add(self, item: Pending, now: float) -> Batch | None:
        """Add a burst; returns its bucket's batch when that bucket is full."""
        b = item.windows.bucket_samples
        self._pending.setdefault(b, []).append(item)
        self._windows[b] = self._windows.get(b, 0) + item.windows.n_windows
        self._oldest.setdefault(b, now)
        if self._windows[b] >= self.config.for_bucket(b).max_batch:
            return self._take(b)
        return None

    def due(self, now: float) -> list[Batch]:
        """Batches whose oldest burst has waited its bucket's max_wait_ms."""
        return [self._take(b) for b, t in list(self._oldest.items())
                if (now - t) * 1e3 >= self.config.for_bucket(b).max_wait_ms]

    def next_due_s(self, now: float) -> float | None:
        """Seconds until the next bucket is due (0 if overdue), None when nothing waits."""
        if not self._oldest:
            return None
        return max(0.0, min(t + self.config.for_bucket(b).max_wait_ms / 1e3 - now
                            for b, t in self._oldest.items()))

    def flush_all(self) -> list[Batch]:
        return [self._take(b) for b in list(self._pending)]

    def _take(self, bucket: int) -> Batch:
        items = self._pending.pop(bucket)
        self._windows.pop(bucket, None)
        self._oldest.pop(bucket, None)
        return Batch(bucket, items)
