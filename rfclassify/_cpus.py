"""How many CPU cores this process may use (a container's or taskset's share, not the host's),
and how many threads its BLAS may start."""

from __future__ import annotations

import os
from typing import Any

_blas_limits: Any = None    # keep_one_blas_thread's threadpoolctl limits, kept in force


def usable_cpu_count() -> int:
    """Cores in this process's affinity mask; os.cpu_count() where there is no such mask."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def keep_one_blas_thread() -> None:
    """Limit this process's BLAS (and OpenMP) pools to one thread for the rest of its life:
    the start of a worker process whose pool is the parallelism. A BLAS that starts a thread
    per core in every worker oversubscribes the cores (the refiner's fit took 2.6x as long on
    a 2-core CPU; fit-sequence's fitted carrier pass made 67x fewer fits in 15 workers on a
    16-core host). numpy's and scipy's BLAS are loaded first: threadpoolctl limits only the
    libraries loaded when it is called, and a worker may not have imported them yet."""
    import importlib

    from threadpoolctl import threadpool_limits

    for module in ("numpy", "scipy.linalg"):     # each loads its own BLAS
        importlib.import_module(module)

    global _blas_limits
    _blas_limits = threadpool_limits(limits=1)
