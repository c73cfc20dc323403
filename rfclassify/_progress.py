"""A small stderr progress bar with a rate, for long CLI jobs (dataset generation, training, evaluation).

On a terminal it redraws one line (at most ~10 times a second); when stderr is not a TTY
(CI, logs, pipes) it prints nothing until `close()`, which writes one summary line, so
captured output stays short.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts work items and shows `desc [####....] n/total rate/s eta`.

    Use as a context manager or call `close()`; `update(n)` adds n finished items.
    """

    def __init__(self, total: int, desc: str = "", unit: str = "it",
                 stream: TextIO | None = None, min_interval_s: float = 0.1) -> None:
        self.total = max(int(total), 0)
        self.desc = desc
        self.unit = unit
        self.count = 0
        self._stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._min_interval_s = min_interval_s
        self._start_s = time.perf_counter()
        self._last_draw_s = 0.0
        self._closed = False

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self._start_s

    @property
    def rate_per_s(self) -> float:
        """Items per second since the bar was made (0 before any time has passed)."""
        t = self.elapsed_s
        return self.count / t if t > 0 else 0.0

    def update(self, n: int = 1) -> None:
        self.count += int(n)
        if not self._tty:
            return
        now = time.perf_counter()
        if now - self._last_draw_s >= self._min_interval_s or self.count >= self.total:
            self._last_draw_s = now
            self._stream.write("\r" + self._line(final=False))
            self._stream.flush()

    def _line(self, final: bool) -> str:
        rate = self.rate_per_s
        head = f"{self.desc}: " if self.desc else ""
        if final:
            return (f"{head}{self.count}/{self.total} {self.unit} in {self.elapsed_s:.1f} s "
                    f"({rate:,.1f} {self.unit}/s)")
        width = 24
        frac = min(self.count / self.total, 1.0) if self.total else 1.0
        bar = "#" * int(frac * width) + "." * (width - int(frac * width))
        eta = (self.total - self.count) / rate if rate > 0 else float("nan")
        return (f"{head}[{bar}] {self.count}/{self.total} {rate:,.1f} {self.unit}/s "
                f"eta {eta:.0f} s   ")

    def close(self) -> None:
        """Finish the line (TTY) or print the one summary line (not a TTY); idempotent."""
        if self._closed:
            return
        self._closed = True
        prefix = "\r" if self._tty else ""
        self._stream.write(prefix + self._line(final=True) + "\n")
        self._stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
