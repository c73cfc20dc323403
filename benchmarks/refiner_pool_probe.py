"""Why does the refiner's worker pool not scale with the sequence network? A diagnostic, not a test.

On the lent H200 host (tenth session, benchmarks/refiner_sequence_cost_h200_run10.log) 8
refiner workers computed the statistics of 480 bursts with the sequence network in about the
wall time one process needs, while each burst inside a worker took its in-process time; the
invariants alone scaled 7.5x in the same pool. This probe prints, for 1 and N workers:

1. the refiner's statistics (rfclassify.engine.refiner.statistics_many) with and without the
   shipped model's sequence network: wall ms per burst, and each worker's in-task time, BLAS
   threads (threadpoolctl), CPU affinity and whether torch got imported;
2. a pool doing nothing but the sequence network's matrix products (48x240 by 240x512,
   float32), with and without a one-thread BLAS limit: if N workers take N times one
   worker's wall time here, the BLAS (or the host) serializes them.

    PYTHONPATH=. python3 benchmarks/refiner_pool_probe.py [--workers 8] [--bursts 480]

Answered in the eleventh session (benchmarks/refiner_pool_h200_run11.log): start_pool had
started only 3 of its 8 workers (a spawning ProcessPoolExecutor starts one only when a task
finds none idle), so the one timed call here paid for starting the others. start_pool now
starts them all; with it, 8 workers take 4.6x less wall time than one process there.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfclassify.dsp.channel import ChannelConfig  # noqa: E402
from rfclassify.dsp.synth import synthesize  # noqa: E402
from rfclassify.engine import refiner as refiner_module  # noqa: E402
from rfclassify.engine.refiner import Refiner, start_pool, statistics_many  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402
from rfclassify.model.meta import ModelMeta, default_model_dir  # noqa: E402


def _worker_view(iq: np.ndarray) -> tuple[float, int, list[int], int, bool]:
    """(seconds for this burst's statistics, pid, BLAS threads, CPUs allowed, torch imported)."""
    from threadpoolctl import threadpool_info

    t = time.perf_counter()
    refiner_module._pooled_statistics(iq)
    return (time.perf_counter() - t, os.getpid(), [i["num_threads"] for i in threadpool_info()],
            len(os.sched_getaffinity(0)), "torch" in sys.modules)


def _limit(one_thread: bool) -> None:
    if one_thread:
        from threadpoolctl import threadpool_limits

        global _LIMITS
        _LIMITS = threadpool_limits(limits=1)


def _products(seed: int) -> float:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((48, 240)).astype(np.float32)
    b = rng.standard_normal((240, 512)).astype(np.float32)
    t = time.perf_counter()
    for _ in range(300):
        a @ b
    return time.perf_counter() - t


def statistics_pools(bursts: list[np.ndarray], sequence, workers: int) -> None:
    t = time.perf_counter()
    statistics_many(bursts, sequence)
    here = (time.perf_counter() - t) / len(bursts)
    print(f"statistics, sequence network {'on' if sequence else 'off'}: in this process {1e3 * here:.2f} ms/burst")
    for n in sorted({1, workers}):
        pool = start_pool(n, sequence)
        try:
            statistics_many(bursts[:2 * n], sequence, pool)  # first real bursts: imports
            t = time.perf_counter()
            statistics_many(bursts, sequence, pool)
            wall = (time.perf_counter() - t) / len(bursts)
            views = list(pool.map(_worker_view, bursts[:160], chunksize=10))
        finally:
            pool.shutdown()
        print(f"  {n} worker(s): wall {1e3 * wall:.2f} ms/burst ({here / wall:.1f}x this process); in a worker "
              f"{1e3 * np.median([v[0] for v in views]):.2f} ms/burst, {len({v[1] for v in views})} pids, BLAS threads "
              f"{views[0][2]}, CPUs allowed {sorted({v[3] for v in views})}, torch imported {any(v[4] for v in views)}")


def product_pools(workers: int) -> None:
    for one_thread in (True, False):
        walls = {}
        for n in sorted({1, workers}):
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(n, mp_context=ctx, initializer=_limit, initargs=(one_thread,)) as ex:
                list(ex.map(_products, range(n)))
                t = time.perf_counter()
                list(ex.map(_products, range(4 * n)))
                walls[n] = time.perf_counter() - t
        print(f"matrix products only, BLAS {'one thread' if one_thread else 'default threads'}: "
              + ", ".join(f"{n} worker(s) {w:.2f} s for {4 * n} tasks" for n, w in walls.items())
              + f" (ideal: equal; {walls[max(walls)] / walls[1]:.1f}x)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--bursts", type=int, default=480)
    args = ap.parse_args(argv)
    model_dir = args.model_dir or default_model_dir()
    meta = ModelMeta.load(model_dir)
    ref = Refiner.load(model_dir, meta.refiner, meta.labels)
    print(f"{os.cpu_count()} CPUs, {len(os.sched_getaffinity(0))} allowed; sequence network "
          f"{'present' if ref.sequence else 'absent'}")
    rng = np.random.default_rng(1)
    labels = list(np.resize(np.array(HIGH_ORDER_LABELS), args.bursts))
    bursts = list(synthesize(labels, 1024, rng, 20.0, ChannelConfig()).iq)
    for sequence in ((ref.sequence, None) if ref.sequence else (None,)):
        statistics_pools(bursts, sequence, args.workers)
    product_pools(args.workers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
