"""The publisher stage: the only thread that touches the output PUB socket.

Other threads hand it serialized `[topic, json]` frames (`results.encode`) through a bounded
queue; it sends them. PUB never blocks: a subscriber that cannot keep up loses messages at
ZeroMQ's high-water mark (`output.sndhwm`), which ZeroMQ does not report, so the daemon can
only count what it handed to the socket (`published`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import zmq

from rfclassify.serve.batching import BoundedQueue
from rfclassify.serve.config import DaemonConfig
from rfclassify.serve.control import open_socket
from rfclassify.serve.stats import DaemonStats

LINGER_MS = 1000         # how long close() may spend delivering what is still queued
POLL_S = 0.1


def open_output_socket(context: zmq.Context, config: DaemonConfig,
                       secure: Callable[[zmq.Socket, str], None] | None) -> zmq.Socket:
    """The PUB socket, bound (default) or connected to output.endpoint."""
    cfg = config.output

    def setup(sock: zmq.Socket) -> None:
        sock.setsockopt(zmq.LINGER, LINGER_MS)
        sock.setsockopt(zmq.SNDHWM, cfg.sndhwm)
        if secure is not None and config.security.curve_output:
            secure(sock, "output")

    return open_socket(context, zmq.PUB, "output", cfg.endpoint, cfg.bind, setup)


def publish_loop(sock: zmq.Socket, queue: BoundedQueue, stats: DaemonStats,
                 abort: threading.Event, end: Any) -> None:
    """Send queued records until `end` arrives (drain) or abort is set; closes the socket."""
    try:
        while not abort.is_set():
            item = queue.get(timeout=POLL_S)
            if item is end:
                break
            if item is None:
                continue
            sock.send_multipart(item)
            stats.add_published()
    finally:
        sock.close(linger=0 if abort.is_set() else LINGER_MS)
