"""The constellation refiner: re-decides a burst among the high-order classes from its symbol statistics.

The network sees raw samples and cannot find the lines that separate 16PSK from 32PSK or the
dense QAMs from each other when the carrier and symbol rate are unknown (docs/model.md). The
refiner is a late fusion that adds them: for a burst whose network top class is one of the
refiner's classes (and that is at least the refiner's ``min_samples`` long), it takes the
network's calibrated log-probabilities, its SNR estimate and the burst's carrier-invariant
statistics at its blind symbol clock (``rfclassify.dsp.symbol_clock.burst_invariants``,
the rate picked by the refiner's ``rate_rule``) and, when it carries one, the class
log-probabilities of a small network over the burst's clocked, carrier-recovered symbols
(``rfclassify.engine.sequence_net``, on
``rfclassify.dsp.symbol_sequence``; with its blind view, also over those symbols after a
class-blind equalizer, ``rfclassify.dsp.blind_equalizer``, read by the same network or by a
blind reader, one trained on such symbols) and, when it has them, how well
each of its classes' alphabets explains those symbols after an equalizer fitted to it
(``rfclassify.dsp.class_equalizer``: the multipath the sequence network cannot undo) and,
with ``em_channel``, how well the alphabets of the network's top three of its classes
explain the burst through a channel estimated for each by EM (``rfclassify.dsp.em_channel``;
with an ``em_ranker``, the top three of a first refiner over the other inputs instead),
runs a small two-layer perceptron (numpy, on the CPU, whatever backend ran the network; an
ensemble of them, and gradient-boosted trees beside them when the fit made some,
``rfclassify.engine.tree_ensemble``), and shares the probability the network gave those
classes out again by their class probabilities. Every other class keeps the network's
probability, so the label can only move inside the refiner's classes and the open-set
threshold reads the result as before.

Fitted by ``rfclassify.model.refiner_fit`` (``rfclassify fit-refiner``) on a trained model and
stored beside it (``refiner.npz``, described in model.json's ``refiner``; the sequence
network's weights, trained by ``rfclassify fit-sequence``, are stored inside it). A model
without one classifies as the network alone.

A model may also carry a low-order refiner (``fit-refiner --group low-order``,
``refiner_low_order.npz``, model.json's ``low_order_refiner``): the same kind of perceptron
over the other classes (labels.LOW_ORDER_LABELS: 4ASK / 8ASK, the SSB pair, GFSK / GMSK, ...)
from the invariants alone. The refiners' classes do not overlap, and ``refine_routed`` sends
each burst to the one that holds its network top class.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rfclassify._atomic import replacing
from rfclassify._cpus import keep_one_blas_thread
from rfclassify._digest import file_sha256
from rfclassify._exceptions import ConfigError, InternalError, ModelNotFoundError
from rfclassify._npz import open_npz
from rfclassify.dsp import em_channel
from rfclassify.dsp.em_channel import ALL_BURSTS, FAST_CLASSES
from rfclassify.dsp.class_equalizer import class_scores, scorable
from rfclassify.dsp.symbol_clock import (N_INVARIANTS, RATE_RULES, STRONGEST_LINE, blind_symbols, burst_invariants,
                                         found_invariants)
from rfclassify.dsp.power_lines import power_line_features
from rfclassify.dsp.sequence_fronts import BLIND_MOMENTS, blind_filtered, front_sequence
from rfclassify.dsp.symbol_sequence import CARRIER_LINES, clocked_symbols, finite_sequence
from rfclassify.engine.refiner_pool import (become_child_worker, end_processes, map_chunksize, spawn_context,
                                            starting_processes)
from rfclassify.engine.results import log_softmax
from rfclassify.engine.sequence_net import PREFIX as SEQUENCE_PREFIX
from rfclassify.engine.sequence_net import SequenceNet
from rfclassify.engine.tree_ensemble import PREFIX as TREES_PREFIX
from rfclassify.engine.tree_ensemble import TreeEnsemble

log = logging.getLogger(__name__)

REFINER_FILE = "refiner.npz"
LOW_ORDER_REFINER_FILE = "refiner_low_order.npz"   # the low-order refiner's (model.json's low_order_refiner)
LIGHT_REFINER_FILE = "refiner_light.npz"   # the invariants-only variant of a refiner with a sequence network
BLIND_READER_PREFIX = "blind_reader_"   # array names of the blind view's own reader in the refiner's file
EM_RANKER_PREFIX = "em_ranker_"         # array names of the refiner's EM ranker (Refiner.em_ranker) in its file
LOG_PROB_FLOOR = 1e-12      # log-probabilities below log(this) are clipped before the perceptron
_ARRAYS = ("mean", "scale", "w1", "b1", "w2", "b2")


@dataclass(frozen=True)
class EmPick:
    """What picks one burst's EM classes once its other statistics are measured: its network
    probabilities (over the model's labels) and SNR estimate, read with those statistics by
    the refiner's EM ranker (Refiner.em_ranker), whose ranking `gate` reads
    (em_channel.em_classes)."""

    probs: np.ndarray
    snr_db: float
    gate: str = ALL_BURSTS
    count: int = FAST_CLASSES      # how many of the ranker's top classes are fitted

    def classes(self, ranker: Refiner, em_labels: tuple[str, ...], statistics: np.ndarray) -> np.ndarray:
        """The classes (indices into em_labels) to fit, from the statistics before the EM scores."""
        logits = ranker.logits(ranker.features(self.probs, self.snr_db, statistics))[0]
        return em_channel.em_classes(logits, em_labels, self.snr_db, self.gate, self.count)


def burst_statistics(iq: np.ndarray, sequence_net: SequenceNet | None = None,
                     equalizer: tuple[str, ...] = (), rate_rule: str = STRONGEST_LINE,
                     em_labels: tuple[str, ...] = (), em_classes: np.ndarray | EmPick | None = None,
                     em_ranker: Refiner | None = None) -> np.ndarray:
    """The refiner's statistics of one raw burst, float32: its N_INVARIANTS invariants at the
    blind clock (its rate by rate_rule: symbol_clock.blind_clock), then, with a sequence
    network, its outputs for the burst's clocked symbols in its front (sequence_fronts;
    SequenceNet.outputs: its log-probabilities, uniform where there are none, and with
    with_features its pooled features; with blind_view then blind_view_outputs; with
    power_lines then power_lines.power_line_features of the same symbols), then, for
    `equalizer`'s classes, their equalized scores (class_equalizer.class_scores; zeros where
    there are too few symbols), then, for classes em_labels, their scores by a channel
    estimate fitted by EM for each of the classes em_classes (indices into em_labels;
    em_channel.scores_at_clock at the same blind clock; zeros where it has none, and where
    em_classes is empty: the refiner's EM gate held the burst back). em_classes may be an
    EmPick instead: the classes em_ranker ranks highest from the statistics before them.
    One blind clock and one set of clocked symbols serve them all, by the sequence network's
    second carrier pass (symbol_sequence.CARRIER_PASSES; the lines without one)."""
    if sequence_net is None and not equalizer and not em_labels:
        return burst_invariants(iq, rate_rule)
    found = blind_symbols(iq, rate_rule)
    parts = [found_invariants(found)]
    y = None                            # the clocked symbols: the EM scores read the clock's samples instead
    if sequence_net is not None or equalizer:
        y = clocked_symbols(found, carrier=sequence_net.carrier if sequence_net is not None else CARRIER_LINES)
    if sequence_net is not None:
        seq = None if y is None else front_sequence(y, sequence_net.front, sequence_net.labels)
        parts.append(sequence_net.outputs(seq))
        filtered = None if y is None or not (sequence_net.blind_view or sequence_net.power_lines) else blind_filtered(y)
        if sequence_net.blind_view:
            parts.append(blind_view_outputs(y, sequence_net, filtered))
        if sequence_net.power_lines:
            parts.append(power_line_features(y, None if filtered is None else filtered[0]))
    if equalizer:
        scores = None if y is None else _equalizer_scores(y, equalizer)
        parts.append(np.zeros(len(equalizer), np.float32) if scores is None else scores)
    if em_labels:
        if isinstance(em_classes, EmPick):
            if em_ranker is None:
                raise ValueError("an EmPick needs the refiner's EM ranker")
            em_classes = em_classes.classes(em_ranker, em_labels, np.concatenate(parts).astype(np.float32))
        parts.append(_em_scores_or_zeros(found, em_labels, em_classes))
    return np.concatenate(parts).astype(np.float32)


def _em_scores_or_zeros(found: Any, em_labels: tuple[str, ...], em_classes: np.ndarray | None) -> np.ndarray:
    """em_channel.scores_at_clock at the blind clock `found`, zeros where it gives none."""
    scores = em_channel.scores_at_clock(found, em_labels, em_classes)
    return np.zeros(em_channel.n_scores(em_labels), np.float32) if scores is None else scores


def blind_view_outputs(y: np.ndarray | None, sequence_net: SequenceNet,
                       filtered: tuple[np.ndarray, float, float] | None = None) -> np.ndarray:
    """The sequence network's log-probabilities for clocked symbols y after the class-blind
    equalizer (blind_equalizer.kurtosis_equalize; read by its blind_reader where it has one),
    then that filter's fourth moments before and after, float32; the uniform log-probabilities
    and zero moments where there are no symbols or no sequence of them. filtered: the
    filter's output for y (sequence_fronts.blind_filtered) where the caller has it."""
    if filtered is None and y is not None:
        filtered = blind_filtered(y)
    if filtered is not None:
        z, before, after = filtered
        reader = sequence_net.blind_reader
        # a reader of the filtered front reads the channels of the filtered symbols z themselves
        seq = (finite_sequence(z) if reader is not None
               else front_sequence(z, sequence_net.front, sequence_net.labels))
        if seq is not None:
            lp = (reader or sequence_net).log_probs(seq)
            return np.concatenate([lp, [before, after]]).astype(np.float32)
    return np.concatenate([sequence_net.uniform(), np.zeros(BLIND_MOMENTS)]).astype(np.float32)


def _equalizer_scores(y: np.ndarray, classes: tuple[str, ...]) -> np.ndarray | None:
    with np.errstate(all="ignore"):
        scores = class_scores(y, classes)
    return scores if scores is not None and np.all(np.isfinite(scores)) else None


def safe_statistics(iq: np.ndarray, sequence_net: SequenceNet | None = None,
                    equalizer: tuple[str, ...] = (), rate_rule: str = STRONGEST_LINE,
                    em_labels: tuple[str, ...] = (), em_classes: np.ndarray | EmPick | None = None,
                    em_ranker: Refiner | None = None) -> np.ndarray | None:
    """burst_statistics, or None (logged) when they fail: that burst keeps the network's answer."""
    try:
        return burst_statistics(iq, sequence_net, equalizer, rate_rule, em_labels, em_classes, em_ranker)
    except Exception:  # noqa: BLE001 - a burst the statistics cannot take keeps the network's answer
        log.warning("refiner: burst statistics failed; the network's decision stands", exc_info=True)
        return None


def em_statistics(iq: np.ndarray, rate_rule: str, em_labels: tuple[str, ...], em_classes: np.ndarray) -> np.ndarray:
    """burst_statistics' EM scores of one raw burst alone (its blind clock by rate_rule): what
    a fit whose EM classes depend on the other statistics (refiner_fit's EM ranker) measures
    in a second pass."""
    return _em_scores_or_zeros(blind_symbols(iq, rate_rule), em_labels, em_classes)


_worker_sequence_net: SequenceNet | None = None    # a pool worker's copy, set by _init_worker
_worker_equalizer: tuple[str, ...] = ()            # the classes whose equalized scores it computes
_worker_rate_rule: str = STRONGEST_LINE            # how its blind clock picks the rate
_worker_em_ranker: Refiner | None = None           # the refiner's EM ranker (EmPick's tasks need it)


POOL_START_TIMEOUT_S = 60.0   # how long a starting worker waits for the pool's others


def _init_worker(sequence_net: SequenceNet | None, equalizer: tuple[str, ...], rate_rule: str, started: Any,
                 all_started: Any, workers: int, setup: tuple[Callable[..., None], tuple[Any, ...]] | None,
                 em_ranker: Refiner | None = None) -> None:
    """A pool worker's start: keep its copy of the sequence network, the equalizer's classes,
    the rate rule and the EM ranker, and give it one BLAS (and OpenMP) thread (keep_one_blas_thread: the
    workers are the parallelism). Then run `setup` (function, args) where given, and wait,
    through `started` (a shared count) and `all_started` (an event), until all `workers`
    have started (see start_pool)."""
    global _worker_sequence_net, _worker_equalizer, _worker_rate_rule, _worker_em_ranker
    # Ctrl-C and SIGTERM reach the whole process group: the daemon drains, and a worker must not
    # die meanwhile (of Ctrl-C with a KeyboardInterrupt traceback on the terminal, sixty-sixth
    # session; of a group's SIGTERM, which broke the pool in the middle of the drain); and a
    # worker whose daemon was killed ends too, instead of waiting for tasks under PID 1
    become_child_worker()
    _worker_sequence_net, _worker_equalizer, _worker_rate_rule = sequence_net, equalizer, rate_rule
    _worker_em_ranker = em_ranker
    keep_one_blas_thread()
    if setup is not None:
        setup[0](*setup[1])
    _wait_for_all(started, all_started, workers)


def worker_statistics_settings() -> tuple[SequenceNet | None, tuple[str, ...], str]:
    """In a start_pool worker: the sequence network, equalizer classes and rate rule it holds."""
    return _worker_sequence_net, _worker_equalizer, _worker_rate_rule


def _wait_for_all(started: Any, all_started: Any, workers: int, timeout_s: float = POOL_START_TIMEOUT_S) -> bool:
    """Count this worker in `started` and wait (at most timeout_s) until `workers` are counted;
    the last sets `all_started`. A worker started later (a replacement) finds it set."""
    with started.get_lock():
        started.value += 1
        if started.value >= workers:
            all_started.set()
    return bool(all_started.wait(timeout_s))


def _pooled_statistics(iq: np.ndarray, em_classes: np.ndarray | EmPick | None = None,
                       em_labels: tuple[str, ...] = ()) -> np.ndarray | None:
    return safe_statistics(iq, _worker_sequence_net, _worker_equalizer, _worker_rate_rule, em_labels, em_classes,
                           _worker_em_ranker)


def _pooled_invariants(rate_rule: str, iq: np.ndarray) -> np.ndarray | None:
    return safe_statistics(iq, None, (), rate_rule)


def statistics_many(bursts: Sequence[np.ndarray], sequence_net: SequenceNet | None = None,
                    pool: Executor | None = None, equalizer: tuple[str, ...] = (),
                    rate_rule: str = STRONGEST_LINE, em_labels: tuple[str, ...] = (),
                    em_classes: Sequence[np.ndarray | EmPick] | None = None,
                    em_ranker: Refiner | None = None) -> list[np.ndarray | None]:
    """safe_statistics of every burst, in order: in `pool` when given (a lone burst too: here
    it would hold the caller's interpreter lock for its 5-20 ms, which a daemon's other
    threads need, and the first such burst paid about a second here for the alphabet tables
    only the workers had made; fifty-fifth session), else here, one after another. The
    invariants alone (no sequence network, no equalizer, no EM scores) run in any start_pool
    pool at `rate_rule`; anything more needs a
    pool from start_pool(workers, sequence_net, equalizer, rate_rule), whose workers hold
    that same network, classes and rule (and em_ranker, for EmPicks). em_labels, em_classes,
    em_ranker: burst_statistics' (one array of classes or EmPick per burst; the EM scores'
    labels travel with the tasks)."""
    if em_labels and (em_classes is None or len(em_classes) != len(bursts)):
        raise ValueError("the EM scores need one array of classes per burst")
    each = list(em_classes) if em_labels and em_classes is not None else [None] * len(bursts)
    if pool is not None and bursts:
        chunk = map_chunksize(len(bursts))
        if sequence_net is None and not equalizer and not em_labels:
            return list(pool.map(functools.partial(_pooled_invariants, rate_rule), bursts, chunksize=chunk))
        return list(pool.map(functools.partial(_pooled_statistics, em_labels=tuple(em_labels)), bursts, each,
                             chunksize=chunk))
    return [safe_statistics(x, sequence_net, equalizer, rate_rule, em_labels, c, em_ranker)
            for x, c in zip(bursts, each, strict=True)]


def _warm_burst() -> np.ndarray:
    """A 1024-sample QPSK burst (4 samples per symbol, a small carrier offset): it takes a
    worker through the blind clock, the sequence and its network, so their first-use costs
    (lazy imports, BLAS buffers) are paid before real bursts arrive."""
    rng = np.random.default_rng(0)
    symbols = np.exp(1j * (np.pi / 4 + np.pi / 2 * rng.integers(0, 4, 256)))
    x = np.convolve(np.repeat(symbols, 4), np.hanning(6), mode="same") * np.exp(2j * np.pi * 0.01 * np.arange(1024))
    return (x + 0.05 * (rng.standard_normal(1024) + 1j * rng.standard_normal(1024))).astype(np.complex64)


def start_pool(workers: int, sequence_net: SequenceNet | None = None, equalizer: tuple[str, ...] = (),
               rate_rule: str = STRONGEST_LINE,
               setup: tuple[Callable[..., None], tuple[Any, ...]] | None = None,
               em_ranker: Refiner | None = None) -> Executor:
    """A pool of `workers` processes for the refiner's statistics (each holding its own copy of
    sequence_net, the equalizer's classes, the rate rule, the EM ranker and one BLAS thread), spawned (so
    nothing of the caller's threads or sockets is inherited), all started and each warmed
    with one burst before it returns. `setup` (a module-level function and its arguments)
    runs in each worker as it starts: what else its tasks need (fit-refiner's workers load
    the network there).

    All started: a spawning ProcessPoolExecutor starts a process only when a task finds no
    idle one, so warming it with one small task per worker left 3 processes of 8, and the
    others started later (seconds each) while real bursts waited for them; on a 16-core H200
    host the first 480 bursts then took 7x as long as the next 480, which made 8 workers
    look as if they did not scale (benchmarks/refiner_pool_h200_run11.log). So each worker's
    start waits until all have started, and no task finds an idle one before then.

    A worker that dies before the pool has started (the OOM killer, kill -9; one whose `setup`
    raised) raises InternalError "a refiner worker died while starting (...)", the pool's
    processes killed: before spawn_context the spawn waited for good on one that died before
    it had read its start data, and the BrokenPipeError it now gets read to the CLI as a
    closed stdout (exit 1, no message)."""
    from concurrent.futures import BrokenExecutor, ProcessPoolExecutor

    ctx = spawn_context()
    started, all_started = ctx.Value("i", 0), ctx.Event()
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker,
                               initargs=(sequence_net, tuple(equalizer), rate_rule, started, all_started, workers,
                                         setup, em_ranker))
    try:
        with starting_processes():      # the workers start as map submits their tasks
            warming = pool.map(_pooled_statistics, [_warm_burst()] * workers)
        list(warming)
    except BaseException as exc:
        # Ctrl-C while they start, say: they are ended, not left to finish starting for no one
        # (a worker still starting then failed to open `started`, which this frame's end had
        # freed, and printed that traceback); killed, since they ignore SIGTERM
        end_processes(pool, 0.0, join=False)
        if isinstance(exc, BrokenPipeError):        # in its spawn (spawn_context)
            raise InternalError(f"a refiner worker died while starting ({exc.strerror or exc})") from exc
        if isinstance(exc, BrokenExecutor):         # once spawned, before its warm-up burst was done
            raise InternalError(f"a refiner worker died while starting (its pool broke: {exc})") from exc
        raise
    return pool


def refiner_info(info: dict[str, Any], sequence: bool = True) -> dict[str, Any]:
    """Which refiner of model.json's `info` to load: the refiner itself, or with
    sequence=False its light variant (`info["light"]`, invariants only). A refiner without a
    sequence network is its own light variant; ConfigError for one with a sequence network
    and no light variant."""
    if sequence:
        return info
    if "light" in info:
        return dict(info["light"])
    if "sequence_net" in info.get("fit", {}):
        raise ConfigError("this model's refiner has a sequence network but no light variant; "
                          "refit it with `rfclassify fit-refiner --sequence-net ...` or serve it whole")
    return info


@dataclass(frozen=True)
class Refiner:
    """A fitted refiner: the classes it re-decides and its perceptron's weights (float32), or
    an ensemble's: the same arrays with a leading axis of M members, whose class probabilities
    are averaged (fit-refiner --members)."""

    labels: tuple[str, ...]     # the classes it re-decides, in its output order
    index: np.ndarray           # their indices in the model's labels
    mean: np.ndarray            # (F,) feature standardization; (M, F) for an ensemble, and so on
    scale: np.ndarray           # (F,)
    w1: np.ndarray              # (F, H)
    b1: np.ndarray              # (H,)
    w2: np.ndarray              # (H, K)
    b2: np.ndarray              # (K,)
    #: bursts shorter than this are left to the network (the fit's held-out bursts said the
    #: refiner does not help them: too few symbols for the statistics)
    min_samples: int = 0
    #: the network over the clocked symbols whose outputs (SequenceNet.outputs: its
    #: log-probabilities, and its pooled features where with_features) follow the invariants
    #: in the perceptron's input (None: the invariants alone)
    sequence: SequenceNet | None = None
    #: the classes whose equalized scores (class_equalizer) come last in the perceptron's input
    equalizer: tuple[str, ...] = ()
    #: how the blind clock its statistics were fitted on picks the rate (symbol_clock.RATE_RULES)
    rate_rule: str = STRONGEST_LINE
    #: gradient-boosted trees over the same inputs, fitted on the same rows, whose class
    #: probabilities are mixed with the perceptrons' by their share (None: the perceptrons alone)
    trees: TreeEnsemble | None = None
    #: its classes' scores by an EM channel estimate (rfclassify.dsp.em_channel) come last in
    #: the perceptron's input, fitted for the network's em_count top ones
    em_channel: bool = False
    #: which bursts get the EM scores (em_channel.passes_gate; the others get zeros, as in
    #: the fit): a gate on the network's ranking and SNR estimate spares the bursts they do
    #: not help their cost
    em_gate: str = ALL_BURSTS
    #: a refiner over the same inputs without the EM scores, whose ranking of the classes (and
    #: not the network's) picks the ones the EM scores are fitted for and the gate reads
    #: (EmPick): its top three hold the truth more often (None: the network's ranking)
    em_ranker: Refiner | None = None
    #: how many of the top-ranked classes get their EM scores fitted when served (the others
    #: score em_channel.ABSENT_MARGIN under the worst fitted, as in the fit): the fit's count
    #: (fit-refiner --em-classes, stored in refiner.npz; files from before it was stored were
    #: fitted with em_channel.FAST_CLASSES), and a model may serve another (fitting_em_classes)
    em_count: int = FAST_CLASSES

    @property
    def n_features(self) -> int:
        return int(self.mean.shape[-1])

    @property
    def members(self) -> int:
        """How many perceptrons it averages (1: a single one)."""
        return 1 if self.w1.ndim == 2 else int(self.w1.shape[0])

    @staticmethod
    def features(probs: np.ndarray, snr_db: np.ndarray | float, statistics: np.ndarray) -> np.ndarray:
        """The perceptron's input rows: [log network probabilities, network SNR estimate / 10 dB,
        the burst's statistics (burst_statistics: its invariants, then the sequence network's
        outputs, the equalized scores and the EM scores when the refiner has them)]."""
        p = np.atleast_2d(np.asarray(probs, np.float64))
        snr = np.asarray(snr_db, np.float64).reshape(-1, 1) / 10.0
        stats = np.atleast_2d(np.asarray(statistics, np.float64))
        return np.concatenate([np.log(np.maximum(p, LOG_PROB_FLOOR)), snr, stats], axis=1).astype(np.float32)

    def clocked_by(self, rate_rule: str) -> Refiner:
        """This refiner with its bursts clocked by another rate rule than the one it was
        fitted on (its weights as they are). ConfigError for an unknown rule."""
        if rate_rule not in RATE_RULES:
            raise ConfigError(f"unknown refiner rate rule {rate_rule!r} (one of {', '.join(RATE_RULES)})")
        return dataclasses.replace(self, rate_rule=rate_rule)

    def fitting_em_classes(self, count: int) -> Refiner:
        """This refiner with the EM scores of its `count` top-ranked classes fitted when served
        (its weights as they are). ConfigError for a refiner without EM scores or a count
        outside 1..its classes."""
        if not self.em_channel:
            raise ConfigError("this refiner has no EM scores to fit for more or fewer classes")
        if not em_channel.count_is_valid(count, len(self.labels)):
            raise ConfigError(f"the EM classes served must be a count in 1..{len(self.labels)}, got {count!r}")
        return dataclasses.replace(self, em_count=count)

    def start_pool(self, workers: int, setup: tuple[Callable[..., None], tuple[Any, ...]] | None = None) -> Executor:
        """start_pool for this refiner's statistics (its workers hold its sequence network;
        `setup` as in start_pool)."""
        return start_pool(workers, self.sequence, self.equalizer, self.rate_rule, setup, self.em_ranker)

    def logits(self, features: np.ndarray) -> np.ndarray:
        """(n, K) outputs of (n, F) feature rows, whose softmax is the refiner's class
        probabilities: one perceptron's logits; an ensemble's, the logarithms of its members'
        mean class probabilities; with trees, the logarithms of the mix of those and the
        trees' probabilities by the trees' share."""
        z = self.perceptron_logits(features)
        if self.trees is None:
            return z
        share = self.trees.share
        mix = (1.0 - share) * np.exp(log_softmax(z)) + share * self.trees.probabilities(features)
        return np.log(np.maximum(mix, np.finfo(np.float64).tiny))

    def perceptron_logits(self, features: np.ndarray) -> np.ndarray:
        """logits of the perceptrons alone (the trees left out)."""
        x = np.asarray(features, np.float32)
        if self.members == 1:
            return np.maximum((x - self.mean) / self.scale @ self.w1 + self.b1, 0.0) @ self.w2 + self.b2
        h = np.maximum(((x[None] - self.mean[:, None]) / self.scale[:, None]) @ self.w1 + self.b1[:, None], 0.0)
        log_p = log_softmax(h @ self.w2 + self.b2[:, None])        # (M, n, K)
        top = log_p.max(axis=0)
        return top + np.log(np.exp(log_p - top).mean(axis=0))

    def describe(self) -> dict[str, Any]:
        """What it re-decides, for logs and `status`: its classes and the shortest burst it takes."""
        out: dict[str, Any] = {"classes": list(self.labels), "min_samples": int(self.min_samples),
                               "rate_rule": self.rate_rule}
        if self.sequence is not None:
            out["sequence_net_params"] = self.sequence.n_params
            out["sequence_net_front"] = self.sequence.front
            out["sequence_net_carrier"] = self.sequence.carrier
            if self.sequence.with_features:
                out["sequence_net_features"] = self.sequence.n_features
            if self.sequence.blind_view:
                out["sequence_net_blind_view"] = True
            if self.sequence.blind_reader is not None:
                out["sequence_net_blind_reader_params"] = self.sequence.blind_reader.n_params
            if self.sequence.power_lines:
                out["power_lines"] = True
        if self.equalizer:
            out["equalizer_classes"] = len(self.equalizer)
        if self.em_channel:
            out["em_channel_classes"] = self.em_count
            out["em_gate"] = self.em_gate
            out["em_ranked_by"] = "refiner" if self.em_ranker is not None else "network"
        if self.members > 1:
            out["perceptrons"] = self.members
        if self.trees is not None:
            out["trees"] = self.trees.n_trees
            out["trees_share"] = self.trees.share
        return out

    def applies(self, probs: np.ndarray) -> bool:
        """Whether the network's top class of this burst is one the refiner re-decides."""
        return bool(np.isin(int(np.argmax(probs)), self.index))

    def wants(self, probs: np.ndarray, iq: np.ndarray | None) -> bool:
        """Whether this burst goes through the refiner: its samples are there, it is at least
        min_samples long and its network top class is one of the refiner's."""
        return iq is not None and np.shape(iq)[0] >= self.min_samples and self.applies(probs)

    def refine(self, probs: np.ndarray, snr_db: float, iq: np.ndarray) -> np.ndarray:
        """The burst's probabilities with the refiner's classes re-shared (unchanged when the
        network's top class is not one of them); snr_db: the network's estimate for the burst."""
        return self.refine_many([probs], [snr_db], [iq])[0]

    def refine_many(self, probs: list[np.ndarray], snr_db: list[float], bursts: list[np.ndarray | None],
                    pool: Executor | None = None) -> list[np.ndarray]:
        """refine for many bursts; the statistics of those it wants are computed in `pool` (this
        refiner's start_pool) when given, else here, one after another."""
        probs = [np.asarray(p, np.float64) for p in probs]
        todo = [i for i, (p, x) in enumerate(zip(probs, bursts, strict=True)) if self.wants(p, x)]
        if not todo:
            return probs
        stats = statistics_many([bursts[i] for i in todo], self.sequence, pool, self.equalizer, self.rate_rule,
                                *self.em_arguments([probs[i] for i in todo], [snr_db[i] for i in todo]),
                                em_ranker=self.em_ranker)
        out = list(probs)
        for i, p in zip(todo, self.refine_measured([probs[i] for i in todo], [snr_db[i] for i in todo], stats),
                        strict=True):
            out[i] = p
        return out

    def em_arguments(self, probs: Sequence[np.ndarray], snr_db: Sequence[float]
                     ) -> tuple[tuple[str, ...], list[np.ndarray | EmPick] | None]:
        """statistics_many's em_labels and em_classes for bursts of network probabilities
        `probs` (over the model's labels) and SNR estimates snr_db: this refiner's classes,
        and each burst's em_channel.em_classes of them under its em_gate (its em_count
        most probable, or none), or with an em_ranker its EmPick
        (they are picked once the other statistics are measured); ((), None) without EM
        scores."""
        if not self.em_channel:
            return (), None
        if self.em_ranker is not None:
            return self.labels, [EmPick(np.asarray(p, np.float64), float(s), self.em_gate, self.em_count)
                                 for p, s in zip(probs, snr_db, strict=True)]
        return self.labels, [em_channel.em_classes(np.asarray(p)[self.index], self.labels, s, self.em_gate,
                                                   self.em_count)
                             for p, s in zip(probs, snr_db, strict=True)]

    def refine_measured(self, probs: list[np.ndarray], snr_db: list[float],
                        stats: list[np.ndarray | None]) -> list[np.ndarray]:
        """The perceptron's half of refine_many, for bursts it wants whose statistics are
        measured already (None: they failed, and that burst keeps the network's answer)."""
        probs = [np.asarray(p, np.float64) for p in probs]
        rows = [r for r, st in enumerate(stats) if st is not None]
        if not rows:
            return probs
        z = self.logits(self.features(np.stack([probs[r] for r in rows]), np.array([snr_db[r] for r in rows]),
                                      np.stack([stats[r] for r in rows]))).astype(np.float64)
        q = np.exp(z - z.max(axis=1, keepdims=True))
        q /= q.sum(axis=1, keepdims=True)
        out = list(probs)
        for k, r in enumerate(rows):
            new = probs[r].copy()
            new[self.index] = probs[r][self.index].sum() * q[k]
            out[r] = new
        return out

    # -- storage ------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        path = Path(path)
        extra = self.sequence.arrays() if self.sequence is not None else {}
        if self.sequence is not None and self.sequence.with_features:
            extra["sequence_features"] = np.bool_(True)
        if self.sequence is not None and self.sequence.blind_view:
            extra["sequence_blind_view"] = np.bool_(True)
        if self.sequence is not None and self.sequence.blind_reader is not None:
            extra.update(self.sequence.blind_reader.arrays(BLIND_READER_PREFIX))
        if self.sequence is not None and self.sequence.power_lines:
            extra["sequence_power_lines"] = np.bool_(True)
        if self.equalizer:
            extra["equalizer_labels"] = np.array(self.equalizer)
        if self.trees is not None:
            extra.update(self.trees.arrays(TREES_PREFIX))
        if self.em_channel:
            extra["em_channel"] = np.bool_(True)
            extra["em_gate"] = np.array(self.em_gate)
            extra["em_count"] = np.int64(self.em_count)
        if self.em_ranker is not None:
            extra.update({EM_RANKER_PREFIX + k: getattr(self.em_ranker, k) for k in _ARRAYS})
            if self.em_ranker.trees is not None:
                extra.update(self.em_ranker.trees.arrays(EM_RANKER_PREFIX + TREES_PREFIX))
        with replacing(path) as tmp, open(tmp, "wb") as fh:   # a handle: np.savez adds no ".npz" to it
            np.savez(fh, labels=np.array(self.labels), min_samples=np.int64(self.min_samples),
                     rate_rule=np.array(self.rate_rule),
                     **{k: getattr(self, k) for k in _ARRAYS}, **extra)
        return path

    @classmethod
    def load(cls, model_dir: str | Path, info: dict[str, Any], model_labels: tuple[str, ...]) -> Refiner:
        """The refiner model.json's `info` describes; ModelNotFoundError if its file is missing,
        altered, or does not fit the model's labels or the invariants of this version."""
        path = Path(model_dir) / str(info.get("file", REFINER_FILE))
        try:
            if not path.is_file():
                raise ModelNotFoundError(f"model.json names a refiner, but {path} is missing")
            if info.get("sha256") and file_sha256(path) != info["sha256"]:
                raise ModelNotFoundError(f"{path} does not match the sha256 model.json records; refit or re-export it")
        except OSError as exc:  # a name past the file system's limits, an unreadable file
            raise ModelNotFoundError(f"cannot read the refiner {path}: {exc.strerror}") from None
        try:
            with open_npz(path) as z:
                labels = tuple(str(s) for s in z["labels"])
                arrays = {k: np.asarray(z[k], np.float32) for k in _ARRAYS}
                min_samples = int(z["min_samples"])
                sequence = SequenceNet.from_arrays(z, str(path)) if f"{SEQUENCE_PREFIX}labels" in z else None
                equalizer = tuple(str(s) for s in z["equalizer_labels"]) if "equalizer_labels" in z else ()
                rate_rule = str(z["rate_rule"]) if "rate_rule" in z else STRONGEST_LINE
                if sequence is not None and "sequence_features" in z and bool(z["sequence_features"]):
                    sequence = dataclasses.replace(sequence, with_features=True)
                if sequence is not None and "sequence_blind_view" in z and bool(z["sequence_blind_view"]):
                    reader = (SequenceNet.from_arrays(z, str(path), BLIND_READER_PREFIX)
                              if f"{BLIND_READER_PREFIX}labels" in z else None)
                    sequence = dataclasses.replace(sequence, blind_view=True, blind_reader=reader)
                if sequence is not None and "sequence_power_lines" in z and bool(z["sequence_power_lines"]):
                    sequence = dataclasses.replace(sequence, power_lines=True)
                trees = TreeEnsemble.from_arrays(z, TREES_PREFIX) if f"{TREES_PREFIX}shape" in z else None
                em = "em_channel" in z and bool(z["em_channel"])
                em_gate = str(z["em_gate"]) if "em_gate" in z else ALL_BURSTS
                em_count = int(z["em_count"]) if "em_count" in z else FAST_CLASSES
                ranker_arrays = ({k: np.asarray(z[EM_RANKER_PREFIX + k], np.float32) for k in _ARRAYS}
                                 if f"{EM_RANKER_PREFIX}w1" in z else None)
                ranker_trees = (TreeEnsemble.from_arrays(z, EM_RANKER_PREFIX + TREES_PREFIX)
                                if f"{EM_RANKER_PREFIX}{TREES_PREFIX}shape" in z else None)
        except (OSError, ValueError, KeyError) as exc:
            raise ModelNotFoundError(f"cannot read the refiner {path}: {exc}") from None
        unknown = [lb for lb in labels if lb not in model_labels]
        if unknown:
            raise ModelNotFoundError(f"{path}: classes {unknown} are not among the model's labels")
        if rate_rule not in RATE_RULES:
            raise ModelNotFoundError(f"{path}: fitted on an unknown rate rule {rate_rule!r} "
                                     f"(this version knows {', '.join(RATE_RULES)})")
        unscored = [lb for lb in equalizer if not scorable(lb)]
        if unscored:
            raise ModelNotFoundError(f"{path}: the equalizer has no alphabets for {unscored}")
        if not em_channel.gate_is_valid(em_gate):
            raise ModelNotFoundError(f"{path}: its EM scores are gated by an unknown gate {em_gate!r}")
        if em and not em_channel.count_is_valid(em_count, len(labels)):
            raise ModelNotFoundError(f"{path}: its EM scores are fitted for {em_count} classes, not 1..{len(labels)}")
        unfitted = [lb for lb in labels if em and not scorable(lb)]
        if unfitted:
            raise ModelNotFoundError(f"{path}: the EM scores have no alphabets for {unfitted}")
        n_sequence = sequence.n_outputs if sequence is not None else 0
        n_em = em_channel.n_scores(labels) if em else 0
        expected = len(model_labels) + 1 + N_INVARIANTS + n_sequence + len(equalizer) + n_em
        shapes_ok = _perceptron_shapes_ok(arrays, expected, len(labels))
        if not shapes_ok:
            raise ModelNotFoundError(
                f"{path}: weights do not fit {len(model_labels)} labels + SNR + {N_INVARIANTS} invariants "
                f"+ {n_sequence} sequence-network outputs + {len(equalizer)} equalizer scores + {n_em} EM scores "
                f"(fitted by another version? run `rfclassify fit-refiner` again)")
        if trees is not None and (trees.n_features, trees.n_classes) != (expected, len(labels)):
            raise ModelNotFoundError(f"{path}: its trees read {trees.n_features} features into {trees.n_classes} "
                                     f"classes, its perceptrons {expected} into {len(labels)}")
        index = np.array([model_labels.index(lb) for lb in labels])
        ranker = None
        if ranker_arrays is not None:
            ranked = expected - n_em      # the ranker reads every input but the EM scores
            if not em or not _perceptron_shapes_ok(ranker_arrays, ranked, len(labels)) or (
                    ranker_trees is not None and (ranker_trees.n_features, ranker_trees.n_classes)
                    != (ranked, len(labels))):
                raise ModelNotFoundError(f"{path}: its EM ranker does not read the {ranked} inputs before the EM "
                                         f"scores into {len(labels)} classes (refit it)")
            ranker = cls(labels=labels, index=index, sequence=sequence, equalizer=equalizer, rate_rule=rate_rule,
                         trees=ranker_trees, **ranker_arrays)
        return cls(labels=labels, index=index, min_samples=min_samples, sequence=sequence, equalizer=equalizer,
                   rate_rule=rate_rule, trees=trees, em_channel=em, em_gate=em_gate, em_ranker=ranker,
                   em_count=em_count, **arrays)


def _perceptron_shapes_ok(arrays: dict[str, np.ndarray], n_features: int, n_classes: int) -> bool:
    """Whether a refiner file's arrays are one perceptron from n_features inputs to n_classes
    outputs, or an ensemble of them (every array with the same leading member axis)."""
    lead = arrays["w1"].shape[:-2]
    if arrays["w1"].ndim < 2 or len(lead) > 1 or any(arrays[k].shape[:len(lead)] != lead for k in _ARRAYS):
        return False
    hidden = arrays["w1"].shape[-1]
    shapes = {"mean": (n_features,), "scale": (n_features,), "w1": (n_features, hidden), "b1": (hidden,),
              "w2": (hidden, n_classes), "b2": (n_classes,)}
    return all(arrays[k].shape[len(lead):] == shape for k, shape in shapes.items())


def refine_routed(refiners: Sequence[Refiner], probs: list[np.ndarray], snr_db: list[float],
                  bursts: list[np.ndarray | None], pool: Executor | None = None) -> list[np.ndarray]:
    """Every burst through the refiner that holds its network top class (refiners whose
    classes do not overlap: disjoint_refiners), the others unchanged. Routing is by the
    network's probabilities, so one refiner's answer never sends a burst on to another;
    each refiner's statistics run in `pool` when given (see statistics_many), all refiners'
    at once."""
    network = [np.asarray(p, np.float64) for p in probs]
    out = list(network)
    routed = [(ref, mine) for ref in refiners if (mine := [i for i, p in enumerate(network) if ref.applies(p)])]

    def refine(ref: Refiner, mine: list[int]) -> list[np.ndarray]:
        return ref.refine_many([network[i] for i in mine], [snr_db[i] for i in mine], [bursts[i] for i in mine],
                               pool)
    if pool is not None and len(routed) > 1:
        # each refiner's tasks go to the pool at once, not one refiner's after the other's: the
        # low-order refiner's bursts no longer wait for the constellation refiner's slowest one
        # (threads here only wait on the pool; the answers are the same)
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(len(routed), thread_name_prefix="rfclassify-refine") as threads:
            answers = list(threads.map(lambda pair: refine(*pair), routed))
    else:
        answers = [refine(ref, mine) for ref, mine in routed]
    for (_, mine), done in zip(routed, answers, strict=True):
        for i, p in zip(mine, done, strict=True):
            out[i] = p
    return out


def disjoint_refiners(*refiners: Refiner | None) -> tuple[Refiner, ...]:
    """The refiners given (Nones left out), ModelNotFoundError where two re-decide one class:
    a burst must have one refiner at most (refine_routed)."""
    present = tuple(r for r in refiners if r is not None)
    seen: set[str] = set()
    for ref in present:
        shared = seen.intersection(ref.labels)
        if shared:
            raise ModelNotFoundError(f"two of the model's refiners re-decide {sorted(shared)}; "
                                     "refit one so that their classes do not overlap")
        seen.update(ref.labels)
    return present
