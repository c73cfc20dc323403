"""CURVE encryption and authentication for the daemon's ZeroMQ sockets.

Keys are zmq.auth certificate files: `NAME.key` holds the public key (give it to peers),
`NAME.key_secret` the public and secret key (keep it private, mode 0600). `rfclassify keys`
makes them. A socket that binds is normally the CURVE server: it needs its own secret file;
with an authorized-keys directory (the `.key` files of allowed clients) a ZAP authenticator
thread turns every other client away, without one any client that knows the server's public
key gets in (encryption without client authentication). A socket that connects to a CURVE
server is a client: it needs the server's public key and a key pair of its own.

GNU Radio's gr-zeromq has no CURVE, so a GNU Radio front end talks to the daemon in clear;
use CURVE for the native input, the results and the control socket.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq
import zmq.auth

from rfclassify._exceptions import ConfigError

ROLES = ("input", "output", "control")


def create_key_pair(directory: str | os.PathLike[str], name: str = "rfclassify", *,
                    overwrite: bool = False) -> tuple[Path, Path]:
    """Write NAME.key (public) and NAME.key_secret (secret, mode 0600) into directory."""
    if not name or "/" in name or name.startswith("."):
        raise ConfigError(f"key name must be a plain file name, got {name!r}")
    d = Path(directory)
    public, secret = d / f"{name}.key", d / f"{name}.key_secret"
    existing = [str(p) for p in (public, secret) if p.exists()]
    if existing and not overwrite:
        raise ConfigError(f"key files exist already: {', '.join(existing)} (use --force to replace them)")
    try:
        d.mkdir(parents=True, exist_ok=True)
        old_umask = os.umask(0o077)  # the secret file is never readable by others, not even briefly
        try:
            pub_path, sec_path = zmq.auth.create_certificates(str(d), name)
        finally:
            os.umask(old_umask)
        os.chmod(pub_path, 0o644)
        os.chmod(sec_path, 0o600)   # a replaced file kept its old mode: umask only shapes new ones
    except OSError as exc:
        raise ConfigError(f"cannot write keys to {d}: {exc.strerror or exc}") from None
    return Path(pub_path), Path(sec_path)


def _load(path: str | os.PathLike[str], need_secret: bool) -> tuple[bytes, bytes | None]:
    try:
        public, secret = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read CURVE key file {path}: {exc}") from None
    if need_secret and not secret:
        raise ConfigError(f"{path} holds no secret key (use the .key_secret file)")
    return public, secret


def load_key_pair(secret_file: str | os.PathLike[str]) -> tuple[bytes, bytes]:
    """(public, secret) Z85 keys from a .key_secret file; ConfigError if missing or invalid."""
    public, secret = _load(secret_file, need_secret=True)
    assert secret is not None
    return public, secret


def load_public_key(key_file: str | os.PathLike[str]) -> bytes:
    """The Z85 public key from a .key (or .key_secret) file."""
    return _load(key_file, need_secret=False)[0]


def configure_server(sock: zmq.Socket, secret_file: str | os.PathLike[str]) -> None:
    """Make sock a CURVE server with the key pair in secret_file (call before bind/connect)."""
    public, secret = load_key_pair(secret_file)
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_server = True


def configure_client(sock: zmq.Socket, server_key_file: str | os.PathLike[str],
                     secret_file: str | os.PathLike[str] | None = None) -> None:
    """Make sock a CURVE client of the server whose public key is in server_key_file.

    secret_file: our own key pair (needed when the server authenticates clients); None makes
    a throw-away pair, enough for a server that accepts any client.
    """
    server_public = load_public_key(server_key_file)
    public, secret = load_key_pair(secret_file) if secret_file else zmq.curve_keypair()
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_serverkey = server_public


def client_security(server_key_file: str | os.PathLike[str],
                    secret_file: str | os.PathLike[str] | None = None) -> Callable[[zmq.Socket], None]:
    """A callable applying configure_client (for `rfclassify status` and other clients)."""
    load_public_key(server_key_file)  # fail early, with the file's name
    if secret_file:
        load_key_pair(secret_file)
    return lambda sock: configure_client(sock, server_key_file, secret_file)


def check_authorized_keys_dir(authorized_keys_dir: str | os.PathLike[str]) -> Path:
    """The folder of admitted clients' public keys; ConfigError where it is not one, holds none,
    or holds one zmq.auth cannot read: it loads the folder whole, and one bad file refused every
    client, with only a line in the log (before the sixty-sixth session)."""
    d = Path(authorized_keys_dir)
    if not d.is_dir():
        raise ConfigError(f"authorized keys directory not found: {d}")
    keys = sorted(d.glob("*.key"))
    if not keys:
        raise ConfigError(f"no client public keys (*.key) in {d}")
    for key in keys:
        _load(key, need_secret=False)
    return d


def start_authenticator(context: zmq.Context, authorized_keys_dir: str | os.PathLike[str]) -> Any:
    """A running ZAP authenticator in context that admits only the clients whose .key files
    are in authorized_keys_dir. Stop it (`.stop()`) before terminating the context."""
    d = check_authorized_keys_dir(authorized_keys_dir)
    from zmq.auth.thread import ThreadAuthenticator

    auth = ThreadAuthenticator(context)
    auth.start()
    auth.configure_curve(domain="*", location=str(d))
    return auth


class DaemonSecurity:
    """Applies CURVE to the daemon's sockets by role: `security(sock, "input"|"output"|"control")`.

    Built from the daemon's [security] table (serve/config.py SecurityConfig): secret_key_file
    (the daemon's key pair), input_server_key_file (set when the daemon connects its input to
    a CURVE server: the input socket is then a client), authorized_keys_dir (client keys
    admitted on server sockets; empty = any client). Call close() before context.term():
    the authenticator's thread holds sockets in that context.
    """

    def __init__(self, config: Any) -> None:
        self.config = config
        if not config.secret_key_file:
            raise ConfigError("security.secret_key_file is required for CURVE (make one with `rfclassify keys`)")
        load_key_pair(config.secret_key_file)
        if config.input_server_key_file:
            load_public_key(config.input_server_key_file)
        if config.authorized_keys_dir:   # found here, not when a socket is made after the model loads
            check_authorized_keys_dir(config.authorized_keys_dir)
        self._auth: dict[int, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, sock: zmq.Socket, role: str) -> None:
        if role not in ROLES:
            raise ValueError(f"unknown socket role {role!r}")
        cfg = self.config
        if role == "input" and cfg.input_server_key_file:
            configure_client(sock, cfg.input_server_key_file, cfg.secret_key_file)
            return
        if cfg.authorized_keys_dir:
            with self._lock:
                if id(sock.context) not in self._auth:
                    self._auth[id(sock.context)] = start_authenticator(sock.context, cfg.authorized_keys_dir)
        configure_server(sock, cfg.secret_key_file)

    def close(self) -> None:
        """Stop the authenticator threads (idempotent)."""
        with self._lock:
            auths, self._auth = list(self._auth.values()), {}
        for auth in auths:
            auth.stop()


def daemon_socket_security(config: Any) -> DaemonSecurity:
    """The daemon's socket hook for its [security] config (see DaemonSecurity)."""
    return DaemonSecurity(config)
