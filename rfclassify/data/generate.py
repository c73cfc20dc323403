"""Synthetic dataset generation: a balanced class x SNR grid of variable-length bursts, written to HDF5.

The work is planned once, from the spec and the seed alone, as a list of chunks; each chunk
is a group of examples of one length and one channel preset that `synthesize` makes in one
vectorized call, with its own generator `SeedSequence(seed, spawn_key=(1, chunk_index))`.
Workers only compute chunks; the parent writes them in chunk order, keeping at most
2 x workers chunks in flight. So the file is identical for a seed whatever the worker count,
and memory stays bounded by a few chunks.

Stopping: Ctrl-C, and SIGTERM where the CLI makes it an exception
(rfclassify._signals.Terminated), are taken at the next chunk boundary; the partial file is
removed and the workers are killed (they ignore both signals, which reach the whole process group, and end
by themselves when this process is gone, killed or not: a SIGTERM once left them running
under PID 1 for good, ~140 MB each).

Balance: every (class, SNR) cell gets exactly `per_cell` examples. Every class gets each
channel preset and (for an explicit length list) each length equally often, up to one,
assigned in a shuffled order independent of the SNR. With a length range instead, each chunk
draws its length log-uniformly from [length_min, length_max] (chunks mix classes and SNRs,
so class x length stays balanced on average).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, is_dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from rfclassify._paths import nearest_existing, writable_folder
from rfclassify import __version__
from rfclassify._exceptions import InputError, InternalError
from rfclassify._signals import DeferredInterrupt
from rfclassify.data import schema
from rfclassify.labels import LABELS, label_index, parse_labels

DEFAULT_CHUNK_EXAMPLES = 256
ALL_PRESETS = "all"
_PLAN_KEY = 0
_CHUNK_KEY = 1
MAX_EXAMPLES = 2 ** 31 - 1     # examples one dataset file may hold (its indices are planned in memory)
#: how often an interrupt is looked for while the workers compute, seconds
CHECK_S = 0.2


@dataclass(frozen=True)
class GenerateSpec:
    """What to generate. Validated on construction (bad values raise InputError)."""

    classes: tuple[str, ...] = LABELS
    snr_grid_db: tuple[float, ...] = tuple(float(s) for s in range(-20, 31, 2))
    per_cell: int = 100
    lengths_samples: tuple[int, ...] = ()          # explicit lengths; empty -> the range below
    length_min_samples: int = 64
    length_max_samples: int = 8192
    channels: tuple[str, ...] = ("full",)           # channel presets (see channel_presets()); "all"
    seed: int = 0
    chunk_examples: int = DEFAULT_CHUNK_EXAMPLES

    def __post_init__(self) -> None:
        object.__setattr__(self, "classes", parse_labels(list(self.classes)))
        if len(set(self.classes)) != len(self.classes):
            raise InputError("duplicate class in --classes")
        snrs = tuple(float(s) for s in self.snr_grid_db)
        if not snrs:
            raise InputError("the SNR grid is empty")
        if not all(np.isfinite(snrs)):
            raise InputError("SNR values must be finite numbers")
        if len(set(np.float32(snrs).tolist())) != len(snrs):   # as the file stores them
            raise InputError("duplicate value in the SNR grid (a cell would get twice --per-cell bursts)")
        object.__setattr__(self, "snr_grid_db", snrs)
        if self.per_cell < 1:
            raise InputError(f"--per-cell must be >= 1, got {self.per_cell}")
        lo, hi = schema.MIN_BURST_SAMPLES, schema.MAX_BURST_SAMPLES
        lengths = tuple(int(n) for n in self.lengths_samples)
        for n in lengths or (self.length_min_samples, self.length_max_samples):
            if not lo <= n <= hi:
                raise InputError(f"burst lengths must be {lo}..{hi} samples, got {n}")
        if not lengths and self.length_min_samples > self.length_max_samples:
            raise InputError(f"--length-min {self.length_min_samples} is above --length-max {self.length_max_samples}")
        object.__setattr__(self, "lengths_samples", lengths)
        if not self.channels:
            raise InputError("at least one channel preset is needed")
        if ALL_PRESETS in self.channels:  # 'all': full, clean and every family alone
            expanded = [p for name in self.channels
                        for p in (channel_presets() if name == ALL_PRESETS else (name,))]
            object.__setattr__(self, "channels", tuple(dict.fromkeys(expanded)))
        if len(set(self.channels)) != len(self.channels):
            raise InputError("duplicate channel preset in --channel")
        known = channel_presets()
        for name in self.channels:
            if name not in known:
                raise InputError(f"unknown channel preset {name!r}; known: {', '.join(known)}")
        if self.seed < 0:
            raise InputError(f"--seed must be >= 0, got {self.seed}")
        if self.chunk_examples < 1:
            raise InputError(f"chunk size must be >= 1, got {self.chunk_examples}")
        if self.n_examples > MAX_EXAMPLES:
            raise InputError(f"--per-cell {self.per_cell} makes {self.n_examples:,} examples; one file holds at "
                             f"most {MAX_EXAMPLES:,} (at 64 samples each, over a terabyte)")

    @property
    def n_examples(self) -> int:
        return len(self.classes) * len(self.snr_grid_db) * self.per_cell

    def lengths_description(self) -> dict[str, Any]:
        if self.lengths_samples:
            return {"rule": "list", "lengths_samples": list(self.lengths_samples)}
        return {"rule": "log-uniform per chunk", "min_samples": self.length_min_samples,
                "max_samples": self.length_max_samples, "chunk_examples": self.chunk_examples}


def channel_presets() -> dict[str, Any]:
    """Named channel configurations: 'full' (every impairment), 'clean' (none), one per family."""
    from rfclassify.dsp.channel import FAMILIES, ChannelConfig

    presets: dict[str, Any] = {"full": ChannelConfig(), "clean": ChannelConfig.clean()}
    for family in FAMILIES:
        presets[family] = ChannelConfig.only(family)
    return presets


@dataclass(frozen=True)
class ChunkTask:
    """One vectorized synthesize call: examples of one length and one channel preset."""

    index: int
    seed: int
    labels: tuple[str, ...]
    snr_db: np.ndarray
    length_samples: int
    channel_index: int
    channel_name: str


@dataclass(frozen=True)
class ChunkResult:
    index: int
    iq: np.ndarray
    label_index: np.ndarray
    snr_db: np.ndarray
    params: np.ndarray
    channel_index: int


@dataclass(frozen=True)
class GenerateReport:
    path: Path
    n_examples: int
    n_samples: int
    elapsed_s: float
    workers: int

    @property
    def bursts_per_s(self) -> float:
        return self.n_examples / self.elapsed_s if self.elapsed_s > 0 else float("inf")


def plan_chunks(spec: GenerateSpec) -> list[ChunkTask]:
    """The whole work list, a pure function of the spec (never of the worker count)."""
    rng = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(_PLAN_KEY,)))
    n_ch, n_len = len(spec.channels), max(len(spec.lengths_samples), 1)
    groups: dict[tuple[int, int], list[tuple[str, float]]] = {}
    m = len(spec.snr_grid_db) * spec.per_cell
    for name in spec.classes:
        # Each class gets every preset and every listed length equally often (+-1), in an
        # order shuffled independently of each other and of the SNR.
        ch = rng.permutation((np.arange(m) + rng.integers(n_ch)) % n_ch)  # random offset: the
        slot = rng.permutation((np.arange(m) + rng.integers(n_len)) % n_len)  # +1s vary by class
        for e in range(m):
            snr = spec.snr_grid_db[e // spec.per_cell]
            groups.setdefault((int(ch[e]), int(slot[e])), []).append((name, snr))
    tasks: list[ChunkTask] = []
    log_lo, log_hi = np.log(spec.length_min_samples), np.log(spec.length_max_samples + 1)
    for (ch, slot) in sorted(groups):
        members = groups[(ch, slot)]
        order = rng.permutation(len(members))
        for start in range(0, len(members), spec.chunk_examples):
            part = [members[i] for i in order[start:start + spec.chunk_examples]]
            if spec.lengths_samples:
                length = spec.lengths_samples[slot]
            else:
                length = int(np.clip(np.floor(np.exp(rng.uniform(log_lo, log_hi))),
                                     spec.length_min_samples, spec.length_max_samples))
            tasks.append(ChunkTask(
                index=len(tasks), seed=spec.seed, labels=tuple(p[0] for p in part),
                snr_db=np.array([p[1] for p in part], dtype=np.float32),
                length_samples=length, channel_index=ch, channel_name=spec.channels[ch]))
    return tasks


def make_chunk(task: ChunkTask) -> ChunkResult:
    """Synthesize one chunk (runs in a worker process); deterministic for the task."""
    from rfclassify.dsp.synth import synthesize

    rng = np.random.default_rng(np.random.SeedSequence(task.seed, spawn_key=(_CHUNK_KEY, task.index)))
    channel = channel_presets()[task.channel_name]
    batch = synthesize(task.labels, task.length_samples, rng, snr_db=task.snr_db, channel=channel)
    expected = np.array([label_index(n) for n in task.labels], dtype=np.int16)
    if batch.iq.shape != (len(task.labels), task.length_samples) or not np.array_equal(batch.label_index, expected):
        raise RuntimeError(f"synthesize returned an unexpected batch for chunk {task.index}")
    return ChunkResult(task.index, np.asarray(batch.iq, dtype=np.complex64), batch.label_index,
                       batch.snr_db, batch.params, task.channel_index)


def _pool_context() -> multiprocessing.context.BaseContext:
    """How the workers start. Linux: a fork server that imported the synthesizer once and
    forks each worker from itself, so workers skip ~2 s of imports each while this process,
    which has threads of its own (numpy's BLAS pool, the caller's), never forks: a fork of a
    threaded process may deadlock the child, and Python 3.12 warns of it (an error under the
    test suite's warnings filter). Python 3.14 makes the fork server Linux's default.
    Elsewhere spawn."""
    if sys.platform != "linux":
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])  # read when this process first starts its server
    return ctx


def _results(tasks: list[ChunkTask], workers: int,
             check: Callable[[], None] = lambda: None) -> Iterator[ChunkResult]:
    """Chunk results in task order; at most 2 x workers chunks computed ahead of the writer.
    While it waits for the workers, `check` is called every CHECK_S (raising stops it: an
    interrupt need not wait for a chunk of up to a few seconds). Closed before its end (an
    interrupt, an error), it kills the workers at once: the chunks they compute are nobody's."""
    if workers <= 1:
        for t in tasks:
            yield make_chunk(t)
        return
    from rfclassify.engine.refiner_pool import become_child_worker, pool_closed_after, starting_processes

    # Ctrl-C and a SIGTERM to the process group are the parent's to handle (it stops at a chunk
    # boundary, kills the workers and removes the partial file): a worker that took them died
    # with a KeyboardInterrupt traceback, or mid-task. Each ends by itself when the parent is gone.
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=_pool_context(), initializer=become_child_worker)
    pending: dict[int, cf.Future[ChunkResult]] = {}
    next_submit = 0
    # ended with SIGKILL on an error or an interrupt, since they ignore SIGTERM: their chunks are nobody's
    with pool_closed_after(pool):
        try:
            for i in range(len(tasks)):
                while next_submit < len(tasks) and next_submit < i + 2 * workers:
                    with starting_processes():   # a submit may start a worker: deaf to Ctrl-C from its first line
                        pending[next_submit] = pool.submit(make_chunk, tasks[next_submit])
                    next_submit += 1
                yield _when_done(pending.pop(i), check)
        except cf.BrokenExecutor:   # a worker killed (the kernel's OOM killer, say): its traceback said no more
            raise InternalError("a worker process ended abruptly (killed, or out of memory)") from None


def _when_done(future: cf.Future[ChunkResult], check: Callable[[], None]) -> ChunkResult:
    """The future's result, `check` called every CHECK_S until it comes."""
    while True:
        try:
            return future.result(timeout=CHECK_S)
        except cf.TimeoutError:
            check()


def _jsonable(obj: Any) -> Any:
    return asdict(obj) if is_dataclass(obj) and not isinstance(obj, type) else repr(obj)


def synth_source_digest() -> str:
    """sha256 (12 hex digits) of synth.py and the rfclassify.dsp modules it imports, directly
    or not: it changes whenever the synthesizer's output may (and not for unrelated dsp code)."""
    import ast
    import hashlib

    from rfclassify import dsp

    folder = Path(dsp.__file__).parent
    seen: set[str] = set()
    todo = ["synth"]
    while todo:
        name = todo.pop()
        if name in seen or not (folder / f"{name}.py").is_file():
            continue
        seen.add(name)
        for node in ast.walk(ast.parse((folder / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "rfclassify.dsp":
                todo += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rfclassify.dsp."):
                todo.append(node.module.rsplit(".", 1)[1])
    h = hashlib.sha256()
    for name in sorted(seen):
        h.update(name.encode() + b"\0" + (folder / f"{name}.py").read_bytes())
    return h.hexdigest()[:12]


def made_by_current_synth(generator: str) -> bool:
    """Whether a file's `generator` attribute names the synthesizer code that is installed now."""
    return f"synth sha256:{synth_source_digest()}" in generator


def generator_version() -> str:
    """What made the bursts: package version and the synthesizer's source digest."""
    return f"rfclassify {__version__} synth sha256:{synth_source_digest()}"


def check_output(out: str | os.PathLike[str], force: bool) -> Path:
    """The output path, or InputError when it is a folder (or names one: ends in /), a device or
    a pipe, or exists without force."""
    if os.fspath(out).endswith(os.sep):   # Path drops the slash: `--out o/new/` wrote a file named new
        raise InputError(f"{os.fspath(out)} names a folder (it ends in {os.sep}); name the dataset file to write")
    path = Path(out)
    schema.check_replaceable(path)
    if path.exists() and not force:
        raise InputError(f"{path} exists; use --force to overwrite it")
    folder = nearest_existing(path.absolute().parent)   # before any work (gnuradio: after its flowgraph)
    if not writable_folder(folder):
        raise InputError(f"{path}: cannot be written ({folder} is not a writable folder)")
    return path


def generate_dataset(spec: GenerateSpec, out: str | os.PathLike[str], workers: int = 1,
                     force: bool = False, compression: str = "none", command_line: str | None = None,
                     on_progress: Callable[[int], None] | None = None) -> GenerateReport:
    """Write the dataset `spec` describes to `out` (via a temporary file, renamed when complete).

    on_progress(n) is called with the number of examples each time a chunk is written."""
    path = check_output(out, force)
    if workers < 1:
        raise InputError(f"--workers must be >= 1, got {workers}")
    from rfclassify.dsp.synth import PARAM_DTYPE

    presets = channel_presets()
    attrs = schema.DatasetAttrs(
        source="synth", seed=spec.seed, generator=generator_version(), classes=spec.classes,
        snr_grid_db=spec.snr_grid_db,
        channel={name: _jsonable(presets[name]) for name in spec.channels},
        lengths=spec.lengths_description(),
        command_line=command_line if command_line is not None else shlex.join(sys.argv),
        created_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        extra={"per_cell": spec.per_cell, "chunk_examples": spec.chunk_examples})
    tasks = plan_chunks(spec)
    start = time.perf_counter()
    with DeferredInterrupt() as interrupt, \
            schema.DatasetWriter(path, attrs, PARAM_DTYPE, compression=compression) as writer, \
            contextlib.closing(_results(tasks, workers, interrupt.check)) as results:
        for res in results:
            interrupt.check()
            writer.append(res.iq, res.label_index, res.snr_db, res.params, res.channel_index)
            if on_progress is not None:
                on_progress(len(res.label_index))
        interrupt.check()
        writer.commit()
    elapsed = time.perf_counter() - start
    return GenerateReport(path, writer.n_examples, writer.n_samples, elapsed, workers)
