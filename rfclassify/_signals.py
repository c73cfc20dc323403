"""How a command stops on a signal: SIGTERM taken Ctrl-C's way out (Terminated, a
KeyboardInterrupt), the exit status of each, and both held to a safe point (DeferredInterrupt:
dataset generate and import, between chunks). `rfclassify.cli.main` holds
sigterm_as_interrupt around every command that does not answer SIGTERM itself; `demo` and
`bench daemon` hold it to say what they stopped."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

#: the exit status of a command stopped by Ctrl-C or SIGTERM (128 + the signal's number)
EXIT_STATUS = {"SIGINT": 128 + signal.SIGINT, "SIGTERM": 128 + signal.SIGTERM}


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, `timeout`), raised in the main thread as Ctrl-C's KeyboardInterrupt is,
    so that it takes the same way out: temporary and partial files removed, worker processes
    ended, a daemon stopped. Without it the process died at once and left all of them behind."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While it lasts, SIGTERM raises Terminated in the main thread, once (a second one while
    the first's clean-up runs is ignored; SIGKILL is still there). `main` holds it around every
    command but those of its OWN_SIGTERM; `serve` drains on SIGTERM without raising. Elsewhere than
    in the main thread it changes nothing (Python runs signal handlers there only)."""
    def on_sigterm(_signum: int, _frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated("SIGTERM")

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class DeferredInterrupt:
    """Holds Ctrl-C, and SIGTERM, to the next `check()` (between chunks), which then runs
    the signal's own handler: KeyboardInterrupt, or rfclassify._signals.Terminated. A signal whose
    handler is not Python's (the default's end of the process, or ignored) is left alone.

    An exception raised at an arbitrary point can land in a weakref callback inside h5py,
    where Python prints and swallows it and generation carries on (and the CLI's SIGTERM
    handler ignores a second SIGTERM); checking a flag at a safe point makes both reliable.
    Only the main thread may set signal handlers."""

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self) -> DeferredInterrupt:
        self.hit: int | None = None
        self._old: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for signum in self._SIGNALS:
                if callable(signal.getsignal(signum)):
                    self._old[signum] = signal.signal(signum, self._handler)
        return self

    def _handler(self, signum: int, frame: Any) -> None:
        if self.hit is None:
            self.hit = signum

    def check(self) -> None:
        if self.hit is not None:
            self._restore()
            signal.raise_signal(self.hit)   # its handler runs now and raises

    def _restore(self) -> None:
        for signum, old in self._old.items():
            signal.signal(signum, old)
        self._old = {}

    def __exit__(self, *exc: object) -> None:
        self._restore()


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM that come meanwhile, held and raised on leaving (their handlers run
    then: KeyboardInterrupt, Terminated): around renames that go together (rfclassify._atomic)
    and HDF5 calls (an exception raised inside one of HDF5's callbacks into Python, the file
    object a dataset is written through, left HDF5 half closed: a segfault or a wrong file). In
    the main thread only, where Python runs signal handlers; a signal whose handler is not
    Python's (ignored, or the default's end of the process) is left alone."""
    came: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            if callable(signal.getsignal(signum)):
                previous[signum] = signal.signal(signum, lambda s, _frame: came.append(s))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(came):
            signal.raise_signal(signum)
