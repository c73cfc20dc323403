"""What one BLAS thread in the refiners (Classifier._refine, _cpus.one_blas_thread) is worth: the
same Classifier classifies the same bursts with that limit and with the process's default
BLAS threads, in alternating rounds of one process, beside the network alone as the baseline.

The bursts are refiner_cost.py's (all 28 labels, the full channel, SNR uniform 10..30 dB, one
length). --busy N starts N processes that keep a core each busy for the whole measurement (a
machine shared with other work: the case the limit is for); they are stopped at the end. The
arm without the limit swaps _cpus.one_blas_thread for a context that does nothing, so it is
the code before the limit. Prints bursts/s of each arm, their ratio and each one's time over
the network's. A measurement, not a test.

    PYTHONPATH=. python3 benchmarks/refiner_blas_threads.py [--model-dir models] [--length 1024] [--bursts 280]
        [--rounds 5] [--backend onnxruntime|torch] [--busy N] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))     # refiner_cost's bursts

import rfclassify._cpus as cpus  # noqa: E402
from refiner_cost import add_cost_arguments, cost_bursts  # noqa: E402
from rfclassify.engine.classifier import Classifier  # noqa: E402


def _spin(stop: multiprocessing.synchronize.Event) -> None:
    """Keep one core busy until `stop` is set."""
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def blas_threads() -> int:
    """The most threads any loaded BLAS may start now."""
    from threadpoolctl import threadpool_info

    return max((d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"), default=0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cost_arguments(ap)
    ap.add_argument("--busy", type=int, default=0, help="processes that keep a core busy meanwhile")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    bursts = cost_bursts(args.bursts, args.length)
    limited = cpus.one_blas_thread

    def unlimited() -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(args.busy)]
    times: dict[str, list[float]] = {"one BLAS thread": [], "default BLAS threads": [], "network alone": []}
    same = True
    first: list[str] | None = None
    with Classifier.load(args.model_dir, backend=args.backend) as on, \
            Classifier.load(args.model_dir, backend=args.backend, refiner=False) as off:
        if not on.refiners:
            print(f"{args.model_dir} has no refiner")
            return 1
        on.classify(bursts[:8])
        off.classify(bursts[:8])
        default_threads = blas_threads()
        for p in spinners:
            p.start()
        try:
            for r in range(args.rounds):
                arms = [("one BLAS thread", limited), ("default BLAS threads", unlimited)]
                for name, context in (arms if r % 2 == 0 else arms[::-1]):
                    cpus.one_blas_thread = context
                    try:
                        t0 = time.perf_counter()
                        out = on.classify(bursts)
                        times[name].append(time.perf_counter() - t0)
                    finally:
                        cpus.one_blas_thread = limited
                    best = [x.top[0][0] for x in out]
                    first = best if first is None else first
                    same = same and best == first
                t0 = time.perf_counter()
                off.classify(bursts)
                times["network alone"].append(time.perf_counter() - t0)
        finally:
            stop.set()
            for p in spinners:
                p.join(5)
    med = {k: float(np.median(v)) for k, v in times.items()}
    print(f"{args.bursts} bursts of {args.length} samples, {args.backend} on {on.device}, median of {args.rounds} "
          f"rounds; {os.cpu_count()} CPUs, BLAS default {default_threads} threads, {args.busy} busy processes")
    for k, t in med.items():
        extra = "" if k == "network alone" else f"  ({t / med['network alone']:.2f}x the network's time)"
        print(f"{k:22s}: {args.bursts / t:8.1f} bursts/s{extra}")
    ratio = med["default BLAS threads"] / med["one BLAS thread"]
    print(f"default threads / one thread: {ratio:.2f}x the time; same top labels in every arm and round: {same}")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "cpus": os.cpu_count(),
                                         "blas_default_threads": default_threads, "device": str(on.device),
                                         "median_s": med, "times_s": times, "ratio_default_over_one": ratio,
                                         "same_labels": same}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
