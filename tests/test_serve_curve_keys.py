"""CURVE key files: `rfclassify keys --force` never exposes a secret and replaces a pair whole;
damaged keys are named where they are read (the start, `--check-config`, `status`), not by
ZeroMQ's "Invalid argument" after the model has loaded; a world-readable secret is warned of.

The file-system steps of create_key_pair are watched through a Python audit hook (sys.audit's
"open", "os.chmod", "os.rename", "os.remove" events, raised before each step): it snapshots the
key folder at every step, or fails one step the way a full disk would."""

from __future__ import annotations

import errno
import os
import stat
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from rfclassify._exceptions import ConfigError
from rfclassify.cli import main
from rfclassify.serve.security import DaemonSecurity, create_key_pair, load_key_pair

_EVENTS = ("open", "os.chmod", "os.rename", "os.remove")


class _Watch:
    """What the audit hook does while a test watches `folder` (in the test's thread only)."""

    folder: Path | None = None
    thread: int | None = None
    snapshots: list[tuple[str, list[tuple[str, int, bytes]]]] = []
    fail_open_of: str | None = None      # a write-open of a file whose name holds this fails (ENOSPC)
    busy = False


def _hook(event: str, args: tuple) -> None:
    w = _Watch
    if w.folder is None or w.busy or event not in _EVENTS or threading.get_ident() != w.thread:
        return
    if (event == "open" and w.fail_open_of is not None and w.fail_open_of in os.fsdecode(args[0])
            and isinstance(args[2], int) and args[2] & (os.O_WRONLY | os.O_RDWR)):
        raise OSError(errno.ENOSPC, "No space left on device", os.fsdecode(args[0]))
    w.busy = True          # the snapshot's own opens are not watched
    try:
        files = []
        for entry in os.scandir(w.folder):
            if entry.is_file(follow_symlinks=False):
                mode = stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode)
                files.append((entry.name, mode, Path(entry.path).read_bytes()))
        w.snapshots.append((event, files))
    finally:
        w.busy = False


sys.addaudithook(_hook)   # for the process's life (hooks cannot be removed): inert unless watching


@pytest.fixture()
def watch():
    def start(folder: Path, fail_open_of: str | None = None) -> list:
        _Watch.snapshots = []
        _Watch.fail_open_of = fail_open_of
        _Watch.thread = threading.get_ident()
        _Watch.folder = folder
        return _Watch.snapshots
    yield start
    _Watch.folder = None
    _Watch.fail_open_of = None


def _secret_line(path: Path) -> bytes:
    return next(line for line in path.read_bytes().splitlines() if b"secret-key" in line)


def test_force_never_leaves_the_new_secret_in_a_file_others_may_read(tmp_path, watch):
    """`keys --force` over a secret file of mode 0644 (an operator's copy, an old tool): pyzmq's
    writer truncated that file, kept its mode, wrote the new secret into it and only then did
    chmod 0600 follow, so another user could read the new secret meanwhile."""
    folder = tmp_path / "keys"
    create_key_pair(folder, "daemon")
    (folder / "daemon.key_secret").chmod(0o644)
    old_umask = os.umask(0)        # the function, not the caller's umask, keeps the secret private
    try:
        snapshots = watch(folder)
        create_key_pair(folder, "daemon", overwrite=True)
    finally:
        os.umask(old_umask)
        _Watch.folder = None
    secret = _secret_line(folder / "daemon.key_secret")
    assert len(snapshots) >= 3          # the hook saw the function's steps
    exposed = [(event, name, oct(mode)) for event, files in snapshots for name, mode, data in files
               if secret in data and mode & 0o077]
    assert not exposed, exposed
    assert stat.S_IMODE((folder / "daemon.key_secret").stat().st_mode) == 0o600
    assert stat.S_IMODE((folder / "daemon.key").stat().st_mode) == 0o644
    assert sorted(p.name for p in folder.iterdir()) == ["daemon.key", "daemon.key_secret"]   # no temporaries


@pytest.mark.parametrize("failing", ["key_secret", ".key"])
def test_a_failed_force_leaves_the_old_pair_whole(tmp_path, watch, capsys, failing):
    """A write that fails (here the disk full as one of the two files is opened) left the new
    public key beside the old secret one: a pair that does not match, with exit 2."""
    folder = tmp_path / "keys"
    create_key_pair(folder, "daemon")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    watch(folder, fail_open_of=failing)
    try:
        rc = main(["keys", "--dir", str(folder), "--name", "daemon", "--force"])
    finally:
        _Watch.folder = None
    assert rc == 2
    assert "No space left on device" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    load_key_pair(folder / "daemon.key_secret")     # still a pair that matches


def test_force_refuses_a_directory_in_the_way_before_touching_the_other_file(tmp_path):
    folder = tmp_path / "keys"
    create_key_pair(folder, "daemon")
    (folder / "daemon.key_secret").unlink()
    (folder / "daemon.key_secret").mkdir()
    public = (folder / "daemon.key").read_bytes()
    with pytest.raises(ConfigError, match="daemon.key_secret"):
        create_key_pair(folder, "daemon", overwrite=True)
    assert (folder / "daemon.key").read_bytes() == public


def _value(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if name in line).split('"')[1]


def _damaged_copies(folder: Path) -> dict[str, Path]:
    """A key pair's secret file, copied with one slip each (a character lost in a copy and
    paste, characters that are not Z85, the public key of another pair, a short public key)."""
    import zmq

    _, secret = create_key_pair(folder, "daemon")
    text = secret.read_text()
    public_key, secret_key = _value(text, "public-key"), _value(text, "secret-key")
    cases = {"secret_dropped_char": text.replace(secret_key, secret_key[:-1]),
             "secret_not_z85": text.replace(secret_key, "~" * 40),
             "secret_other_public": text.replace(public_key, zmq.curve_keypair()[0].decode()),
             "public_short": text.replace(public_key, public_key[:-5])}
    out = {}
    for name, body in cases.items():
        out[name] = folder / f"{name}.key_secret"
        out[name].write_text(body)
        out[name].chmod(0o600)
    return out


@pytest.mark.parametrize("case,needle", [("secret_dropped_char", "39 characters long"),
                                         ("secret_not_z85", "characters Z85 does not use"),
                                         ("secret_other_public", "not the one its secret key gives")])
def test_a_damaged_secret_key_is_named_by_check_config(tmp_path, capsys, case, needle):
    """Each passed `serve --check-config` (exit 0) and failed the start after the model had
    loaded with "output tcp://...: Invalid argument", naming neither the key nor the file."""
    secret = _damaged_copies(tmp_path / "k")[case]
    with pytest.raises(ConfigError, match=needle) as err:
        DaemonSecurity(SimpleNamespace(secret_key_file=str(secret), input_server_key_file="",
                                       authorized_keys_dir=""))
    assert str(secret) in str(err.value)
    config = tmp_path / "serve.toml"
    config.write_text(f'[security]\ncurve_output = true\nsecret_key_file = "{secret}"\n')
    assert main(["serve", "--config", str(config), "--check-config"]) == 2
    err_text = capsys.readouterr().err
    assert str(secret) in err_text and needle in err_text and err_text.count("\n") == 1, err_text


def test_a_short_authorized_client_key_is_refused_at_the_start_naming_it(tmp_path, capsys):
    """zmq.auth read it, libzmq never matched it: that client was refused without a word."""
    _, secret = create_key_pair(tmp_path / "k", "daemon")
    allowed = tmp_path / "allowed"
    create_key_pair(allowed, "ops")
    (allowed / "ops.key_secret").unlink()
    (allowed / "short.key").write_text('curve\n    public-key = "abc"\n')
    with pytest.raises(ConfigError, match=r"short\.key: its public key is 3 characters long"):
        DaemonSecurity(SimpleNamespace(secret_key_file=str(secret), input_server_key_file="",
                                       authorized_keys_dir=str(allowed)))
    config = tmp_path / "serve.toml"
    config.write_text(f'[security]\ncurve_control = true\nsecret_key_file = "{secret}"\n'
                      f'authorized_keys_dir = "{allowed}"\n')
    assert main(["serve", "--config", str(config), "--check-config"]) == 2
    assert "short.key" in capsys.readouterr().err


def test_status_names_a_damaged_server_key_or_key_pair(tmp_path, capsys):
    """It said "control ipc://...: Invalid argument", naming no file."""
    damaged = _damaged_copies(tmp_path / "k")
    public = tmp_path / "k" / "daemon.key"
    for argv, bad in ((["--server-key", str(damaged["public_short"])], damaged["public_short"]),
                      (["--server-key", str(public), "--key", str(damaged["secret_dropped_char"])],
                       damaged["secret_dropped_char"])):
        assert main(["status", "--control", f"ipc://{tmp_path}/none", "--timeout", "0.1", *argv]) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and "damaged CURVE key file" in err and err.count("\n") == 1, err


def test_a_world_readable_secret_key_is_used_with_a_warning(tmp_path, caplog):
    _, secret = create_key_pair(tmp_path / "k", "daemon")
    DaemonSecurity(SimpleNamespace(secret_key_file=str(secret), input_server_key_file="", authorized_keys_dir=""))
    assert "readable by every user" not in caplog.text
    secret.chmod(0o644)
    with caplog.at_level("WARNING", logger="rfclassify.serve.security"):
        DaemonSecurity(SimpleNamespace(secret_key_file=str(secret), input_server_key_file="",
                                       authorized_keys_dir=""))
    line = next(r for r in caplog.records if "readable by every user" in r.getMessage())
    assert line.levelname == "WARNING" and str(secret) in line.getMessage() and "0644" in line.getMessage()
