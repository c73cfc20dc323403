"""`rfclassify serve` as a real process: sd_notify + watchdog, SIGTERM drain, overload memory, config errors.

Every subprocess is killed in a finally. The daemon runs the tiny random model on ONNX Runtime.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

from rfclassify.serve.control import NoDaemonError, request
from rfclassify.serve.demo import ResultCollector
from rfclassify.serve.native import encode_native

pytest.importorskip("onnxruntime")

DRAIN_BOUND_S = 10.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """`python -m rfclassify serve` on free loopback ports with a config file."""

    def __init__(self, tmp: Path, model_dir: Path, config: str = "", env: dict[str, str] | None = None,
                 prefix: tuple[str, ...] = ()) -> None:
        self.input = f"tcp://127.0.0.1:{_free_port()}"
        self.output = f"tcp://127.0.0.1:{_free_port()}"
        self.control = f"ipc://{tmp}/control"
        cfg = tmp / "rfclassify.toml"
        cfg.write_text(config)
        cmd = [*prefix, sys.executable, "-m", "rfclassify", "serve", "--config", str(cfg), "--input", self.input,
               "--input-mode", "pull", "--input-bind", "--output", self.output, "--control", self.control,
               "--model-dir", str(model_dir), "--backend", "onnxruntime"]
        self.log = open(tmp / "serve.log", "w+")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})

    def wait_ready(self, timeout_s: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output_text()
            try:
                st = request(self.control, "status", timeout_s=0.5)
            except NoDaemonError:
                continue
            if st["health"] != "starting":
                return st
            time.sleep(0.1)
        raise AssertionError("daemon did not become ready: " + self.output_text())

    def status(self) -> dict:
        return request(self.control, "status", timeout_s=5)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def output_text(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


def _push(endpoint: str) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def _noise(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)


def test_notify_ready_watchdog_and_sigterm_drains_in_flight_bursts(tiny_model_dir, tmp_path):
    notify_path = tmp_path / "notify.sock"
    nsock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    nsock.bind(str(notify_path))
    nsock.settimeout(0.2)
    messages: list[str] = []

    def read_notify(stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                messages.append(nsock.recv(4096).decode())
            except (socket.timeout, OSError):
                pass

    # a batch that waits 60 s: the bursts are certainly still in flight when SIGTERM arrives
    config = "[batching]\nmax_batch = 4096\nmax_wait_ms = 60000\n[shutdown]\ndrain_timeout_s = 10\n"
    stop = threading.Event()
    reader = threading.Thread(target=read_notify, args=(stop,), daemon=True)
    reader.start()
    srv = ServeProcess(tmp_path, tiny_model_dir, config,
                       env={"NOTIFY_SOCKET": str(notify_path), "WATCHDOG_USEC": "400000"})
    push = _push(srv.input)
    collector = ResultCollector(srv.output)
    try:
        srv.wait_ready()
        collector.start()
        time.sleep(1.0)                 # several watchdog periods (0.2 s each)
        assert any(m.startswith("READY=1") for m in messages), messages
        assert sum("WATCHDOG=1" in m for m in messages) >= 2, messages
        for i in range(50):
            push.send_multipart(encode_native(_noise(1024, i), {"sample_rate": 1e6, "burst_id": i}))
        deadline = time.monotonic() + 20
        while srv.status()["counters"]["received"] < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        st = srv.status()
        assert st["counters"]["received"] == 50 and st["counters"]["classified"] == 0
        # SIGHUP: the drop policy reloads, the input high-water mark needs a restart
        (tmp_path / "rfclassify.toml").write_text(
            config + '[queues]\noverload = "drop_newest"\n[input]\nrcvhwm = 7\n')
        srv.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while srv.status()["overload_policy"] != "drop_newest" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert srv.status()["overload_policy"] == "drop_newest"
        assert "NOT reloaded (restart needed): input.rcvhwm" in srv.output_text()
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        rc = srv.proc.wait(DRAIN_BOUND_S + 5)
        assert rc == 0, srv.output_text()
        assert time.monotonic() - t0 < DRAIN_BOUND_S + 2
        assert collector.wait_for(50, 5), f"{collector.count()} of 50 published during drain"
        assert sorted(r["burst_id"] for r in collector.results) == list(range(50))
        time.sleep(0.3)
        assert any(m.startswith("STOPPING=1") for m in messages), messages
    finally:
        push.close()
        collector.stop()
        stop.set()
        srv.kill()
        nsock.close()


def test_sigterm_while_the_model_loads_stops_without_serving(tmp_path):
    """A stop during the start (minutes of TensorRT engine builds on a Jetson's first start)
    abandons it: before the sixty-seventh session the daemon finished loading, sent READY=1 and
    only then drained, while systemd waited out TimeoutStopSec and killed it."""
    notify_path = tmp_path / "notify.sock"
    nsock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    nsock.bind(str(notify_path))
    nsock.settimeout(0.2)
    models = Path(__file__).resolve().parents[1] / "models"     # the shipped model: seconds to load here
    srv = ServeProcess(tmp_path, models, "[model]\nrefiner_workers = 1\n", env={"NOTIFY_SOCKET": str(notify_path)})
    try:
        deadline = time.monotonic() + 60
        while "control socket on" not in srv.output_text() and time.monotonic() < deadline:
            assert srv.proc.poll() is None, srv.output_text()
            time.sleep(0.02)
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(120) == 0, srv.output_text()     # 20-29 s measured under load
        out = srv.output_text()
        assert "SIGTERM while starting: stopped before serving" in out, out
        assert "serving:" not in out and "Traceback" not in out, out
        messages = []
        while True:
            try:
                messages.append(nsock.recv(4096).decode())
            except (socket.timeout, OSError):
                break
        assert not any(m.startswith("READY=1") for m in messages), messages
        assert any(m.startswith("STOPPING=1") for m in messages), messages
    finally:
        srv.kill()
        nsock.close()


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine not in ("x86_64", "aarch64"),
                    reason="the seccomp stand-in for RestrictAddressFamilies= knows Linux x86_64/aarch64 only")
def test_the_daemon_serves_under_the_units_address_families(tiny_model_dir, tmp_path):
    """systemd's RestrictAddressFamilies= makes socket() of any other family fail; libzmq's tcp
    bind resolves the address with getifaddrs(), a netlink socket, and aborted the process when
    that failed (zeromq/libzmq#4737): under the unit before the sixty-seventh session the
    daemon loaded its model, then died with SIGABRT on every start."""
    unit = (Path(__file__).resolve().parents[1] / "systemd" / "rfclassify.service").read_text()
    (line,) = [ln for ln in unit.splitlines() if ln.startswith("RestrictAddressFamilies=")]
    families = line.split("=", 1)[1].split()
    helper = str(Path(__file__).with_name("restrict_address_families.py"))
    srv = ServeProcess(tmp_path, tiny_model_dir, prefix=(sys.executable, helper, *families, "--"))
    push = _push(srv.input)
    collector = ResultCollector(srv.output)
    try:
        srv.wait_ready()
        collector.start()
        time.sleep(0.3)
        push.send_multipart(encode_native(_noise(1024, 1), {"sample_rate": 1e6, "burst_id": "sandboxed"}))
        assert collector.wait_for(1, 20), srv.output_text()
        assert collector.results[0]["burst_id"] == "sandboxed"
    finally:
        push.close()
        collector.stop()
        srv.kill()


def test_overload_keeps_memory_bounded_and_counts_drops(tiny_model_dir, tmp_path):
    queue_mib = 16
    config = f"[queues]\ningest_max_bytes = {queue_mib * 1024 * 1024}\noverload = \"drop_oldest\"\n"
    srv = ServeProcess(tmp_path, tiny_model_dir, config)
    collector = None
    try:
        srv.wait_ready()
        collector = ResultCollector(srv.output)
        collector.start()
        baseline_kib = srv.rss_kib()
        frames = [encode_native(_noise(1024, i), {"sample_rate": 1e6, "burst_id": i}) for i in range(64)]
        push = _push(srv.input)
        push.setsockopt(zmq.SNDHWM, 2000)
        peak_kib, sent, t_end = baseline_kib, 0, time.monotonic() + 3.0
        while time.monotonic() < t_end:           # far beyond what the backend can classify
            for _ in range(200):
                try:
                    push.send_multipart(frames[sent % 64], zmq.NOBLOCK)
                    sent += 1
                except zmq.Again:
                    break
            peak_kib = max(peak_kib, srv.rss_kib())
        push.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:        # until every received burst is accounted for
            st = srv.status()
            c = st["counters"]
            peak_kib = max(peak_kib, srv.rss_kib())
            if c["received"] == c["classified"] + c["dropped_total"] + c["rejected_total"]:
                break
            time.sleep(0.1)
        growth_mib = (peak_kib - baseline_kib) / 1024
        print(f"sent {sent}, received {c['received']}, classified {c['classified']}, dropped {c['dropped']}, "
              f"RSS {baseline_kib / 1024:.0f} MiB -> peak {peak_kib / 1024:.0f} MiB")
        # the ingest queue holds at most 16 MiB; ZeroMQ buffers and allocator slack get the rest
        assert growth_mib < queue_mib + 150, f"RSS grew {growth_mib:.0f} MiB"
        assert c["dropped"].get("ingest", 0) > 0
        assert c["received"] == c["classified"] + c["dropped"]["ingest"] + c["rejected_total"]
        assert st["health"] == "degraded" and any("drop" in r for r in st["health_reasons"])
        assert collector.wait_for(c["classified"], 10)
        worst_ms = max(r["latency_ms"]["total"] for r in collector.results)
        assert worst_ms < 20_000, worst_ms          # generous: queue bounded, so latency is too
    finally:
        if collector is not None:
            collector.stop()
        srv.kill()


def test_config_mistake_is_one_line_and_exit_2(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[batching]\nmax_batch = 0\n")
    proc = subprocess.run([sys.executable, "-m", "rfclassify", "serve", "--config", str(cfg)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "batching.max_batch" in lines[0] and "1..4096" in lines[0], proc.stderr


def test_check_config_prints_the_merged_config(tmp_path):
    cfg = tmp_path / "ok.toml"
    cfg.write_text('[input]\nformat = "gr-pdu"\n[queues]\noverload = "drop_newest"\n')
    proc = subprocess.run([sys.executable, "-m", "rfclassify", "serve", "--config", str(cfg), "--check-config",
                           "--overload", "block"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    merged = json.loads(proc.stdout)
    assert merged["input"]["format"] == "gr-pdu"
    assert merged["queues"]["overload"] == "block"          # the command line wins
