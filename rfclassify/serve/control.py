"""The control socket: a REP server in the daemon and the REQ client `rfclassify status` uses.

Only zmq, json and the standard library are imported here, so `rfclassify status` starts in
milliseconds (no numpy, no inference runtime).

Requests are JSON objects `{"command": "status"}` (or "ping"); replies are JSON objects, with
`"error"` set for a request the daemon does not understand, and strict JSON (a non-finite
number is null: strict_json_text). The default endpoint is
`ipc:///run/rfclassify/control` (systemd's RuntimeDirectory=rfclassify); when that directory is
not writable (not run by systemd) the daemon falls back to `$XDG_RUNTIME_DIR/rfclassify/control`
or `/tmp/rfclassify-<uid>/control`. The client looks in the same places, in the same order, for
a socket that exists.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq

from rfclassify._exceptions import ConfigError, quoted

log = logging.getLogger(__name__)

SYSTEM_RUNTIME_DIR = Path("/run/rfclassify")
SOCKET_NAME = "control"
POLL_MS = 100
MAX_REQUEST_BYTES = 65536


def open_socket(context: zmq.Context, kind: int, role: str, endpoint: str, bind: bool,
                setup: Callable[[zmq.Socket], None] | None = None) -> zmq.Socket:
    """A socket of `kind`, given its options by setup(sock), then bound or connected.

    Shared by every socket of the daemon and the simulator (it lives here because this
    module stays light). On failure the socket is closed; a ZMQError becomes a ConfigError
    naming the role and endpoint, e.g. "input tcp://127.0.0.1:5555: Address already in use".
    """
    sock = context.socket(kind)
    try:
        if ":" in endpoint.partition("://")[2].rpartition(":")[0]:
            # an IPv6 address (tcp://[::1]:5555, tcp://::1:5555): ZeroMQ's sockets are IPv4-only
            # until told otherwise, and it failed with "No such device"
            sock.ipv6 = True
        if setup is not None:
            setup(sock)
        if bind:
            sock.bind(endpoint)
        else:
            sock.connect(endpoint)
    except zmq.ZMQError as exc:
        sock.close(linger=0)
        raise ConfigError(f"{role} {endpoint}: {exc}") from None
    except BaseException:
        sock.close(linger=0)
        raise
    return sock


def strict_json_text(value: Any, *, indent: int | None = None, sort_keys: bool = False) -> str:
    """value as JSON text that strict parsers read: each NaN or infinity written as null (a
    value that is not JSON's, as a string). Python's json writes them as NaN and Infinity,
    which jq and JavaScript's JSON.parse refuse: a status reply carrying one (a tegrastats
    temperature past a float's range, say), and `status --json` of it, could not be read by
    them before the seventy-first session. Used by the daemon's replies and `status --json`."""
    try:
        return json.dumps(value, default=str, allow_nan=False, indent=indent, sort_keys=sort_keys)
    except ValueError:   # a non-finite float somewhere: read back with each one as null
        pass
    # json's own scanner finds them, at any depth a reply's parse reached
    finite = json.loads(json.dumps(value, default=str), parse_constant=lambda _name: None)
    return json.dumps(finite, allow_nan=False, indent=indent, sort_keys=sort_keys)


class NoDaemonError(Exception):
    """No daemon answered on the control endpoint in time."""


class UnexpectedReplyError(NoDaemonError):
    """Something answered on the control endpoint, but not as a daemon does (not a JSON object)."""


def candidate_dirs() -> list[Path]:
    """Where a control socket may live, in the order the daemon prefers them."""
    dirs = [SYSTEM_RUNTIME_DIR]
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        dirs.append(Path(xdg) / "rfclassify")
    dirs.append(Path(f"/tmp/rfclassify-{os.getuid()}"))
    return dirs


def _usable_dir(path: Path, private: bool) -> bool:
    try:
        path.mkdir(mode=0o700 if private else 0o750, exist_ok=True)
        owner = path.stat().st_uid
    except OSError:
        return False
    if private and owner != os.getuid():
        return False          # someone else made our /tmp name first: do not put a socket there
    return os.access(path, os.W_OK | os.X_OK)


def server_endpoint(configured: str = "") -> str:
    """The endpoint the daemon binds: the configured one, else the first usable runtime dir."""
    if configured:
        return configured
    for i, d in enumerate(candidate_dirs()):
        if _usable_dir(d, private=i > 0):
            return f"ipc://{d / SOCKET_NAME}"
    raise ConfigError("no writable runtime directory for the control socket; set control.endpoint")


def client_endpoint(configured: str | None = None) -> str:
    """The endpoint `status` talks to: the given one, else the first default socket that exists."""
    if configured:
        return configured
    paths = [d / SOCKET_NAME for d in candidate_dirs()]
    for p in paths:
        if p.exists():
            return f"ipc://{p}"
    return f"ipc://{paths[0]}"


def ipc_path(endpoint: str) -> Path | None:
    return Path(endpoint[len("ipc://"):]) if endpoint.startswith("ipc://") else None


def _listened_on(endpoint: str, path: Path) -> bool:
    """Whether a process listens on the unix socket file at path: a connect() tells, at the
    OS level, whatever ZeroMQ security the socket speaks (refused: a stale file whose daemon
    died). Where the file's permissions refuse the connect (a socket left by a daemon of
    another user, root's, say), Linux's table of listening sockets tells; ConfigError where
    nothing can (the start refused such a stale file, a restart loop under systemd)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except (BlockingIOError, TimeoutError):   # a listener whose backlog is full
        return True
    except OSError as exc:
        if exc.errno == errno.EAGAIN:
            return True
        listed = _listening_in_proc(path) if exc.errno in (errno.EACCES, errno.EPERM) else None
        if listed is not None:
            return listed
        raise ConfigError(f"control endpoint {endpoint}: cannot tell whether a daemon listens on {path} "
                          f"({exc.strerror or exc}); remove the file if none runs, or name another path") from None
    finally:
        probe.close()
    return True


def _listening_in_proc(path: Path) -> bool | None:
    """Whether /proc/net/unix lists a listening socket bound to path (None: no such table, not
    Linux): it lists every process's sockets, whatever their files' permissions."""
    try:
        rows = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return None
    names = {str(path), os.path.abspath(path)}
    for row in rows:   # Num RefCount Protocol Flags Type St Inode Path
        fields = row.split()
        if len(fields) >= 8 and fields[7] in names and int(fields[3], 16) & 0x10000:   # __SO_ACCEPTCON
            return True
    return False


def _refuse_if_served(endpoint: str) -> None:
    """Raise ConfigError when something listens on endpoint, an ipc socket file that exists;
    return where the file is stale. A daemon whose control socket uses CURVE never answers the
    plain ping, and its live socket was once taken for stale: removed and bound again by a
    second daemon, which then failed on a busy port and removed the file on its way out, leaving
    the first daemon running without a control socket."""
    path = ipc_path(endpoint)
    if path is not None and not _listened_on(endpoint, path):
        return
    try:
        request(endpoint, "ping", timeout_s=0.3)
    except UnexpectedReplyError:
        raise ConfigError(f"something that is not an rfclassify daemon answers on {endpoint}") from None
    except NoDaemonError:
        if path is None:
            return
        raise ConfigError(f"another process listens on {endpoint} and does not answer a plain request (an "
                          "rfclassify daemon whose control socket uses CURVE?); stop it, or name another "
                          "control endpoint") from None
    raise ConfigError(f"another rfclassify daemon already answers on {endpoint}")


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = path.lstat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except OSError:
        return False


class ControlServer:
    """A REP socket served by its own thread; `handler(request) -> reply` builds each answer."""

    def __init__(self, context: zmq.Context, endpoint: str, handler: Callable[[dict[str, Any]], dict[str, Any]],
                 secure: Callable[[zmq.Socket, str], None] | None = None) -> None:
        self.context = context
        self.endpoint = server_endpoint(endpoint)
        self.handler = handler
        self._secure = secure
        self._stop = threading.Event()
        self._bound = threading.Event()
        self._error: BaseException | None = None
        self._socket_file: tuple[int, int] | None = None   # (device, inode) of the ipc file we bound
        self._thread = threading.Thread(target=self._run, name="control", daemon=True)

    def start(self, timeout_s: float = 5.0) -> None:
        self._thread.start()
        self._bound.wait(timeout_s)
        if self._error is not None:
            raise self._error

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread.ident is not None:      # started (a stop after a failed start joins nothing)
            self._thread.join(timeout_s)

    def _bind(self) -> zmq.Socket:
        path = ipc_path(self.endpoint)

        def setup(sock: zmq.Socket) -> None:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, MAX_REQUEST_BYTES)
            if self._secure is not None:
                self._secure(sock, "control")
            if path is not None and (path.exists() or path.is_symlink()):
                if not _is_socket(path):   # a mistyped endpoint naming a file: it was replaced (66th session)
                    raise ConfigError(f"control endpoint {self.endpoint}: {path} exists and is not a socket; "
                                      "name another path")
                _refuse_if_served(self.endpoint)
                path.unlink()        # a stale socket of a daemon that died (nothing listens); bind would fail

        old = os.umask(0o117)        # the socket file is created 0660 (group: operators)
        try:
            sock = open_socket(self.context, zmq.REP, "control", self.endpoint, True, setup)
        finally:
            os.umask(old)
        if path is not None:
            # the per-user fallback is private; systemd's runtime dir is shared with the group
            os.chmod(path, 0o660 if path.parent == SYSTEM_RUNTIME_DIR else 0o600)
            self._socket_file = _file_id(path)
        else:
            self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT) or self.endpoint
        return sock

    def _run(self) -> None:
        try:
            sock = self._bind()
        except BaseException as exc:  # noqa: BLE001 - handed to start()
            self._error = exc
            self._bound.set()
            return
        self._bound.set()
        try:
            while not self._stop.is_set():
                if not sock.poll(POLL_MS):
                    continue
                frames = sock.recv_multipart()     # every frame, or REP will not send the reply
                if len(frames) != 1:
                    answer = {"error": f"a request is one frame, got {len(frames)}"}
                else:
                    answer = self._answer(frames[0])
                sock.send(strict_json_text(answer).encode())
        except zmq.ContextTerminated:
            pass
        finally:
            sock.close(linger=0)
            path = ipc_path(self.endpoint)
            # the file this server bound, not one that another process put there since
            if path is not None and self._socket_file is not None and _file_id(path) == self._socket_file:
                try:
                    path.unlink()
                except OSError:
                    pass

    def _answer(self, raw: bytes) -> dict[str, Any]:
        try:
            request = json.loads(raw.decode("utf-8")) if raw.strip() else {}
        except (UnicodeDecodeError, ValueError):
            request = {"command": raw.decode("utf-8", "replace").strip()}
        except RecursionError:
            return {"error": "request is nested too deeply; send {\"command\": \"status\"}"}
        if not isinstance(request, dict):
            return {"error": "request must be a JSON object such as {\"command\": \"status\"}"}
        try:
            return self.handler(request)
        except Exception as exc:  # noqa: BLE001 - a status bug must not kill the control thread
            log.exception("control request %r failed", request)
            return {"error": f"internal error: {exc}"}


def request(endpoint: str, command: str = "status", timeout_s: float = 2.0,
            secure: Callable[[zmq.Socket], None] | None = None) -> dict[str, Any]:
    """Send one request and return the decoded reply; NoDaemonError when nothing answers in time.

    A malformed endpoint is a ConfigError (from open_socket)."""

    timeout_ms = max(1, int(timeout_s * 1000))

    def setup(sock: zmq.Socket) -> None:
        sock.setsockopt(zmq.LINGER, 0)   # an unanswered request must not hold up exit
        # a REQ socket blocks in send while it has no connection to send on (one seen stuck so
        # against a CURVE daemon that refused its key): bounded like the wait for the answer
        sock.setsockopt(zmq.SNDTIMEO, timeout_ms)
        if secure is not None:
            secure(sock)

    def no_answer() -> NoDaemonError:
        path = ipc_path(endpoint)
        hint = f" (no socket at {path})" if path is not None and not path.exists() else ""
        return NoDaemonError(f"no rfclassify daemon answered on {endpoint} within {timeout_s:g} s{hint}")

    sock = open_socket(zmq.Context.instance(), zmq.REQ, "control", endpoint, False, setup)
    try:
        try:
            sock.send(json.dumps({"command": command}).encode())
        except zmq.Again:
            raise no_answer() from None
        if not sock.poll(timeout_ms):
            raise no_answer()
        data = sock.recv()
    finally:
        sock.close(linger=0)
    try:
        reply = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):   # another service, or garbage
        raise UnexpectedReplyError(f"unexpected reply from {endpoint}: {len(data)} bytes that are not "
                                   f"JSON") from None
    if not isinstance(reply, dict):
        raise UnexpectedReplyError(f"unexpected reply from {endpoint}: {quoted(reply)}")
    return reply
