"""`rfclassify serve` stopped by a SIGTERM to its whole process group, as `timeout`, `kill -TERM
-PGID`, supervisord's stopasgroup and a shell's job control send it (systemd's KillMode=mixed
signals the main process alone), while every burst it received is still in flight: each is
still classified and published by the refiners' worker processes, the exit code is 0, nothing
is logged as an error, and no process of the group is left. The same with SIGTERM to the main
process alone, for comparison; and a group's SIGTERM while the workers start.

Before the workers ignored SIGTERM they died of it: the pool broke in the middle of the drain
(an ERROR line, the backlog's statistics in the inference thread, a new pool spawned while the
daemon stopped) and, with a backlog on this 2-core CPU, the drain missed its bound: bursts lost
and exit 1.

The shipped model (its refiners), ONNX Runtime, two refiner workers; the daemon runs in a
session of its own, and everything it started is killed in a finally.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zmq
from processes import held_worker_starts

from rfclassify.serve.control import NoDaemonError, request
from rfclassify.serve.demo import ResultCollector
from rfclassify.serve.native import encode_native

pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process groups read from /proc: Linux")

BURSTS = 40
DRAIN_TIMEOUT_S = 60    # the bound is not what is tested: a slow box drains in time too


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _bursts() -> list[np.ndarray]:
    """High-order bursts at a middling SNR: the network is not sure of them, so they go
    through the DC pass and the refiners, whose statistics run in the worker processes."""
    from rfclassify.dsp.synth import synthesize
    from rfclassify.labels import HIGH_ORDER_LABELS

    labels = [HIGH_ORDER_LABELS[i % len(HIGH_ORDER_LABELS)] for i in range(BURSTS)]
    return list(synthesize(labels, 1024, np.random.default_rng(5), 8.0).iq)


class Serve:
    """`python -m rfclassify serve` with the shipped model on ONNX Runtime and two refiner
    workers, in a session of its own (its pid is the group's id), on free loopback ports,
    its log in a file; `env` added to its environment."""

    def __init__(self, tmp: Path, config: str = "", env: dict[str, str] | None = None) -> None:
        self.control = f"ipc://{tmp}/control"
        self.input, self.output = f"tcp://127.0.0.1:{_free_port()}", f"tcp://127.0.0.1:{_free_port()}"
        cfg = tmp / "rfclassify.toml"
        cfg.write_text("[model]\nrefiner_workers = 2\n" + config)
        self.path = tmp / "serve.log"
        self.log = open(self.path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "rfclassify", "serve", "--config", str(cfg),
                                      "--input", self.input, "--input-mode", "pull", "--input-bind",
                                      "--output", self.output, "--control", self.control, "--backend", "onnxruntime"],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, **(env or {})})

    def text(self) -> str:
        self.log.flush()
        return self.path.read_text()

    def assert_clean_end(self, rc: int) -> str:
        """rc 0, nothing logged as an error, and no process of its group left; its log."""
        log_text = self.text()
        assert rc == 0, log_text
        for bad in ("Traceback", "ERROR", "worker pool", "abandoned"):
            assert bad not in log_text, log_text
        deadline = time.monotonic() + 10
        while _group(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _group(self.proc.pid), f"left running: {_group(self.proc.pid)}"
        return log_text

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for pid in _group(self.proc.pid):
            os.kill(pid, signal.SIGKILL)
        self.log.close()


@pytest.mark.parametrize("to", ["group", "main"])
def test_sigterm_drains_every_received_burst_through_the_refiner_workers(tmp_path, to):
    # one batch that waits a minute: every burst is still in flight when SIGTERM comes
    srv = Serve(tmp_path, f"[batching]\nmax_batch = 4096\nmax_wait_ms = 60000\n"
                          f"[shutdown]\ndrain_timeout_s = {DRAIN_TIMEOUT_S}\n")
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    collector = ResultCollector(srv.output)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert srv.proc.poll() is None and time.monotonic() < deadline, srv.text()
            try:
                st = request(srv.control, "status", timeout_s=0.5)
            except NoDaemonError:
                continue
            if st["health"] != "starting":
                break
            time.sleep(0.1)
        assert st["engine"]["refiner_workers"] == 2
        workers = [pid for pid in _group(srv.proc.pid) if pid != srv.proc.pid]
        assert len(workers) >= 2, workers      # the two workers (and multiprocessing's resource tracker)
        collector.start()
        push.connect(srv.input)
        for i, iq in enumerate(_bursts()):
            push.send_multipart(encode_native(iq, {"sample_rate": 1e6, "burst_id": i}))
        deadline = time.monotonic() + 30
        while (c := request(srv.control, "status", timeout_s=2)["counters"])["received"] < BURSTS:
            assert time.monotonic() < deadline, c
            time.sleep(0.05)
        assert c["received"] == BURSTS and c["classified"] == 0

        if to == "group":
            os.killpg(srv.proc.pid, signal.SIGTERM)
        else:
            srv.proc.send_signal(signal.SIGTERM)
        srv.assert_clean_end(srv.proc.wait(DRAIN_TIMEOUT_S + 30))
        assert collector.wait_for(BURSTS, 5), f"{collector.count()} of {BURSTS} published"
        assert sorted(r["burst_id"] for r in collector.results) == list(range(BURSTS)) and not collector.rejects
    finally:
        push.close()
        collector.stop()
        srv.kill()


def test_a_group_sigterm_while_the_refiner_workers_start_stops_the_start(tmp_path):
    """A worker that died of the group's SIGTERM while its interpreter started left the daemon
    writing the worker's start data (the refiners' networks, more than a pipe holds) into a
    pipe for good, with the stop held until the spawn ended (CPython gh-118981: the parent
    keeps the pipe's read end open while it writes): no exit, no log line. Each worker's start
    is held here for three seconds (a sitecustomize) and the SIGTERM comes meanwhile."""
    site, marks = held_worker_starts(tmp_path, 3.0)
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    srv = Serve(tmp_path, env={"PYTHONPATH": path})
    try:
        deadline = time.monotonic() + 120
        while not os.listdir(marks):
            assert srv.proc.poll() is None and time.monotonic() < deadline, srv.text()
            time.sleep(0.05)
        os.killpg(srv.proc.pid, signal.SIGTERM)
        try:
            rc = srv.proc.wait(60)
        except subprocess.TimeoutExpired:
            pytest.fail("no exit within 60 s of SIGTERM:\n" + srv.text())
        assert "SIGTERM while starting: stopped before serving" in srv.assert_clean_end(rc)
    finally:
        srv.kill()
