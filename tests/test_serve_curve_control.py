"""The control socket file of a daemon whose control socket uses CURVE is never taken by a
second daemon: its plain liveness ping got no answer from the CURVE socket, so the live file was
taken for stale, removed and bound again, and the second daemon's exit removed it, leaving the
first without a control socket. Real ControlServer threads and daemons, real ipc sockets."""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from types import SimpleNamespace

import pytest
import zmq

from rfclassify._exceptions import ConfigError
from rfclassify.serve.control import ControlServer, request
from rfclassify.serve.security import DaemonSecurity, client_security, create_key_pair


@pytest.fixture()
def curve(tmp_path):
    """The daemon's key pair, an admitted operator's, and the daemon's socket hook."""
    public, secret = create_key_pair(tmp_path / "keys", "daemon")
    allowed = tmp_path / "allowed"
    _, ops_secret = create_key_pair(allowed, "ops")
    (allowed / "ops.key_secret").rename(tmp_path / "keys" / "ops.key_secret")
    ops_secret = tmp_path / "keys" / "ops.key_secret"
    sec = DaemonSecurity(SimpleNamespace(secret_key_file=str(secret), input_server_key_file="",
                                         authorized_keys_dir=str(allowed)))
    yield SimpleNamespace(public=public, secret=secret, ops=ops_secret, allowed=allowed, sec=sec)
    sec.close()


def test_a_second_server_refuses_a_live_curve_control_socket_and_leaves_it(tmp_path, curve):
    ctx = zmq.Context()
    path = tmp_path / "control"
    first = ControlServer(ctx, f"ipc://{path}", lambda req: {"pong": True}, curve.sec)
    first.start()
    try:
        inode = path.stat().st_ino
        for secure in (None, curve.sec):     # a second daemon without CURVE on control, and one with it
            second = ControlServer(ctx, f"ipc://{path}", lambda req: {"second": True}, secure)
            try:
                with pytest.raises(ConfigError, match="another process listens on"):
                    second.start()
            finally:
                second.stop()
            assert path.stat().st_ino == inode
        reply = request(first.endpoint, "ping", timeout_s=10, secure=client_security(curve.public, curve.ops))
        assert reply == {"pong": True}
    finally:
        first.stop()
        curve.sec.close()
        ctx.term()
    assert not path.exists()       # the first removes its own file as it stops


def test_a_stale_socket_file_is_still_replaced(tmp_path):
    path = tmp_path / "control"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))           # a daemon that died: the file stays, nothing listens
    dead.close()
    ctx = zmq.Context()
    srv = ControlServer(ctx, f"ipc://{path}", lambda req: {"ok": True})
    srv.start()
    try:
        assert request(srv.endpoint, "status", timeout_s=10) == {"ok": True}
    finally:
        srv.stop()
        ctx.term()


@pytest.mark.skipif(not os.path.exists("/proc/net/unix"), reason="Linux's table of unix sockets")
def test_a_socket_file_whose_connect_is_refused_is_judged_by_the_table_of_listening_sockets(tmp_path, monkeypatch):
    """A stale file of a daemon run as another user (its connect refused: EACCES) stopped the
    start ("cannot tell whether a daemon listens"), a restart loop under systemd, where the
    plain ping had taken it as stale; a live one of another user is still refused."""
    from rfclassify.serve import control

    class Refused(socket.socket):
        def connect(self, address):
            raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(control.socket, "socket", Refused)

    stale = tmp_path / "stale"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(stale))
    dead.close()
    assert control._listened_on(f"ipc://{stale}", stale) is False
    live = tmp_path / "live"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(live))
    listener.listen(1)
    try:
        assert control._listened_on(f"ipc://{live}", live) is True
    finally:
        listener.close()


def test_a_server_removes_only_the_socket_file_it_made(tmp_path):
    """The stop removed whatever socket was at the path, another process's included."""
    path = tmp_path / "control"
    ctx = zmq.Context()
    srv = ControlServer(ctx, f"ipc://{path}", lambda req: {"ok": True})
    srv.start()
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        path.unlink()
        other.bind(str(path))      # another process's socket now lives at the path
        other.listen(1)
        srv.stop()
        assert path.exists()
    finally:
        srv.stop()
        other.close()
        ctx.term()


def test_a_second_daemon_never_takes_a_curve_daemons_control_socket(tiny_model_dir, tmp_path, curve):
    """Two daemons, one config with curve_control: the second refuses at its control socket,
    before loading the model, and the first still answers `status` on its file."""
    pytest.importorskip("onnxruntime")
    from rfclassify.serve.config import SecurityConfig
    from rfclassify.serve.daemon import Daemon
    from rfclassify.serve.demo import local_config

    cfg = replace(local_config(tmp_path, model_dir=str(tiny_model_dir), backend="onnxruntime"),
                  security=SecurityConfig(secret_key_file=str(curve.secret), authorized_keys_dir=str(curve.allowed),
                                          curve_control=True, curve_output=True))
    first = Daemon(cfg)
    first.start()
    second = Daemon(cfg)
    try:
        inode = os.stat(tmp_path / "control").st_ino
        with pytest.raises(ConfigError, match="another process listens on"):
            second.start()                 # stops what it started on the way out
        assert second.engine is None       # refused before the model loaded
        assert os.stat(tmp_path / "control").st_ino == inode
        st = request(first.control.endpoint, "status", timeout_s=10, secure=client_security(curve.public, curve.ops))
        assert st["health"] in ("ok", "degraded")
    finally:
        second.stop(drain=False)
        first.stop(drain=False)
