"""`rfclassify simulate`: a synthetic SDR front end publishing labelled native bursts."""

from __future__ import annotations

import argparse
import sys
import time

from rfclassify._argtypes import count, finite_float, float_range, seed
from rfclassify.commands.dataset import SNR_LIMIT_DB


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint", default="tcp://127.0.0.1:5555", metavar="ENDPOINT",
                        help="where to send (default tcp://127.0.0.1:5555)")
    b = parser.add_mutually_exclusive_group()
    b.add_argument("--bind", dest="bind", action="store_true", default=True,
                   help="bind the socket, like an SDR front end (default)")
    b.add_argument("--connect", dest="bind", action="store_false", help="connect instead of binding")
    parser.add_argument("--socket", choices=("pub", "push"), default="pub",
                        help="PUB (default; daemon --input-mode sub) or PUSH (lossless; --input-mode pull)")
    parser.add_argument("--rate", type=float_range(0.0, 1e6), default=100.0, metavar="BURSTS_PER_S",
                        help="send rate (default 100; 0 = as fast as possible)")
    parser.add_argument("--count", type=count(0), default=0, metavar="N",
                        help="stop after N bursts (default 0: no limit, run until ^C)")
    parser.add_argument("--classes", default="all", metavar="LIST",
                        help="comma-separated labels to draw from (default all)")
    # the synthesizer's bound: -1000 dB sent NaN bursts (before the sixty-seventh session)
    snr_db = float_range(-SNR_LIMIT_DB, SNR_LIMIT_DB)
    parser.add_argument("--snr-min", type=snr_db, default=0.0, metavar="DB", help="default 0")
    parser.add_argument("--snr-max", type=snr_db, default=20.0, metavar="DB", help="default 20")
    parser.add_argument("--length-min", type=count(), default=256, metavar="SAMPLES", help="default 256")
    parser.add_argument("--length-max", type=count(), default=2048, metavar="SAMPLES", help="default 2048")
    parser.add_argument("--pattern", choices=("random", "cycle"), default="random",
                        help="random labels (default) or every class in turn")
    parser.add_argument("--dtype", choices=("cf32_le", "ci16_le", "ci8"), default="cf32_le")
    parser.add_argument("--stream", default="sim0", help="stream (sensor) name in headers")
    parser.add_argument("--sample-rate", type=finite_float, default=1e6, metavar="HZ")
    parser.add_argument("--seed", type=seed, default=0)
    parser.add_argument("--clean", action="store_true", help="no channel impairments besides noise")
    parser.add_argument("--warmup", type=float_range(0.0, 3600.0), default=0.5, metavar="SECONDS",
                        help="PUB: wait this long for subscribers before sending (default 0.5)")
    parser.add_argument("--quiet", action="store_true", help="no progress line")


def run(args: argparse.Namespace) -> int:
    from rfclassify.labels import parse_labels
    from rfclassify.serve.simulate import SimulateOptions, run_simulator

    _check_endpoint(args.endpoint)
    opts = SimulateOptions(
        endpoint=args.endpoint, bind=args.bind, socket_type=args.socket, rate_bursts_per_s=args.rate,
        count=args.count, classes=parse_labels(args.classes), snr_min_db=args.snr_min,
        snr_max_db=args.snr_max, length_min_samples=args.length_min, length_max_samples=args.length_max,
        pattern=args.pattern, sample_rate_hz=args.sample_rate, stream=args.stream, dtype=args.dtype,
        seed=args.seed, warmup_s=args.warmup, clean_channel=args.clean)
    t0 = time.monotonic()
    last = [t0]

    def progress(burst_id: int, label: str, snr_db: float, n: int) -> None:
        now = time.monotonic()
        if not args.quiet and now - last[0] >= 1.0:
            last[0] = now
            print(f"\rsent {burst_id + 1} bursts ({(burst_id + 1) / (now - t0):.0f}/s)", end="",
                  file=sys.stderr, flush=True)

    sent = run_simulator(opts, on_sent=progress)
    if not args.quiet:
        print(f"\rsent {sent} bursts in {time.monotonic() - t0:.1f} s to {args.endpoint}", file=sys.stderr)
    return 0


def _check_endpoint(endpoint: str) -> None:
    """--endpoint checked as `serve` checks its input endpoint, where the simulator's bursts go
    (ConfigError naming --endpoint): ZeroMQ took tcp://127.0.0.1:70000 and bound port 4464."""
    from rfclassify.serve.config import check_option

    check_option("--endpoint", "input.endpoint", endpoint)
