"""systemd's notify protocol without libsystemd: datagrams to $NOTIFY_SOCKET.

    READY=1      the engine is loaded and warmed, the sockets are up
    STATUS=...   one line shown by `systemctl status`
    WATCHDOG=1   "still alive", sent every WATCHDOG_USEC/2, but only while the caller says the
                 pipeline is healthy, so a hung inference stops the pings and systemd restarts us
    STOPPING=1   shutdown has begun

A leading '@' in NOTIFY_SOCKET names a socket in the abstract namespace. Without
NOTIFY_SOCKET (not run by systemd) every call is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


class Notifier:
    """Sends notify messages; silent when not under systemd (or the socket went away)."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        addr = env.get("NOTIFY_SOCKET", "")
        self._addr = "\0" + addr[1:] if addr.startswith("@") else addr
        self._sock: socket.socket | None = None
        if self._addr:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.setblocking(False)
        self.watchdog_interval_s = _watchdog_interval(env)

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def notify(self, *lines: str) -> bool:
        """Send 'KEY=value' lines in one datagram; False when not sent."""
        if self._sock is None:
            return False
        try:
            self._sock.sendto("\n".join(lines).encode(), self._addr)
        except OSError as exc:
            log.debug("sd_notify %s failed: %s", lines, exc)
            return False
        return True

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> bool:
        return self.notify(f"STATUS={text.splitlines()[0] if text else ''}")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def stopping(self, status: str = "") -> bool:
        return self.notify("STOPPING=1", *([f"STATUS={status}"] if status else []))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _watchdog_interval(env: dict[str, str] | os._Environ[str]) -> float | None:
    """Half of WATCHDOG_USEC in seconds, or None when the watchdog is off or meant for another pid."""
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None
    return int(usec) / 2e6
