"""How a command stops on a signal: SIGTERM taken Ctrl-C's way out (Terminated, a
KeyboardInterrupt), and the exit status of each. `rfclassify.cli.main` holds
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
