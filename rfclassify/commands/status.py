"""`rfclassify status`: ask a running daemon for its health and counters.

Imports only zmq, json and the standard library so it starts instantly. Exit codes: 0 when
the daemon answered (whatever its health: read `health` for that), 1 when no daemon answered
within --timeout (one line on stderr; with --watch it keeps trying), 2 for a usage mistake.
"""

from __future__ import annotations

import argparse
import sys
import time

from rfclassify._argtypes import seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--control", metavar="ENDPOINT",
                        help="control endpoint (default: the daemon's default socket that exists)")
    parser.add_argument("--json", action="store_true",
                        help="print the raw status reply as JSON (a NaN or infinity in it as null)")
    parser.add_argument("--watch", nargs="?", type=seconds, const=2.0, metavar="SECONDS",
                        help="refresh every SECONDS (default 2) until interrupted")
    parser.add_argument("--timeout", type=seconds, default=2.0, metavar="SECONDS",
                        help="how long to wait for the daemon (default 2)")
    parser.add_argument("--server-key", metavar="FILE",
                        help="the daemon's CURVE public key (.key) when its control socket uses CURVE")
    parser.add_argument("--key", metavar="FILE",
                        help="our CURVE key pair (.key_secret), when the daemon admits only known clients")


def _rendered(reply: dict, endpoint: str) -> str:
    """The status table of `reply`; UnexpectedReplyError where it is a daemon's error reply or
    not a status this version can read (another service, or a daemon of another version): a
    field of an unexpected type once ended in a traceback. --json prints any reply."""
    from rfclassify.serve.control import UnexpectedReplyError
    from rfclassify.serve.status_view import render_status

    if isinstance(reply.get("error"), str):
        raise UnexpectedReplyError(f"{endpoint} answered with an error: {reply['error']}")
    try:
        if not isinstance(reply.get("health"), str) or not isinstance(reply.get("counters"), dict):
            raise TypeError("no health or counters")
        return render_status(reply)
    except (AttributeError, TypeError, KeyError, ValueError, IndexError, ArithmeticError) as exc:
        raise UnexpectedReplyError(f"the reply from {endpoint} is not a status this version reads ({exc}); "
                                   "--json prints it as it came") from None


def run(args: argparse.Namespace) -> int:
    from rfclassify.serve.control import NoDaemonError, client_endpoint, request, strict_json_text

    if args.key and not args.server_key:   # it was ignored, and the daemon's refusal read as no daemon
        from rfclassify._exceptions import ConfigError

        raise ConfigError("--key is our key pair for a daemon whose control socket uses CURVE: give the "
                          "daemon's public key with --server-key too")
    endpoint = client_endpoint(args.control)
    secure = None
    if args.server_key:
        from rfclassify.serve.security import client_security

        secure = client_security(args.server_key, args.key)
    while True:
        try:
            reply = request(endpoint, "status", timeout_s=args.timeout, secure=secure)
            text = None if args.json else _rendered(reply, endpoint)
        except NoDaemonError as exc:   # nothing answered, or not as a daemon this version reads
            print(f"rfclassify status: {exc}", file=sys.stderr, flush=True)
            if args.watch is None:
                return 1
            time.sleep(args.watch)     # watching: the daemon may be restarting
            continue
        if text is None:
            # strict JSON whatever came: Python's json reads NaN and Infinity (a daemon before the
            # seventy-first session sent them), and wrote them back out for jq to refuse
            print(strict_json_text(reply, indent=None if args.watch else 2, sort_keys=True), flush=True)
        else:
            if args.watch is not None and sys.stdout.isatty():
                print("\033[2J\033[H", end="")
            print(text, flush=True)
        if args.watch is None:
            return 0
        time.sleep(args.watch)
        if not args.json and not sys.stdout.isatty():
            print()
