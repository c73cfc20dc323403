"""Handing the heap's freed memory back to the system after a peak (glibc's malloc_trim), so a
daemon that runs for months does not keep its worst moment's RSS: glibc keeps freed blocks of a
few MiB in its heap, raising its mmap threshold as it frees them, and returns them to no one."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: freed heap memory is handed back to the system once the pipeline's bytes, or the daemon's
#: RSS over what it was after the last trim, reached this, and a quarter of it or less is held
TRIM_AFTER_BYTES = 32 * 1024 * 1024
TRIM_EVERY_S = 30.0      # at most one trim this often: it walks the heap with each arena locked


def should_trim(high_bytes: int, held_bytes: int, since_last_s: float, *, after_bytes: int = TRIM_AFTER_BYTES,
                every_s: float = TRIM_EVERY_S) -> bool:
    """Whether to hand the heap's freed memory back now: since the last trim the pipeline held,
    or the RSS grew by, `high_bytes` >= after_bytes; the queues, batcher and batch being
    inferred hold a quarter of that or less now (the bulk was freed); the last trim was
    every_s ago or more."""
    return high_bytes >= after_bytes and held_bytes <= high_bytes // 4 and since_last_s >= every_s


def _rss_bytes() -> int:
    """This process's resident memory (Linux /proc; 0 where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS: nothing to do)."""
    import ctypes

    try:
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


class HeapTrim:
    """Hands the heap's freed memory back to the system after a peak (glibc's malloc_trim(0)).

    glibc keeps freed blocks of a few MiB in its heap (each raises its mmap threshold) and
    returns them to no one: after 8 MiB bursts had filled a 1 GiB ingest queue the daemon sat
    at 1,203 MB idle for good (208 at start; 306 with this), its RSS its worst moment. Polled
    by the main thread every 0.2 s, never a pipeline thread; a no-op without glibc."""

    def __init__(self, trim: Callable[[int], int] | None, clock: Callable[[], float] = time.monotonic,
                 rss: Callable[[], int] = _rss_bytes) -> None:
        self._trim = trim                  # malloc_trim(); None: nothing to call
        self._clock, self._rss = clock, rss
        self._last_s = clock()
        self._rss_after = rss()            # RSS after the last trim (or at start)
        self._peak = 0                     # the pipeline's most bytes since the last trim
        self.trims = 0

    def poll(self, held_bytes: int, peak_bytes: int) -> bool:
        """Trim if should_trim says so; whether it did."""
        self._peak = max(self._peak, peak_bytes)
        now, rss = self._clock(), self._rss()
        high = max(self._peak, rss - self._rss_after)
        if self._trim is None or not should_trim(high, held_bytes, now - self._last_s):
            return False
        t0 = time.monotonic()
        self._trim(0)
        self._rss_after, self._last_s, self._peak = self._rss(), now, 0
        self.trims += 1
        # a line when it gave something back; under steady traffic of big bursts (freed by
        # munmap, not kept) most trims find nothing
        log.log(logging.INFO if rss - self._rss_after >= 8 * 2**20 else logging.DEBUG,
                "memory: handed freed heap back to the system (malloc_trim) after a peak of %.0f MiB: RSS %.0f -> "
                "%.0f MiB in %.0f ms", high / 2**20, rss / 2**20, self._rss_after / 2**20,
                (time.monotonic() - t0) * 1e3)
        return True
