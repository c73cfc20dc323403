"""How many CPU cores this process may use (a container's or taskset's share, not the host's),
how many threads its BLAS may start, how many refiner worker processes those cores allow, and
which CPU they are (what a benchmark's ratios came from)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_blas_limits: Any = None    # keep_one_blas_thread's threadpoolctl limits, kept in force
_controller: Any = None     # one_blas_thread's threadpoolctl controller, made on first use
_one_thread_lock = threading.Lock()
_one_thread_depth = 0       # one_blas_thread contexts open in this process (any thread)
_one_thread_limits: Any = None


#: the CPU features that decide how fast (and, on x86, how exactly) INT8 runs: with VNNI
#: (avx512_vnni, avx_vnni) uint8 x int8 products add in 32 bits; without it ONNX Runtime's x86
#: kernels add each pair in a saturating int16 first (benchmarks/no_vnni_overflow_probe.md);
#: asimddp and i8mm are ARM's dot product and matrix multiply (a Jetson Orin has asimddp)
INT8_CPU_FEATURES = ("avx2", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm", "sve")
CPUINFO = "/proc/cpuinfo"


def cpu_description(cpuinfo: str | None = None) -> dict[str, Any]:
    """{"model": the CPU's name, "int8_features": which of INT8_CPU_FEATURES it has}, from the
    first processor's entry of /proc/cpuinfo (or the text given); where there is none (not
    Linux), the model is the platform's word for it and the features are unknown (None)."""
    import platform

    if cpuinfo is None:
        try:
            cpuinfo = Path(CPUINFO).read_text(errors="replace")
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break           # the first processor's entry is enough: the others repeat it
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    if not fields:
        return {"model": platform.processor() or platform.machine() or "unknown", "int8_features": None}
    if "model name" in fields:
        model = fields["model name"]
    elif "cpu part" in fields:   # ARM: no name, the implementer's and the part's numbers
        implementer = fields.get("cpu implementer", "?")
        model = f"{platform.machine() or 'ARM'} CPU implementer {implementer} part {fields['cpu part']}"
    else:
        model = platform.processor() or platform.machine() or "unknown"
    flags = set((fields.get("flags") or fields.get("features") or "").split())
    return {"model": model, "int8_features": [f for f in INT8_CPU_FEATURES if f in flags]}


def usable_cpu_count() -> int:
    """Cores in this process's affinity mask; os.cpu_count() where there is no such mask."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


#: refiner_workers = AUTO_WORKERS: as many worker processes as auto_refiner_workers allows
AUTO_WORKERS = -1
#: the most CPU threads an inference backend is given ([model] threads, --threads, Classifier.load)
MAX_THREADS = 1024
#: the most refiner worker processes asked for by number ([model] refiner_workers, --refiner-workers)
MAX_REFINER_WORKERS = 256
#: cores auto_refiner_workers leaves to the process itself: its threads (the daemon's ingest,
#: batching, inference and publishing share one interpreter lock, about a core) and the backend
RESERVED_CORES = 2
#: at least this many workers on any box of two cores or more (one worker only moves the work;
#: two on this 2-core CPU gave the daemon 213 bursts/s against 144 in the inference thread,
#: fifty-fifth session)
MIN_AUTO_WORKERS = 2
#: more than this buys little and costs about 130 MB of memory each (a worker's own Python,
#: numpy, scipy and the refiner; measured on x86)
MAX_AUTO_WORKERS = 16


def auto_refiner_workers(cpus: int | None = None) -> int:
    """The refiner worker processes for a process that may use `cpus` cores (default: this
    one's, usable_cpu_count): all but RESERVED_CORES of them, at least MIN_AUTO_WORKERS, at
    most MAX_AUTO_WORKERS; 0 (the refiner in the calling thread) on one core. So 2 on a box of
    2 to 4 cores, 10 on a 12-core Jetson AGX Orin, 14 on a 16-core host."""
    n = usable_cpu_count() if cpus is None else int(cpus)
    if n < 2:
        return 0
    return min(max(n - RESERVED_CORES, MIN_AUTO_WORKERS), MAX_AUTO_WORKERS)


def refiner_worker_count(requested: int, cpus: int | None = None) -> int:
    """The worker processes a refiner_workers setting means: AUTO_WORKERS (-1) picks
    auto_refiner_workers(cpus); 0..MAX_REFINER_WORKERS is itself.
    ValueError otherwise (a count past a C int was an OverflowError out of the process pool)."""
    if requested == AUTO_WORKERS:
        return auto_refiner_workers(cpus)
    if not 0 <= requested <= MAX_REFINER_WORKERS:
        raise ValueError(f"refiner_workers must be -1 (auto) or 0..{MAX_REFINER_WORKERS}, got {requested}")
    return int(requested)


def keep_one_blas_thread() -> None:
    """Limit this process's BLAS (and OpenMP) pools to one thread for the rest of its life:
    the start of a worker process whose pool is the parallelism. A BLAS that starts a thread
    per core in every worker oversubscribes the cores (the refiner's fit took 2.6x as long on
    a 2-core CPU; fit-sequence's fitted carrier pass made 67x fewer fits in 15 workers on a
    16-core host). numpy's and scipy's BLAS are loaded first: threadpoolctl limits only the
    libraries loaded when it is called, and a worker may not have imported them yet."""
    from threadpoolctl import threadpool_limits

    _load_blas_libraries()
    global _blas_limits
    _blas_limits = threadpool_limits(limits=1)


def _load_blas_libraries() -> None:
    """Import numpy's and scipy's BLAS: threadpoolctl sees only the libraries loaded when asked."""
    import importlib

    for module in ("numpy", "scipy.linalg"):     # each loads its own BLAS
        importlib.import_module(module)


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with this process's BLAS pools at one thread, then restore them: for
    numpy work made of many small products (the refiners' statistics: filters of a few taps,
    a sequence network over at most 512 symbols), where a BLAS thread per core costs more in
    start-up and waiting than it saves, and far more when the cores are busy (classification
    of 1024-sample bursts with the shipped refiners took 2.2x as long with two BLAS threads
    as with one on a 2-core CPU with one core busy, 4.0x with sixteen on a 16-core host with
    eight busy; docs/engine.md). Contexts may nest and overlap across
    threads: the first to enter sets the limit, the last to leave restores it, whichever
    threads they are (the daemon's refiners run in its inference thread). OpenMP pools (a
    torch backend's) are left alone."""
    global _controller, _one_thread_depth, _one_thread_limits
    with _one_thread_lock:
        if _one_thread_depth == 0:
            if _controller is None:
                from threadpoolctl import ThreadpoolController

                _load_blas_libraries()
                _controller = ThreadpoolController()
            _release_openblas_control()
            _one_thread_limits = _controller.limit(limits=1, user_api="blas")
            _release_openblas_control()
        _one_thread_depth += 1
    try:
        yield
    finally:
        with _one_thread_lock:
            _one_thread_depth -= 1
            if _one_thread_depth == 0:
                _release_openblas_control()
                _one_thread_limits.restore_original_limits()
                _one_thread_limits = None
                _release_openblas_control()


def _release_openblas_control() -> None:
    """Let the next thread that sets OpenBLAS's pool do so. threadpoolctl 3.8 and later let
    only one thread at a time set it (its pool is process-wide) and ignore the others without
    a word, so a limit set in one thread could not be lifted from another; one_blas_thread
    holds its own lock while it sets or lifts its limit. Older threadpoolctl has no such rule."""
    import threadpoolctl

    clear = getattr(getattr(threadpoolctl, "OpenBLASController", None), "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)
