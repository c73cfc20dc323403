"""The backend life cycle and the input checks every backend shares (a template method).

A backend runs the network on ready-made model input: float32 ``(B, 2, 1, L)`` with ``L`` one of
the configured length buckets. Public methods live here (``load``, ``warmup``, ``infer``,
``close``, the context manager); a subclass fills in the small hooks ``_load``, ``_infer`` and
``_close`` (and ``_warmup`` when it has something better to do than run zeros, e.g. capture
CUDA graphs). So the checks are written once and a new backend (TensorRT) is a thin file.
"""

from __future__ import annotations

import logging
import numbers
import threading
from pathlib import Path
from typing import ClassVar

import numpy as np

from rfclassify._exceptions import BackendError, ConfigError, InputError, ModelNotFoundError
from rfclassify._paths import not_a_file
from rfclassify.engine.devices import device_kind
from rfclassify.model.meta import META_FILE, ModelMeta
from rfclassify.model.network import arch_with_defaults

log = logging.getLogger(__name__)

PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")

#: Batch sizes warmed up (and, on CUDA, captured as graphs) unless told otherwise.
DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 8, 64, 256, 1024)


def integer_option(name: str, value: object, lo: int, hi: int | None = None, note: str = "") -> int:
    """`value` as an int where it is an integer (not a bool; numpy's too) in lo..hi (hi None: no
    bound); else a one-line ConfigError naming the option `name` (`note` after the range). The
    check of every integer option of a backend or a Classifier: max_batch_size="8" once raised
    TypeError from a comparison, and 1.5 or True were taken as 1."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < lo
            or (hi is not None and value > hi)):
        bounds = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise ConfigError(f"{name} must be an integer {bounds}{note}, got {value!r:.40}")
    return int(value)


class Backend:
    """One way of running the network. One object may be shared between threads: ``load``,
    ``warmup``, ``infer`` and ``close`` take its lock, so calls are serialized and a close waits
    for the call in flight."""

    #: Short name used in results, logs and on the command line.
    name: ClassVar[str] = "base"
    #: Precisions this backend can run on each kind of device ('cpu', 'cuda').
    precisions_by_device: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: The DLA core the engines run on (TensorRT sets it before this constructor runs; None: the GPU
    #: or the CPU), so that the files checked are the ones that placement reads.
    dla_core: int | None = None

    def __init__(
        self,
        meta: ModelMeta,
        model_dir: str | Path,
        *,
        precision: str = "fp32",
        device: str = "cpu",
        buckets_samples: tuple[int, ...] | None = None,
        max_batch_size: int = DEFAULT_BATCH_SIZES[-1],
    ) -> None:
        if precision not in PRECISIONS:
            raise ConfigError(f"unknown precision {precision!r}; choose from {', '.join(PRECISIONS)}")
        kind = device_kind(device)
        allowed = self.precisions_by_device.get(kind, ())
        if not allowed:
            raise ConfigError(f"backend {self.name} cannot run on device {device!r}")
        if precision not in allowed:
            raise ConfigError(
                f"backend {self.name} on {kind} supports {', '.join(allowed)}, not {precision}")
        n_classes = arch_with_defaults(meta.arch)["n_classes"]
        if n_classes != len(meta.labels):
            # the network gives one logit per label: every batch would fail, so say it before one runs
            raise ModelNotFoundError(
                f"{Path(model_dir) / META_FILE}: arch.n_classes is {n_classes} but labels lists "
                f"{len(meta.labels)}; the network must give one logit per label")
        problem = (self.foreign_file(meta, model_dir, precision, dla_core=self.dla_core)
                   or self.artifact_problem(meta, model_dir, precision, dla_core=self.dla_core))
        if problem:
            raise ModelNotFoundError(problem)
        max_batch_size = integer_option("max_batch_size", max_batch_size, 1)
        self.meta = meta
        self.model_dir = Path(model_dir)
        self._precision = precision
        self._device = device
        self.buckets_samples = tuple(buckets_samples or meta.buckets_samples)
        self.max_batch_size = max_batch_size
        self._loaded = False
        self._lock = threading.Lock()

    @classmethod
    def artifact_problem(cls, meta: ModelMeta, model_dir: str | Path, precision: str, *,
                         dla_core: int | None = None) -> str | None:
        """Why this backend cannot run `precision` from model_dir's files, or None if it can;
        dla_core: on that DLA core (TensorRT's engines there read other files; the rest ignore it)."""
        return None

    @classmethod
    def foreign_file(cls, meta: ModelMeta, model_dir: str | Path, precision: str, *,
                     dla_core: int | None = None) -> str | None:
        """Which file this backend reads for `precision` is not the one model.json records (another
        model's: rfclassify.model.provenance), as one line naming both, or None. Unlike an
        artifact_problem it is no reason to fall back to another precision or backend: the folder
        mixes two models, and select_backend raises it. ModelNotFoundError where a file cannot be
        read to tell."""
        return None

    # -- properties ---------------------------------------------------------------------
    @property
    def precision(self) -> str:
        return self._precision

    @property
    def device(self) -> str:
        return self._device

    @property
    def n_labels(self) -> int:
        return len(self.meta.labels)

    @property
    def loaded(self) -> bool:
        return self._loaded

    @classmethod
    def missing_file(cls, model_dir: str | Path, name: str) -> str | None:
        """Why file `name` of model_dir cannot be used (it is not there, or not a regular file),
        or None when it can. A folder in its place was "does not exist" before."""
        path = Path(model_dir) / name
        try:
            present = bool(name) and path.is_file()
        except OSError as exc:  # a name past the file system's limits (ENAMETOOLONG), say
            return f"{cls.name} backend needs {path}, which cannot be read: {exc.strerror}"
        if present:
            return None
        kind = not_a_file(path) if name else "no such file"
        if kind == "no such file":
            return f"{cls.name} backend needs {path}, which does not exist"
        return f"{cls.name} backend needs the file {path}, which is {kind}"

    def model_file(self, name: str) -> Path:
        """A file of the model directory; ModelNotFoundError when it is missing."""
        problem = self.missing_file(self.model_dir, name)
        if problem:
            raise ModelNotFoundError(problem)
        return self.model_dir / name

    # -- life cycle ---------------------------------------------------------------------
    def load(self) -> Backend:
        """Load the model (idempotent); returns self so `Backend(...).load()` chains. Under the
        backend's lock: two threads' first calls loaded it twice (two sessions, or CUDA graphs
        captured twice) before the sixty-seventh session."""
        with self._lock:
            self._load_held()
        return self

    def _load_held(self) -> None:
        """load() for a caller that holds the lock."""
        if not self._loaded:
            # checked again: a file may have been replaced since the constructor checked it
            problem = self.foreign_file(self.meta, self.model_dir, self.precision, dla_core=self.dla_core)
            if problem:
                raise ModelNotFoundError(problem)
            self._load()
            self._loaded = True
            log.info("loaded %s backend (%s on %s)", self.name, self.precision, self.device)

    @property
    def warmup_batch_sizes(self) -> tuple[int, ...]:
        """Batch sizes `warmup()` runs by default (CUDA graphs: every captured size)."""
        return (1,)

    def warmup(self, buckets_samples: tuple[int, ...] | None = None,
               batch_sizes: tuple[int, ...] | None = None) -> None:
        """Run every (bucket, batch size) once so the first real request pays nothing extra."""
        self.load()
        for b in buckets_samples or self.buckets_samples:
            self._check_length(b)
            for n in batch_sizes or self.warmup_batch_sizes:
                if not 1 <= n <= self.max_batch_size:
                    raise ConfigError(f"warmup batch size {n} outside 1..{self.max_batch_size}")
                with self._lock:
                    self._load_held()   # a close() from another thread since: load again, as infer does
                    self._warmup(b, n)

    def infer(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Run float32 (B, 2, 1, L) -> (logits float32 (B, n_labels), snr_db float32 (B,))."""
        self.check_input(x)
        with self._lock:
            # loaded where it runs, under the lock: checked before taking it (before the seventieth
            # session), a close() in between freed the session and _infer ran on None
            self._load_held()
            logits, snr_db = self._infer(x)
        return self._check_output(x.shape[0], logits, snr_db)

    def close(self) -> None:
        """Free the session/graphs, after the call in flight (it holds the lock); a later call
        (infer, warmup, load) loads the backend again."""
        with self._lock:
            if self._loaded:
                self._close()
                self._loaded = False

    def __enter__(self) -> Backend:
        return self.load()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.precision} on {self.device}>"

    # -- shared checks ------------------------------------------------------------------
    def check_input(self, x: object) -> None:
        """InputError unless x is C-contiguous float32 (B>=1, 2, 1, L) with L a configured bucket."""
        if not isinstance(x, np.ndarray):
            raise InputError(f"{self.name} backend input must be a numpy array, got {type(x).__name__}")
        if x.dtype != np.float32:
            raise InputError(f"{self.name} backend input must be float32, got {x.dtype}")
        if x.ndim != 4 or x.shape[1] != 2 or x.shape[2] != 1:
            raise InputError(
                f"{self.name} backend input must have shape (batch, 2, 1, length), got {x.shape}")
        if x.shape[0] < 1:
            raise InputError(f"{self.name} backend input has an empty batch")
        if x.shape[0] > self.max_batch_size:
            raise InputError(
                f"{self.name} backend batch {x.shape[0]} exceeds max_batch_size {self.max_batch_size}")
        self._check_length(x.shape[3])
        if not x.flags.c_contiguous:
            raise InputError(f"{self.name} backend input must be C-contiguous (np.ascontiguousarray)")

    def _check_length(self, length: int) -> None:
        if length not in self.buckets_samples:
            raise InputError(
                f"window length {length} is not a configured bucket {list(self.buckets_samples)}")

    def _check_output(self, batch: int, logits: object, snr_db: object) -> tuple[np.ndarray, np.ndarray]:
        lg = np.asarray(logits, dtype=np.float32)
        sn = np.asarray(snr_db, dtype=np.float32).reshape(-1)
        if lg.shape != (batch, self.n_labels) or sn.shape != (batch,):
            raise BackendError(
                f"{self.name} backend returned shapes {lg.shape}, {sn.shape}; "
                f"expected ({batch}, {self.n_labels}), ({batch},)")
        return lg, sn

    # -- hooks --------------------------------------------------------------------------
    def _load(self) -> None:
        raise NotImplementedError

    def _infer(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _close(self) -> None:
        """Default: nothing to free."""

    def _warmup(self, bucket_samples: int, batch_size: int) -> None:
        x = np.zeros((batch_size, 2, 1, bucket_samples), dtype=np.float32)
        self._infer(x)
