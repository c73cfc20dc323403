"""`rfclassify status` says which sockets use CURVE and how many client keys are admitted now
(after a SIGHUP's reload), and the daemon's reply and `status --json` are strict JSON whatever
number came (NaN and Infinity, which Python's json writes, are null). Until the seventy-first
session only the start's log line said which sockets use CURVE, and a tegrastats temperature
past a float's range went out as `Infinity`, which jq and JSON.parse refuse.

Real daemons (tests/held_daemon.py) on the shipped model (ONNX Runtime on the CPU), real ZeroMQ
sockets and ZAP authenticator, and a stand-in tegrastats on PATH (there is no Jetson here)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import zmq

from held_daemon import WAIT_S, serving, until
from rfclassify.cli import main
from rfclassify.serve.config import InputConfig, SecurityConfig
from rfclassify.serve.demo import local_config
from rfclassify.serve.security import configure_server, create_key_pair

pytest.importorskip("onnxruntime")


def _not_json(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _strict(text: str | bytes) -> dict:
    """text parsed as a strict parser (jq, JSON.parse) does: NaN and Infinity refused."""
    return json.loads(text, parse_constant=_not_json)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory):
    """The shipped model on ONNX Runtime, shared by the module's daemons (its refiners in the
    inference thread: no worker processes)."""
    from rfclassify.serve.daemon import load_engine

    cfg = local_config(tmp_path_factory.mktemp("engine"), backend="onnxruntime")
    adapter = load_engine(replace(cfg, model=replace(cfg.model, refiner_workers=0)))
    yield adapter
    adapter.classifier.close()


def _key_pairs(tmp_path: Path, admitted: tuple[str, ...]) -> tuple[Path, Path]:
    """keys/ (the daemon's pair, "front"'s and one per admitted client) and allowed/ (the
    admitted clients' public keys)."""
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    allowed.mkdir()
    for name in ("daemon", "front", *admitted):
        create_key_pair(keys, name)
    for name in admitted:
        shutil.copy(keys / f"{name}.key", allowed)
    return keys, allowed


def _status(capsys, *argv: str) -> str:
    assert main(["status", *argv, "--timeout", str(WAIT_S)]) == 0
    return capsys.readouterr().out


def test_status_says_which_sockets_use_curve_and_counts_the_admitted_keys_live(engine, tmp_path, capsys):
    keys, allowed = _key_pairs(tmp_path, ("ops", "second"))
    cfg = replace(local_config(tmp_path, backend="onnxruntime"),
                  security=SecurityConfig(secret_key_file=str(keys / "daemon.key_secret"),
                                          authorized_keys_dir=str(allowed), curve_output=True, curve_control=True))
    with serving(engine, cfg) as (d, _push):
        argv = ["--control", d.control.endpoint, "--server-key", str(keys / "daemon.key"),
                "--key", str(keys / "ops.key_secret")]
        st = _strict(_status(capsys, *argv, "--json"))
        assert st["input"]["curve"] is None
        assert st["output"]["curve"] == st["control"]["curve"] == {"role": "server", "admitted_keys": 2}
        assert "\nsecurity    CURVE on output, control; 2 client keys admitted; plaintext: input\n" in \
            _status(capsys, *argv)
        (allowed / "second.key").unlink()          # revoked: SIGHUP's reload reads the folder again
        d.reload()
        st = _strict(_status(capsys, *argv, "--json"))
        assert st["output"]["curve"] == st["control"]["curve"] == {"role": "server", "admitted_keys": 1}
        assert "\nsecurity    CURVE on output, control; 1 client key admitted; plaintext: input\n" in \
            _status(capsys, *argv)


def test_status_says_a_socket_in_clear_an_open_curve_server_and_the_input_as_a_client(engine, tmp_path, capsys):
    keys, allowed = _key_pairs(tmp_path, ("ops",))
    base = local_config(tmp_path, backend="onnxruntime")
    secret = str(keys / "daemon.key_secret")
    with serving(engine, base) as (d, _push):
        st = _strict(_status(capsys, "--control", d.control.endpoint, "--json"))
        assert [st[name]["curve"] for name in ("input", "output", "control")] == [None, None, None]
        assert "\nsecurity    no CURVE: input, output and control are plaintext\n" in \
            _status(capsys, "--control", d.control.endpoint)

    # a bound CURVE input without authorized_keys_dir: any client that knows the daemon's key
    open_input = replace(base, security=SecurityConfig(secret_key_file=secret, curve_input=True))
    with serving(engine, open_input) as (d, _push):
        st = _strict(_status(capsys, "--control", d.control.endpoint, "--json"))
        assert st["input"]["curve"] == {"role": "server", "admitted_keys": None}
        assert st["output"]["curve"] is None and st["control"]["curve"] is None
        assert ("\nsecurity    CURVE on input; any client that knows the daemon's public key; "
                "plaintext: output, control\n") in _status(capsys, "--control", d.control.endpoint)

    # the input connected to a front end that is the CURVE server; the output admits ops alone
    ctx = zmq.Context()
    front = ctx.socket(zmq.PUSH)
    try:
        configure_server(front, keys / "front.key_secret")
        front.bind("tcp://127.0.0.1:*")
        client_input = replace(base, input=InputConfig(endpoint=front.last_endpoint.decode(), mode="pull", bind=False),
                               security=SecurityConfig(secret_key_file=secret,
                                                       input_server_key_file=str(keys / "front.key"),
                                                       authorized_keys_dir=str(allowed),
                                                       curve_input=True, curve_output=True))
        with serving(engine, client_input) as (d, _push):
            st = _strict(_status(capsys, "--control", d.control.endpoint, "--json"))
            assert st["input"]["curve"] == {"role": "client"}
            assert st["output"]["curve"] == {"role": "server", "admitted_keys": 1} and st["control"]["curve"] is None
            assert ("\nsecurity    CURVE on input (as the front end's client), output; 1 client key admitted; "
                    "plaintext: control\n") in _status(capsys, "--control", d.control.endpoint)
    finally:
        front.close(0)
        ctx.term()


def _raw_status(endpoint: str) -> bytes:
    """The daemon's status reply, the bytes as they came."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        sock.send(b'{"command": "status"}')
        assert sock.poll(int(WAIT_S * 1000)), "no status reply"
        return sock.recv()
    finally:
        sock.close(0)
        ctx.term()


def test_a_temperature_past_a_floats_range_is_null_in_the_reply_and_in_status_json(
        engine, tmp_path, monkeypatch, capsys):
    """A tegrastats line whose temperature has 400 digits reads as infinity (float() of it):
    the reply carried `Infinity`, and `status --json` printed it again."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "tegrastats"
    script.write_text("#!/bin/sh\n"
                      f"echo 'RAM 3456/30536MB GR3D_FREQ 37% CPU@{'9' * 400}C tj@46.5C VDD_GPU_SOC 2003mW/1990mW'\n"
                      "exec sleep 60\n")      # stopped by the daemon's terminate, sleep and all
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    cfg = local_config(tmp_path, backend="onnxruntime")        # health.tegrastats on: the stand-in runs
    with serving(engine, cfg) as (d, _push):
        until(lambda: d.tegra.latest is not None)
        st = _strict(_raw_status(d.control.endpoint))
        assert st["jetson"]["temps_c"] == {"CPU": None, "tj": 46.5}
        st = _strict(_status(capsys, "--control", d.control.endpoint, "--json"))
        assert st["jetson"]["temps_c"] == {"CPU": None, "tj": 46.5} and st["jetson"]["ram_used_mb"] == 3456
        assert "\n  temps     CPU ?C, tj 46.5C\n" in _status(capsys, "--control", d.control.endpoint)
