"""What a stop that gives up on its drain (shutdown.drain_timeout_s) counts, with real ZeroMQ
sockets and ONNX Runtime in this process: every received burst ends up classified, rejected or
dropped, each once, and every record made (a result or a reject) is published or counted as
dropped at `shutdown_unsent`. A stage is held back on an Event, not slowed by a sleep, so the
drain misses its bound whatever the machine's speed.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

from rfclassify.dsp.synth import synthesize
from rfclassify.serve import pipeline as pipeline_module
from rfclassify.serve.config import QueueConfig, ShutdownConfig
from rfclassify.serve.daemon import Daemon
from rfclassify.serve.demo import local_config
from rfclassify.serve.native import encode_native
from rfclassify.serve.pipeline import EngineAdapter

from held_daemon import WAIT_S, Gate, hold, hold_inference, serving, tiny_engine, until

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> EngineAdapter:
    return tiny_engine(tiny_model_dir, tmp_path_factory)


def _daemon(engine: EngineAdapter, tmp_path: Path, max_batch: int = 64, **queues: Any):
    """A daemon on the shared engine whose drain bound is 0.2 s, and a PUSH socket to it."""
    cfg = local_config(tmp_path, max_batch=max_batch)
    cfg = replace(cfg, shutdown=ShutdownConfig(drain_timeout_s=0.2), queues=replace(QueueConfig(), **{
        "overload": "block", **queues}))
    return serving(engine, cfg)


def _finish(d: Daemon, gate: Gate) -> dict[str, Any]:
    """Let the held stage go on after the stop gave up, wait for the threads it outlived, and
    return the counters once nothing can change them."""
    gate.open()
    for t in d.pipeline._threads:
        t.join(WAIT_S)
    assert not any(t.is_alive() for t in d.pipeline._threads)
    d.context.term()      # an unclean stop leaves it to whoever waits for the threads
    return d.stats.snapshot()["counters"]


def _send(push: zmq.Socket, n: int, seed: int) -> None:
    bursts = synthesize(["BPSK"] * n, 1024, np.random.default_rng(seed), snr_db=np.full(n, 10.0))
    for i in range(n):
        push.send_multipart(encode_native(bursts.iq[i], {"sample_rate": 1e6, "burst_id": f"b{seed}-{i}"}))


def test_the_batch_inference_runs_when_the_drain_gives_up_is_dropped_and_never_recorded(
        engine, tmp_path, monkeypatch):
    """Its backend call outlives the stop: its bursts are counted as dropped at `shutdown` with
    the queued ones, and its results, made after, are neither counted as classified nor queued
    for a publisher that is gone (before: 5 of 6 counted, the sixth classified but never sent)."""
    with _daemon(engine, tmp_path) as (d, push):
        gate = hold_inference(monkeypatch)
        _send(push, 1, seed=1)
        assert gate.entered.wait(WAIT_S)
        _send(push, 5, seed=2)
        until(lambda: d.stats.received == 6)
        assert not d.stop(drain=True)
        c = _finish(d, gate)
    assert c["dropped"] == {"shutdown": 6}
    assert (c["received"], c["classified"], c["published"]) == (6, 0, 0)


def test_bursts_the_ingest_and_batcher_threads_hold_when_the_drain_gives_up_are_dropped(
        engine, tmp_path, monkeypatch):
    """With one batch a burst and room for one in each queue: one burst in inference, one in the
    infer queue, one in the batcher's hands waiting for room there, one in the ingest queue and
    one in the ingest thread's hands waiting for room there. All five are counted (before: the
    two the threads held were lost uncounted, and the running one was not counted either)."""
    with _daemon(engine, tmp_path, max_batch=1, ingest_max_bursts=1, infer_max_batches=1) as (d, push):
        gate = hold_inference(monkeypatch)
        _send(push, 1, seed=3)
        assert gate.entered.wait(WAIT_S)
        _send(push, 4, seed=4)
        p = d.pipeline
        until(lambda: d.stats.received == 5 and len(p.infer_q) == 1 and len(p.ingest_q) == 1)
        assert not d.stop(drain=True)
        c = _finish(d, gate)
    assert c["dropped"] == {"shutdown": 5}
    assert (c["received"], c["classified"], c["published"]) == (5, 0, 0)


class _HeldSocket:
    """The publisher's PUB socket, its first send held at the gate."""

    def __init__(self, sock: zmq.Socket, gate: Gate) -> None:
        self._sock = sock
        self._gate = gate

    def send_multipart(self, frames: list[bytes]) -> None:
        self._gate.wait()
        self._sock.send_multipart(frames)

    def close(self, linger: int | None = None) -> None:
        self._sock.close(linger=linger)


def test_records_left_in_the_publish_queue_are_counted_unsent(engine, tmp_path, monkeypatch):
    """Results counted as classified and rejects counted as rejected that the publisher never
    sends are counted at `shutdown_unsent` (before: not at all), apart from the bursts dropped
    unclassified: published + unsent = classified + rejected."""
    gate = Gate()
    real_loop = pipeline_module.publish_loop
    monkeypatch.setattr(pipeline_module, "publish_loop",
                        lambda sock, *args: real_loop(_HeldSocket(sock, gate), *args))
    with _daemon(engine, tmp_path) as (d, push):
        _send(push, 4, seed=5)
        push.send_multipart([b"not a header", b"\0" * 8])         # a decoder reject
        until(lambda: d.stats.classified == 4 and sum(d.stats.rejected.values()) == 1)
        assert gate.entered.wait(WAIT_S)
        assert not d.stop(drain=True)
        c = _finish(d, gate)
    assert (c["received"], c["classified"], c["rejected_total"]) == (4, 4, 1)
    assert c["published"] == 1                                      # the one the publisher held
    assert c["dropped"] == {"shutdown_unsent": 4}


def test_records_a_batch_makes_after_the_stop_counted_are_counted_unsent_once(engine, tmp_path, monkeypatch):
    """The inference thread had taken its batch's outcome to record when the stop gave up: its
    result is counted as classified and, made after the publisher stopped, as unsent; not as a
    dropped burst too. The burst behind it is dropped unclassified."""
    gate = hold(monkeypatch, pipeline_module, "result_record")
    with _daemon(engine, tmp_path) as (d, push):
        _send(push, 1, seed=6)
        assert gate.entered.wait(WAIT_S)
        _send(push, 1, seed=7)
        until(lambda: d.stats.received == 2)
        assert not d.stop(drain=True)
        c = _finish(d, gate)
    assert (c["received"], c["classified"], c["published"]) == (2, 1, 0)
    assert c["dropped"] == {"shutdown": 1, "shutdown_unsent": 1}
