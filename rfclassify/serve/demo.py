"""`rfclassify demo`: the daemon and a simulated SDR in one process, live results, a summary.

The daemon runs exactly as `rfclassify serve` would (same threads, real ZeroMQ sockets on
127.0.0.1 with free ports, the control socket in a temporary directory) on the default
backend with the shipped model; the simulator hands bursts over PUSH/PULL (lossless, so the
accuracy counts every burst) and a subscriber collects the published results.
The summary comes from the daemon's own status after its drain (the same counters, latency
percentiles and live accuracy `rfclassify status` shows). `local_config` and `ResultCollector`
are shared with `rfclassify bench daemon` and the tests; SIGTERM becomes Ctrl-C's Terminated
through rfclassify._signals' `sigterm_as_interrupt`, which `rfclassify demo` holds around it.
"""

from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import zmq

from rfclassify._signals import Terminated
from rfclassify.serve.config import (
    BatchingConfig,
    ControlConfig,
    DaemonConfig,
    InputConfig,
    LoggingConfig,
    ModelConfig,
    OutputConfig,
    QueueConfig,
)
from rfclassify.serve.control import open_socket

LOOPBACK_ANY_PORT = "tcp://127.0.0.1:*"
#: how long the demo waits for its answers after the last burst was due to be sent
GRACE_S = 30.0


def local_config(control_dir: str | Path, *, model_dir: str = "", backend: str = "auto",
                 precision: str = "auto", device: str = "", threads: int = 0,
                 overload: str = "block", mode: str = "pull",
                 max_batch: int = 64, max_wait_ms: float = 2.0, log_level: str = "warning") -> DaemonConfig:
    """A daemon on loopback with free ports (input bound, so the sender connects)."""
    return DaemonConfig(
        input=InputConfig(endpoint=LOOPBACK_ANY_PORT, mode=mode, bind=True),
        output=OutputConfig(endpoint=LOOPBACK_ANY_PORT),
        control=ControlConfig(endpoint=f"ipc://{Path(control_dir) / 'control'}"),
        model=ModelConfig(dir=model_dir, backend=backend, precision=precision, device=device, threads=threads),
        batching=BatchingConfig(max_batch=max_batch, max_wait_ms=max_wait_ms),
        queues=replace(QueueConfig(), overload=overload),
        logging=LoggingConfig(level=log_level),
    )


class ResultCollector:
    """Subscribes to a daemon's output in a thread and keeps every record it receives."""

    def __init__(self, endpoint: str, context: zmq.Context | None = None) -> None:
        self.endpoint = endpoint
        self.context = context or zmq.Context.instance()
        self.results: list[dict[str, Any]] = []
        self.rejects: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._connected = threading.Event()
        self._thread = threading.Thread(target=self._run, name="collector", daemon=True)

    def start(self, settle_s: float = 0.5) -> ResultCollector:
        self._thread.start()
        self._connected.wait(5)
        time.sleep(settle_s)          # let the subscription reach the PUB socket (slow joiner)
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)

    def _run(self) -> None:
        import json

        def setup(sock: zmq.Socket) -> None:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, 0)
            sock.setsockopt(zmq.SUBSCRIBE, b"")

        sock = open_socket(self.context, zmq.SUB, "results", self.endpoint, False, setup)
        self._connected.set()
        try:
            while not self._stop.is_set():
                if not sock.poll(50):
                    continue
                topic, body = sock.recv_multipart()
                rec = json.loads(body)
                with self._cond:
                    (self.results if topic == b"result" else self.rejects).append(rec)
                    self._cond.notify_all()
        finally:
            sock.close()

    def wait_for(self, n: int, timeout_s: float) -> bool:
        """Wait until n records (results + rejects) arrived; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self.results) + len(self.rejects) >= n, timeout_s)

    def results_between(self, start: int, stop: int) -> list[dict[str, Any]]:
        with self._cond:
            return self.results[start:stop]

    def count(self) -> int:
        with self._cond:
            return len(self.results) + len(self.rejects)


def _line(r: dict[str, Any]) -> str:
    t = r.get("truth") or {}
    mark = "" if not t.get("label") else ("  ok" if t["label"] == r["label"] else f"  (true {t['label']})")
    return (f"#{r['burst_id']:<5} {r['label']:<10} p={r['confidence']:.2f}  snr {r['snr_db']:5.1f} dB"
            f" (true {t.get('snr_db', float('nan')):5.1f})  {r['n_samples']:>5} samples  "
            f"{r['latency_ms']['total']:6.1f} ms{mark}")


def run_demo(count: int, rate: float, model_dir: str = "", backend: str = "auto",
             precision: str = "auto", device: str = "", threads: int = 0, lines: int = 15, seed: int = 0,
             out: Any = None, grace_s: float | None = None) -> dict[str, Any]:
    """Run the demo and print as it goes; returns the summary dict: what was sent, the daemon's
    status after its drain, `interrupted` (None, "SIGINT" or "SIGTERM": Ctrl-C or
    sigterm_as_interrupt's Terminated during the run), `timed_out` (answers still missing
    grace_s (default GRACE_S) after the last burst was due), `unanswered_at_deadline` and
    `unanswered` (bursts sent that the daemon never classified, rejected or dropped, after its
    drain)."""
    import sys

    from rfclassify.serve.daemon import Daemon
    from rfclassify.serve.simulate import SimulateOptions, run_simulator

    out = out or sys.stdout
    say = lambda *a: print(*a, file=out, flush=True)  # noqa: E731
    grace_s = GRACE_S if grace_s is None else grace_s
    stop = threading.Event()
    sent = [0]
    sim: threading.Thread | None = None
    collector: ResultCollector | None = None
    interrupted: str | None = None
    timed_out = False
    t0 = time.monotonic()
    answered_at_deadline = 0
    with tempfile.TemporaryDirectory(prefix="rfclassify-demo-") as tmp:
        daemon = Daemon(local_config(tmp, model_dir=model_dir, backend=backend, precision=precision,
                                     device=device, threads=threads))
        try:
            t_load = time.monotonic()
            daemon.start()
            e = daemon.engine
            assert e is not None and daemon.pipeline is not None
            say(f"daemon up in {time.monotonic() - t_load:.1f} s: {e.backend} {e.precision} on {e.device}, "
                f"model {e.model_id}; input {daemon.pipeline.input_endpoint}, output {daemon.pipeline.output_endpoint}")
            collector = ResultCollector(daemon.pipeline.output_endpoint).start()
            opts = SimulateOptions(endpoint=daemon.pipeline.input_endpoint, bind=False, socket_type="push",
                                   rate_bursts_per_s=rate, count=count, seed=seed,
                                   pool=min(count, 2000))  # synthesized up front: no GIL stalls mid-run
            sim = threading.Thread(target=lambda: sent.__setitem__(0, run_simulator(opts, stop=stop)),
                                   name="simulator", daemon=True)
            say(f"simulating {count} bursts at {rate:g}/s (all {len(opts.classes)} classes, SNR "
                f"{opts.snr_min_db:g}..{opts.snr_max_db:g} dB, {opts.length_min_samples}..{opts.length_max_samples} samples)")
            t0 = time.monotonic()
            sim.start()
            try:
                timed_out = not _follow(daemon, collector, count, t0 + (count / rate if rate > 0 else 60) + grace_s,
                                        lines, say)
            except KeyboardInterrupt as exc:
                interrupted = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
                say("interrupted" + (" by SIGTERM" if interrupted == "SIGTERM" else ""))
            answered_at_deadline = collector.count()
        finally:
            stop.set()
            if sim is not None:
                sim.join(5)
            daemon.stop(drain=True)
            elapsed = time.monotonic() - t0     # the drain's answers are counted: its time too
            if collector is not None:
                # what the drain published is still on its way to the subscriber
                collector.wait_for(daemon.stats.published, 2.0)
                collector.stop()
    # the counters after the drain: taken before it, the summary counted fewer bursts classified
    # than results had reached the subscriber
    status = daemon.status()
    c = status["counters"]
    summary = {"sent": sent[0], "elapsed_s": elapsed, "status": status,
               "results_received": len(collector.results) if collector else 0,
               "rejects_received": len(collector.rejects) if collector else 0,
               "interrupted": interrupted, "timed_out": timed_out,
               "unanswered_at_deadline": max(0, sent[0] - answered_at_deadline),
               "unanswered": max(0, sent[0] - c["classified"] - c["rejected_total"] - c["dropped_total"])}
    _print_summary(summary, say)
    if timed_out:
        say(f"timed out: {summary['unanswered_at_deadline']} of {sent[0]} bursts were unanswered {grace_s:g} s after "
            f"the last was due (the daemon does not keep up with {rate:g}/s here: try a lower --rate); after the drain "
            f"{summary['unanswered']} had no answer")
    return summary


def _follow(daemon: Any, collector: ResultCollector, count: int, deadline: float, lines: int, say: Any) -> bool:
    """Print the first `lines` results, then a rolling line each second, until `count` records
    arrived (True) or `deadline` (time.monotonic) passed (False)."""
    shown, last_roll = 0, time.monotonic()
    while time.monotonic() < deadline:
        done = collector.wait_for(count, 0.25)
        new = collector.results_between(shown, lines) if shown < lines else []
        for r in new:
            say(_line(r))
        shown += len(new)
        now = time.monotonic()
        if done:
            return True
        if shown >= lines and now - last_roll >= 1.0:
            last_roll = now
            s = daemon.status()
            acc = s["accuracy"]["overall"] * 100 if s.get("accuracy") else float("nan")
            say(f"  ... {s['counters']['classified']} classified, {s['throughput_bursts_per_s']:.0f}/s, "
                f"p99 total {s['latency_ms']['total']['p99']} ms, accuracy so far {acc:.1f}%")
    return collector.count() >= count


def _print_summary(s: dict[str, Any], say: Any) -> None:
    st = s["status"]
    c = st["counters"]
    why = lambda d: f" {dict(d)}" if d else ""  # noqa: E731
    say("")
    say(f"summary: sent {s['sent']}, classified {c['classified']}, rejected {c['rejected_total']}"
        f"{why(c['rejected'])}, dropped {c['dropped_total']}{why(c['dropped'])} in {s['elapsed_s']:.1f} s "
        f"({c['classified'] / max(s['elapsed_s'], 1e-9):.0f} bursts/s); {s['results_received']} results "
        f"reached the subscriber")
    for stage, p in st["latency_ms"].items():
        say(f"latency {stage:<6} p50 {p['p50'] or 0:6.1f} ms  p90 {p['p90'] or 0:6.1f} ms  p99 {p['p99'] or 0:6.1f} ms")
    acc = st.get("accuracy")
    if acc:
        eng = st["engine"]
        say(f"live accuracy {acc['overall'] * 100:.1f}% over {acc['n']} bursts ('unknown' counts as wrong; "
            f"best guess right {acc['best_guess'] * 100:.1f}%) (engine {eng['backend']} {eng['precision']}, "
            f"model {eng['model']})")
        say("  by SNR: " + ", ".join(f"{k} dB {v['accuracy'] * 100:.0f}% (n={v['n']})"
                                    for k, v in acc["per_snr_db"].items()))
        # a class whose bursts the open-set threshold calls unknown (NOISE: noise looks like any
        # signal at -20 dB) would read as a fault without its best guess beside it
        say("  by class, reported / best guess: " + ", ".join(
            f"{k} {_percents(v['accuracy'], v.get('best_guess', v['accuracy']))}" for k, v in acc["per_class"].items()))


def _percents(reported: float, best_guess: float) -> str:
    """'40/64%', or '64%' where the two round alike."""
    a, b = round(reported * 100), round(best_guess * 100)
    return f"{a}%" if a == b else f"{a}/{b}%"
