"""The publisher stage: the only thread that touches the output PUB socket.

Other threads hand it serialized `[topic, json]` frames (`results.encode`) through a bounded
queue; it sends them. PUB never blocks: a subscriber that cannot keep up loses messages at
ZeroMQ's high-water mark (`output.sndhwm`), which ZeroMQ does not report, so the daemon can
only count what it handed to the socket (`published`).

ZeroMQ's high-water mark counts messages, not bytes (and is fixed when the socket binds:
libzmq 4.3 applies a later SNDHWM to no pipe), so what a subscriber that stops reading can
hold is bounded in bytes by the size of a record: `fit_record` keeps every record within
`output.max_record_bytes` by cutting what a sender made large, its echoed `meta` (a reject's
`detail`), so that such a subscriber holds at most `sndhwm` x `max_record_bytes`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import zmq

from rfclassify.serve.batching import BoundedQueue
from rfclassify.serve.config import DaemonConfig
from rfclassify.serve.control import open_socket
from rfclassify.serve.stats import DaemonStats

LINGER_MS = 1000         # how long close() may spend delivering what is still queued
POLL_S = 0.1
CUT_DETAIL_CHARS = 512   # what a reject too large for max_record_bytes keeps of its detail


def fit_record(topic: bytes, record: dict[str, Any], encode: Callable[[bytes, dict[str, Any]], list[bytes]],
               max_record_bytes: int) -> tuple[list[bytes] | None, bool]:
    """(frames, whether something was cut): `record` encoded within max_record_bytes (all its
    frames), or None where even the cut record is larger (its echoed stream or burst_id is).
    A result over the limit goes out with `meta` null and `meta_cut` {record_bytes,
    max_record_bytes}; a reject with its detail cut to CUT_DETAIL_CHARS."""
    frames = encode(topic, record)
    size = sum(len(f) for f in frames)
    if size <= max_record_bytes:
        return frames, False
    if "meta" in record:
        cut = {**record, "meta": None, "meta_cut": {"record_bytes": size, "max_record_bytes": max_record_bytes}}
    else:
        detail = str(record.get("detail"))[:CUT_DETAIL_CHARS]
        cut = {**record, "detail": f"{detail}... (cut: {size} bytes, over output.max_record_bytes)"}
    frames = encode(topic, cut)
    return (frames if sum(len(f) for f in frames) <= max_record_bytes else None), True


def open_output_socket(context: zmq.Context, config: DaemonConfig,
                       secure: Callable[[zmq.Socket, str], None] | None,
                       watch: Callable[[zmq.Socket], None] | None = None) -> zmq.Socket:
    """The PUB socket, bound (default) or connected to output.endpoint; watch(sock), where
    given, is called last before the bind or connect (the handshake monitor's place)."""
    cfg = config.output

    def setup(sock: zmq.Socket) -> None:
        sock.setsockopt(zmq.LINGER, LINGER_MS)
        sock.setsockopt(zmq.SNDHWM, cfg.sndhwm)
        if secure is not None and config.security.curve_output:
            secure(sock, "output")
        if watch is not None:
            watch(sock)

    return open_socket(context, zmq.PUB, "output", cfg.endpoint, cfg.bind, setup)


def publish_loop(sock: zmq.Socket, queue: BoundedQueue, stats: DaemonStats,
                 abort: threading.Event, end: Any, watch: Any = None) -> None:
    """Send queued records until `end` arrives (drain) or abort is set; closes the socket.

    watch: the socket's handshakes.HandshakeWatch, or None; serviced here (this thread owns
    the socket) at most every POLL_S, and closed with the socket."""
    next_look_s = 0.0
    try:
        while not abort.is_set():
            if watch is not None and (now := time.monotonic()) >= next_look_s:
                watch.service(now)
                next_look_s = now + POLL_S
            item = queue.get(timeout=POLL_S)
            if item is end:
                break
            if item is None:
                continue
            sock.send_multipart(item)
            stats.add_published()
    finally:
        if watch is not None:
            watch.close()
        sock.close(linger=0 if abort.is_set() else LINGER_MS)
