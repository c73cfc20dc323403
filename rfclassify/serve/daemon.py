"""The daemon: wires config, engine, pipeline, control socket, metrics and systemd together.

Start-up order: control socket (health `starting`), engine load + warm-up, pipeline threads
(input and output sockets), then READY=1. SIGTERM/SIGINT: STOPPING=1, stop ingest, drain what
is queued within shutdown.drain_timeout_s, exit. SIGHUP: reload the config file and apply what
can change safely (config.RELOADABLE) and, with CURVE, the admitted clients' keys; everything
else (a changed key file of the daemon's own too) is logged as needing a restart.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import zmq

from rfclassify import __version__
from rfclassify._exceptions import Cancelled, ConfigError
from rfclassify.serve.config import (DaemonConfig, apply_overrides, load_config, reloadable_changes, security_errors,
                                     security_notes)
from rfclassify.serve.control import ControlServer
from rfclassify.serve.heap_trim import HeapTrim, malloc_trim
from rfclassify.serve.pipeline import EngineAdapter, Pipeline
from rfclassify.serve.sdnotify import Notifier
from rfclassify.serve.stats import DaemonStats
from rfclassify.serve.tegrastats import TegraStats

log = logging.getLogger(__name__)

STATUS_LINE_EVERY_S = 5.0
def load_engine(config: DaemonConfig, cancel: threading.Event | None = None) -> EngineAdapter:
    """Load (and warm) the classifier the [model] section asks for; `cancel` set stops the
    TensorRT engine builds between engines (Classifier.load)."""
    from rfclassify.engine.classifier import Classifier

    m = config.model
    max_batch = max([config.batching.max_batch] + [b.max_batch for b in config.batching.buckets.values()])
    clf = Classifier.load(m.dir or None, backend=m.backend, precision=m.precision, device=m.device or None,
                          max_batch_size=max(max_batch, 1024), warmup=False, threads=m.threads or None,
                          dla_core=m.dla_core if m.dla_core >= 0 else None, engine_cache=m.engine_cache or None,
                          refiner=m.refiner, refiner_workers=m.refiner_workers, refiner_sequence=m.refiner_sequence,
                          refiner_rate_rule=m.refiner_rate_rule or None,
                          refiner_em_classes=m.refiner_em_classes or None, dc_pass=m.dc_pass,
                          low_order_refiner=m.low_order_refiner,
                          refiner_skip_above=m.refiner_skip_above if m.refiner_skip_above >= 0 else None,
                          cancel=cancel)
    for warning in config.batching.unused_overrides(clf.meta.buckets_samples):
        log.warning("%s", warning)
    if m.warmup:
        # every bucket at batch 1 and a typical batch: first calls pay allocation, not traffic
        clf.backend_impl.warmup(batch_sizes=tuple(sorted({1, min(max_batch, 64)})))
        clf.prepare_dc_pass()
    return EngineAdapter(clf, m.unknown_threshold)


def socket_security(config: DaemonConfig) -> Any:
    """security.DaemonSecurity (applies CURVE by socket role) when any socket uses CURVE, else None;
    ConfigError for settings that cannot work (config.security_errors: the merged config, where
    a command-line option may have made one) or a key file that is missing or damaged."""
    errors = security_errors(config)
    if errors:
        raise ConfigError("\n".join(errors))
    s = config.security
    if not (s.curve_input or s.curve_output or s.curve_control):
        return None
    from rfclassify.serve import security

    return security.daemon_socket_security(s)


def _gpu_present() -> bool:
    return any(Path(p).exists() for p in ("/dev/nvidia0", "/dev/nvhost-ctrl-gpu", "/dev/nvgpu"))


class StoppedWhileStarting(Cancelled):
    """start() left off because SIGTERM/SIGINT (request_stop) came while it ran: raised at its
    next step (and by the TensorRT backend before its next engine build, as Cancelled), so the
    daemon stops without READY=1 instead of running its start (minutes of engine builds on a
    first start) to the end while systemd waits out its stop timeout. Raised at safe points
    only: a signal handler that raised it anywhere left threads unjoinable, a metrics server
    whose shutdown waited for ever, and half-spawned refiner workers (the first version of
    the sixty-seventh session)."""


class Daemon:
    """A running rfclassify service. `start()`, then `stop()`; `serve_forever()` for the CLI."""

    def __init__(self, config: DaemonConfig, *, config_path: str | None = None,
                 overrides: dict[str, Any] | None = None, engine: EngineAdapter | None = None,
                 notifier: Notifier | None = None) -> None:
        self.config = config
        self.config_path = config_path
        self.overrides = dict(overrides or {})
        self._security = socket_security(config)   # first: a key it refuses leaves nothing to close
        self.stats = DaemonStats()
        self.notifier = notifier or Notifier()
        self.context = zmq.Context()
        self.engine = engine
        self._owns_engine = False           # loaded by start(), so closed by stop()
        self.pipeline: Pipeline | None = None
        self.capture: Any = None             # serve.capture.BurstCapture when [capture] dir is set
        self.control: ControlServer | None = None
        self.metrics: Any = None
        self.tegra = TegraStats()
        self.state = "starting"
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._stopped = False
        self.stop_signal = "a stop request"     # or the signal's name (SIGTERM, SIGINT)
        self.heap_trim: HeapTrim | None = None  # made once serving (its RSS baseline then)

    # -- life cycle ------------------------------------------------------------------------
    def start(self) -> None:
        cfg = self.config
        logging.getLogger().setLevel(cfg.logging.level.upper())
        security_line, security_warnings = security_notes(cfg)
        log.info("security: %s", security_line)
        for warning in security_warnings:
            log.warning("%s", warning)
        try:
            self.control = ControlServer(self.context, cfg.control.endpoint, self.handle_request,
                                         self._security if cfg.security.curve_control else None)
            self.control.start()
            log.info("control socket on %s", self.control.endpoint)
            if cfg.health.tegrastats:
                self.tegra.start()
            if self.engine is None:
                self._stop_asked()
                self.notifier.status("loading the model")
                self.engine = load_engine(cfg, cancel=self._stop)
                self._owns_engine = True
            self._stop_asked()      # after it the pipeline starts: a stop then drains as usual
            e = self.engine
            log.info("engine: %s %s on %s, model %s", e.backend, e.precision, e.device, e.model_id)
            if cfg.capture.dir:
                from rfclassify.serve.capture import BurstCapture

                self.capture = BurstCapture(cfg.capture, e.model_id)
                log.info("capture: bursts labelled %s kept in %s (at most %d bytes)", cfg.capture.labels,
                         cfg.capture.dir, cfg.capture.max_bytes)
            self.pipeline = Pipeline(cfg, e, self.stats, self.context, self._security, self.capture)
            self.pipeline.start()
            if cfg.metrics.listen:
                from rfclassify.serve.metrics import MetricsServer

                self.metrics = MetricsServer(cfg.metrics.listen, self)
                self.metrics.start()
        except BaseException:
            self.state = "failed"
            self.stop(drain=False)
            raise
        self.state = "running"
        log.info("serving: input %s (%s %s, %s) -> output %s", self.pipeline.input_endpoint,
                 cfg.input.mode, "bind" if cfg.input.bind else "connect", cfg.input.format,
                 self.pipeline.output_endpoint)
        self.notifier.ready(self.status_line())
        if self.notifier.watchdog_interval_s:
            threading.Thread(target=self._watchdog_loop, name="watchdog", daemon=True).start()

    def stop(self, drain: bool = True) -> bool:
        """Stop everything; with drain, publish what is in flight first. True if clean."""
        if self._stopped:
            return True
        self._stopped = True
        self.state = "stopping"
        self.notifier.stopping("draining" if drain else "stopping")
        clean = True
        if self.pipeline is not None:
            clean = self.pipeline.stop(drain=drain, timeout_s=self.config.shutdown.drain_timeout_s)
        if self.capture is not None:
            self.capture.close()   # after the pipeline (its drained bursts are offered too); <= 2 s
        if self._owns_engine and self.engine is not None and clean:
            self.engine.classifier.close()  # its refiner's worker processes too
        if self.metrics is not None:
            self.metrics.stop()
        if self.control is not None:
            self.control.stop()
        self.tegra.stop()
        if self._security is not None:  # CURVE's ZAP authenticator holds sockets in our context
            self._security.close()
        if clean:
            self.context.term()
        self.notifier.close()
        self.state = "stopped"
        self._stop.set()
        return clean

    def request_stop(self) -> None:
        self._stop.set()

    def _on_stop_signal(self, signum: int, _frame: Any) -> None:
        self.stop_signal = signal.Signals(signum).name
        self.request_stop()

    def _stop_asked(self) -> None:
        """StoppedWhileStarting if a stop was asked for while start() runs (its safe points)."""
        if self._stop.is_set():
            raise StoppedWhileStarting(f"{self.stop_signal} while starting")

    def request_reload(self) -> None:
        self._reload.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT -> drain and stop (while starting: abandon the start, see
        StoppedWhileStarting), SIGHUP -> reload (main thread only)."""
        signal.signal(signal.SIGTERM, self._on_stop_signal)
        signal.signal(signal.SIGINT, self._on_stop_signal)
        signal.signal(signal.SIGHUP, lambda *_: self.request_reload())

    def serve_forever(self) -> int:
        """Block until SIGTERM/SIGINT, handling reloads and STATUS= updates; returns the exit code."""
        last_status = 0.0
        self.heap_trim = HeapTrim(malloc_trim())
        while not self._stop.wait(0.2):
            if self._reload.is_set():
                self._reload.clear()
                self.reload()
            if self.pipeline is not None and self.pipeline.failed_threads():
                log.error("pipeline thread(s) failed: %s", ", ".join(self.pipeline.failed_threads()))
                self.stop(drain=False)
                return 1
            if self.pipeline is not None:
                self.heap_trim.poll(self.pipeline.held_bytes(), self.pipeline.take_peak_bytes())
            now = time.monotonic()
            if now - last_status >= STATUS_LINE_EVERY_S:
                last_status = now
                self.notifier.status(self.status_line())
        log.info("shutting down: draining for at most %.1f s", self.config.shutdown.drain_timeout_s)
        return 0 if self.stop(drain=True) else 1

    # -- reload ----------------------------------------------------------------------------
    def reload(self) -> list[str]:
        """Re-read the config file; apply the reloadable keys; return the names applied. With
        CURVE, the admitted clients' keys are read again too, and a changed key file of the
        daemon's own is reported as needing a restart (security.DaemonSecurity.reload)."""
        keys_applied, keys_restart = self._security.reload() if self._security is not None else ([], [])
        if not self.config_path:
            log.warning("SIGHUP: no config file to reload (started without --config)")
            return self._log_reload([], [], keys_applied, keys_restart, only_if_any=True)
        try:
            new = apply_overrides(load_config(self.config_path), self.overrides)
        except ConfigError as exc:
            log.error("SIGHUP: config not reloaded, it has errors:\n%s", exc)
            return self._log_reload([], [], keys_applied, keys_restart, only_if_any=True)
        except Exception:  # noqa: BLE001 - a bad edit must not stop a running daemon
            log.exception("SIGHUP: config not reloaded, reading it failed")
            return self._log_reload([], [], keys_applied, keys_restart, only_if_any=True)
        applied, restart = reloadable_changes(self.config, new)
        merged = self.config
        for key in applied:
            section, name = key.split(".")
            merged = replace(merged, **{section: replace(getattr(merged, section), **{name: getattr(getattr(new, section), name)})})
        self.config = merged
        logging.getLogger().setLevel(merged.logging.level.upper())
        if self.pipeline is not None:
            self.pipeline.reconfigure(merged)
        if self.engine is not None:
            self.engine.set_unknown_threshold(merged.model.unknown_threshold)
        return self._log_reload(applied, restart, keys_applied, keys_restart)

    @staticmethod
    def _log_reload(applied: list[str], restart: list[str], keys_applied: list[str], keys_restart: list[str],
                    only_if_any: bool = False) -> list[str]:
        """The reload's one log line (config keys, then the CURVE keys' phrases); `applied`."""
        done, todo = applied + keys_applied, restart + [k for k in keys_restart if k.split(" ")[0] not in restart]
        if done or todo or not only_if_any:
            log.warning("SIGHUP: reloaded %s; %s", ", ".join(done) or "nothing (no reloadable key changed)",
                        ("NOT reloaded (restart needed): " + ", ".join(todo)) if todo else "no other changes")
        return applied

    # -- health and status -----------------------------------------------------------------
    def heartbeat_age_s(self) -> float | None:
        if self.pipeline is None or self.state != "running":
            return None
        return time.monotonic() - self.pipeline.heartbeat_s

    def health(self) -> tuple[str, list[str]]:
        """(starting | ok | degraded | failed, reasons)."""
        if self.state in ("starting",):
            return "starting", ["loading the model"]
        if self.state in ("failed", "stopped") or self.pipeline is None:
            return "failed", [f"daemon is {self.state}"]
        reasons: list[str] = []
        failed = self.pipeline.failed_threads()
        if failed:
            return "failed", [f"thread(s) died: {', '.join(failed)}"]
        age = self.heartbeat_age_s() or 0.0
        if age > self.config.health.heartbeat_stale_s:
            return "failed", [f"inference heartbeat is {age:.1f} s old (hung backend?)"]
        e = self.engine
        assert e is not None
        if self.config.model.precision not in ("auto", e.precision):
            reasons.append(f"precision fallback: asked {self.config.model.precision}, running {e.precision}")
        if e.device == "cpu" and _gpu_present():
            reasons.append(f"backend fallback: running {e.backend} on the CPU although a GPU is present")
        drops = self.stats.recent_drops(self.config.health.drop_window_s)
        if drops:
            reasons.append(f"{drops} drop(s) in the last {self.config.health.drop_window_s:g} s")
        reasons += self._recent_errors()
        now = time.monotonic()
        for counts in self.pipeline.handshakes.values():
            reason = counts.health_reason(now, self.config.health.error_window_s)
            if reason:
                reasons.append(reason)
        clf = getattr(e, "classifier", None)
        breaks = getattr(clf, "refiner_pool_breaks", 0)
        if breaks and not clf.refiner_workers:
            reasons.append(f"refiner worker pool broke ({breaks} so far): its statistics run in the inference "
                           "thread until a new pool starts")
        if self.state == "stopping":
            reasons.append("shutting down")
        return ("degraded" if reasons else "ok"), reasons

    def _recent_errors(self) -> list[str]:
        """A reason for each kind of pipeline error seen within health.error_window_s: a box up
        for months showed `degraded` for good after one (until the sixty-seventh session)."""
        p = self.pipeline
        assert p is not None
        now, window = time.monotonic(), self.config.health.error_window_s
        reasons = []
        for kind, count, what in (
                ("inference", p.inference_errors, "failed inference batch(es)"),
                ("refiner", p.refiner_errors, "batch(es) the refiner failed on (network alone)"),
                ("decoder", p.decoder_errors, "message(s) the decoder failed on (rejected; see the log)"),
                ("encoder", p.encoder_errors, "record(s) the output encoder failed on (sent as internal_error; "
                                              "see the log)")):
            last = p.last_error_s.get(kind)
            if last is not None and now - last <= window:
                reasons.append(f"{count} {what} since start, the last {now - last:.0f} s ago")
        return reasons

    def status(self) -> dict[str, Any]:
        """The reply to a `status` request (see docs/daemon.md for every field)."""
        health, reasons = self.health()
        snap = self.stats.snapshot()
        e = self.engine
        clf = e.classifier if e is not None else None
        engine = None
        if e is not None:
            engine = {**clf.describe(), "dla_core": getattr(clf.backend_impl, "dla_core", None),
                      "unknown_threshold": e.unknown_threshold}
        cfg = self.config
        p = self.pipeline
        return {
            "health": health,
            "health_reasons": reasons,
            "version": __version__,
            "pid": os.getpid(),
            "uptime_s": round(time.monotonic() - self.stats.started_monotonic, 1),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.stats.started_wall)),
            "engine": engine,
            "input": {"endpoint": p.input_endpoint if p else cfg.input.endpoint, "mode": cfg.input.mode,
                      "bind": cfg.input.bind, "format": cfg.input.format, "cut_mode": cfg.input.cut_mode,
                      "curve": self._curve("input"), "handshakes": self._handshakes("input")},
            "output": {"endpoint": p.output_endpoint if p else cfg.output.endpoint, "format": cfg.output.format,
                       "sndhwm": cfg.output.sndhwm, "max_record_bytes": cfg.output.max_record_bytes,
                       "records_cut": p.records_cut if p else 0, "curve": self._curve("output"),
                       "handshakes": self._handshakes("output")},
            "control": {"endpoint": self.control.endpoint if self.control else cfg.control.endpoint,
                        "curve": self._curve("control")},
            "overload_policy": cfg.queues.overload,
            "heartbeat_age_s": None if (a := self.heartbeat_age_s()) is None else round(a, 3),
            **snap,
            "queues": p.queue_depths() if p else {},
            "decoder": p.decoder_stats() if p else {},
            "jetson": self.tegra.snapshot(),
            "capture": self.capture.snapshot() if self.capture is not None else None,
        }

    def _curve(self, role: str) -> dict[str, Any] | None:
        """The status's `curve` of the socket of role: None where it runs in clear, else
        security.DaemonSecurity.socket_status (its admitted keys counted now, after any SIGHUP).
        Until the seventy-first session only the start's log line said which sockets use CURVE."""
        on = getattr(self.config.security, f"curve_{role}")
        return self._security.socket_status(role) if on and self._security is not None else None

    def _handshakes(self, role: str) -> dict[str, Any] | None:
        """The status's `handshakes` of the input or output socket (handshakes.HandshakeCounts):
        how many succeeded, how many failed by cause, the last failure's cause and age; None
        before the pipeline exists. Since the seventy-first session: a peer of a socket type
        ours cannot talk to (a GNU Radio push_sink to the daemon's SUB) failed without a word."""
        p = self.pipeline
        return p.handshakes[role].snapshot(time.monotonic()) if p is not None else None

    def status_line(self) -> str:
        """One line for systemd's STATUS=."""
        health, reasons = self.health()
        s = self.stats
        line = (f"{health}: {s.classified} classified, {sum(s.rejected.values())} rejected, "
                f"{sum(s.dropped.values())} dropped, {s.throughput():.1f} bursts/s")
        return line + (f" ({reasons[0]})" if reasons and health != "ok" else "")

    def handle_request(self, request: dict[str, Any]) -> dict[str, Any]:
        cmd = request.get("command", "status")
        if cmd == "status":
            return self.status()
        if cmd == "ping":
            return {"pong": True, "pid": os.getpid()}
        return {"error": f"unknown command {cmd!r}; known: status, ping"}

    # -- systemd watchdog ------------------------------------------------------------------
    def pipeline_healthy(self) -> bool:
        """The watchdog condition: threads alive and the inference heartbeat fresh."""
        if self.pipeline is None or self.pipeline.failed_threads():
            return False
        age = self.heartbeat_age_s()
        return age is not None and age <= self.config.health.heartbeat_stale_s

    def _watchdog_loop(self) -> None:
        interval = self.notifier.watchdog_interval_s or 1.0
        while not self._stop.wait(interval):
            if self.pipeline_healthy():
                self.notifier.watchdog()
            else:
                log.error("watchdog: pipeline unhealthy (heartbeat %s s old); not pinging systemd",
                          self.heartbeat_age_s())
