"""The public Python API: load a model on the best backend and classify bursts of any length.

    clf = rfclassify.Classifier.load()                       # shipped models/, backend auto
    results = clf.classify([iq0, iq1], sample_rate=1e6)
    results[0].label, results[0].confidence, results[0].top, results[0].snr_db

Each burst goes through ``rfclassify.dsp.windows.burst_to_windows`` (the normalization and
bucket rule shared with training), windows are grouped by bucket across bursts and batched
through the backend, and each burst's windows are aggregated by ``engine.results``. When the
model has a constellation refiner (``engine.refiner``), a burst whose top class is one it
re-decides goes through it, on the CPU, before the result is made; so does a burst whose top
class is one of the low-order refiner's, where the model has one. Before the refiners, the
DC pass (``engine.dc_pass``) finds each burst's receiver DC offset (for those the
constellation refiner takes, from the burst's symbols); where it matters it is taken out
and the network runs again on the burst, so that the network and the refiners both see it
without the offset. A burst whose network top probability is above the model's
``refiner_skip_above`` (model.json; bursts of at least its ``refiner_skip_min_samples``)
skips both: the network is sure of it, and on held-out bursts the refiners did not change
such answers, so their CPU goes to the others.
The daemon batches windows across bursts itself with ``infer_windows`` and
``results_from_outputs``.
"""

from __future__ import annotations

import logging
import numbers
import threading
from collections.abc import Sequence
from concurrent.futures import BrokenExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rfclassify._cpus import MAX_THREADS, refiner_worker_count
from rfclassify._exceptions import Cancelled, ConfigError, InputError, MessageError
from rfclassify._numbers import as_finite_float
from rfclassify.dsp.windows import BucketPolicy, BurstWindows, burst_to_windows, to_model_input, within_safe_peak
from rfclassify.engine.base import DEFAULT_BATCH_SIZES, Backend, integer_option
from rfclassify.engine.results import (
    ClassificationResult,
    aggregate_windows,
    log_softmax,
    make_result,
    reject_result,
)
from rfclassify.engine.select import Selection, backend_class, select_backend
from rfclassify.model.meta import ModelMeta, default_model_dir

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from rfclassify.engine.dc_pass import FitRoute
    from rfclassify.engine.refiner import Refiner
    from rfclassify.engine.refiner_pool import RefinerPool

__all__ = ["ClassificationResult", "Classifier", "as_burst"]

log = logging.getLogger(__name__)

_SKIP_NOTE = " (1: every burst is refined)"   # refiner_skip_above's error says what 1 means


def probability_option(name: str, value: object, note: str = "") -> float:
    """`value` as a float where it is a real number (not a bool or a string) in 0..1; else a
    one-line ConfigError naming `name` (None once raised TypeError from float(), and "0.5" passed).
    The number check is sample_rate's (_numbers.as_finite_float)."""
    p = as_finite_float(value)
    if p is None or not 0.0 <= p <= 1.0:
        raise ConfigError(f"{name} must be in 0..1{note}, got {value!r:.40}")
    return p


def as_burst(burst: object) -> np.ndarray:
    """A 1-D complex or real array from a burst; MessageError('bad_shape' / 'bad_dtype') otherwise.

    Accepted: 1-D complex (any precision), 1-D real numbers (a real signal, Q = 0), and
    (n, 2) real arrays read as I/Q pairs.
    """
    try:
        x = np.asarray(burst)
    except (ValueError, TypeError) as exc:  # ragged nested sequences
        raise MessageError("bad_shape", f"burst is not an array: {exc}") from None
    if x.dtype.kind not in "iufc":
        raise MessageError("bad_dtype", f"burst samples must be numbers, got dtype {x.dtype}")
    if x.ndim == 2 and x.shape[1] == 2 and x.dtype.kind != "c":
        return x[:, 0] + 1j * x[:, 1]
    if x.ndim != 1:
        raise MessageError("bad_shape", f"a burst must be 1-D complex (or (n, 2) I/Q), got shape {x.shape}")
    return x


def burst_list(bursts: object) -> Sequence[Any]:
    """`bursts` as classify iterates them; InputError where they are not a sequence of bursts but
    one burst passed bare (its samples would be taken as bursts of one sample, or of one I/Q pair,
    each a reject: a bare (n, 2) I/Q array and a bare list of numbers were, silently, before the
    seventieth session) or not a sequence at all (None, a number, a 0-d array, a string)."""
    wrap = "wrap a single burst in a list: classify([iq])"
    if isinstance(bursts, np.ndarray):
        if bursts.ndim == 0:
            raise InputError(f"classify takes a sequence of bursts, not a 0-d array; {wrap}")
        if bursts.ndim == 1:
            raise InputError(f"classify takes a sequence of bursts, not one 1-D array; {wrap}")
        if bursts.ndim == 2 and bursts.shape[1] == 2 and bursts.dtype.kind != "c":
            # one burst of I/Q pairs; read as bursts, each row would be one of 2 real samples
            raise InputError(f"classify takes a sequence of bursts, not one {bursts.shape} array of I/Q "
                             f"pairs; {wrap} (a 2-D complex array (B, n) is B bursts)")
        return bursts   # (B, n) complex: B bursts; (B, n, 2) real: B bursts of I/Q pairs
    if bursts is None or isinstance(bursts, (str, bytes, numbers.Number)) or not hasattr(bursts, "__iter__"):
        raise InputError(f"classify takes a sequence of bursts (arrays), not {type(bursts).__name__}")
    items = bursts if isinstance(bursts, Sequence) else list(bursts)
    if len(items) > 0 and all(isinstance(v, (numbers.Number, np.generic)) for v in items):
        raise InputError(f"classify takes a sequence of bursts, not one burst's {len(items)} samples as a "
                         f"{type(bursts).__name__} of numbers; {wrap}")
    return items


def sharpened(probs: np.ndarray, temperature: float) -> np.ndarray:
    """probs raised to 1 / temperature and renormalized (the same order; temperature 1: as
    given): the calibration of the bursts that skip the refiners, whose network confidence
    alone sits below their accuracy (model.json's refiner_skip_temperature)."""
    if temperature == 1.0:
        return probs
    return np.exp(log_softmax(np.log(np.maximum(np.asarray(probs, np.float64), 1e-300)), temperature))


def skip_sure(probs: Sequence[np.ndarray], bursts: Sequence[np.ndarray | None],
              skip_above: float, min_samples: int = 0) -> list[np.ndarray | None]:
    """The bursts as the DC pass and the refiners get them: None (no samples, so the network's
    answer stands) for each of at least min_samples whose top probability in `probs` is above
    skip_above, the others as given. skip_above 1.0 keeps every burst (no probability is
    above 1)."""
    return [None if x is None or (len(x) >= min_samples and float(np.max(p)) > skip_above) else x
            for p, x in zip(probs, bursts, strict=True)]


class Classifier:
    """A loaded model plus backend. Create with ``Classifier.load``; close (or use ``with``) when done."""

    def __init__(self, backend: Backend, *, selection: Selection | None = None, top_k: int = 5,
                 refiner: Refiner | None = None, refiner_pool: RefinerPool | None = None,
                 low_order_refiner: Refiner | None = None, dc_pass: bool = True) -> None:
        self._backend = backend
        self._selection = selection
        self.top_k = int(top_k)
        self.meta: ModelMeta = backend.meta
        self.model_dir: Path = backend.model_dir
        self.policy: BucketPolicy = self.meta.bucket_policy
        self.refiner = refiner
        self.low_order_refiner = low_order_refiner
        self._refiner_pool = refiner_pool
        self.dc_pass = bool(dc_pass)
        # the bursts handed to the refiners with their samples and at least
        # refiner_skip_min_samples long, and how many of those skipped (refiner_skip_counts)
        self._skip_counts = [0, 0]
        self._skip_lock = threading.Lock()
        #: the bursts the DC pass fits rather than leak-lines: its constellation refiner's
        #: (dc_pass.FitRoute.of_refiner; None without one)
        self.dc_route: FitRoute | None = None
        if refiner is not None:
            from rfclassify.engine.dc_pass import FitRoute
            self.dc_route = FitRoute.of_refiner(refiner)

    @classmethod
    def load(cls, model_dir: str | Path | None = None, backend: str = "auto",
             precision: str = "auto", device: str | None = None, *, top_k: int = 5,
             max_batch_size: int = DEFAULT_BATCH_SIZES[-1], warmup: bool = False,
             threads: int | None = None, refiner: bool = True, refiner_workers: int = 0,
             refiner_sequence: bool = True, refiner_rate_rule: str | None = None,
             refiner_em_classes: int | None = None,
             dc_pass: bool = True, low_order_refiner: bool = True,
             refiner_skip_above: float | None = None, dla_core: int | None = None,
             engine_cache: str | Path | None = None, cancel: threading.Event | None = None) -> Classifier:
        """Load the model in `model_dir` (default: $RFCLASSIFY_MODEL_DIR or the shipped models/).

        backend: auto | tensorrt | torch | onnxruntime; precision: auto | int8 | fp16 | fp32;
        device: None (chosen with the backend), 'cpu', 'cuda' or 'cuda:N'. The rules, and how
        an unavailable precision falls back, are in ``rfclassify.engine.select``; what was
        chosen and why is in ``clf.backend``, ``clf.precision``, ``clf.backend_reason`` and
        ``clf.precision_reason``. warmup=True runs every bucket once before returning (on CUDA:
        captures the graphs of every bucket and batch size, 1 up to max_batch_size, so no
        request pays for a capture); threads limits CPU threads; refiner=False leaves out the
        model's refiners, the constellation refiner and the low-order one (the network decides
        alone); refiner_workers > 0 computes their statistics in that many processes (a batch's
        bursts in parallel) instead of one after another in the calling thread, and -1
        (_cpus.AUTO_WORKERS, the daemon's default) in as many as _cpus.auto_refiner_workers
        allows (all cores but two, at least two; none on one core), the count kept in
        ``clf.refiner_workers`` (0 without a pool);
        refiner_sequence=False serves the constellation refiner's
        light variant (invariants only, about half its CPU per burst) where the model has one;
        refiner_rate_rule (one of symbol_clock.RATE_RULES) clocks the refiner's bursts by that
        rule; None: the model's serving rule (model.json's refiner.serve_rate_rule) where it names
        one, else the rule the refiner was fitted on (the shipped refiner's own is
        alphabet_fit_3_low_snr since the twenty-fifth session, docs/model.md);
        refiner_em_classes fits the EM scores of that many of the network's top classes for a
        refiner that has them; None: model.json's refiner.serve_em_classes where it names a
        count, else the count it was fitted with (Refiner.em_count); dc_pass=False
        leaves out the DC pass before the refiners (engine.dc_pass; it runs only where they do);
        low_order_refiner=False leaves out the model's low-order refiner alone (about a sixth
        of the shipped model's CPU per burst; docs/engine.md); refiner_skip_above: a burst
        whose network top probability is above it keeps the network's answer, without the DC
        pass and the refiners (0..1; 1: none skips them), if it is at least model.json's
        refiner_skip_min_samples long; None: model.json's refiner_skip_above
        (``clf.refiner_skip_above``); dla_core runs the TensorRT backend's engines on that DLA
        core (GPU fallback) and engine_cache is where it keeps them (tensorrt_plan.engine_cache_dir
        when None); other backends ignore both, with a logged warning for dla_core. cancel, once
        set, makes the TensorRT backend raise Cancelled instead of building its next engine
        (the daemon's stop during its start), and any backend once it has loaded, before the
        refiner workers spawn and the warm-up runs (the backend closed again).
        """
        model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
        meta = ModelMeta.load(model_dir)
        if len(meta.labels) < 2:  # an empty list too: nothing to choose between
            raise ConfigError(
                f"{model_dir}: model.json lists {len(meta.labels)} labels; a classifier needs at least 2")
        try:
            refiner_workers = refiner_worker_count(refiner_workers)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if threads is not None:
            # as [model] threads; a count past C's int once raised TypeError from ONNX Runtime
            integer_option("threads", threads, 0, MAX_THREADS, " (0 or None: all usable)")
        # top_k 0 or less once gave one label and 2.7 two, silently
        integer_option("top_k", top_k, 1)
        integer_option("max_batch_size", max_batch_size, 1)   # before anything loads; the backend checks it too
        if refiner_skip_above is not None:   # set once the backend has loaded: checked before
            probability_option("refiner_skip_above", refiner_skip_above, _SKIP_NOTE)
        refine, low_order = None, None
        low_order_info = meta.low_order_refiner if low_order_refiner else {}
        if refiner and (meta.refiner or low_order_info):  # before the backend: a broken file fails fast
            from rfclassify.engine.refiner import Refiner, disjoint_refiners, refiner_info, start_pool
            if meta.refiner:
                refine = Refiner.load(model_dir, refiner_info(meta.refiner, refiner_sequence), meta.labels)
                rule = refiner_rate_rule if refiner_rate_rule is not None else meta.refiner.get("serve_rate_rule")
                if rule is not None:
                    refine = refine.clocked_by(rule)
                count = refiner_em_classes if refiner_em_classes is not None else meta.refiner.get("serve_em_classes")
                if count is not None and refine.em_channel:
                    refine = refine.fitting_em_classes(count)
            if low_order_info:
                low_order = Refiner.load(model_dir, low_order_info, meta.labels)
            disjoint_refiners(refine, low_order)
        sel = select_backend(meta, model_dir, backend, precision, device, dla_core=dla_core)
        options: dict[str, Any] = {}
        if sel.backend == "tensorrt":
            options = {"dla_core": dla_core, "engine_cache": engine_cache, "cancel": cancel}
        elif dla_core is not None:
            log.warning("dla_core %s ignored: the %s backend runs (%s)", dla_core, sel.backend, sel.reason)
        impl = backend_class(sel.backend)(meta, model_dir, precision=sel.precision, device=sel.device,
                                          max_batch_size=max_batch_size, threads=threads, **options)
        impl.load()
        if cancel is not None and cancel.is_set():
            # before the refiner workers spawn and the warm-up runs: seconds each on a loaded box
            impl.close()
            raise Cancelled(f"stopped after loading the {sel.backend} backend, before its refiner workers and warm-up")
        clf: Classifier | None = None
        try:   # a refiner pool or a warm-up that fails leaves no loaded backend behind
            clf = cls(impl, selection=sel, top_k=top_k, refiner=refine, low_order_refiner=low_order, dc_pass=dc_pass)
            if refiner_skip_above is not None:
                clf.refiner_skip_above = refiner_skip_above
            if refiner_workers > 0 and (refine is not None or low_order is not None):
                # started once the backend has loaded, so a backend that fails leaves no processes behind
                from functools import partial

                from rfclassify.engine.refiner_pool import RefinerPool
                if refine is not None:
                    from rfclassify.engine.dc_pass import worker_setup
                    setup = worker_setup(clf.dc_route) if dc_pass and clf.dc_route is not None else None
                    start = partial(refine.start_pool, refiner_workers, setup)
                    clf._refiner_pool = RefinerPool(start, refiner_workers)
                else:
                    clf._refiner_pool = RefinerPool(partial(start_pool, refiner_workers), refiner_workers)
            if warmup:
                impl.warmup()
                clf.prepare_dc_pass()
        except BaseException:
            if clf is not None:
                clf.close()
            else:
                impl.close()
            raise
        return clf

    def prepare_dc_pass(self) -> None:
        """Build what the DC pass's fits need now rather than on the first bursts (part of
        warm-up; nothing without the DC pass or a constellation refiner)."""
        if self.dc_pass and self.dc_route is not None:
            from rfclassify.engine.dc_pass import prepare
            prepare(self.dc_route)

    # -- what is running ----------------------------------------------------------------
    @property
    def refiners(self) -> tuple[Refiner, ...]:
        """The refiners it serves: the constellation refiner, then the low-order one, where
        present (load has checked that their classes do not overlap)."""
        return tuple(r for r in (self.refiner, self.low_order_refiner) if r is not None)

    @property
    def refiner_workers(self) -> int:
        """The processes the refiners' statistics run in now (0: the calling thread: none were
        asked for, or a pool that broke is being replaced; engine.refiner_pool)."""
        pool = self._refiner_pool
        return pool.workers if pool is not None and pool.executor is not None else 0

    @property
    def refiner_pool_breaks(self) -> int:
        """How often the refiners' worker pool broke (a worker died) since load."""
        return self._refiner_pool.breaks if self._refiner_pool is not None else 0

    @property
    def refiner_skip_counts(self) -> dict[str, int]:
        """Since load: the bursts given to the refiners with their samples that were at least
        model.json's refiner_skip_min_samples long (`long_enough`), and how many of them kept the
        network's answer above refiner_skip_above (`skipped`)."""
        with self._skip_lock:
            return {"long_enough": self._skip_counts[0], "skipped": self._skip_counts[1]}

    @property
    def labels(self) -> tuple[str, ...]:
        return self.meta.labels

    @property
    def backend(self) -> str:
        return self._backend.name

    @property
    def backend_impl(self) -> Backend:
        """The Backend object (for benchmarks and the daemon's warmup)."""
        return self._backend

    @property
    def backend_reason(self) -> str:
        return self._selection.reason if self._selection else "given explicitly"

    @property
    def precision(self) -> str:
        return self._backend.precision

    @property
    def precision_reason(self) -> str:
        return self._selection.precision_reason if self._selection else "given explicitly"

    @property
    def device(self) -> str:
        return self._backend.device

    @property
    def model_id(self) -> str:
        return self.meta.model_id

    @property
    def unknown_threshold(self) -> float:
        """The open-set threshold in use (model.json's unless set)."""
        return float(self.meta.unknown_threshold)

    @unknown_threshold.setter
    def unknown_threshold(self, value: float) -> None:
        self._set_probability("unknown_threshold", value)

    @property
    def refiner_skip_above(self) -> float:
        """The network top probability above which a burst skips the DC pass and the refiners
        (model.json's unless set; 1.0: none skips them), if it is at least model.json's
        refiner_skip_min_samples long."""
        return float(self.meta.refiner_skip_above)

    @refiner_skip_above.setter
    def refiner_skip_above(self, value: float) -> None:
        # the skipped bursts' temperature was fitted for the model's own threshold: another one
        # serves them the network's probabilities as they are
        same = probability_option("refiner_skip_above", value, _SKIP_NOTE) == self.meta.refiner_skip_above
        self._set_probability("refiner_skip_above", value, _SKIP_NOTE,
                              **({} if same else {"refiner_skip_temperature": 1.0}))

    def _set_probability(self, key: str, value: float, note: str = "", **also: Any) -> None:
        """model.json's probability `key` (and the values `also`) as served from now on
        (ConfigError unless a number in 0..1)."""
        p = probability_option(key, value, note)
        # one attribute swap of a frozen meta: a concurrent results_from_outputs sees old or new
        self.meta = self.meta.with_updates(**{key: p}, **also)

    @property
    def max_batch_size(self) -> int:
        return self._backend.max_batch_size

    def describe(self) -> dict[str, Any]:
        """backend/precision/device/model and the reasons, the refiners, the DC pass and the
        refiners' worker processes, for logs and `status`."""
        return {"backend": self.backend, "precision": self.precision, "device": self.device,
                "model": self.model_id, "backend_reason": self.backend_reason,
                "precision_reason": self.precision_reason,
                "refiner": self.refiner.describe() if self.refiner else None,
                "low_order_refiner": self.low_order_refiner.describe() if self.low_order_refiner else None,
                "dc_pass": bool(self.dc_pass and self.refiners), "refiner_workers": self.refiner_workers,
                "refiner_pool_breaks": self.refiner_pool_breaks,
                "refiner_skip_above": self.refiner_skip_above if self.refiners else None,
                "refiner_skip_min_samples": self.meta.refiner_skip_min_samples if self.refiners else None,
                "refiner_skip_counts": self.refiner_skip_counts if self.refiners else None}

    # -- classification -----------------------------------------------------------------
    def classify(self, bursts: Sequence[Any], sample_rate: float | None = None) -> list[ClassificationResult]:
        """One result per burst, in order. A burst that cannot be classified gets a result with
        ok=False and reject_reason set; it never raises for one bad burst. One burst passed bare,
        not in a list, is an InputError (burst_list).

        sample_rate (Hz) is recorded in the results only: the model is trained across 2-16
        samples/symbol, so nothing is resampled to a nominal rate (a model with a symbol-rate
        normalizer resamples each burst by its own estimated symbol rate instead).
        """
        bursts = burst_list(bursts)
        rate = None if sample_rate is None else as_finite_float(sample_rate)
        if sample_rate is not None and not (rate is not None and rate > 0):
            raise InputError(f"sample_rate must be a positive number of Hz or None, not {sample_rate!r}")
        cut: list[BurstWindows | ClassificationResult] = []
        raw: list[np.ndarray | None] = []
        for burst in bursts:
            x, item = self._cut(burst, rate)
            raw.append(x)
            cut.append(item)
        by_bucket: dict[int, list[int]] = {}
        for i, item in enumerate(cut):
            if isinstance(item, BurstWindows):
                by_bucket.setdefault(item.bucket_samples, []).append(i)
        results: list[ClassificationResult | None] = [
            item if isinstance(item, ClassificationResult) else None for item in cut]
        for bucket, members in by_bucket.items():
            wins: list[BurstWindows] = [cut[i] for i in members]  # type: ignore[misc]
            logits, snr_db = self.infer_windows(bucket, np.concatenate([w.windows for w in wins]))
            made = self.results_from_batch(logits, snr_db, wins, bucket, [rate] * len(wins),
                                           [raw[i] for i in members])
            for i, r in zip(members, made, strict=True):
                results[i] = r
        return [r for r in results if r is not None]

    def _cut(self, burst: Any, rate: float | None) -> tuple[np.ndarray | None, BurstWindows | ClassificationResult]:
        """(the burst as an array, or None; its windows, or its reject result)."""
        n, x = 0, None
        try:
            x = as_burst(burst)
            n = int(x.shape[0]) if x.ndim else 0
            return x, burst_to_windows(x, self.policy)
        except MessageError as exc:
            return x, reject_result(exc.reason, exc.detail, n, sample_rate_hz=rate)

    # -- daemon-facing ------------------------------------------------------------------
    def infer_windows(self, bucket_samples: int, windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Run normalized windows (W, bucket_samples) complex64 of one bucket through the backend.

        Returns (logits float32 (W, n_labels), snr_db float32 (W,)); batches larger than
        max_batch_size are split. The windows come from ``burst_to_windows(iq, clf.policy)``.
        """
        w = np.asarray(windows)
        if w.ndim != 2 or w.shape[1] != bucket_samples:
            raise InputError(f"windows must have shape (n, {bucket_samples}), got {w.shape}")
        if w.shape[0] == 0:
            return (np.zeros((0, len(self.labels)), np.float32), np.zeros(0, np.float32))
        step = self.max_batch_size
        outs = [self._backend.infer(to_model_input(w[i:i + step])) for i in range(0, w.shape[0], step)]
        if len(outs) == 1:
            return outs[0]
        return np.concatenate([o[0] for o in outs]), np.concatenate([o[1] for o in outs])

    def results_from_outputs(self, logits: np.ndarray, snr_db: np.ndarray, n_samples: int,
                             bucket_samples: int, sample_rate: float | None = None,
                             snr_offset_db: float = 0.0, burst: np.ndarray | None = None) -> ClassificationResult:
        """One burst's result from its windows' outputs: logits (W, n_labels), snr_db (W,).

        snr_offset_db: the burst's BurstWindows.snr_offset_db (resampling's SNR gain), taken off
        the estimate so the result reports the SNR over the burst's full sampled band.
        burst: its samples as received, for the DC pass and the refiners (None: the network
        decides alone)."""
        w = np.shape(logits)[0]
        (result,) = self._results([aggregate_windows(logits, snr_db, self.meta.temperature)], [w], [snr_offset_db],
                                  [n_samples], bucket_samples, [sample_rate], [burst])
        return result

    def results_from_batch(self, logits: np.ndarray, snr_db: np.ndarray, windows: Sequence[BurstWindows],
                           bucket_samples: int, sample_rates: Sequence[float | None],
                           bursts: Sequence[np.ndarray | None]) -> list[ClassificationResult]:
        """results_from_outputs for the bursts of one backend call: logits (W, n_labels) and
        snr_db (W,) hold their windows in order (windows[i].n_windows rows each); bursts are
        their samples for the refiners (None: the network decides alone for that burst). The
        refiners' statistics (and the DC pass's estimates) of the whole batch run in the process
        pool when there is one."""
        return self._results(self._aggregated(logits, snr_db, windows), [w.n_windows for w in windows],
                             [w.snr_offset_db for w in windows], [w.n_samples for w in windows], bucket_samples,
                             sample_rates, bursts)

    def _aggregated(self, logits: np.ndarray, snr_db: np.ndarray,
                    windows: Sequence[BurstWindows]) -> list[tuple[np.ndarray, float]]:
        """Each burst's (probabilities, network SNR estimate) from the rows of one backend call,
        windows[i].n_windows rows each, in order."""
        ends = np.cumsum([w.n_windows for w in windows])
        return [aggregate_windows(logits[end - w.n_windows:end], snr_db[end - w.n_windows:end], self.meta.temperature)
                for w, end in zip(windows, ends, strict=True)]

    def _results(self, outputs: list[tuple[np.ndarray, float]], n_windows: list[int], snr_offsets: list[float],
                 n_samples: list[int], bucket_samples: int, sample_rates: Sequence[float | None],
                 bursts: Sequence[np.ndarray | None]) -> list[ClassificationResult]:
        """Results from each burst's aggregated network output (probabilities, SNR estimate):
        through the DC pass and the refiners where the burst's samples are given and the
        network is not sure of it (skip_sure; those sharpened by refiner_skip_temperature)."""
        probs = [p for p, _ in outputs]
        snrs = [s - off for (_, s), off in zip(outputs, snr_offsets, strict=True)]
        if self.refiners:
            bursts = [None if x is None else within_safe_peak(x) for x in bursts]
            # a burst the network is sure of goes to the DC pass and the refiners without its
            # samples, which keeps the network's answer; its probabilities are sharpened after
            least = self.meta.refiner_skip_min_samples
            sure = skip_sure(probs, bursts, self.refiner_skip_above, least)
            skipped = [i for i, (x, y) in enumerate(zip(bursts, sure, strict=True)) if x is not None and y is None]
            with self._skip_lock:
                self._skip_counts[0] += sum(x is not None and len(x) >= least for x in bursts)
                self._skip_counts[1] += len(skipped)
            pool = self._refiner_pool
            executor = pool.executor if pool is not None else None
            # the DC pass updates these lists in place: a retry must start from them as they were
            # (it ran twice on the bursts it had cleaned before the sixty-seventh session)
            before = (list(probs), list(snrs), list(n_windows), list(sure))
            try:
                probs = self._refine(probs, snrs, n_windows, sure, executor)
            except BrokenExecutor:  # a worker died (killed, out of memory): this batch without the pool
                pool.broke(executor)    # which starts a new one in the background
                probs, snrs, n_windows, sure = (list(v) for v in before)
                probs = self._refine(probs, snrs, n_windows, sure, None)
            for i in skipped:
                probs[i] = sharpened(probs[i], self.meta.refiner_skip_temperature)
        return [make_result(p, s, self.labels, n_samples=n, bucket=bucket_samples, windows=w,
                            unknown_threshold=self.meta.unknown_threshold, top_k=self.top_k, sample_rate_hz=rate)
                for p, s, w, n, rate in zip(probs, snrs, n_windows, n_samples, sample_rates, strict=True)]

    def _refine(self, probs: list[np.ndarray], snrs: list[float], n_windows: list[int],
                bursts: list[np.ndarray | None], executor: Executor | None) -> list[np.ndarray]:
        """The DC pass (probs, snrs, n_windows and bursts updated in place for the bursts it
        cleans), then the refiners' answers, their statistics in `executor`'s processes where
        given. Their numpy work runs with one BLAS thread (_cpus.one_blas_thread: its products
        are small, and a thread per core only waits)."""
        from rfclassify._cpus import one_blas_thread
        from rfclassify.engine.refiner import refine_routed
        with one_blas_thread():
            if self.dc_pass:
                self.take_out_dc(probs, snrs, n_windows, bursts, self.dc_route, executor)
            return refine_routed(self.refiners, probs, snrs, bursts, executor)

    def take_out_dc(self, probs: list[np.ndarray], snrs: list[float], n_windows: list[int],
                    bursts: list[np.ndarray | None], route: FitRoute | None,
                    executor: Executor | None = None) -> None:
        """The DC pass (engine.dc_pass; its fits for the bursts `route` takes, none for
        None): each burst whose DC offset matters, without it, and the network's answer for it
        so, in place of what is given. Served, it runs before the refiners; a refiner's fit
        runs it on its bursts so that its perceptron learns from them as they are served."""
        from rfclassify.engine.dc_pass import offsets_to_remove
        cleaned: dict[int, tuple[np.ndarray, BurstWindows]] = {}
        for i, offset in offsets_to_remove(probs, snrs, bursts, route, executor).items():
            x = np.asarray(bursts[i]) - offset
            try:
                cleaned[i] = (x, burst_to_windows(x, self.policy))
            except MessageError:    # not for a burst accepted once; if it were, it stays as it was
                continue
        by_bucket: dict[int, list[int]] = {}
        for i, (_, cut) in cleaned.items():
            by_bucket.setdefault(cut.bucket_samples, []).append(i)
        for bucket, members in by_bucket.items():
            cuts = [cleaned[i][1] for i in members]
            logits, snr_db = self.infer_windows(bucket, np.concatenate([c.windows for c in cuts]))
            for i, cut, (p, s) in zip(members, cuts, self._aggregated(logits, snr_db, cuts), strict=True):
                probs[i], snrs[i], n_windows[i], bursts[i] = p, s - cut.snr_offset_db, cut.n_windows, cleaned[i][0]

    # -- life cycle ---------------------------------------------------------------------
    def close(self) -> None:
        if self._refiner_pool is not None:
            self._refiner_pool.close()
            self._refiner_pool = None
        self._backend.close()

    def __enter__(self) -> Classifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<Classifier model={self.model_id!r} backend={self.backend} "
                f"precision={self.precision} device={self.device}>")
