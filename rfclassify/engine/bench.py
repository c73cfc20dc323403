"""Model-level benchmark: each backend and precision against plain PyTorch eager fp32.

The baseline is the same network (``load_trained``) run eagerly in fp32 on the same device,
in the same process, interleaved call by call with the backend under test,
so machine load and clock changes hit both alike. Every call includes what a caller pays:
numpy in, numpy out (host<->device copies on a GPU). Reported per (backend, precision,
bucket, batch): latency median/p90/p99 per call and throughput in windows/s, with the
ratios baseline/backend (>1 means the backend is faster).
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rfclassify._exceptions import ConfigError
from rfclassify._cpus import cpu_description, usable_cpu_count
from rfclassify._optional import require
from rfclassify.engine.base import PRECISIONS
from rfclassify.engine.devices import device_index, device_kind
from rfclassify.engine.select import BACKEND_CHOICES, backend_class, candidates, unusable
from rfclassify.model.meta import ModelMeta

log = logging.getLogger(__name__)

MIN_CALLS = 5  # per side, however long they take
#: the fewest calls a percentile of the table rests on before it is marked: below 1 / (1 - q)
#: calls the q-th percentile is the slowest call, or an interpolation next to it
PERCENTILE_CALLS = {"p90": 10, "p99": 100}


@dataclass(frozen=True)
class BenchConfig:
    """What to measure. precisions None: every precision each backend can run here."""

    backends: tuple[str, ...] = ("tensorrt", "onnxruntime", "torch")   # those that cannot run: skipped[]
    precisions: tuple[str, ...] | None = None
    buckets_samples: tuple[int, ...] = (1024,)
    batch_sizes: tuple[int, ...] | None = None   # None: 1, 64 (and 1024 on a GPU)
    seconds: float = 2.0                         # per measurement, baseline included
    device: str | None = None
    threads: int | None = None
    #: the caller named the backends or the precisions (`--backends`, `--precisions`): a run
    #: that can measure none of them is a ConfigError naming each reason, not an empty report
    #: (the defaults still skip what this machine lacks, listed in skipped[])
    named: bool = False

    def __post_init__(self) -> None:
        if self.seconds <= 0:
            raise ConfigError(f"seconds must be > 0, got {self.seconds}")
        unknown = [p for p in self.precisions or () if p not in PRECISIONS]
        if unknown:
            raise ConfigError(f"unknown precisions {unknown}; choose from {', '.join(PRECISIONS)}")
        backends = [b for b in BACKEND_CHOICES if b != "auto"]   # each is measured by its name
        unknown = [b for b in self.backends if b not in backends]
        if unknown:
            raise ConfigError(f"unknown backends {unknown}; choose from {', '.join(backends)}")


def percentiles_ms(call_s: np.ndarray) -> dict[str, float]:
    ms = np.asarray(call_s) * 1e3
    return {"median": round(float(np.median(ms)), 4), "p90": round(float(np.percentile(ms, 90)), 4),
            "p99": round(float(np.percentile(ms, 99)), 4), "mean": round(float(ms.mean()), 4)}


def measure_pair(baseline: Callable[[], object], candidate: Callable[[], object],
                 seconds: float, batch: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Timing of two callables alternating call by call: (baseline stats, candidate stats).

    Alternating single calls (not blocks) makes a burst of load from other processes hit
    both sides alike, which matters on a shared machine."""
    for fn in (baseline, candidate, baseline, candidate):  # warm up (kernels, CUDA graphs)
        fn()
    base_s: list[float] = []
    cand_s: list[float] = []
    end = time.perf_counter() + seconds
    while True:
        for fn, out in ((baseline, base_s), (candidate, cand_s)):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        if len(base_s) >= MIN_CALLS and time.perf_counter() >= end:
            break
    return _stats(np.array(base_s), batch), _stats(np.array(cand_s), batch)


def _stats(call_s: np.ndarray, batch: int) -> dict[str, Any]:
    return {"calls": int(call_s.size), "latency_ms": percentiles_ms(call_s),
            "throughput_windows_per_s": round(batch / float(call_s.mean()), 1)}


def _eager_fp32(model_dir: Path, device: str, threads: int) -> Callable[[np.ndarray], tuple[Any, Any]]:
    """Plain PyTorch eager fp32: numpy in, forward under inference_mode, numpy out."""
    torch = require("torch", "the benchmark baseline")
    from rfclassify.model.network import load_trained

    torch.set_num_threads(threads)
    net, _ = load_trained(model_dir)
    net = net.to(device)

    def run(x: np.ndarray) -> tuple[Any, Any]:
        with torch.inference_mode():
            logits, snr = net(torch.from_numpy(x).to(device))
            return logits.cpu().numpy(), snr.cpu().numpy()

    return run


def _device_for(name: str, device: str | None) -> tuple[str | None, str]:
    """(device, '') for the first device backend `name` can use, or (None, why not)."""
    reasons = []
    for backend, dev in candidates(name, device):
        problem = unusable(backend, dev)
        if problem is None:
            return dev, ""
        reasons.append(f"{dev}: {problem}")
    return None, "; ".join(reasons)


def run_bench(model_dir: str | Path, config: BenchConfig) -> dict[str, Any]:
    """Measure every configured combination; returns the JSON-able report."""
    model_dir = Path(model_dir)
    meta = ModelMeta.load(model_dir)
    bad = [b for b in config.buckets_samples if b not in meta.buckets_samples]
    if bad:
        raise ConfigError(f"buckets {bad} are not buckets of the model {list(meta.buckets_samples)}")
    threads = config.threads or usable_cpu_count()
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    baselines: dict[str, Callable[[np.ndarray], Any]] = {}
    devices_used: set[str] = set()
    with _torch_threads_kept():
        for name in config.backends:
            device, why = _device_for(name, config.device)
            if device is None:
                skipped.append({"backend": name, "precision": "*", "reason": why})
                continue
            cls = backend_class(name)
            kind = device_kind(device)
            batches = config.batch_sizes or ((1, 64, 1024) if kind == "cuda" else (1, 64))
            for precision in config.precisions or cls.precisions_by_device.get(kind, ()):
                if precision not in cls.precisions_by_device.get(kind, ()):
                    skipped.append({"backend": name, "precision": precision,
                                    "reason": f"not supported by {name} on {kind}"})
                    continue
                problem = cls.artifact_problem(meta, model_dir, precision)
                if problem:
                    skipped.append({"backend": name, "precision": precision, "reason": problem})
                    continue
                if device not in baselines:
                    baselines[device] = _eager_fp32(model_dir, device, threads)
                base = baselines[device]
                devices_used.add(device)
                with cls(meta, model_dir, precision=precision, device=device,
                         buckets_samples=config.buckets_samples, max_batch_size=max(batches),
                         threads=threads) as backend:
                    for bucket in config.buckets_samples:
                        for batch in batches:
                            x = rng.standard_normal((batch, 2, 1, bucket)).astype(np.float32)
                            b_stats, c_stats = measure_pair(lambda x=x: base(x), lambda x=x: backend.infer(x),
                                                            config.seconds, batch)
                            rows.append(_row(name, precision, device, bucket, batch, b_stats, c_stats))
                            log.info("%s", format_row(rows[-1]))
    if config.named and not rows:
        raise ConfigError(nothing_measurable(skipped))
    return {"model": meta.model_id, "model_dir": str(model_dir), "machine": machine_info(devices_used),
            "baseline": "torch eager fp32, same network, same device, same process, alternating call by call",
            "config": asdict(config), "threads": threads,
            "rows": rows, "skipped": skipped}


def nothing_measurable(skipped: list[dict[str, str]]) -> str:
    """The error for a run of named backends or precisions that measured nothing: a line per
    reason (`--backends onnxruntime --precisions int8` on a model without an INT8 graph
    printed a "skipped" line, measured nothing and exited 0)."""
    lines = [f"{s['backend']} {'(every precision)' if s['precision'] == '*' else s['precision']}: {s['reason']}"
             for s in skipped]
    if len(lines) == 1:
        return f"nothing that was asked can be measured here: {lines[0]}"
    return "nothing that was asked can be measured here:\n" + "\n".join(f"  {line}" for line in lines)


@contextlib.contextmanager
def _torch_threads_kept() -> Iterator[None]:
    """torch's thread count is the process's: the baseline and the torch backend set it to the
    benchmark's threads, and the caller gets its own back afterwards."""
    try:
        import torch
    except ImportError:   # then no baseline runs, and nothing sets it
        yield
        return
    before = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _row(name: str, precision: str, device: str, bucket: int, batch: int,
         base: dict[str, Any], cand: dict[str, Any]) -> dict[str, Any]:
    return {
        "backend": name, "precision": precision, "device": device, "bucket": bucket, "batch": batch,
        **cand, "baseline": base,
        "speedup_latency": round(base["latency_ms"]["median"] / cand["latency_ms"]["median"], 3),
        "speedup_throughput": round(cand["throughput_windows_per_s"] / base["throughput_windows_per_s"], 3),
    }


TABLE_HEADER = (f"{'backend':<12} {'prec':<5} {'device':<7} {'bucket':>6} {'batch':>5} {'calls':>6} "
                f"{'med_ms':>8} {'p90_ms':>9} {'p99_ms':>9} {'win/s':>9} | "
                f"{'eager_ms':>8} {'eager_w/s':>9} | {'x_lat':>6} {'x_thr':>6}")


def format_row(r: dict[str, Any]) -> str:
    """A row of the table; a percentile over fewer calls than PERCENTILE_CALLS asks is marked '*'."""
    lat, base = r["latency_ms"], r["baseline"]
    tail = {q: f"{lat[q]:.3f}" + ("*" if r["calls"] < PERCENTILE_CALLS[q] else " ") for q in PERCENTILE_CALLS}
    return (f"{r['backend']:<12} {r['precision']:<5} {r['device']:<7} {r['bucket']:>6} {r['batch']:>5} "
            f"{r['calls']:>6} {lat['median']:>8.3f} {tail['p90']:>9} {tail['p99']:>9} "
            f"{r['throughput_windows_per_s']:>9.0f} | {base['latency_ms']['median']:>8.3f} "
            f"{base['throughput_windows_per_s']:>9.0f} | {r['speedup_latency']:>6.2f} "
            f"{r['speedup_throughput']:>6.2f}")


def few_calls_note(rows: list[dict[str, Any]]) -> str | None:
    """The table's footnote where a row's percentile is marked, else None."""
    if not any(r["calls"] < PERCENTILE_CALLS[q] for r in rows for q in PERCENTILE_CALLS):
        return None
    rule = ", ".join(f"{q} under {n}" for q, n in PERCENTILE_CALLS.items())
    return (f"* over too few calls ({rule}): the slowest call or next to it, not a percentile; "
            "a longer --seconds gives more calls")


def machine_info(devices: set[str]) -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "cpu": cpu_description(),
                            "cpu_count": os.cpu_count(), "cpu_threads_usable": usable_cpu_count(),
                            "python": platform.python_version()}
    for mod in ("numpy", "torch", "onnxruntime"):
        try:
            info[mod] = __import__(mod).__version__
        except ImportError:
            info[mod] = None
    gpus = sorted({device_index(d) for d in devices if device_kind(d) == "cuda"})
    if gpus:   # the GPU(s) measured, not GPU 0 whichever was (rows name their device)
        names = [require("torch").cuda.get_device_name(i) for i in gpus]
        info["gpu"] = names[0] if len(gpus) == 1 else "; ".join(f"cuda:{i}: {n}" for i, n in zip(gpus, names))
    return info
