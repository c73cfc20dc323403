"""A peer whose ZeroMQ handshake with the daemon fails is counted, logged once and makes the
health degraded (serve/handshakes.py): a socket type ours cannot talk to (a GNU Radio push_sink
or rep_sink to the input's SUB, a PUB to its PULL, a PULL subscribing to the output's PUB) and
the CURVE failures (a key not admitted, a wrong key, one side without CURVE). Until the
seventy-first session each left the daemon silent with `health: ok`, and a connecting input
never tried its endpoint again, so a front end fixed on the same port was not read either.

Real daemons on the tiny model (tests/held_daemon.py), real pyzmq peers of the wrong type and
a real GNU Radio push_sink flowgraph (tests/gr/burst_source.py)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

from held_daemon import WAIT_S, tiny_engine, until
from rfclassify.serve.config import InputConfig, SecurityConfig
from rfclassify.serve.daemon import Daemon
from rfclassify.serve.demo import local_config
from rfclassify.serve.metrics import render_metrics
from rfclassify.serve.native import encode_native
from rfclassify.serve.pipeline import EngineAdapter
from rfclassify.serve.status_view import render_status
from rfclassify.serve.security import configure_client, configure_server, create_key_pair

pytest.importorskip("onnxruntime")

LOGGER = "rfclassify.serve.handshakes"


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> EngineAdapter:
    return tiny_engine(tiny_model_dir, tmp_path_factory)


@pytest.fixture()
def peers() -> Iterator[Any]:
    """make(kind, setup=None, bind=True, endpoint="tcp://127.0.0.1:*") -> a pyzmq socket, closed at the end."""
    ctx = zmq.Context()
    made: list[zmq.Socket] = []

    def make(kind: int, setup: Any = None, bind: bool = True, endpoint: str = "tcp://127.0.0.1:*") -> zmq.Socket:
        sock = ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        made.append(sock)
        if setup is not None:
            setup(sock)
        (sock.bind if bind else sock.connect)(endpoint)
        return sock

    yield make
    for sock in made:
        sock.close(0)
    ctx.term()


@contextlib.contextmanager
def daemon(engine: EngineAdapter, cfg: Any) -> Iterator[Daemon]:
    """A started daemon on `engine` (which it does not close); no sender of its own."""
    d = Daemon(cfg, engine=engine)
    d.start()
    try:
        yield d
    finally:
        d.stop(drain=False)


def _config(tmp_path: Path, **sections: Any) -> Any:
    return replace(local_config(tmp_path, backend="onnxruntime"), **sections)


def _handshakes(d: Daemon, role: str) -> dict:
    return d.status()[role].get("handshakes") or {}


def _failed(d: Daemon, role: str, cause: str) -> int:
    return (_handshakes(d, role).get("failed") or {}).get(cause, 0)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every WARNING (or worse) line logged, whoever logged it."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("mode, peer_kind, advice", [
    ("sub", zmq.PUSH, 'a PUSH (push_sink, push_msg_sink) needs input.mode = "pull"'),
    ("pull", zmq.PUB, 'a PUB (pub_sink, pub_msg_sink, rfclassify simulate) needs input.mode = "sub"'),
    ("sub", zmq.REP, "a REP (rep_sink, rep_msg_sink) is not supported"),
], ids=["sub-to-push", "pull-to-pub", "sub-to-rep"])
def test_an_input_connected_to_a_peer_of_the_wrong_socket_type_is_degraded_with_one_warning(
        engine, tmp_path, peers, caplog, mode, peer_kind, advice):
    peer = peers(peer_kind)
    endpoint = peer.last_endpoint.decode()
    cfg = _config(tmp_path, input=InputConfig(endpoint=endpoint, mode=mode, bind=False))
    with daemon(engine, cfg) as d:
        # libzmq tries a refused endpoint once; the daemon connects again (1 s, 2 s, ...)
        until(lambda: _handshakes(d, "input").get("failed_total", 0) >= 3)
        health, reasons = d.health()
        st = d.status()
    assert health == "degraded"
    input_reasons = [r for r in reasons if r.startswith("input: ")]
    assert len(input_reasons) == 1 and "failed ZeroMQ handshake(s) since start" in input_reasons[0]
    assert "socket type ours cannot talk to" in input_reasons[0]
    h = st["input"]["handshakes"]
    # the peer may refuse and close first: libzmq then says the peer closed in the handshake
    # (and tries again itself); which one is a race
    assert h["succeeded"] == 0 and set(h["failed"]) <= {"socket_type", "closed"}
    assert h["failed_total"] == sum(h["failed"].values()) >= 3
    assert st["counters"]["messages"] == 0
    lines = _warnings(caplog)
    assert len(lines) == 1, lines          # a reconnect loop logs one line, not one per attempt
    assert lines[0].startswith(f"input {endpoint}: ZeroMQ's handshake with the peer failed (1 so far")
    assert advice in lines[0]
    text = render_metrics(st, {})
    for cause, n in h["failed"].items():
        assert f'rfclassify_handshake_failures_total{{socket="input",cause="{cause}"}} {n}' in text
    assert f"\nhandshakes  input: {h['failed_total']} failed (" in "\n" + render_status(st)


def _bind_again(peers: Any, kind: int, endpoint: str) -> zmq.Socket:
    """A socket of kind bound to endpoint, which a closed socket held a moment ago."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return peers(kind, endpoint=endpoint)
        except zmq.ZMQError:
            assert time.monotonic() < deadline, f"{endpoint} stayed in use"
            time.sleep(0.05)


def test_a_front_end_fixed_on_the_same_port_is_read_without_restarting_the_daemon(engine, tmp_path, peers, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    wrong = peers(zmq.PUSH)
    endpoint = wrong.last_endpoint.decode()
    cfg = _config(tmp_path, input=InputConfig(endpoint=endpoint, mode="sub", bind=False))
    with daemon(engine, cfg) as d:
        until(lambda: _handshakes(d, "input").get("failed_total", 0) >= 1)
        assert d.health()[0] == "degraded"
        wrong.close(0)
        fixed = _bind_again(peers, zmq.PUB, endpoint)
        frames = encode_native(np.ones(1024, np.complex64), {"sample_rate": 1e6})

        def reached() -> bool:
            fixed.send_multipart(frames)     # a PUB drops what it sends before the SUB joined
            return d.stats.messages > 0
        until(reached)
        health, reasons = d.health()
        h = _handshakes(d, "input")
    assert (health, reasons) == ("ok", [])
    assert h["succeeded"] >= 1 and h["failed_total"] >= 1
    assert any("a peer's ZeroMQ handshake succeeded" in r.getMessage() for r in caplog.records
               if r.name == LOGGER and r.levelno == logging.INFO)


@pytest.mark.gnuradio
def test_a_gnuradio_push_sink_to_the_sub_input_is_named_in_health_and_log(engine, tmp_path, caplog):
    from test_gnuradio_ingest import _MISSING, Flowgraph

    if _MISSING:
        pytest.skip(_MISSING)
    fg = Flowgraph("--sink", "push")      # binds its push_sink, then waits for "go" (never sent)
    try:
        cfg = _config(tmp_path, input=InputConfig(endpoint=fg.endpoint, mode="sub", bind=False, format="gr-stream",
                                                  sample_rate_hz=1e6))
        with daemon(engine, cfg) as d:
            until(lambda: _handshakes(d, "input").get("failed_total", 0) >= 2)
            health, reasons = d.health()
    finally:
        fg.kill()
    assert health == "degraded" and any(r.startswith("input: ") and "socket type ours cannot talk to" in r
                                        for r in reasons)
    lines = _warnings(caplog)
    assert len(lines) == 1 and 'push_sink, push_msg_sink) needs input.mode = "pull"' in lines[0], lines


def test_a_pull_subscribing_to_the_output_degrades_health_until_a_subscriber_gets_through(engine, tmp_path, peers,
                                                                                          caplog):
    cfg = _config(tmp_path)
    with daemon(engine, cfg) as d:
        endpoint = d.pipeline.output_endpoint
        peers(zmq.PULL, bind=False, endpoint=endpoint)
        until(lambda: _handshakes(d, "output").get("failed_total", 0) >= 1)
        health, reasons = d.health()
        st = d.status()
        h = st["output"]["handshakes"]
        # the PULL tries once: ours refuses it (socket_type) or it refuses ours and closes first
        # (closed), which one port scan also leaves: that degrades only when it comes again
        (cause, n), = h["failed"].items()
        assert cause in ("socket_type", "closed") and n == 1
        if cause == "socket_type":
            assert health == "degraded"
            assert [r for r in reasons if r.startswith("output: ")]
        else:
            assert health == "ok", reasons
        assert not [r for r in reasons if r.startswith("input: ")]
        assert h == {"succeeded": 0, "failed": {cause: 1}, "failed_total": 1,
                     "last_failed_cause": cause, "last_failed_age_s": h["last_failed_age_s"]}
        assert f'rfclassify_handshake_failures_total{{socket="output",cause="{cause}"}} 1' in render_metrics(st, {})
        lines = _warnings(caplog)
        assert len(lines) == 1 and lines[0].startswith(f"output {endpoint}: ZeroMQ's handshake with a peer failed")
        assert "a PULL (pull_source, pull_msg_source), REQ or other socket type gets nothing from it" in lines[0]
        sub = peers(zmq.SUB, lambda s: s.setsockopt(zmq.SUBSCRIBE, b""), bind=False, endpoint=endpoint)
        assert sub is not None
        until(lambda: _handshakes(d, "output").get("succeeded", 0) >= 1)
        assert d.health() == ("ok", [])
        assert _handshakes(d, "output")["failed_total"] == 1     # the count stays


def _keys(tmp_path: Path) -> tuple[Path, Path]:
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    allowed.mkdir()
    for name in ("daemon", "ops", "stranger", "other"):
        create_key_pair(keys, name)
    (allowed / "ops.key").write_bytes((keys / "ops.key").read_bytes())
    return keys, allowed


def _curve_client(keys: Path, name: str, server: str) -> Any:
    return lambda sock: configure_client(sock, keys / f"{server}.key", keys / f"{name}.key_secret")


@pytest.mark.parametrize("client, cause, words", [
    ("stranger", "curve_refused", "the peer's CURVE key is not admitted (ZAP status 400): its .key is not in "
                                  "security.authorized_keys_dir"),
    ("wrong-server-key", "curve_key", "it likely uses another server key than the daemon's public key"),
    # or "closed": the plain peer may refuse first (the same words)
    ("plain", "curve_mechanism", "does not use CURVE while security.curve_input is on"),
])
def test_a_curve_handshake_refused_on_the_input_is_counted_and_logged_once(engine, tmp_path, peers, caplog,
                                                                           client, cause, words):
    keys, allowed = _keys(tmp_path)
    cfg = _config(tmp_path, security=SecurityConfig(secret_key_file=str(keys / "daemon.key_secret"),
                                                    authorized_keys_dir=str(allowed), curve_input=True))
    setup = {"stranger": _curve_client(keys, "stranger", "daemon"),
             "wrong-server-key": _curve_client(keys, "ops", "other"), "plain": None}[client]
    with daemon(engine, cfg) as d:
        peers(zmq.PUSH, setup, bind=False, endpoint=d.pipeline.input_endpoint)
        until(lambda: _handshakes(d, "input").get("failed_total", 0) >= 1)
        health, reasons = d.health()
        h = _handshakes(d, "input")
    assert set(h["failed"]) <= ({cause, "closed"} if client == "plain" else {cause}) and h["succeeded"] == 0
    if set(h["failed"]) == {"closed"} and h["failed_total"] < 3:   # the plain peer closed first: as a port scan
        assert health == "ok", reasons
    else:
        assert health == "degraded" and any(r.startswith("input: ") for r in reasons), reasons
    lines = _warnings(caplog)       # zmq.auth's own line about a refused key is a DEBUG one: not twice
    assert len(lines) == 1 and words in lines[0], lines


def test_a_curve_client_input_with_the_wrong_server_key_says_which_key(engine, tmp_path, peers, caplog):
    """The input as the front end's CURVE client, given another public key than the front end's:
    the front end drops each try, which libzmq repeats every 100 ms; one line says which file."""
    keys, _allowed = _keys(tmp_path)
    front = peers(zmq.PUSH, lambda s: configure_server(s, keys / "ops.key_secret"))
    cfg = _config(tmp_path, input=InputConfig(endpoint=front.last_endpoint.decode(), mode="pull", bind=False),
                  security=SecurityConfig(secret_key_file=str(keys / "daemon.key_secret"),
                                          input_server_key_file=str(keys / "other.key"), curve_input=True))
    with daemon(engine, cfg) as d:
        until(lambda: _failed(d, "input", "closed") >= 5)
        health, reasons = d.health()
    assert health == "degraded" and any(r.startswith("input: ") for r in reasons)
    lines = _warnings(caplog)
    assert len(lines) == 1, lines
    assert "security.input_server_key_file likely does not hold its public key" in lines[0]


def test_a_good_peer_leaves_the_health_ok_and_counts_its_handshake(engine, tmp_path, peers, caplog):
    front = peers(zmq.PUSH)
    cfg = _config(tmp_path, input=InputConfig(endpoint=front.last_endpoint.decode(), mode="pull", bind=False))
    with daemon(engine, cfg) as d:
        until(lambda: _handshakes(d, "input").get("succeeded", 0) >= 1)
        assert d.health() == ("ok", [])
        assert _handshakes(d, "input")["failed"] == {} and _warnings(caplog) == []


def test_one_connection_closed_before_its_handshake_is_no_health_reason_but_three_in_a_row_are():
    """A port scan or a TCP-only health check of a bound socket leaves one "closed" failure; a
    peer of the wrong type reconnects and fails again: only failures in a row degrade, and a
    handshake that succeeds starts the count again. Other causes degrade at once."""
    from rfclassify.serve.handshakes import CLOSED_IN_A_ROW_TO_DEGRADE, HandshakeCounts

    counts = HandshakeCounts("input")
    counts.bound = True
    counts.add_failure("closed", 10.0)
    assert counts.health_reason(11.0, 3600.0) is None
    assert counts.snapshot(11.0)["failed"] == {"closed": 1}      # counted all the same
    for i in range(1, CLOSED_IN_A_ROW_TO_DEGRADE):
        counts.add_failure("closed", 10.0 + i)
    assert "failed ZeroMQ handshake" in counts.health_reason(20.0, 3600.0)
    counts.add_success(21.0)
    counts.add_failure("closed", 22.0)
    assert counts.health_reason(23.0, 3600.0) is None
    counts.add_failure("curve_key", 24.0)
    assert counts.health_reason(25.0, 3600.0) is not None
    connecting = HandshakeCounts("input")      # no scanner connects to a socket that connects out
    connecting.add_failure("closed", 10.0)
    assert connecting.health_reason(11.0, 3600.0) is not None
