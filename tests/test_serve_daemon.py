"""The daemon end to end, in this process: real ZeroMQ sockets on 127.0.0.1, real ONNX Runtime.

One daemon (module-scoped) serves every test here; each test uses its own burst ids and
compares counters before and after, so the tests do not depend on each other's order.
"""

from __future__ import annotations

import collections
import json
import math
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

from rfclassify.dsp.synth import synthesize
from rfclassify.labels import LABELS
from rfclassify.serve.control import request
from rfclassify.serve.daemon import Daemon
from rfclassify.serve.demo import ResultCollector, local_config
from rfclassify.serve.native import encode_native

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def daemon(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    ctl = tmp_path_factory.mktemp("ctl")
    d = Daemon(local_config(ctl, model_dir=str(tiny_model_dir), backend="onnxruntime"))
    d.start()
    try:
        yield d
    finally:
        d.stop(drain=False)


@pytest.fixture(scope="module")
def sender(daemon: Daemon):
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(daemon.pipeline.input_endpoint)
    yield sock
    sock.close()


@pytest.fixture()
def collector(daemon: Daemon):
    c = ResultCollector(daemon.pipeline.output_endpoint).start()
    yield c
    c.stop()


def _bursts(n: int, seed: int, length: int = 1024):
    rng = np.random.default_rng(seed)
    labels = [LABELS[i] for i in rng.integers(0, len(LABELS), n)]
    snr = rng.uniform(0, 20, n)
    return synthesize(labels, length, rng, snr_db=snr), labels, snr


def _header(burst_id, label=None, snr=None, **kw):
    h = {"sample_rate": 1e6, "burst_id": burst_id, "stream": "test", "center_freq": 433.92e6,
         "time": 1234.5, "meta": {"k": [1, "x"]}}
    if label is not None:
        h.update(label=label, snr_db=float(snr))
    h.update(kw)
    return h


def _status(daemon: Daemon) -> dict:
    return request(daemon.control.endpoint, "status", timeout_s=5)


def test_every_burst_answered_with_the_contract_fields(daemon, sender, collector):
    batch, labels, snr = _bursts(40, seed=1)
    ids = [f"ok-{i}" for i in range(40)]
    for i in range(40):
        sender.send_multipart(encode_native(batch.iq[i], _header(ids[i], labels[i], snr[i])))
    assert collector.wait_for(40, 30), f"only {collector.count()} of 40 answered"
    by_id = {r["burst_id"]: r for r in collector.results}
    assert sorted(by_id) == sorted(ids)
    r = by_id["ok-3"]
    assert set(r) == {"burst_id", "stream", "label", "confidence", "top", "snr_db", "n_samples", "bucket",
                      "windows", "backend", "precision", "model", "latency_ms", "center_freq", "time",
                      "meta", "truth"}
    assert r["truth"] == {"label": labels[3], "snr_db": pytest.approx(float(snr[3]))}
    assert r["stream"] == "test" and r["center_freq"] == 433.92e6 and r["time"] == 1234.5
    assert r["meta"] == {"k": [1, "x"]}
    assert r["n_samples"] == 1024 and r["bucket"] == 1024 and r["windows"] == 1
    assert r["backend"] == "onnxruntime" and r["model"] == "tiny-random" and r["precision"] == "fp32"
    assert r["label"] in LABELS or r["label"] == "unknown"
    assert [t["label"] for t in r["top"]][0] == (r["label"] if r["label"] != "unknown" else r["top"][0]["label"])
    assert r["confidence"] == pytest.approx(r["top"][0]["p"])
    lat = r["latency_ms"]
    assert 0 <= lat["queue"] <= lat["total"] and 0 < lat["infer"] <= lat["total"]
    assert collector.rejects == []


def test_lengths_pick_buckets_and_windows(daemon, sender, collector):
    rng = np.random.default_rng(2)
    lengths = {"len-100": 100, "len-300": 300, "len-5000": 5000}
    for bid, n in lengths.items():
        iq = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
        sender.send_multipart(encode_native(iq, _header(bid)))
    assert collector.wait_for(3, 20)
    by_id = {r["burst_id"]: r for r in collector.results}
    assert (by_id["len-100"]["bucket"], by_id["len-100"]["windows"]) == (128, 1)
    assert (by_id["len-300"]["bucket"], by_id["len-300"]["windows"]) == (256, 2)
    assert by_id["len-5000"]["bucket"] == 4096 and by_id["len-5000"]["windows"] == 2
    assert by_id["len-5000"]["truth"] is None


def test_bad_input_is_rejected_counted_and_valid_bursts_still_classified(daemon, sender, collector):
    before = _status(daemon)["counters"]
    good = _bursts(6, seed=3)[0].iq
    ok = lambda i: encode_native(good[i], _header(f"good-{i}"))  # noqa: E731
    nan_iq = good[0].copy()
    nan_iq[5] = complex(math.nan, 0)
    inf_iq = good[1].copy()
    inf_iq[7] = complex(0, math.inf)
    hdr = lambda bid, **kw: json.dumps(_header(bid, **kw)).encode()  # noqa: E731
    bad = {
        "random bytes": ([np.random.default_rng(0).bytes(300)], "bad_frames"),
        "truncated frame": ([hdr("trunc"), good[0].tobytes()[:-3]], "bad_payload_size"),
        "invalid json": ([b"{not json", good[0].tobytes()], "bad_json"),
        "unknown dtype": ([hdr("dt", dtype="cf64_be"), good[0].tobytes()], "unknown_dtype"),
        "odd payload": ([hdr("odd", dtype="ci16_le"), b"\x00" * 6], "bad_payload_size"),
        "nan samples": (encode_native(nan_iq, _header("nan")), "non_finite"),
        "inf samples": (encode_native(inf_iq, _header("inf")), "non_finite"),
        "zero samples": (encode_native(np.zeros(512, np.complex64), _header("zero")), "zero_power"),
        "too short": (encode_native(good[0][:10], _header("short")), "too_short"),
        "100 MB payload": ([hdr("huge"), bytes(100 * 1024 * 1024)], "too_large"),
        "four frames": ([b"t", hdr("four"), good[0].tobytes(), b"x"], "bad_frames"),
        "one frame": ([hdr("one")], "bad_frames"),
        # a JSON integer past float range: it once raised out of the decoder and ended ingest
        "huge integer": ([hdr("bigint", sample_rate=10 ** 400), good[0].tobytes()], "bad_header"),
    }
    for i, (frames, _) in enumerate(bad.values()):
        sender.send_multipart(ok(i % 6))
        sender.send_multipart(frames)
    n_total = len(bad) * 2
    assert collector.wait_for(n_total, 60), f"{collector.count()} of {n_total} answered"
    reasons = sorted(r["reason"] for r in collector.rejects)
    assert reasons == sorted(reason for _, reason in bad.values())
    assert all(r["detail"] for r in collector.rejects)
    by_id = {r["burst_id"]: r for r in collector.rejects if r["burst_id"] is not None}
    assert by_id["nan"]["reason"] == "non_finite" and by_id["zero"]["reason"] == "zero_power"
    assert len(collector.results) == len(bad)
    assert {r["burst_id"] for r in collector.results} == {f"good-{i}" for i in range(6)}
    after = _status(daemon)
    assert after["health"] in ("ok", "degraded")
    for reason in set(reasons):
        got = after["counters"]["rejected"].get(reason, 0) - before["rejected"].get(reason, 0)
        assert got == reasons.count(reason), reason
    assert after["counters"]["classified"] - before["classified"] == len(bad)


def test_a_header_meta_json_cannot_hold_is_echoed_as_strict_json(daemon, sender, collector):
    """Python's parser takes NaN and Infinity in a header, which are not JSON: the echoed meta
    holds their names (as PDU metadata does), so a strict consumer can read every record."""
    import zmq

    raw = zmq.Context.instance().socket(zmq.SUB)
    raw.setsockopt(zmq.SUBSCRIBE, b"result")
    raw.setsockopt(zmq.RCVTIMEO, 30000)
    raw.connect(daemon.pipeline.output_endpoint)
    time.sleep(1.0)                 # the subscription reaches the PUB socket (slow joiner)
    try:
        iq = _bursts(1, seed=4)[0].iq[0]
        sender.send_multipart(encode_native(iq, _header("nan-meta", meta={"x": math.nan, "y": [math.inf, -math.inf]})))
        assert collector.wait_for(1, 30)
        text = raw.recv_multipart()[1]
    finally:
        raw.close(0)

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    assert json.loads(text, parse_constant=refuse)["meta"] == {"x": "nan", "y": ["inf", "-inf"]}
    assert collector.results[0]["meta"] == {"x": "nan", "y": ["inf", "-inf"]}


def test_a_decoder_that_raises_costs_its_message_not_the_daemon(tiny_model_dir, tmp_path, monkeypatch, serving):
    """Decoders reject bad input themselves; if one raises anyway (a bug some input found),
    that message is rejected as internal_error and counted, the health says so for
    health.error_window_s (for good before the sixty-seventh session), and the messages after it
    are classified: the ingest thread does not die with it."""
    from dataclasses import replace

    from rfclassify.serve.config import HealthConfig
    from rfclassify.serve.native import NativeDecoder

    real = NativeDecoder.decode

    def fragile(self, frames, received_s):
        if bytes(frames[0]).startswith(b'{"boom"'):
            raise RuntimeError("a decoder bug")
        return real(self, frames, received_s)
    monkeypatch.setattr(NativeDecoder, "decode", fragile)
    iq = _bursts(2, seed=5)[0].iq
    cfg = replace(local_config(tmp_path, model_dir=str(tiny_model_dir), backend="onnxruntime"),
                  health=HealthConfig(error_window_s=15.0))    # long enough for a loaded machine's results
    with serving(cfg) as (d, push, c):
        push.send_multipart(encode_native(iq[0], _header("before")))
        push.send_multipart([b'{"boom": 1}', iq[0].tobytes()])
        push.send_multipart(encode_native(iq[1], _header("after")))
        assert c.wait_for(3, 30), f"{c.count()} of 3"
        st = d.status()
        assert st["health"] == "degraded" and not d.pipeline.failed_threads()
        assert any(r.startswith("1 message(s) the decoder failed on (rejected; see the log) since start, the last ")
                   for r in st["health_reasons"]), st["health_reasons"]
        assert st["counters"]["rejected"] == {"internal_error": 1}
        deadline = time.monotonic() + 45
        while d.health()[0] != "ok" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert d.health() == ("ok", []), "the error still degrades the health past its window"
        assert d.status()["counters"]["rejected"] == {"internal_error": 1}     # the count stays
        c.stop()
    assert sorted(r["burst_id"] for r in c.results) == ["after", "before"]
    assert [r["reason"] for r in c.rejects] == ["internal_error"]
    assert "RuntimeError: a decoder bug" in c.rejects[0]["detail"]


def test_a_record_the_encoder_fails_on_goes_out_as_a_reject_and_the_daemon_goes_on(tiny_model_dir, tmp_path,
                                                                                   monkeypatch, serving):
    """If encoding a record raises (a 400-digit burst_id did in gr-pmt output before the
    sixty-sixth session, and ended the inference thread), an internal_error reject goes out in
    its place, counted, the health says so, and the bursts after it are answered."""
    from rfclassify.serve import pipeline as pipeline_module

    real = pipeline_module.encode

    def fragile(topic, record):
        if record.get("burst_id") == "boom":
            raise RuntimeError("an encoder bug")
        return real(topic, record)
    monkeypatch.setattr(pipeline_module, "encode", fragile)
    iq = _bursts(3, seed=5)[0].iq
    with serving(local_config(tmp_path, model_dir=str(tiny_model_dir), backend="onnxruntime")) as (d, push, c):
        for i, name in enumerate(("before", "boom", "after")):
            push.send_multipart(encode_native(iq[i], _header(name)))
        assert c.wait_for(3, 30), f"{c.count()} of 3"
        st = d.status()
        assert st["health"] == "degraded" and not d.pipeline.failed_threads()
        assert any(r.startswith("1 record(s) the output encoder failed on (sent as internal_error; see the log) "
                                "since start") for r in st["health_reasons"]), st["health_reasons"]
        c.stop()
    assert sorted(r["burst_id"] for r in c.results) == ["after", "before"]
    assert [(r["reason"], r["burst_id"]) for r in c.rejects] == [("internal_error", None)]
    assert "could not encode its result record: RuntimeError" in c.rejects[0]["detail"]


def test_status_reply_has_every_documented_field(daemon):
    st = _status(daemon)
    for key in ("health", "health_reasons", "version", "pid", "uptime_s", "engine", "input", "output",
                "control", "counters", "queues", "latency_ms", "throughput_bursts_per_s", "per_class",
                "accuracy", "heartbeat_age_s", "jetson", "overload_policy", "capture"):
        assert key in st, key
    assert st["engine"]["backend"] == "onnxruntime" and st["engine"]["device"] == "cpu"
    assert st["engine"]["refiner"] is None  # the tiny model has none
    assert set(st["counters"]) >= {"received", "classified", "rejected", "dropped", "published"}
    assert set(st["latency_ms"]) == {"queue", "infer", "total"}
    assert set(st["queues"]) >= {"ingest", "batching", "infer_batches", "publish"}
    assert st["heartbeat_age_s"] is not None and st["heartbeat_age_s"] < 5
    assert request(daemon.control.endpoint, "nonsense", timeout_s=5)["error"]


def test_status_command_prints_table_and_json(daemon, capsys):
    from rfclassify.cli import main

    assert main(["status", "--control", daemon.control.endpoint, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["engine"]["model"] == "tiny-random"
    assert main(["status", "--control", daemon.control.endpoint]) == 0
    table = capsys.readouterr().out
    assert "health" in table and "onnxruntime fp32 on cpu" in table and "latency ms" in table


def test_status_without_daemon_is_one_line_and_exit_1(tmp_path, capsys):
    from rfclassify.cli import main

    t0 = time.monotonic()
    assert main(["status", "--control", f"ipc://{tmp_path}/nothing", "--timeout", "0.3"]) == 1
    err = capsys.readouterr().err.strip()
    assert "no rfclassify daemon answered" in err and len(err.splitlines()) == 1
    assert time.monotonic() - t0 < 10


def test_default_sub_input_from_simulate_pub(tiny_model_dir, tmp_path):
    """The default wiring: simulator binds PUB, daemon SUB-connects; ground truth flows through."""
    import socket
    import threading

    from rfclassify.serve.config import InputConfig, MetricsConfig
    from rfclassify.serve.simulate import SimulateOptions, run_simulator
    from dataclasses import replace

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = local_config(tmp_path, model_dir=str(tiny_model_dir), backend="onnxruntime")
    cfg = replace(cfg, input=InputConfig(endpoint=f"tcp://127.0.0.1:{port}"),   # sub + connect
                  metrics=MetricsConfig(listen="127.0.0.1:0"))
    d = Daemon(cfg)
    d.start()
    try:
        c = ResultCollector(d.pipeline.output_endpoint).start()
        opts = SimulateOptions(endpoint=f"tcp://127.0.0.1:{port}", rate_bursts_per_s=200, count=30,
                               warmup_s=1.0, classes=("QPSK", "FM"))
        sim = threading.Thread(target=run_simulator, args=(opts,))
        sim.start()
        sim.join(30)
        assert c.wait_for(30, 20), f"{c.count()} of 30"
        assert {r["truth"]["label"] for r in c.results} <= {"QPSK", "FM"}
        assert sorted(r["burst_id"] for r in c.results) == list(range(30))
        c.stop()
        import urllib.request

        with urllib.request.urlopen(f"http://{d.metrics.address}/metrics", timeout=10) as resp:
            assert "rfclassify_bursts_classified_total 30" in resp.read().decode()
    finally:
        assert d.stop(drain=True)


def test_prometheus_endpoint_serves_the_live_counters(daemon):
    import urllib.request

    from rfclassify.serve.metrics import CONTENT_TYPE, MetricsServer

    m = MetricsServer("127.0.0.1:0", daemon)
    m.start()
    try:
        with urllib.request.urlopen(f"http://{m.address}/metrics", timeout=10) as resp:
            assert resp.headers["Content-Type"] == CONTENT_TYPE
            text = resp.read().decode()
        classified = _status(daemon)["counters"]["classified"]
        line = next(ln for ln in text.splitlines() if ln.startswith("rfclassify_bursts_classified_total "))
        assert float(line.split()[1]) == classified
        assert 'rfclassify_info{version="0.1.0",backend="onnxruntime"' in text
        assert 'rfclassify_queue_depth{queue="ingest"}' in text
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://{m.address}/other", timeout=10)
    finally:
        m.stop()



def test_the_metrics_endpoint_listens_on_an_ipv6_address(daemon):
    """metrics.listen = "[::1]:9108" stopped the start: http.server binds IPv4 only."""
    import socket
    import urllib.request

    from rfclassify.serve.metrics import MetricsServer

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    m = MetricsServer("[::1]:0", daemon)
    m.start()
    try:
        assert m.address.startswith("[::1]:")
        with urllib.request.urlopen(f"http://{m.address}/metrics", timeout=10) as resp:
            assert "rfclassify_bursts_classified_total" in resp.read().decode()
    finally:
        m.stop()


def test_a_metrics_connection_that_sends_nothing_is_closed(daemon, monkeypatch):
    """Each open connection holds one of the endpoint's threads: one that sends no request is
    closed after CLIENT_TIMEOUT_S, and the endpoint answers others meanwhile."""
    import socket
    import urllib.request

    import rfclassify.serve.metrics as metrics

    monkeypatch.setattr(metrics, "CLIENT_TIMEOUT_S", 0.5)
    m = metrics.MetricsServer("127.0.0.1:0", daemon)
    m.start()
    host, port = m.address.rsplit(":", 1)
    try:
        idle = socket.create_connection((host, int(port)), timeout=30)
        idle.sendall(b"GET /metr")                  # half a request line, then nothing
        with urllib.request.urlopen(f"http://{m.address}/metrics", timeout=10) as resp:
            assert resp.status == 200
        t0 = time.monotonic()
        assert idle.recv(1024) == b""               # the server closed it (else: a 30 s timeout error)
        assert time.monotonic() - t0 < 20
        idle.close()
    finally:
        m.stop()


def test_a_metrics_client_trickling_bytes_is_closed_at_the_deadline(daemon, monkeypatch):
    """The limit is on the whole connection, not on each read: a client sending a byte of its
    request line every 0.2 s never hit a per-read timeout and held its thread for as long as it
    liked (the sixty-sixth session's review)."""
    import socket

    import rfclassify.serve.metrics as metrics

    monkeypatch.setattr(metrics, "CLIENT_TIMEOUT_S", 1.0)
    m = metrics.MetricsServer("127.0.0.1:0", daemon)
    m.start()
    host, port = m.address.rsplit(":", 1)
    try:
        t0 = time.monotonic()
        closed = False
        with socket.create_connection((host, int(port)), timeout=0.2) as slow:
            while time.monotonic() - t0 < 8 and not closed:
                try:
                    slow.sendall(b"G")
                    closed = slow.recv(1024) == b""
                except socket.timeout:
                    pass
                except OSError:                 # reset or broken pipe: closed as well
                    closed = True
        assert closed, "the trickling client kept its connection for 8 s"
        assert time.monotonic() - t0 < 6
    finally:
        m.stop()


def test_metrics_connections_past_the_cap_are_closed_on_arrival(daemon, monkeypatch):
    """Each connection holds a thread until its deadline; past MAX_CONNECTIONS open at once a
    new one is closed at once, and the endpoint serves again when the others are gone."""
    import http.client
    import socket
    import urllib.request

    import rfclassify.serve.metrics as metrics

    monkeypatch.setattr(metrics, "CLIENT_TIMEOUT_S", 3.0)
    monkeypatch.setattr(metrics, "MAX_CONNECTIONS", 2, raising=False)
    m = metrics.MetricsServer("127.0.0.1:0", daemon)
    m.start()
    host, port = m.address.rsplit(":", 1)
    try:
        idle = [socket.create_connection((host, int(port)), timeout=30) for _ in range(2)]
        for s in idle:
            s.sendall(b"GET /metr")
        time.sleep(0.3)                         # both accepted and holding their slots
        extra = socket.create_connection((host, int(port)), timeout=30)
        t0 = time.monotonic()
        extra.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        assert extra.recv(1024) == b""          # no reply: closed on arrival
        assert time.monotonic() - t0 < 2.0      # not at the deadline
        extra.close()
        for s in idle:
            assert s.recv(1024) == b""          # closed at their deadline
            s.close()
        # The client sees the hang-up before the handler's thread has returned and given its
        # slot back (CI lost that race once): the slots must come back, not at once.
        give_up = time.monotonic() + 10.0
        while True:
            try:
                with urllib.request.urlopen(f"http://{m.address}/metrics", timeout=10) as resp:
                    assert resp.status == 200
                break
            except (ConnectionError, http.client.RemoteDisconnected):
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.05)
    finally:
        m.stop()


def test_a_stop_asked_for_before_the_start_ends_it_before_the_model_loads(tiny_model_dir, tmp_path, monkeypatch):
    """SIGTERM during the start (request_stop) is taken at start()'s next safe point: no model
    load, no READY=1, everything it had started stopped."""
    import rfclassify.serve.daemon as daemon_module
    from rfclassify.serve.daemon import Daemon, StoppedWhileStarting

    loads = []
    monkeypatch.setattr(daemon_module, "load_engine", lambda *a, **k: loads.append(a))
    d = Daemon(local_config(tmp_path, model_dir=str(tiny_model_dir), backend="onnxruntime"))
    d.request_stop()
    with pytest.raises(StoppedWhileStarting, match="a stop request while starting"):
        d.start()
    assert not loads and d.state == "stopped" and not (tmp_path / "control").exists()


def test_servers_stopped_before_they_started_stop_at_once(daemon):
    """A start that failed part way stops what it made: joining a control thread never started
    raised RuntimeError, and the metrics server's shutdown() waited for ever for a serve_forever
    that never ran (the review of the sixty-seventh session's first version)."""
    import threading

    import zmq

    from rfclassify.serve.control import ControlServer
    from rfclassify.serve.metrics import MetricsServer

    m = MetricsServer("127.0.0.1:0", daemon)
    stopper = threading.Thread(target=m.stop, daemon=True)
    stopper.start()
    stopper.join(10)
    assert not stopper.is_alive(), "MetricsServer.stop() of a server never started hangs"
    ctx = zmq.Context()
    try:
        ControlServer(ctx, "inproc://never-started", lambda r: r).stop()
    finally:
        ctx.term()


def test_a_scraper_that_leaves_mid_reply_costs_no_traceback(daemon, capsys):
    """Each connection reset while the reply was written printed socketserver's traceback block
    on the daemon's stderr (its journal): 14 of 20 resets before the fifty-eighth session."""
    import socket
    import struct
    import urllib.request

    from rfclassify.serve.metrics import MetricsServer

    m = MetricsServer("127.0.0.1:0", daemon)
    m.start()
    host, port = m.address.rsplit(":", 1)
    try:
        for _ in range(40):
            s = socket.create_connection((host, int(port)), timeout=10)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            s.close()
        time.sleep(1)
        with urllib.request.urlopen(f"http://{m.address}/metrics", timeout=10) as resp:
            assert resp.status == 200                       # and it still answers
    finally:
        m.stop()
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Exception occurred during processing" not in err


def test_bench_daemon_reports_ratios_against_the_bare_backend(tiny_model_dir, tmp_path, capsys):
    from rfclassify.cli import main

    out = tmp_path / "bench.json"
    assert main(["bench", "daemon", "--model-dir", str(tiny_model_dir), "--backend", "onnxruntime",
                 "--seconds", "0.5", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["model"] == "tiny-random" and report["bare_bursts_per_s"] > 0
    assert set(report["phases"]) == {"max", "half"}
    mx, half = report["phases"]["max"], report["phases"]["half"]
    assert mx["classified"] > 0 and mx["dropped"] == 0          # max load is lossless (block policy)
    assert half["offered_rate"] == pytest.approx(mx["throughput_bursts_per_s"] / 2)
    assert report["max_vs_bare"] == pytest.approx(mx["throughput_bursts_per_s"] / report["bare_bursts_per_s"])
    # the daemon's process CPU over the window: busy at max load, and per burst what it says
    assert mx["process_cpu_cores"] > 0
    assert mx["process_cpu_ms_per_burst"] == pytest.approx(
        mx["process_cpu_cores"] * 1e3 / mx["throughput_bursts_per_s"], rel=1e-6)
    printed = capsys.readouterr().out
    assert "daemon process CPU" in printed
    assert "x bare" in printed and "ms (goal <= 20 ms)" in printed     # the tiny model has no refiners



def test_bench_daemon_json_dash_prints_the_report_alone_on_stdout(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """As `bench --json -` does; it wrote a file named "-" beside the running lines."""
    from rfclassify.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["bench", "daemon", "--model-dir", str(tiny_model_dir), "--backend", "onnxruntime",
                 "--seconds", "0.3", "--rate", "20", "--json", "-"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["model"] == "tiny-random" and set(report["phases"]) == {"fixed"}
    assert "daemon, fixed" in captured.err and not (tmp_path / "-").exists()


def test_bench_options_before_the_word_daemon_are_refused_not_dropped(tiny_model_dir, tmp_path, capsys):
    """`bench --model-dir M --json F daemon` measured the shipped model and wrote no F: the daemon
    benchmark's defaults took the place of options given before its word (sixty-sixth session)."""
    from rfclassify.cli import main

    assert main(["bench", "--model-dir", str(tiny_model_dir), "--json", str(tmp_path / "bd.json"),
                 "daemon", "--rate", "20"]) == 2
    err = capsys.readouterr().err
    assert "--model-dir, --json before 'daemon' would be ignored" in err and not (tmp_path / "bd.json").exists()


def test_bench_daemon_measures_the_daemon_keeping_bursts(tiny_model_dir, tmp_path, capsys):
    from rfclassify.cli import main

    out = tmp_path / "bench.json"
    assert main(["bench", "daemon", "--model-dir", str(tiny_model_dir), "--backend", "onnxruntime",
                 "--seconds", "0.5", "--rate", "50", "--capture", "*", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    fixed = report["phases"]["fixed"]
    assert report["capture"] == "*" and fixed["capture"]["kept"] > 0 and fixed["capture"]["failed"] == 0
    assert f"capture kept {fixed['capture']['kept']}, skipped 0" in capsys.readouterr().out


def test_bench_daemon_holds_only_the_network_alone_to_the_latency_goal():
    from rfclassify.serve.bench_daemon import latency_goal_words

    assert latency_goal_words(False) == "goal <= 20 ms"
    assert "goal <= 20" not in latency_goal_words(True) and "--no-refiner" in latency_goal_words(True)


def test_curve_protects_output_and_control(tiny_model_dir, tmp_path):
    """CURVE on the output and control sockets: a client with the daemon's public key gets
    results and status; a plain client gets nothing."""
    from dataclasses import replace

    from rfclassify.serve.config import SecurityConfig
    from rfclassify.serve.control import NoDaemonError
    from rfclassify.serve.security import client_security, configure_client, create_key_pair

    public, secret = create_key_pair(tmp_path / "keys", "daemon")
    cfg = local_config(tmp_path, model_dir=str(tiny_model_dir), backend="onnxruntime")
    cfg = replace(cfg, security=SecurityConfig(secret_key_file=str(secret), curve_output=True, curve_control=True))
    d = Daemon(cfg)
    d.start()
    ctx = zmq.Context.instance()
    plain, secure = ctx.socket(zmq.SUB), ctx.socket(zmq.SUB)
    push = ctx.socket(zmq.PUSH)
    try:
        for s in (plain, secure, push):
            s.setsockopt(zmq.LINGER, 0)
        configure_client(secure, public)
        for s in (plain, secure):
            s.setsockopt(zmq.SUBSCRIBE, b"")
            s.connect(d.pipeline.output_endpoint)
        push.connect(d.pipeline.input_endpoint)
        time.sleep(0.5)
        push.send_multipart(encode_native(_bursts(1, seed=9)[0].iq[0], _header("curve-1")))
        assert secure.poll(10_000), "no result over CURVE"
        topic, body = secure.recv_multipart()
        assert topic == b"result" and json.loads(body)["burst_id"] == "curve-1"
        assert not plain.poll(500)                                   # the handshake never completed
        st = request(d.control.endpoint, "status", timeout_s=5, secure=client_security(public))
        assert st["counters"]["classified"] == 1
        with pytest.raises(NoDaemonError):
            request(d.control.endpoint, "status", timeout_s=0.5)     # plain client: no answer
    finally:
        for s in (plain, secure, push):
            s.close()
        d.stop(drain=False)


def test_unknown_threshold_override_turns_results_unknown_and_back(daemon, sender, collector):
    model_threshold = daemon.engine.unknown_threshold
    iq = _bursts(2, seed=5)[0].iq
    daemon.engine.set_unknown_threshold(1.0)          # what SIGHUP applies from model.unknown_threshold
    try:
        sender.send_multipart(encode_native(iq[0], _header("thr-1")))
        assert collector.wait_for(1, 20)
    finally:
        daemon.engine.set_unknown_threshold(None)
    sender.send_multipart(encode_native(iq[1], _header("thr-2")))
    assert collector.wait_for(2, 20)
    by_id = {r["burst_id"]: r for r in collector.results}
    assert by_id["thr-1"]["label"] == "unknown" and by_id["thr-1"]["top"][0]["label"] != "unknown"
    assert daemon.engine.unknown_threshold == model_threshold
    assert by_id["thr-2"]["label"] == by_id["thr-2"]["top"][0]["label"]    # the random model's 0.0 threshold


def test_status_watch_refreshes(daemon):
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "rfclassify", "status", "--control", daemon.control.endpoint,
                             "--json", "--watch", "0.2"], stdout=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
    finally:
        proc.kill()
        proc.wait(10)
        proc.stdout.close()
    replies = [json.loads(ln) for ln in lines]
    assert all(r["pid"] == daemon.status()["pid"] for r in replies)
    assert replies[0]["uptime_s"] <= replies[-1]["uptime_s"]


def test_demo_command_classifies_every_simulated_burst(tiny_model_dir, capsys):
    from rfclassify.cli import main

    assert main(["demo", "--model-dir", str(tiny_model_dir), "--backend", "onnxruntime", "--count", "40",
                 "--rate", "200", "--lines", "3"]) == 0
    out = capsys.readouterr().out
    assert "summary: sent 40, classified 40, rejected 0, dropped 0" in out
    assert "40 results reached the subscriber" in out
    assert out.count(" samples ") >= 3 and "live accuracy" in out and "latency total" in out


def _serving_a_slow_first_batch(tiny_model_dir, tmp_path, monkeypatch, serving, seconds: float):
    """(the batch sizes inference was given, a context serving the tiny model with a 2 ms
    max_wait_ms, and a function that sends one burst and waits until the first batch runs),
    the first batch taking `seconds` longer than it would."""
    from rfclassify.serve.pipeline import EngineAdapter

    sizes: list[int] = []
    real = EngineAdapter.infer_batch

    def slow_first(self, batch):
        sizes.append(len(batch.items))
        if len(sizes) == 1:
            time.sleep(seconds)
        return real(self, batch)
    monkeypatch.setattr(EngineAdapter, "infer_batch", slow_first)

    def send_first(push, iq, burst_id):
        push.send_multipart(encode_native(iq, _header(burst_id)))
        deadline = time.monotonic() + 10
        while not sizes and time.monotonic() < deadline:
            time.sleep(0.005)                       # the first batch is running (slowly)
    return sizes, serving(local_config(tmp_path, model_dir=str(tiny_model_dir), backend="onnxruntime",
                                       max_batch=64, max_wait_ms=2.0)), send_first


def test_the_demo_summary_gives_a_class_its_best_guess_where_unknown_hides_it():
    """NOISE bursts are mostly called unknown (below the open-set threshold) with NOISE as their
    best guess: the per-class line says so instead of a bare 0 %."""
    from rfclassify.serve.demo import _print_summary
    from rfclassify.serve.stats import DaemonStats

    stats = DaemonStats()
    for _ in range(9):
        stats.add_result("unknown", 0.0, 0.0, 0.0, truth_label="NOISE", truth_snr_db=0.0, best_guess="NOISE")
    stats.add_result("QPSK", 0.0, 0.0, 0.0, truth_label="QPSK", truth_snr_db=0.0, best_guess="QPSK")
    status = {**stats.snapshot(), "engine": {"backend": "b", "precision": "p", "model": "m"}}
    lines: list[str] = []
    _print_summary({"sent": 10, "elapsed_s": 1.0, "status": status, "results_received": 10,
                    "rejects_received": 0}, lines.append)
    (by_class,) = [ln for ln in lines if "by class" in ln]
    assert by_class == "  by class, reported / best guess: NOISE 0/100%, QPSK 100%"


def test_bursts_that_arrive_while_inference_is_busy_wait_as_one_growing_batch(tiny_model_dir, tmp_path, monkeypatch,
                                                                              serving):
    """A bucket past max_wait_ms is held while inference runs another batch, then goes whole:
    30 bursts sent during a slow first batch make two more batches at most, not one per 2 ms
    (which would leave a refiner's worker processes mostly idle)."""
    sizes, served, send_first = _serving_a_slow_first_batch(tiny_model_dir, tmp_path, monkeypatch, serving, 0.4)
    with served as (_, push, c):
        batch, _, _ = _bursts(31, seed=7)
        send_first(push, batch.iq[0], "busy-0")
        for i in range(1, 31):
            push.send_multipart(encode_native(batch.iq[i], _header(f"busy-{i}")))
            time.sleep(0.005)                       # 150 ms of arrivals, 75 max_waits of 2 ms
        assert c.wait_for(31, 30), f"{c.count()} of 31"
        c.stop()
        assert sorted(r["burst_id"] for r in c.results) == sorted(f"busy-{i}" for i in range(31))
        assert sizes[0] == 1 and sum(sizes) == 31 and len(sizes) <= 3, sizes


def test_a_held_batch_waits_for_inference_without_polling_the_ingest_queue(tiny_model_dir, tmp_path, monkeypatch,
                                                                          serving):
    """While a due batch is held behind a slow one, the batcher sleeps until a burst comes or
    inference ends (which wakes it), instead of looking every millisecond; the held burst goes
    when inference is free."""
    from rfclassify.serve.batching import BoundedQueue

    gets: collections.Counter = collections.Counter()
    real_get = BoundedQueue.get

    def counted_get(self, *args, **kwargs):
        gets[id(self)] += 1     # per queue: the module's daemon polls its own ingest queue meanwhile
        return real_get(self, *args, **kwargs)
    monkeypatch.setattr(BoundedQueue, "get", counted_get)
    sizes, served, send_first = _serving_a_slow_first_batch(tiny_model_dir, tmp_path, monkeypatch, serving, 1.0)
    with served as (d, push, c):
        ingest = id(d.pipeline.ingest_q)
        batch, _, _ = _bursts(2, seed=7)
        send_first(push, batch.iq[0], "first")
        push.send_multipart(encode_native(batch.iq[1], _header("held")))
        time.sleep(0.1)                             # the second is due after 2 ms, and held
        before = gets[ingest]
        time.sleep(0.5)
        during = gets[ingest] - before
        assert c.wait_for(2, 30), f"{c.count()} of 2"
        c.stop()
    assert sizes == [1, 1]
    # half a second held: a few 100 ms timeouts (its stop-flag look), not 500 one-millisecond polls
    # (every ingest queue was counted before the sixty-sixth session: with the module's daemon
    # also up, 10 of the limit of 10 here, and 11 once on the GPU host)
    assert 3 <= during <= 10, during


def test_held_batches_grow_unless_the_refiners_run_in_the_inference_thread():
    from types import SimpleNamespace

    from rfclassify.serve.pipeline import EngineAdapter

    def adapter(refiners: tuple, workers: int) -> EngineAdapter:
        clf = SimpleNamespace(policy=None, backend="b", precision="p", device="d", model_id="m",
                              unknown_threshold=0.5, refiners=refiners, refiner_workers=workers)
        return EngineAdapter(clf)
    assert adapter((), 0).grows_held_batches                   # the network alone
    assert adapter(("refiner",), 4).grows_held_batches         # its statistics in worker processes
    assert not adapter(("refiner",), 0).grows_held_batches     # one burst after another in this thread
