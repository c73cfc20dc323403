"""`rfclassify demo`: run the daemon and a simulated SDR together, print live results and a summary."""

from __future__ import annotations

import argparse

from rfclassify._argtypes import count, finite_float, seed
from rfclassify.engine.options import add_model_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", type=count(), default=600, metavar="N", help="bursts to simulate (default 600)")
    parser.add_argument("--rate", type=finite_float, default=150.0, metavar="R", help="bursts per second (default 150)")
    parser.add_argument("--seconds", type=finite_float, metavar="S", help="simulate for S seconds instead of --count")
    add_model_arguments(parser)
    parser.add_argument("--lines", type=count(0), default=15, metavar="N",
                        help="print the first N results one per line, then a rolling summary (default 15)")
    parser.add_argument("--seed", type=seed, default=0)


def run(args: argparse.Namespace) -> int:
    from rfclassify._exceptions import InputError
    from rfclassify.serve.demo import run_demo

    if args.rate <= 0 or (args.seconds is not None and args.seconds <= 0):
        raise InputError("--rate and --seconds must be positive")
    summary = run_demo(args.count, args.rate, args.seconds, model_dir=str(args.model_dir or ""),
                       backend=args.backend, precision=args.precision, device=args.device or "",
                       threads=args.threads or 0, lines=args.lines, seed=args.seed)
    return 0 if summary["status"]["counters"]["classified"] > 0 else 1
