"""CURVE over real sockets on 127.0.0.1: authorized clients get through, others do not; `rfclassify keys`."""

from __future__ import annotations

import stat
from types import SimpleNamespace

import pytest
import zmq

from rfclassify._exceptions import ConfigError
from rfclassify.cli import main
from rfclassify.serve.security import (DaemonSecurity, client_security, configure_client, configure_server,
                                       create_key_pair, load_key_pair)

TIMEOUT_MS = 1500


@pytest.fixture()
def keys(tmp_path):
    server_pub, server_sec = create_key_pair(tmp_path / "server", "daemon")
    client_pub, client_sec = create_key_pair(tmp_path / "clients", "alice")
    _, stranger_sec = create_key_pair(tmp_path / "others", "mallory")
    return SimpleNamespace(server_pub=server_pub, server_sec=server_sec, client_sec=client_sec,
                           stranger_sec=stranger_sec, allowed=tmp_path / "clients")


def _exchange(ctx: zmq.Context, server: zmq.Socket, client: zmq.Socket) -> bytes | None:
    """Bind server (REP), connect client (REQ), try one request; the reply or None."""
    server.linger = client.linger = 0
    client.sndtimeo = TIMEOUT_MS   # a REQ without a connection (a refused handshake) blocks in send
    port = server.bind_to_random_port("tcp://127.0.0.1")
    client.connect(f"tcp://127.0.0.1:{port}")
    try:
        client.send(b"ping")
    except zmq.Again:
        return None
    if not server.poll(TIMEOUT_MS):
        return None
    server.send(server.recv() + b"-pong")
    return client.recv() if client.poll(TIMEOUT_MS) else None


def test_key_files_and_modes(keys) -> None:
    public, secret = load_key_pair(keys.server_sec)
    assert len(public) == 40 and len(secret) == 40
    assert stat.S_IMODE(keys.server_sec.stat().st_mode) == 0o600
    with pytest.raises(ConfigError, match="exist"):
        create_key_pair(keys.server_sec.parent, "daemon")
    with pytest.raises(ConfigError, match="no secret key"):
        load_key_pair(keys.server_pub)


def test_authorized_client_gets_through_and_stranger_does_not(keys) -> None:
    ctx = zmq.Context()
    sec = DaemonSecurity(SimpleNamespace(secret_key_file=str(keys.server_sec), input_server_key_file="",
                                         authorized_keys_dir=str(keys.allowed)))
    socks = []
    try:
        server = ctx.socket(zmq.REP)
        socks.append(server)
        sec(server, "control")
        alice = ctx.socket(zmq.REQ)
        socks.append(alice)
        configure_client(alice, keys.server_pub, keys.client_sec)
        assert _exchange(ctx, server, alice) == b"ping-pong"

        server2 = ctx.socket(zmq.REP)
        socks.append(server2)
        sec(server2, "output")  # same context: the authenticator is shared
        mallory = ctx.socket(zmq.REQ)
        socks.append(mallory)
        configure_client(mallory, keys.server_pub, keys.stranger_sec)
        assert _exchange(ctx, server2, mallory) is None

        server3 = ctx.socket(zmq.REP)
        socks.append(server3)
        sec(server3, "control")
        plain = ctx.socket(zmq.REQ)
        socks.append(plain)
        assert _exchange(ctx, server3, plain) is None  # no CURVE at all
    finally:
        for s in socks:
            s.close(0)
        sec.close()
        ctx.term()  # would hang if close() left the authenticator running


@pytest.mark.timeout(60)
def test_status_request_refused_by_curve_ends_in_no_daemon_not_a_hang(keys) -> None:
    """A full run on Python 3.12 under load once left the stranger's REQ above blocked in
    send for the suite's 600 s (not reproduced alone): a REQ socket without a connection
    blocks in send. control.request bounds its send as it bounds the wait. Here the socket may
    only send over a completed connection (ZMQ_IMMEDIATE), which a refused handshake never
    makes, so without the bound the send would block for good."""
    import time

    from rfclassify.serve.control import NoDaemonError, request

    sec = DaemonSecurity(SimpleNamespace(secret_key_file=str(keys.server_sec), input_server_key_file="",
                                         authorized_keys_dir=str(keys.allowed)))
    ctx = zmq.Context()
    server = ctx.socket(zmq.REP)
    try:
        sec(server, "control")
        server.linger = 0
        port = server.bind_to_random_port("tcp://127.0.0.1")
        stranger = client_security(keys.server_pub, keys.stranger_sec)

        def refused_and_immediate(sock: zmq.Socket) -> None:
            stranger(sock)
            sock.setsockopt(zmq.IMMEDIATE, 1)

        t0 = time.monotonic()
        with pytest.raises(NoDaemonError, match="no rfclassify daemon answered"):
            request(f"tcp://127.0.0.1:{port}", timeout_s=0.5, secure=refused_and_immediate)
        assert time.monotonic() - t0 < 5
    finally:
        server.close(0)
        sec.close()
        ctx.term()


def test_encryption_only_server_admits_any_curve_client(keys) -> None:
    ctx = zmq.Context()
    server, client = ctx.socket(zmq.REP), ctx.socket(zmq.REQ)
    try:
        configure_server(server, keys.server_sec)
        client_security(keys.server_pub)(client)  # throw-away client key pair
        assert _exchange(ctx, server, client) == b"ping-pong"
    finally:
        server.close(0)
        client.close(0)
        ctx.term()


def test_input_role_is_a_client_when_the_front_end_is_the_server(keys) -> None:
    ctx = zmq.Context()
    sec = DaemonSecurity(SimpleNamespace(secret_key_file=str(keys.client_sec),
                                         input_server_key_file=str(keys.server_pub), authorized_keys_dir=""))
    pub, sub = ctx.socket(zmq.PUB), ctx.socket(zmq.SUB)
    try:
        pub.linger = sub.linger = 0
        configure_server(pub, keys.server_sec)   # a native front end with CURVE binds PUB
        port = pub.bind_to_random_port("tcp://127.0.0.1")
        sec(sub, "input")
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(f"tcp://127.0.0.1:{port}")
        for _ in range(50):  # PUB drops until the subscription has arrived
            pub.send(b"hello")
            if sub.poll(100):
                break
        assert sub.recv() == b"hello"
    finally:
        pub.close(0)
        sub.close(0)
        sec.close()
        ctx.term()


def test_config_mistakes_are_config_errors(keys, tmp_path) -> None:
    with pytest.raises(ConfigError, match="secret_key_file"):
        DaemonSecurity(SimpleNamespace(secret_key_file="", input_server_key_file="", authorized_keys_dir=""))
    with pytest.raises(ConfigError, match="cannot read"):
        DaemonSecurity(SimpleNamespace(secret_key_file=str(tmp_path / "nope"), input_server_key_file="",
                                       authorized_keys_dir=""))
    # found as the daemon starts, not when its data sockets are made after the model has loaded
    with pytest.raises(ConfigError, match="authorized keys directory not found"):
        DaemonSecurity(SimpleNamespace(secret_key_file=str(keys.server_sec), input_server_key_file="",
                                       authorized_keys_dir=str(tmp_path / "missing")))
    (tmp_path / "none").mkdir()
    with pytest.raises(ConfigError, match="no client public keys"):
        DaemonSecurity(SimpleNamespace(secret_key_file=str(keys.server_sec), input_server_key_file="",
                                       authorized_keys_dir=str(tmp_path / "none")))


def test_check_config_reads_the_curve_key_files(keys, tmp_path, capsys) -> None:
    """`serve --check-config` passed a CURVE config whose key file was missing; the start failed."""
    from rfclassify.cli import main

    for table, message in [("secret_key_file = \"\"", "security.secret_key_file is required"),
                           (f"secret_key_file = \"{tmp_path / 'nope'}\"", "cannot read CURVE key file"),
                           (f"secret_key_file = \"{keys.server_sec}\"\nauthorized_keys_dir = \"{tmp_path / 'x'}\"",
                            "authorized keys directory not found")]:
        cfg = tmp_path / "serve.toml"
        cfg.write_text(f"[security]\ncurve_control = true\n{table}\n")
        assert main(["serve", "--config", str(cfg), "--check-config"]) == 2
        assert message in capsys.readouterr().err
    cfg.write_text(f"[security]\ncurve_control = true\nsecret_key_file = \"{keys.server_sec}\"\n"
                   f"authorized_keys_dir = \"{keys.allowed}\"\n")
    assert main(["serve", "--config", str(cfg), "--check-config"]) == 0
    # one damaged client key: zmq.auth loads the folder whole, and refused every client with
    # only a log line (sixty-sixth session); named now, before the start
    (keys.allowed / "broken.key").write_text("metadata\ncurve\n")
    assert main(["serve", "--config", str(cfg), "--check-config"]) == 2
    err = capsys.readouterr().err
    assert "cannot read CURVE key file" in err and "broken.key" in err and "Traceback" not in err



def test_status_key_options_fail_early_and_a_key_alone_is_refused(keys, tmp_path, capsys) -> None:
    """`status --key` without --server-key was ignored (the daemon's CURVE socket then read as
    no daemon); a client key pair that cannot be read is named before any request."""
    from rfclassify.cli import main

    assert main(["status", "--control", f"ipc://{tmp_path}/none", "--timeout", "0.1",
                 "--key", str(keys.client_sec)]) == 2
    assert "--key is our key pair" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="cannot read CURVE key file"):
        client_security(keys.server_pub, tmp_path / "missing.key_secret")
    client_security(keys.server_pub, keys.client_sec)     # a good pair passes


def test_keys_command(tmp_path, capsys) -> None:
    assert main(["keys", "--dir", str(tmp_path / "k"), "--name", "edge1"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "k" / "edge1.key").exists() and "z85 public" in out
    assert main(["keys", "--dir", str(tmp_path / "k"), "--name", "edge1"]) == 2
    assert "exist" in capsys.readouterr().err
    assert main(["keys", "--dir", str(tmp_path / "k"), "--name", "edge1", "--force"]) == 0
