"""ZeroMQ handshakes that fail on a daemon socket, found through libzmq's socket monitor.

A peer whose socket type cannot talk to ours (a GNU Radio push_sink or rep_sink to the input's
SUB, a PUB to its PULL, a PULL subscribing to the output's PUB) is refused in ZeroMQ's
handshake without a word: libzmq 4.3.5 reports no HANDSHAKE_FAILED event for it, only a
CONNECTED (or ACCEPTED) then DISCONNECTED with no HANDSHAKE_SUCCEEDED between, and a
connecting socket then never tries that endpoint again (a protocol error ends its session:
the front end fixed and restarted on the same port was never read either). Until the
seventy-first session the daemon said `health: ok` with 0 messages and nothing in the log,
and a push_sink flowgraph stayed blocked. CURVE failures do have events, and were as silent:
HANDSHAKE_FAILED_PROTOCOL (ZMTP_CRYPTOGRAPHIC: a wrong key; ZMTP_MECHANISM_MISMATCH: one side
without CURVE), HANDSHAKE_FAILED_AUTH (the ZAP authenticator refused the client's key:
zmq.auth says so at DEBUG only) and, on a CURVE client, HANDSHAKE_FAILED_NO_DETAIL (the
server closed the connection it could not decrypt).

`HandshakeWatch` lives in the thread that owns the socket (the monitor is a PAIR socket of its
own, made, read and closed there: ZeroMQ sockets are not thread-safe); it counts into a
`HandshakeCounts`, which the control thread reads (status, health, metrics). Each failure is
counted by cause; one WARNING line says what the cause likely is and the fix, at once for a
cause's first failure and then at most every LOG_REPEAT_S while they go on. A connecting
socket whose endpoint libzmq gave up on is connected again, RECONNECT_FIRST_S after the
failure, the wait doubling up to RECONNECT_MAX_S, so a front end fixed and restarted is read
without restarting the daemon.

Which side notices a mismatch first is a race: where the peer refuses and closes first, ours
sees HANDSHAKE_FAILED_NO_DETAIL (the peer closed in the handshake; libzmq then tries a
connecting socket again every 100 ms by itself). That is counted too (cause `closed`), on a
bound socket as well, where a TCP connection that closes without a word (a port scan, a TCP
health check) makes the same event: a mismatched peer that connects tries once and never again,
and its only trace on the daemon's side is that event.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any

import zmq
from zmq.utils.monitor import parse_monitor_message

log = logging.getLogger(__name__)

#: one WARNING line per cause at first, then at most one this often while failures go on
LOG_REPEAT_S = 600.0
#: a connecting socket that libzmq gave up on (a protocol error) is connected again after this,
RECONNECT_FIRST_S = 1.0
#: the wait doubling up to this while the handshakes keep failing
RECONNECT_MAX_S = 10.0
#: monitor events read per call at most (a reconnect loop makes four or five per attempt)
MAX_EVENTS_PER_CALL = 1000

EVENTS = (zmq.EVENT_CONNECTED | zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED
          | zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
          | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.EVENT_HANDSHAKE_FAILED_AUTH)
_PROTOCOL_ERRORS = {getattr(zmq, n): n for n in dir(zmq) if n.startswith("PROTOCOL_ERROR_")}
_CURVE_KEY_ERRORS = {getattr(zmq, n, -1) for n in (
    "PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC", "PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE")}

#: failure causes, as status and the metrics name them
CAUSES = ("socket_type", "curve_mechanism", "curve_key", "curve_refused", "closed", "protocol")
_SHORT = {"socket_type": "likely a peer of a socket type ours cannot talk to",
          "curve_mechanism": "one side uses CURVE, the other does not",
          "curve_key": "a CURVE key does not match",
          "curve_refused": "a CURVE key is not admitted",
          "closed": "the peer closed the connection in the handshake: likely a socket type ours cannot talk to, "
                    "a CURVE setting that differs, or a connection that is not ZeroMQ",
          "protocol": "the peer broke ZeroMQ's protocol"}

_TYPE_ADVICE = {
    zmq.SUB: ("our SUB takes a PUB or XPUB (GNU Radio pub_sink, pub_msg_sink; rfclassify simulate): a PUSH "
              "(push_sink, push_msg_sink) needs input.mode = \"pull\" (serve --input-mode pull), a REP (rep_sink, "
              "rep_msg_sink) is not supported: use pub_sink or push_sink"),
    zmq.PULL: ("our PULL takes a PUSH (GNU Radio push_sink, push_msg_sink): a PUB (pub_sink, pub_msg_sink, "
               "rfclassify simulate) needs input.mode = \"sub\" (serve --input-mode sub), a REP (rep_sink, "
               "rep_msg_sink) is not supported: use push_sink or pub_sink"),
    zmq.PUB: ("our PUB publishes to SUB or XSUB sockets (GNU Radio sub_source, sub_msg_source): a PULL "
              "(pull_source, pull_msg_source), REQ or other socket type gets nothing from it"),
}


#: failures of cause "closed" in a row on a bound socket (no handshake succeeded between) before the health says so:
#: a connection closed before its handshake is also what a port scan or a TCP-only health check
#: of a bound socket leaves, once; a peer of the wrong type reconnects and fails again and again
CLOSED_IN_A_ROW_TO_DEGRADE = 3


class HandshakeCounts:
    """The handshakes of one socket (`role`: input or output): succeeded, failed by cause, and
    when the last of each happened (time.monotonic()). Written by the socket's thread, read by
    any (status, health, metrics)."""

    def __init__(self, role: str) -> None:
        self.role = role
        self._lock = threading.Lock()
        self.succeeded = 0
        self.failed: dict[str, int] = {}
        self.last_failure_s: float | None = None
        self.last_cause: str | None = None
        self.last_success_s: float | None = None
        self._in_a_row = 0              # failures since the last handshake that succeeded
        self.bound = False              # a bound socket's (HandshakeWatch says): others connect to it

    @property
    def failed_total(self) -> int:
        with self._lock:
            return sum(self.failed.values())

    def add_success(self, now_s: float) -> int:
        """Count a handshake that succeeded; the failures since the last success before it."""
        with self._lock:
            self.succeeded += 1
            self._in_a_row = 0
            before, self.last_success_s = self.last_success_s, now_s
            failing = self.last_failure_s is not None and (before is None or before < self.last_failure_s)
            return sum(self.failed.values()) if failing else 0

    def add_failure(self, cause: str, now_s: float) -> int:
        """Count a failed handshake of `cause`; the failures of that cause so far."""
        with self._lock:
            self.failed[cause] = self.failed.get(cause, 0) + 1
            self._in_a_row += 1
            self.last_failure_s, self.last_cause = now_s, cause
            return self.failed[cause]

    def snapshot(self, now_s: float) -> dict[str, Any]:
        """status's `handshakes` object of the socket."""
        with self._lock:
            age = None if self.last_failure_s is None else round(now_s - self.last_failure_s, 1)
            return {"succeeded": self.succeeded, "failed": dict(self.failed),
                    "failed_total": sum(self.failed.values()), "last_failed_cause": self.last_cause,
                    "last_failed_age_s": age}

    def health_reason(self, now_s: float, window_s: float) -> str | None:
        """A health reason while the handshakes fail: the last failure within window_s and no
        handshake of this socket succeeded after it, and where the last was a connection to a
        bound socket closed before its handshake ("closed"), CLOSED_IN_A_ROW_TO_DEGRADE failures
        in a row (one such is what a port scan leaves); else None."""
        with self._lock:
            last, ok = self.last_failure_s, self.last_success_s
            if last is None or now_s - last > window_s or (ok is not None and ok >= last):
                return None
            if self.bound and self.last_cause == "closed" and self._in_a_row < CLOSED_IN_A_ROW_TO_DEGRADE:
                return None
            return (f"{self.role}: {sum(self.failed.values())} failed ZeroMQ handshake(s) since start, the last "
                    f"{now_s - last:.0f} s ago ({_SHORT.get(self.last_cause or '', self.last_cause)}; see the log)")


class HandshakeWatch:
    """The socket monitor of `sock`, made, read and closed by the thread that owns `sock`: call
    it from that socket's setup, before it binds or connects (a connecting socket's one failed
    handshake would be missed otherwise), read `monitor` when it polls readable (or now and
    then) with service(), and close() it before the socket."""

    def __init__(self, sock: zmq.Socket, counts: HandshakeCounts, *, endpoint: str, bind: bool,
                 curve: str | None = None) -> None:
        """endpoint: the one a connecting socket connects to again (a bound socket's: the one its
        log lines name); curve: None (plaintext), "server" or "client": the socket's CURVE role."""
        self.sock = sock
        self.counts = counts
        counts.bound = bind
        self.endpoint = endpoint
        self.bind = bind
        self.curve = curve
        self.socket_type = sock.type
        # not sock.get_monitor_socket(): its PAIR has the default high-water mark, and libzmq's
        # I/O thread blocks sending the event past it (2,000 unread events here), which froze
        # every socket of the context, the control socket too; unlimited, the events wait
        # for this thread in memory (about 100 bytes each) and it reads them every 100 ms
        address = f"inproc://rfclassify-monitor-{counts.role}-{id(self)}"
        sock.monitor(address, EVENTS)
        self.monitor: zmq.Socket = sock.context.socket(zmq.PAIR)
        try:
            self.monitor.setsockopt(zmq.LINGER, 0)
            self.monitor.setsockopt(zmq.RCVHWM, 0)
            self.monitor.connect(address)
        except BaseException:
            sock.monitor(None, 0)
            self.monitor.close(linger=0)
            raise
        self.handshake_ivl_s = max(sock.getsockopt(zmq.HANDSHAKE_IVL), 0) / 1000.0 or 30.0
        # fds of connections in their handshake -> when they began (first in, first resolved)
        self._pending: OrderedDict[int, float] = OrderedDict()
        self._logged_s: dict[str, float] = {}
        self._reconnect_at_s: float | None = None
        self._reconnect_wait_s = RECONNECT_FIRST_S

    # -- in the socket's thread ----------------------------------------------------------------
    def service(self, now_s: float | None = None, read: bool = True) -> None:
        """Read the monitor events waiting (unless read is False: a poll said none is), and
        connect again where it is time to."""
        now = time.monotonic() if now_s is None else now_s
        for _ in range(MAX_EVENTS_PER_CALL if read else 0):
            try:
                frames = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            try:
                event = parse_monitor_message(frames)
            except (ValueError, IndexError, TypeError):   # not an event of libzmq's 4.x format
                continue
            self._on_event(int(event["event"]), int(event["value"]), now)
        self._tick(now)

    def close(self) -> None:
        """Stop the monitor and close its socket (before the monitored socket closes)."""
        if not self.sock.closed:
            try:
                self.sock.monitor(None, 0)
            except zmq.ZMQError:
                pass
        self.monitor.close(linger=0)

    def _on_event(self, event: int, value: int, now: float) -> None:
        if event in (zmq.EVENT_CONNECTED, zmq.EVENT_ACCEPTED):
            self._pending[value] = now
        elif event == zmq.EVENT_CONNECT_RETRIED:
            self._reconnect_at_s = None            # libzmq tries again by itself
        elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self._resolve_oldest()
            self._reconnect_wait_s = RECONNECT_FIRST_S
            failed_before = self.counts.add_success(now)
            if failed_before:
                log.info("%s %s: a peer's ZeroMQ handshake succeeded (%d failed before it)", self.counts.role,
                         self.endpoint, failed_before)
        elif event in _FAILED:
            self._resolve_oldest()
            self._failed(self._cause(event, value), now, value)
        elif event == zmq.EVENT_DISCONNECTED and self._pending.pop(value, None) is not None:
            # a connection that ended in its handshake with no event that says why: libzmq 4.3.5
            # refuses a peer of a socket type ours cannot talk to that way
            self._failed("socket_type", now, value)

    def _resolve_oldest(self) -> None:
        """A handshake ended with an event of its own: the oldest in progress, most likely (the
        event does not say which connection; handshakes run in parallel only when peers
        connect at the same moment)."""
        if self._pending:
            self._pending.popitem(last=False)

    def _tick(self, now: float) -> None:
        # a connection in its handshake longer than libzmq's handshake timeout got through it
        # (its event was taken for another's): it is no longer watched
        while self._pending and now - next(iter(self._pending.values())) > self.handshake_ivl_s + 1.0:
            self._pending.popitem(last=False)
        if self._reconnect_at_s is not None and now >= self._reconnect_at_s:
            self._reconnect_at_s = None
            try:
                self.sock.disconnect(self.endpoint)
            except zmq.ZMQError:
                pass                               # libzmq dropped the endpoint already
            try:
                self.sock.connect(self.endpoint)
            except zmq.ZMQError as exc:
                log.warning("%s %s: connecting again failed: %s", self.counts.role, self.endpoint, exc)

    def _cause(self, event: int, value: int) -> str:
        """The cause of a failure libzmq gave an event for."""
        if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            return "curve_refused"
        if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            return "closed"
        if value == getattr(zmq, "PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH", -1):
            return "curve_mechanism"
        if self.curve is not None and value in _CURVE_KEY_ERRORS:
            return "curve_key"
        return "protocol"

    def _failed(self, cause: str, now: float, value: int) -> None:
        count = self.counts.add_failure(cause, now)
        if not self.bind and self._reconnect_at_s is None:
            # connected again unless libzmq does it itself first (EVENT_CONNECT_RETRIED)
            self._reconnect_at_s = now + self._reconnect_wait_s
            self._reconnect_wait_s = min(2 * self._reconnect_wait_s, RECONNECT_MAX_S)
        # which of a socket type mismatch's two signatures a connecting socket sees is a race (the
        # peer may refuse and close first): they share their line
        key = "socket_type" if cause == "closed" and self.curve is None else cause
        last = self._logged_s.get(key)
        if last is not None and now - last < LOG_REPEAT_S:
            return
        self._logged_s[key] = now
        peer = "a peer" if self.bind else "the peer"
        again = "" if self.bind else f"; the daemon keeps trying {self.endpoint}"
        log.warning("%s %s: ZeroMQ's handshake with %s failed (%d so far of this cause; at most one such line "
                    "every %.0f min): %s%s", self.counts.role, self.endpoint, peer, count, LOG_REPEAT_S / 60,
                    self._advice(cause, value), again)

    def _advice(self, cause: str, value: int) -> str:
        role = self.counts.role
        if cause == "socket_type":
            return ("likely a socket type that cannot talk to ours (ZeroMQ refuses such a pair without a word): "
                    + _TYPE_ADVICE.get(self.socket_type, "see docs/daemon.md"))
        if cause == "curve_mechanism":
            if self.curve is not None:
                return (f"the peer does not use CURVE while security.curve_{role} is on (GNU Radio's gr-zeromq "
                        "has no CURVE)")
            return f"the peer uses CURVE while security.curve_{role} is off"
        if cause == "curve_key":
            if self.curve == "client":
                return ("the front end's CURVE handshake failed (a wrong key): security.input_server_key_file "
                        "likely does not hold the front end's public key")
            return ("the peer's CURVE handshake failed (a wrong key): it likely uses another server key than the "
                    "daemon's public key (the .key beside security.secret_key_file)")
        if cause == "curve_refused":
            if self.curve == "client":
                return (f"the front end refused the daemon's CURVE key (ZAP status {value}): admit the daemon's "
                        "public key there")
            return (f"the peer's CURVE key is not admitted (ZAP status {value}): its .key is not in "
                    "security.authorized_keys_dir (SIGHUP reads the folder again)")
        if cause == "closed":
            if self.curve == "client":
                return ("the front end closed the connection during the CURVE handshake: "
                        "security.input_server_key_file likely does not hold its public key, or it refused the "
                        "daemon's key")
            types = _TYPE_ADVICE.get(self.socket_type, "see docs/daemon.md")
            probe = (" (a port scan or a TCP check counts too: probe the daemon with `rfclassify status` or its "
                     "/metrics)" if self.bind else "")
            if self.curve == "server":
                return ("the peer closed the connection (or never answered) during ZeroMQ's handshake: likely a peer "
                        f"that does not use CURVE while security.curve_{role} is on (GNU Radio's gr-zeromq has none), "
                        "one with another server key than the daemon's public key, or a socket type that cannot "
                        f"talk to ours: {types}; or a connection that is not ZeroMQ{probe}")
            return ("the peer closed the connection (or never answered) during ZeroMQ's handshake: likely a socket "
                    f"type that cannot talk to ours, which the peer refused first: {types}; or a connection that "
                    f"is not ZeroMQ{probe}")
        return f"the peer broke ZeroMQ's handshake protocol ({_PROTOCOL_ERRORS.get(value, hex(value))})"
