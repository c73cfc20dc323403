"""SIGHUP and CURVE keys, through a running daemon (real sockets, real ZAP authenticator): a
client key added to or removed from authorized_keys_dir is applied, and said; a rotated key of
the daemon's own is said to need a restart. Before, the reload logged "reloaded nothing ...; no
other changes", a revoked client was still admitted and an added one still refused.

Daemon.reload() is what serve_forever runs on SIGHUP (tests/test_serve_process.py sends the
signal itself)."""

from __future__ import annotations

import logging
import shutil

import pytest

from rfclassify.serve.control import NoDaemonError, request
from rfclassify.serve.security import client_security, create_key_pair

pytest.importorskip("onnxruntime")


def _admitted(daemon, server_key, client_secret) -> bool:
    try:
        request(daemon.control.endpoint, "ping", timeout_s=1.0, secure=client_security(server_key, client_secret))
    except NoDaemonError:
        return False
    return True


@pytest.fixture()
def curve_daemon(tiny_model_dir, tmp_path):
    from rfclassify.serve.config import load_config
    from rfclassify.serve.daemon import Daemon

    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    create_key_pair(keys, "daemon")
    for name in ("ops", "new"):
        create_key_pair(keys, name)
    allowed.mkdir()
    shutil.copy(keys / "ops.key", allowed)
    config = tmp_path / "rfclassify.toml"
    config.write_text(f"""
[input]
endpoint = "tcp://127.0.0.1:*"
mode = "pull"
bind = true
[output]
endpoint = "tcp://127.0.0.1:*"
[control]
endpoint = "ipc://{tmp_path}/control"
[model]
dir = "{tiny_model_dir}"
backend = "onnxruntime"
[health]
tegrastats = false
[security]
secret_key_file = "{keys / 'daemon.key_secret'}"
authorized_keys_dir = "{allowed}"
curve_control = true
""")
    d = Daemon(load_config(config), config_path=str(config))
    d.start()
    try:
        yield d, keys, allowed
    finally:
        d.stop(drain=False)


def _reload_line(caplog) -> str:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("SIGHUP: reloaded")][-1]


def test_sighup_applies_added_and_revoked_client_keys(curve_daemon, caplog):
    d, keys, allowed = curve_daemon
    server = keys / "daemon.key"
    assert _admitted(d, server, keys / "ops.key_secret")
    assert not _admitted(d, server, keys / "new.key_secret")
    (allowed / "ops.key").unlink()                 # revoke ops, admit new
    shutil.copy(keys / "new.key", allowed)
    with caplog.at_level(logging.INFO):
        assert d.reload() == []                    # no config key changed
    line = _reload_line(caplog)
    assert "authorized client keys (1 admitted" in line and "added new.key" in line and "removed ops.key" in line
    assert "reloaded nothing" not in line
    assert not _admitted(d, server, keys / "ops.key_secret")
    assert _admitted(d, server, keys / "new.key_secret")

    # a damaged key dropped in: named in an ERROR line, its client refused, the others kept
    (allowed / "broken.key").write_text('curve\n    public-key = "abc"\n')
    shutil.copy(keys / "ops.key", allowed)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        d.reload()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("broken.key" in e and "damaged" in e for e in errors), errors
    assert "added ops.key" in _reload_line(caplog)
    assert _admitted(d, server, keys / "ops.key_secret") and _admitted(d, server, keys / "new.key_secret")

    caplog.clear()
    with caplog.at_level(logging.INFO):
        d.reload()                                 # nothing changed since
    assert "reloaded nothing (no reloadable key changed); no other changes" in _reload_line(caplog)


def test_sighup_says_a_rotated_daemon_key_needs_a_restart(curve_daemon, tmp_path, caplog):
    d, keys, _ = curve_daemon
    shutil.copy(keys / "daemon.key", tmp_path / "daemon_old.key")
    create_key_pair(keys, "daemon", overwrite=True)       # `rfclassify keys --force` in place
    with caplog.at_level(logging.INFO):
        d.reload()
    line = _reload_line(caplog)
    assert "NOT reloaded (restart needed): security.secret_key_file (its key changed" in line, line
    assert _admitted(d, tmp_path / "daemon_old.key", keys / "ops.key_secret")   # it serves the old key still
