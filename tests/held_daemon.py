"""An in-process daemon on a shared engine with real ZeroMQ sockets, and a stage of it held back
on an Event (not slowed by a sleep), so a test puts the daemon in the state it needs whatever
the machine's speed: the shutdown accounting and memory-bound tests use it."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from rfclassify.serve.daemon import Daemon, load_engine
from rfclassify.serve.demo import local_config
from rfclassify.serve.pipeline import EngineAdapter

WAIT_S = 30.0         # the longest a test waits for the daemon to reach the state it needs


class Gate:
    """Holds back whoever calls wait() until open(); `entered` is set at the first call."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self._open = threading.Event()

    def wait(self) -> None:
        self.entered.set()
        self._open.wait(WAIT_S)

    def open(self) -> None:
        self._open.set()


def hold(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> Gate:
    """Make every call of owner.name (a function, or a method of a class) wait for the gate first."""
    gate = Gate()
    real: Callable[..., Any] = getattr(owner, name)

    def held(*args: Any, **kwargs: Any) -> Any:
        gate.wait()
        return real(*args, **kwargs)
    monkeypatch.setattr(owner, name, held)
    return gate


def hold_inference(monkeypatch: pytest.MonkeyPatch) -> Gate:
    return hold(monkeypatch, EngineAdapter, "infer_batch")


def tiny_engine(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> EngineAdapter:
    """The tiny model on ONNX Runtime, for a module's daemons to share (a daemon does not close
    an engine it was given): the body of a module-scoped fixture."""
    cfg = local_config(tmp_path_factory.mktemp("ctl"), model_dir=str(tiny_model_dir), backend="onnxruntime")
    return load_engine(cfg)


def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "the daemon did not get there"
        time.sleep(0.01)


@contextlib.contextmanager
def serving(engine: EngineAdapter, cfg: Any) -> Iterator[tuple[Daemon, zmq.Socket]]:
    """A started daemon on `engine` (which it does not close) and a PUSH socket to its input."""
    d = Daemon(cfg, engine=engine)
    d.start()
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(d.pipeline.input_endpoint)
    try:
        yield d, push
    finally:
        push.close(0)
        ctx.term()
        d.stop(drain=False)
