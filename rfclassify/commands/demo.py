"""`rfclassify demo`: run the daemon and a simulated SDR together, print live results and a summary."""

from __future__ import annotations

import argparse

from rfclassify._argtypes import COUNT_MAX, count, finite_float, seconds, seed
from rfclassify.engine.options import add_model_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", type=count(), default=600, metavar="N", help="bursts to simulate (default 600)")
    parser.add_argument("--rate", type=finite_float, default=150.0, metavar="R", help="bursts per second (default 150)")
    parser.add_argument("--seconds", type=seconds, metavar="S",
                        help="simulate for S seconds (at most a day) instead of --count")
    add_model_arguments(parser)
    parser.add_argument("--lines", type=count(0), default=15, metavar="N",
                        help="print the first N results one per line, then a rolling summary (default 15)")
    parser.add_argument("--seed", type=seed, default=0)


def run(args: argparse.Namespace) -> int:
    import sys

    from rfclassify._exceptions import InputError
    from rfclassify._signals import EXIT_STATUS, Terminated, sigterm_as_interrupt
    from rfclassify.serve.demo import run_demo
    from rfclassify.serve.simulate import SimulateOptions

    if args.rate <= 0:
        raise InputError("--rate must be positive")
    bursts = args.count
    if args.seconds is not None:
        # found here, before the model loads: 1e300 bursts overflowed int() after it, with the
        # daemon left running
        if not args.seconds * args.rate <= COUNT_MAX:
            raise InputError(f"--seconds {args.seconds:g} at --rate {args.rate:g} makes {args.seconds * args.rate:.3g} "
                             f"bursts; at most {COUNT_MAX} (--count's limit)")
        bursts = max(1, int(args.seconds * args.rate))
    # the simulator's own checks (the least rate it can wait for), before the model loads too
    SimulateOptions(rate_bursts_per_s=args.rate, count=bursts)
    with sigterm_as_interrupt():
        try:
            summary = run_demo(bursts, args.rate, model_dir=str(args.model_dir or ""),
                               backend=args.backend, precision=args.precision, device=args.device or "",
                               threads=args.threads or 0, lines=args.lines, seed=args.seed)
        except Terminated:      # while the model loaded: nothing to summarize
            print("rfclassify demo: stopped by SIGTERM", file=sys.stderr)
            return EXIT_STATUS["SIGTERM"]
    if summary["interrupted"]:
        return EXIT_STATUS[summary["interrupted"]]
    if summary["timed_out"]:
        print(f"rfclassify demo: timed out with {summary['unanswered_at_deadline']} of {summary['sent']} bursts "
              "unanswered", file=sys.stderr)
        return 1
    return 0 if summary["status"]["counters"]["classified"] > 0 else 1
