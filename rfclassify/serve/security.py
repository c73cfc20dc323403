"""CURVE encryption and authentication for the daemon's ZeroMQ sockets.

Keys are zmq.auth certificate files: `NAME.key` holds the public key (give it to peers),
`NAME.key_secret` the public and secret key (keep it private, mode 0600). `rfclassify keys`
makes them. A socket that binds is normally the CURVE server: it needs its own secret file;
with an authorized-keys directory (the `.key` files of allowed clients) a ZAP authenticator
thread turns every other client away, without one any client that knows the server's public
key gets in (encryption without client authentication). A socket that connects to a CURVE
server is a client: it needs the server's public key and a key pair of its own.

Every key is checked where it is read (40 Z85 characters, 32 bytes; a secret file's public
key the one its secret key gives), so a damaged file is named at the start and by
`serve --check-config`, not by a ZeroMQ "Invalid argument" after the model has loaded.

GNU Radio's gr-zeromq has no CURVE, so a GNU Radio front end talks to the daemon in clear;
use CURVE for the native input, the results and the control socket.
"""

from __future__ import annotations

import datetime
import logging
import os
import stat
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq
import zmq.auth
from zmq.utils import z85

from rfclassify._atomic import replacing_together
from rfclassify._exceptions import ConfigError

log = logging.getLogger(__name__)

ROLES = ("input", "output", "control")
KEY_BYTES = 32
KEY_Z85_CHARS = 40

# zmq.auth's certificate layout (czmq's), so that zmq.auth and czmq read what we write
_PUBLIC_BANNER = ("#   ****  Generated on {0} by rfclassify  ****\n"
                  "#   ZeroMQ CURVE Public Certificate\n"
                  "#   Exchange securely, or use a secure mechanism to verify the contents\n"
                  "#   of this file after exchange.\n\n")
_SECRET_BANNER = ("#   ****  Generated on {0} by rfclassify  ****\n"
                  "#   ZeroMQ CURVE **Secret** Certificate\n"
                  "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.\n\n")


def _certificate_text(banner: str, public: bytes, secret: bytes | None = None) -> str:
    text = banner.format(datetime.datetime.now()) + "metadata\ncurve\n"
    text += f'    public-key = "{public.decode("ascii")}"\n'
    if secret is not None:
        text += f'    secret-key = "{secret.decode("ascii")}"\n'
    return text


def _write_new_file(path: Path, text: str, mode: int) -> None:
    """Write text into a file created here with `mode` from its first moment: a file that
    existed is never opened (one replaced by `--force` kept its old mode, 0644, while the new
    secret was written into it, and was chmod 0600 only afterwards)."""
    path.unlink(missing_ok=True)     # a temporary a crash left, of a process with our pid
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)          # exactly mode: the umask may have taken bits off the public 0644
        data = memoryview(text.encode("ascii"))
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


def create_key_pair(directory: str | os.PathLike[str], name: str = "rfclassify", *,
                    overwrite: bool = False) -> tuple[Path, Path]:
    """Write NAME.key (public, 0644) and NAME.key_secret (secret, 0600) into directory.

    Both are written under temporary names (the secret one created 0600) and renamed into place
    together (rfclassify._atomic.replacing_together): a failure leaves the old pair as it was,
    never a new public key beside the old secret one."""
    if not name or "/" in name or name.startswith("."):
        raise ConfigError(f"key name must be a plain file name, got {name!r}")
    d = Path(directory)
    public, secret = d / f"{name}.key", d / f"{name}.key_secret"
    existing = [p for p in (public, secret) if p.exists() or p.is_symlink()]
    if existing and not overwrite:
        raise ConfigError(f"key files exist already: {', '.join(map(str, existing))} (use --force to replace them)")
    for p in existing:
        if p.is_dir():   # its rename would fail after the other file's: a mismatched pair
            raise ConfigError(f"cannot replace {p}: it is a directory")
    public_z85, secret_z85 = zmq.curve_keypair()
    try:
        with replacing_together([secret, public]) as (tmp_secret, tmp_public):
            _write_new_file(tmp_secret, _certificate_text(_SECRET_BANNER, public_z85, secret_z85), 0o600)
            _write_new_file(tmp_public, _certificate_text(_PUBLIC_BANNER, public_z85), 0o644)
    except OSError as exc:
        raise ConfigError(f"cannot write keys to {d}: {exc.strerror or exc}") from None
    return public, secret


def _key_problem(key: bytes) -> str:
    """What is wrong with a Z85 CURVE key (40 characters for 32 bytes), or "": libzmq refused
    a damaged key only when a socket was given it ("Invalid argument", after the model had
    loaded), and zmq.auth admitted a short client key that nothing ever matched."""
    outside = sorted({chr(c) for c in key} - set(z85.Z85CHARS.decode("ascii")))
    if outside:
        return f"has characters Z85 does not use ({''.join(outside)[:10]!r})"
    if len(key) != KEY_Z85_CHARS:
        return f"is {len(key)} characters long, not {KEY_Z85_CHARS}"
    try:
        raw = z85.decode(key)
    except (ValueError, KeyError, struct.error):   # five characters past 2**32
        return "is not valid Z85"
    return "" if len(raw) == KEY_BYTES and z85.encode(raw) == key else "is not valid Z85"


def _check_key(key: bytes, path: str | os.PathLike[str], what: str) -> None:
    problem = _key_problem(key)
    if problem:
        raise ConfigError(f"damaged CURVE key file {path}: its {what} key {problem}")


def _load(path: str | os.PathLike[str], need_secret: bool) -> tuple[bytes, bytes | None]:
    try:
        public, secret = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read CURVE key file {path}: {exc}") from None
    _check_key(public, path, "public")
    if need_secret:
        if not secret:
            raise ConfigError(f"{path} holds no secret key (use the .key_secret file)")
        _check_key(secret, path, "secret")
        try:
            matches = zmq.curve_public(secret) == public
        except zmq.ZMQError:   # a libzmq without CURVE: the socket options will say so
            matches = True
        if not matches:
            raise ConfigError(f"damaged CURVE key file {path}: its public key is not the one its secret key "
                              "gives (make a new pair with `rfclassify keys`)")
    return public, secret


def load_key_pair(secret_file: str | os.PathLike[str]) -> tuple[bytes, bytes]:
    """(public, secret) Z85 keys from a .key_secret file; ConfigError if missing or invalid."""
    public, secret = _load(secret_file, need_secret=True)
    assert secret is not None
    return public, secret


def load_public_key(key_file: str | os.PathLike[str]) -> bytes:
    """The Z85 public key from a .key (or .key_secret) file; ConfigError if missing or invalid."""
    return _load(key_file, need_secret=False)[0]


def warn_if_readable_by_others(secret_file: str | os.PathLike[str]) -> None:
    """A WARNING log line where every user may read the secret key file (it is used all the same)."""
    try:
        mode = stat.S_IMODE(os.stat(secret_file).st_mode)
    except OSError:
        return
    if mode & stat.S_IROTH:
        log.warning("CURVE secret key file %s is readable by every user (mode %04o): anyone on this machine "
                    "can take its identity; chmod 600 it", secret_file, mode)


def _set_keys(sock: zmq.Socket, public: bytes, secret: bytes) -> None:
    sock.curve_secretkey = secret
    sock.curve_publickey = public


def configure_server(sock: zmq.Socket, secret_file: str | os.PathLike[str]) -> None:
    """Make sock a CURVE server with the key pair in secret_file (call before bind/connect)."""
    _set_keys(sock, *load_key_pair(secret_file))
    sock.curve_server = True


def configure_client(sock: zmq.Socket, server_key_file: str | os.PathLike[str],
                     secret_file: str | os.PathLike[str] | None = None) -> None:
    """Make sock a CURVE client of the server whose public key is in server_key_file.

    secret_file: our own key pair (needed when the server authenticates clients); None makes
    a throw-away pair, enough for a server that accepts any client.
    """
    server_public = load_public_key(server_key_file)
    _set_keys(sock, *(load_key_pair(secret_file) if secret_file else zmq.curve_keypair()))
    sock.curve_serverkey = server_public


def client_security(server_key_file: str | os.PathLike[str],
                    secret_file: str | os.PathLike[str] | None = None) -> Callable[[zmq.Socket], None]:
    """A callable applying configure_client (for `rfclassify status` and other clients)."""
    load_public_key(server_key_file)  # fail early, with the file's name
    if secret_file:
        load_key_pair(secret_file)
        warn_if_readable_by_others(secret_file)
    return lambda sock: configure_client(sock, server_key_file, secret_file)


def _read_authorized_keys(authorized_keys_dir: str | os.PathLike[str]) -> tuple[dict[bytes, str], list[str]]:
    """({Z85 public key: file name} of the readable *.key files, [one line per problem]).
    Hidden files are skipped, as zmq.auth skips them."""
    d = Path(authorized_keys_dir)
    if not d.is_dir():
        return {}, [f"authorized keys directory not found: {d}"]
    files = sorted(p for p in d.glob("*.key") if not p.name.startswith("."))
    if not files:
        return {}, [f"no client public keys (*.key) in {d}"]
    keys: dict[bytes, str] = {}
    errors = []
    for path in files:
        try:
            keys[load_public_key(path)] = path.name
        except ConfigError as exc:
            errors.append(str(exc))
    return keys, errors


def load_authorized_keys(authorized_keys_dir: str | os.PathLike[str]) -> dict[bytes, str]:
    """{Z85 public key: file name} of the admitted clients; ConfigError where the folder is not
    one, holds no key, or holds one that cannot be read or is damaged (a key zmq.auth reads
    but libzmq never matches, such as a short one, admitted nobody without a word)."""
    keys, errors = _read_authorized_keys(authorized_keys_dir)
    if errors:
        raise ConfigError(errors[0])
    return keys


def check_authorized_keys_dir(authorized_keys_dir: str | os.PathLike[str]) -> Path:
    """The folder of admitted clients' public keys; ConfigError where it is not one, holds none,
    or holds one that cannot be read or is damaged: zmq.auth loads the folder whole, and one bad
    file refused every client, with only a line in the log (before the sixty-sixth session)."""
    load_authorized_keys(authorized_keys_dir)
    return Path(authorized_keys_dir)


class AdmittedKeys:
    """The ZAP authenticator's credentials provider (zmq.auth's configure_curve_callback): admits
    the clients whose public keys it holds. `keys` is replaced whole on a reload, so the
    authenticator's thread sees the old set or the new one."""

    def __init__(self, keys: dict[bytes, str]) -> None:
        self.keys = dict(keys)

    def callback(self, domain: str, client_key: bytes) -> bool:
        """zmq.auth's question for each CURVE handshake: is client_key (Z85) admitted in domain?"""
        return client_key in self.keys


def start_authenticator(context: zmq.Context, authorized_keys_dir: str | os.PathLike[str],
                        admitted: AdmittedKeys | None = None) -> Any:
    """A running ZAP authenticator in context that admits only the clients whose .key files
    are in authorized_keys_dir (or those `admitted` holds, which a reload may change). Stop it
    (`.stop()`) before terminating the context."""
    if admitted is None:
        admitted = AdmittedKeys(load_authorized_keys(authorized_keys_dir))
    from zmq.auth.thread import ThreadAuthenticator

    auth = ThreadAuthenticator(context)
    auth.start()
    auth.configure_curve_callback(domain="*", credentials_provider=admitted)
    return auth


class DaemonSecurity:
    """Applies CURVE to the daemon's sockets by role: `security(sock, "input"|"output"|"control")`.

    Built from the daemon's [security] table (serve/config.py SecurityConfig): secret_key_file
    (the daemon's key pair), input_server_key_file (set when the daemon connects its input to
    a CURVE server: the input socket is then a client), authorized_keys_dir (client keys
    admitted on server sockets; empty = any client). Every file is read and checked here, once:
    the sockets get the keys read then. `reload()` (SIGHUP) reads the admitted keys again.
    Call close() before context.term(): the authenticator's thread holds sockets in that context.
    """

    def __init__(self, config: Any) -> None:
        self.config = config
        if not config.secret_key_file:
            raise ConfigError("security.secret_key_file is required for CURVE (make one with `rfclassify keys`)")
        self.key_pair = load_key_pair(config.secret_key_file)
        warn_if_readable_by_others(config.secret_key_file)
        self.input_server_key = load_public_key(config.input_server_key_file) if config.input_server_key_file else None
        # found here, not when a socket is made after the model loads
        self.admitted = AdmittedKeys(load_authorized_keys(config.authorized_keys_dir)) \
            if config.authorized_keys_dir else None
        self._auth: dict[int, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, sock: zmq.Socket, role: str) -> None:
        if role not in ROLES:
            raise ValueError(f"unknown socket role {role!r}")
        if role == "input" and self.input_server_key is not None:
            _set_keys(sock, *self.key_pair)
            sock.curve_serverkey = self.input_server_key
            return
        if self.admitted is not None:
            with self._lock:
                if id(sock.context) not in self._auth:
                    self._auth[id(sock.context)] = start_authenticator(sock.context, self.config.authorized_keys_dir,
                                                                       self.admitted)
        _set_keys(sock, *self.key_pair)
        sock.curve_server = True

    def socket_status(self, role: str) -> dict[str, Any]:
        """`status`'s `curve` object for the socket of role, which uses CURVE: {"role": "client"}
        for an input connected to the front end's CURVE server; else {"role": "server",
        "admitted_keys": N}, N the client keys admitted now (a SIGHUP may have changed them), or
        None where any client that knows the daemon's public key gets in."""
        if role not in ROLES:
            raise ValueError(f"unknown socket role {role!r}")
        if role == "input" and self.input_server_key is not None:
            return {"role": "client"}
        admitted = self.admitted
        return {"role": "server", "admitted_keys": None if admitted is None else len(admitted.keys)}

    def reload(self) -> tuple[list[str], list[str]]:
        """Read the admitted clients' keys again (SIGHUP) and look at the key files: (what
        changed and is applied, what changed and needs a restart), as phrases for the log line.
        The admitted set becomes exactly the keys readable now: a damaged file's client, or
        every client where the folder is gone or empty, is refused (an ERROR line names why)."""
        applied: list[str] = []
        restart: list[str] = []
        if self.admitted is not None:
            keys, errors = _read_authorized_keys(self.config.authorized_keys_dir)
            for error in errors:
                log.error("SIGHUP: authorized keys: %s", error)
            if not keys:
                log.error("SIGHUP: no client key is admitted now: every client is refused")
            old, self.admitted.keys = self.admitted.keys, keys
            added = sorted(keys[k] for k in keys.keys() - old.keys())
            removed = sorted(old[k] for k in old.keys() - keys.keys())
            if added or removed:
                applied.append(f"authorized client keys ({len(keys)} admitted from {self.config.authorized_keys_dir}"
                               + (f"; added {', '.join(added)}" if added else "")
                               + (f"; removed {', '.join(removed)}" if removed else "") + ")")
        read: Callable[[str], Any]
        for name, loaded, read in (("secret_key_file", self.key_pair, load_key_pair),
                                   ("input_server_key_file", self.input_server_key, load_public_key)):
            path = getattr(self.config, name)
            if not path or loaded is None:
                continue
            try:
                now = read(path)
            except ConfigError as exc:
                restart.append(f"security.{name} (cannot be read now: {exc}; the daemon keeps the key it started with)")
                continue
            if now != loaded:
                restart.append(f"security.{name} (its key changed; the daemon keeps the one it started with)")
        return applied, restart

    def close(self) -> None:
        """Stop the authenticator threads (idempotent)."""
        with self._lock:
            auths, self._auth = list(self._auth.values()), {}
        for auth in auths:
            auth.stop()


def daemon_socket_security(config: Any) -> DaemonSecurity:
    """The daemon's socket hook for its [security] config (see DaemonSecurity)."""
    return DaemonSecurity(config)
