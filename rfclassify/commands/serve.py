"""`rfclassify serve`: run the streaming classification daemon (see docs/daemon.md)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from rfclassify._argtypes import finite_float, path_text
from rfclassify.engine.options import add_model_arguments
from rfclassify.serve.config import INPUT_FORMATS, INPUT_MODES, OUTPUT_FORMATS, OVERLOAD_POLICIES

CONFIG_ENV = "RFCLASSIFY_CONFIG"

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=path_text, metavar="FILE",
                        help=f"TOML config (default: ${CONFIG_ENV} if set); options below override it")
    g = parser.add_argument_group("input")
    g.add_argument("--input", metavar="ENDPOINT", help="input endpoint (default tcp://127.0.0.1:5555)")
    g.add_argument("--input-format", choices=INPUT_FORMATS, help="wire format (default native)")
    g.add_argument("--input-mode", choices=INPUT_MODES, help="SUB (default) or PULL (lossless hand-off)")
    bind = g.add_mutually_exclusive_group()
    bind.add_argument("--input-bind", dest="input_bind", action="store_true", default=None,
                      help="bind the input socket (default: connect to the front end)")
    bind.add_argument("--input-connect", dest="input_bind", action="store_false",
                      help="connect the input socket (the default)")
    g.add_argument("--sample-rate", type=finite_float, metavar="HZ",
                   help="sample rate of GNU Radio input (it carries none)")
    g.add_argument("--overload", choices=OVERLOAD_POLICIES,
                   help="what a full ingest queue does (default drop_oldest)")
    g = parser.add_argument_group("output and control")
    g.add_argument("--output", metavar="ENDPOINT", help="results PUB endpoint, bound (default tcp://127.0.0.1:5556)")
    g.add_argument("--output-format", choices=OUTPUT_FORMATS,
                   help="json: [topic, json] frames (default); gr-pmt: one PMT dict a frame, for GNU Radio's "
                        "zeromq.sub_msg_source")
    g.add_argument("--control", metavar="ENDPOINT",
                   help="control REP endpoint (default ipc:///run/rfclassify/control or a per-user fallback)")
    g.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus metrics here (default off)")
    # no defaults filled in: an option not given leaves the config file's value
    add_model_arguments(parser, fill_defaults=False)
    g = parser.add_argument_group("batching")
    g.add_argument("--max-batch", type=int, metavar="WINDOWS", help="windows per backend batch (default 64)")
    g.add_argument("--max-wait-ms", type=finite_float, metavar="MS", help="longest a burst waits for its batch (default 2)")
    parser.add_argument("--check-config", action="store_true", help="validate the configuration, print it, exit")


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Command-line values as 'section.key' overrides (None: not given)."""
    level = {1: "info", 2: "debug"}.get(min(getattr(args, "verbose", 0), 2))
    return {
        "input.endpoint": args.input, "input.format": args.input_format, "input.mode": args.input_mode,
        "input.bind": args.input_bind, "input.sample_rate_hz": args.sample_rate,
        "queues.overload": args.overload, "output.endpoint": args.output,
        "output.format": args.output_format,
        "control.endpoint": args.control, "metrics.listen": args.metrics,
        "model.dir": None if args.model_dir is None else str(args.model_dir),
        "model.backend": args.backend, "model.precision": args.precision,
        "model.device": args.device, "model.threads": args.threads,
        "batching.max_batch": args.max_batch, "batching.max_wait_ms": args.max_wait_ms,
        "logging.level": level,
    }


def check_metrics_address(listen: str) -> None:
    """ConfigError where the daemon's metrics endpoint (HOST:PORT) would fail its bind for its
    host: a name that does not resolve (999.0.0.1) or no address of this machine, found by
    binding a socket to the host on a port the system picks (as serve/metrics.MetricsServer
    binds: IPv6 for a literal with a colon). Its port is not bound here: the daemon that is
    running may hold it; a port in use or one below 1024 for a user is found by the start."""
    import socket

    from rfclassify._exceptions import ConfigError

    host = listen.rpartition(":")[0].strip("[]")
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
    except OSError as exc:
        raise ConfigError(f"metrics.listen {listen}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    from rfclassify.serve.config import apply_overrides, load_config

    path = args.config or os.environ.get(CONFIG_ENV) or None
    overrides = overrides_from_args(args)
    config = apply_overrides(load_config(path), overrides)
    if args.check_config:
        import json
        from dataclasses import asdict

        from rfclassify.engine.select import select_backend
        from rfclassify.model.meta import ModelMeta, default_model_dir
        from rfclassify.serve.config import security_notes
        from rfclassify.serve.daemon import socket_security

        # the model's description and the CURVE key files too (a missing or damaged one passed the
        # check before and stopped the daemon's start); weights and backend are loaded by the start alone
        if config.metrics.listen:
            check_metrics_address(config.metrics.listen)
        model_dir = config.model.dir or default_model_dir()
        meta = ModelMeta.load(model_dir)
        # the start's own choice, from the libraries that import and the model's files (nothing
        # loaded): a backend, precision or device that cannot run here passed before
        m = config.model
        selection = select_backend(meta, model_dir, m.backend, m.precision, m.device or None,
                                   dla_core=m.dla_core if m.dla_core >= 0 else None)
        security = socket_security(config)   # the key files CURVE reads, and the admitted clients' folder
        if security is not None:
            security.close()
        if config.capture.dir:   # found here, not when the daemon starts after loading the model
            from rfclassify.serve.capture import check_folder

            check_folder(config.capture.dir)
        print(json.dumps(asdict(config), indent=2))
        print(f"model {meta.model_id} in {model_dir}", file=sys.stderr)
        print(f"backend: {selection.backend} {selection.precision} on {selection.device} ({selection.reason})",
              file=sys.stderr)
        security_line, security_warnings = security_notes(config)
        print(f"security: {security_line}", file=sys.stderr)
        for warning in config.batching.unused_overrides(meta.buckets_samples) + security_warnings:
            print(f"warning: {warning}", file=sys.stderr)
        return 0
    from rfclassify._exceptions import Cancelled
    from rfclassify.serve.daemon import Daemon

    daemon = Daemon(config, config_path=path, overrides=overrides)
    daemon.install_signal_handlers()
    try:
        daemon.start()
    except Cancelled:     # a stop asked for during the start: start() stopped what it had started
        log.info("%s while starting: stopped before serving", daemon.stop_signal)
        return 0
    return daemon.serve_forever()
