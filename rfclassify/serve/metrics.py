"""An optional Prometheus endpoint (`metrics.listen = "127.0.0.1:9108"`): GET /metrics, text format 0.0.4.

Standard library only (http.server in a thread). Names follow Triton's nv_inference_* spirit:
monotonic `_total` counters, a cumulative latency histogram per stage, gauges for queues.

    rfclassify_messages_received_total            wire messages read from the input socket
    rfclassify_bursts_received_total              bursts decoded from them
    rfclassify_bursts_classified_total
    rfclassify_results_published_total            records handed to the output socket
    rfclassify_rejects_total{reason}
    rfclassify_drops_total{stage}                 ingest | publish | shutdown | shutdown_unsent
    rfclassify_handshake_failures_total{socket,cause}   ZeroMQ handshakes failed on input | output
    rfclassify_class_total{label}
    rfclassify_latency_seconds{stage}             histogram, stage = queue | infer | total
    rfclassify_queue_depth{queue}                 gauge
    rfclassify_throughput_bursts_per_second       gauge (recent)
    rfclassify_live_accuracy{kind}                gauge, when bursts carry ground truth
    rfclassify_heartbeat_age_seconds              gauge
    rfclassify_health{state}                      1 for the current state, else 0
    rfclassify_info{version,backend,precision,device,model}   always 1
    rfclassify_jetson_temperature_celsius{zone}, rfclassify_jetson_power_milliwatts{rail},
    rfclassify_jetson_telemetry_age_seconds       gauge: how old the tegrastats line is
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rfclassify.serve.stats import LATENCY_BUCKETS_S

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# a connection is closed this many seconds after it opened, whatever it sent meanwhile: each
# open one holds a thread, and a box left for months must not collect them from a stuck scraper
# or one trickling a byte every few seconds (a per-read timeout never fired on that one)
CLIENT_TIMEOUT_S = 10.0
# connections served at once; more are closed on arrival (a Prometheus scrape is one at a time)
MAX_CONNECTIONS = 16
HEALTH_STATES = ("starting", "ok", "degraded", "failed")


def _esc(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**kv: Any) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in kv.items()) + "}" if kv else ""


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]

    def sample(self, name: str, value: float, **labels: Any) -> None:
        self.lines.append(f"{name}{_labels(**labels)} {float(value):.17g}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def render_metrics(status: dict[str, Any], histograms: dict[str, tuple[list[int], float, int]]) -> str:
    """The exposition text for a daemon status reply plus the stats' cumulative histograms."""
    w = _Writer()
    c = status.get("counters") or {}
    for name, key, help_text in (
            ("rfclassify_messages_received_total", "messages", "Wire messages read from the input socket."),
            ("rfclassify_bursts_received_total", "received", "Bursts decoded from input messages."),
            ("rfclassify_bursts_classified_total", "classified", "Bursts classified."),
            ("rfclassify_results_published_total", "published", "Records handed to the output socket.")):
        w.family(name, "counter", help_text)
        w.sample(name, c.get(key, 0))
    for name, key, label, help_text in (
            ("rfclassify_rejects_total", "rejected", "reason", "Messages or bursts rejected, by reason."),
            ("rfclassify_drops_total", "dropped", "stage", "Bursts or records dropped under load, by stage.")):
        w.family(name, "counter", help_text)
        for k, v in sorted((c.get(key) or {}).items()):
            w.sample(name, v, **{label: k})
    w.family("rfclassify_handshake_failures_total", "counter",
             "ZeroMQ handshakes that failed on the input or output socket, by cause (socket_type: likely a "
             "peer of a socket type ours cannot talk to; curve_*: CURVE; see docs/daemon.md).")
    for role in ("input", "output"):
        for cause, n in sorted(((status.get(role) or {}).get("handshakes") or {}).get("failed", {}).items()):
            w.sample("rfclassify_handshake_failures_total", n, socket=role, cause=cause)
    w.family("rfclassify_class_total", "counter", "Classified bursts by reported label.")
    for k, v in sorted((status.get("per_class") or {}).items()):
        w.sample("rfclassify_class_total", v, label=k)
    w.family("rfclassify_latency_seconds", "histogram", "Latency from arrival: queue (to inference start), "
             "infer (batch inference), total (arrival to result).")
    for stage, (counts, total_s, n) in histograms.items():
        cum = 0
        for le, cnt in zip(LATENCY_BUCKETS_S, counts, strict=False):
            cum += cnt
            w.sample("rfclassify_latency_seconds_bucket", cum, stage=stage, le=f"{le:g}")
        w.sample("rfclassify_latency_seconds_bucket", n, stage=stage, le="+Inf")
        w.sample("rfclassify_latency_seconds_sum", total_s, stage=stage)
        w.sample("rfclassify_latency_seconds_count", n, stage=stage)
    w.family("rfclassify_queue_depth", "gauge", "Items waiting in each queue (*_bytes: bytes; infer_bytes: "
             "the batcher's, infer queue's and running batch's).")
    for q, v in sorted((status.get("queues") or {}).items()):
        w.sample("rfclassify_queue_depth", v, queue=q)
    w.family("rfclassify_throughput_bursts_per_second", "gauge", "Recent classification rate.")
    w.sample("rfclassify_throughput_bursts_per_second", status.get("throughput_bursts_per_s") or 0)
    acc = status.get("accuracy")
    if acc:
        w.family("rfclassify_live_accuracy", "gauge", "Fraction correct among bursts carrying ground truth "
                 "(kind=label: the reported label, unknown counts as wrong; kind=best_guess: top-1).")
        w.sample("rfclassify_live_accuracy", acc["overall"], kind="label")
        w.sample("rfclassify_live_accuracy", acc["best_guess"], kind="best_guess")
    if status.get("heartbeat_age_s") is not None:
        w.family("rfclassify_heartbeat_age_seconds", "gauge", "Age of the inference loop's heartbeat.")
        w.sample("rfclassify_heartbeat_age_seconds", status["heartbeat_age_s"])
    w.family("rfclassify_health", "gauge", "1 for the current health state.")
    for state in HEALTH_STATES:
        w.sample("rfclassify_health", 1 if status.get("health") == state else 0, state=state)
    eng = status.get("engine") or {}
    w.family("rfclassify_info", "gauge", "Version and engine of the running daemon.")
    w.sample("rfclassify_info", 1, version=status.get("version", ""), backend=eng.get("backend", ""),
             precision=eng.get("precision", ""), device=eng.get("device", ""), model=eng.get("model", ""))
    cap = status.get("capture")
    if cap:
        w.family("rfclassify_capture_bursts_total", "counter",
                 "Bursts [capture] was asked to keep: kept (written), skipped (writer behind, or too large), "
                 "failed (the write failed), deleted (the oldest, beyond max_bytes).")
        for outcome in ("kept", "skipped", "failed", "deleted"):
            w.sample("rfclassify_capture_bursts_total", cap.get(outcome, 0), outcome=outcome)
        w.family("rfclassify_capture_bytes", "gauge", "Bytes of the kept recordings in the capture folder.")
        w.sample("rfclassify_capture_bytes", cap.get("bytes", 0))
    jet = status.get("jetson") or {}
    if jet.get("age_s") is not None:
        w.family("rfclassify_jetson_telemetry_age_seconds", "gauge",
                 "Seconds since tegrastats printed its latest line (it is started again when it exits).")
        w.sample("rfclassify_jetson_telemetry_age_seconds", jet["age_s"])
    if jet.get("temps_c"):
        w.family("rfclassify_jetson_temperature_celsius", "gauge", "tegrastats temperatures.")
        for zone, t in sorted(jet["temps_c"].items()):
            w.sample("rfclassify_jetson_temperature_celsius", t, zone=zone)
    if jet.get("power_mw"):
        w.family("rfclassify_jetson_power_milliwatts", "gauge", "tegrastats power rails (current).")
        for rail, p in sorted(jet["power_mw"].items()):
            w.sample("rfclassify_jetson_power_milliwatts", p["cur_mw"], rail=rail)
    return w.text()


def _hang_up(connection: socket.socket) -> None:
    """Ends a connection past its deadline: the handler's blocked read or write returns (EOF or
    an error the server logs at debug) and its thread finishes."""
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass                                    # already closed by the handler


class _MetricsHTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer whose failed requests are log lines, not tracebacks on stderr: a
    scraper that goes away mid-reply (a Prometheus timeout, a port scan) printed socketserver's
    traceback block into the daemon's journal each time (14 of 20 such connections, fifty-eighth
    session)."""

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            log.debug("metrics: %d connections open, closing the one from %s", MAX_CONNECTIONS, client_address[0])
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()               # no thread started: give its slot back here
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        deadline = threading.Timer(CLIENT_TIMEOUT_S, _hang_up, (request,))
        deadline.daemon = True
        deadline.start()
        try:
            super().process_request_thread(request, client_address)
        finally:
            deadline.cancel()
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):   # the client's doing, not ours
            log.debug("metrics: %s from %s: %s", type(exc).__name__, client_address[0], exc)
        else:
            log.warning("metrics: a request from %s failed", client_address[0], exc_info=True)


class _MetricsHTTPServer6(_MetricsHTTPServer):
    """The same on an IPv6 address (`[::1]:9108`): http.server binds IPv4 only."""

    address_family = socket.AF_INET6


class MetricsServer:
    """GET /metrics on host:port, served by a thread; `daemon` provides status() and stats."""

    def __init__(self, listen: str, daemon: Any) -> None:
        host, _, port = listen.rpartition(":")
        daemon_ref = daemon

        class Handler(BaseHTTPRequestHandler):
            timeout = CLIENT_TIMEOUT_S

            def do_GET(self) -> None:  # noqa: N802 - http.server hook
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "only /metrics is served here")
                    return
                body = render_metrics(daemon_ref.status(), daemon_ref.stats.histograms()).encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("metrics: " + fmt, *args)

        host = host.strip("[]")
        ipv6 = ":" in host     # an IPv6 literal ([::1]:9108 was "Address family ... not supported")
        try:
            self.server = (_MetricsHTTPServer6 if ipv6 else _MetricsHTTPServer)((host, int(port)), Handler)
        except OSError as exc:
            from rfclassify._exceptions import ConfigError

            raise ConfigError(f"metrics.listen {listen}: {exc.strerror or exc}") from None
        bound, bound_port = self.server.server_address[:2]
        self.address = f"[{bound}]:{bound_port}" if ipv6 else f"{bound}:{bound_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("Prometheus metrics on http://%s/metrics", self.address)

    def stop(self) -> None:
        if self._thread.ident is not None:
            # shutdown() waits for serve_forever to notice: called before that thread ran, it
            # waited for ever
            self.server.shutdown()
            self._thread.join(2)
        self.server.server_close()
