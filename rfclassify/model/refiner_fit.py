"""Fit the constellation refiner (rfclassify.engine.refiner) to a trained model, on synthesized bursts.

Bursts of the refiner's classes (the 12 high-order ones) are drawn from the model's own
training recipe (its impairment chain and SNR range), at lengths spread over the buckets and
beyond; the model classifies them as it serves (the network alone, any backend); the bursts it
calls one of those classes become the refiner's examples: the network's log-probabilities, its
SNR estimate and the burst's clocked invariants in, the true class out. A two-layer perceptron (torch, CPU) is
trained on them with early stopping on a held-out share (with ``sequence_net``, a network
from ``rfclassify fit-sequence``, its outputs join the invariants and its weights are stored
inside refiner.npz; with ``equalizer``, the per-class equalized scores of
``rfclassify.dsp.class_equalizer`` come last), saved beside the model as
refiner.npz and recorded in model.json with what it was fitted on and how it did on the
held-out share against the network alone (``members`` trains several perceptrons and serves
their mean; ``trees`` fits gradient-boosted trees on the same rows beside them,
rfclassify.model.tree_fit, and serves a mix of both). Refitting replaces it; retraining the
network drops it (a refiner belongs to one network).

``group="low-order"`` fits the low-order refiner the same way over labels.LOW_ORDER_LABELS,
from the invariants alone (no sequence network, no equalizer: both are made for the
high-order alphabets), saved as refiner_low_order.npz and recorded in model.json's
``low_order_refiner``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from collections import deque
from concurrent.futures import Executor, Future
import dataclasses
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rfclassify._digest import file_sha256
from rfclassify._exceptions import ConfigError
from rfclassify._npz import open_npz
from rfclassify._optional import require
from rfclassify.dsp import em_channel as em_scores
from rfclassify.dsp.symbol_clock import N_INVARIANTS
from rfclassify.engine.refiner import (LIGHT_REFINER_FILE, LOW_ORDER_REFINER_FILE, REFINER_FILE, Refiner,
                                      em_statistics,
                                      start_pool, statistics_many, worker_statistics_settings)
from rfclassify.dsp.symbol_clock import RATE_RULES, STRONGEST_LINE
from rfclassify.engine.dc_pass import FitRoute
from rfclassify.engine.refiner_pool import pool_closed_after
from rfclassify.engine.sequence_net import SequenceNet
from rfclassify.engine.tree_ensemble import TreeEnsemble
from rfclassify.labels import HIGH_ORDER_LABELS, LOW_ORDER_LABELS

log = logging.getLogger(__name__)

FIT_LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192)   # burst lengths drawn, uniformly
HIGH_ORDER, LOW_ORDER = "high-order", "low-order"
TREES_SEED = 1000      # the trees' early-stopping share is drawn by the fit's seed plus this
RANKER_SEED = 2000     # the EM ranker's folds are drawn by the fit's seed plus this
RANKER_FOLDS = 2       # the EM ranker's out-of-fold rankings of the fit's own bursts


@dataclass(frozen=True)
class RefinerGroup:
    """The classes one refiner re-decides, and where it is stored."""
    classes: tuple[str, ...]
    file: str                   # beside the model
    meta_key: str               # model.json's key that names it


GROUPS: dict[str, RefinerGroup] = {
    HIGH_ORDER: RefinerGroup(HIGH_ORDER_LABELS, REFINER_FILE, "refiner"),
    LOW_ORDER: RefinerGroup(LOW_ORDER_LABELS, LOW_ORDER_REFINER_FILE, "low_order_refiner"),
}


@dataclass(frozen=True)
class RefinerFitConfig:
    per_class: int = 3000          # bursts synthesized per refiner class
    seed: int = 20261208
    hidden: int = 128
    epochs: int = 300              # at most; early stopping usually ends far sooner
    patience: int = 20             # epochs without a held-out gain before stopping
    lr: float = 2e-3
    weight_decay: float = 1e-3
    dropout: float = 0.2
    holdout: float = 0.15          # share of the routed bursts kept out for early stopping
    #: the perceptron learns from targets smoothed by this much (its one regularizer that
    #: changes nothing when served); its outputs, flattened by it, are then sharpened back by
    #: a temperature fitted on the held-out share, so the refined probabilities stay calibrated
    label_smoothing: float = 0.0
    #: perceptrons whose class probabilities the served refiner averages, each trained on the
    #: examples outside the held-out share with its own early-stopping share and initial weights
    members: int = 1
    #: gradient-boosted trees (LightGBM; served in numpy) fitted on the perceptrons' rows
    #: beside them, their class probabilities mixed with the perceptrons' by tree_share
    trees: bool = False
    tree_leaves: int = 15
    tree_lr: float = 0.1
    tree_share: float = 0.5
    workers: int = 2               # processes computing the invariants (0 or 1: in this one)
    backend: str = "onnxruntime"   # what runs the network while fitting
    chunk: int = 256               # bursts synthesized and classified at a time
    sequence_net: str | None = None  # a fit-sequence network whose outputs join the invariants
    equalizer: bool = False        # the classes' equalized scores (class_equalizer) join them too
    #: how the bursts' blind clock picks the rate (symbol_clock.RATE_RULES), in the fit and in
    #: serving; None: the one the sequence network was trained on, else STRONGEST_LINE (the
    #: shipped refiner's: ALPHABET_FIT gained 0.4 points at 1024 samples for 2.9x its CPU)
    rate_rule: str | None = None
    #: which classes it re-decides (GROUPS): the high-order ones, or the low-order
    #: ones from the invariants alone
    group: str = HIGH_ORDER
    #: run the served DC pass (engine.dc_pass) on the fit's bursts before they are measured, so
    #: the perceptron learns from bursts as they reach it when served. Off by default: the
    #: shipped refiner was fitted without it, and a refit with it is level with it on big1024,
    #: burst for burst, with the DC pass served (docs/model.md, twenty-second session)
    dc_pass: bool = False
    #: the sequence network's pooled features (what its head reads) join its log-probabilities
    #: in the perceptron's input, so the perceptron can weigh what the network saw in the
    #: symbols against the CNN's answer and the invariants, not only its answer
    sequence_features: bool = False
    #: the sequence network's reading of the symbols after the class-blind equalizer, and that
    #: filter's fourth moments, join its reading of the raw symbols (SequenceNet.blind_view,
    #: rfclassify.dsp.blind_equalizer): a view of multipath bursts with the channel partly undone
    blind_view: bool = False
    #: a fit-sequence network of the filtered front that reads the blind view in place of the
    #: sequence network (SequenceNet.blind_reader); stored inside refiner.npz
    blind_reader: str | None = None
    #: the coherent power lines of the clocked symbols, raw, through the blind filter and
    #: through a constant-modulus filter (SequenceNet.power_lines, rfclassify.dsp.power_lines)
    power_lines: bool = False
    #: each class's score by a channel estimate fitted by EM for the network's top
    #: em_classes classes (rfclassify.dsp.em_channel) joins them, last
    em_channel: bool = False
    #: how many of the top-ranked classes get their EM scores fitted, in the fit and when
    #: served (stored in refiner.npz: Refiner.em_count)
    em_classes: int = em_scores.FAST_CLASSES
    #: the bursts that get them (em_channel.passes_gate); the others get zeros, in the fit
    #: and when served
    em_gate: str = em_scores.ALL_BURSTS
    #: the EM scores are fitted for the top classes of a first refiner over the other inputs
    #: (Refiner.em_ranker, fitted here and stored inside refiner.npz), and the gate reads its
    #: ranking, rather than the network's; the fit's own bursts are ranked out of fold
    #: (ranker_out_of_fold) and their EM scores measured in a second pass (em_columns)
    em_ranker: bool = False

    def __post_init__(self) -> None:
        if self.per_class < 10:
            raise ConfigError(f"per_class must be >= 10, got {self.per_class}")
        if not 0.05 <= self.holdout <= 0.5:
            raise ConfigError(f"holdout must be in 0.05..0.5, got {self.holdout}")
        if self.hidden < 1 or self.epochs < 1 or self.patience < 1 or self.members < 1:
            raise ConfigError("hidden, epochs, patience and members must be >= 1")
        if self.tree_leaves < 2 or not 0.0 < self.tree_lr <= 1.0 or not 0.0 < self.tree_share <= 1.0:
            raise ConfigError(f"tree_leaves must be >= 2 and tree_lr, tree_share in 0..1 (0 excluded), got "
                              f"{self.tree_leaves}, {self.tree_lr}, {self.tree_share}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"label_smoothing must be in 0..1 (1 excluded), got {self.label_smoothing}")
        if self.rate_rule is not None and self.rate_rule not in RATE_RULES:
            raise ConfigError(f"rate_rule must be one of {', '.join(RATE_RULES)}, got {self.rate_rule!r}")
        if self.group not in GROUPS:
            raise ConfigError(f"group must be one of {', '.join(GROUPS)}, got {self.group!r}")
        if self.group == LOW_ORDER and (self.sequence_net or self.equalizer or self.em_channel):
            raise ConfigError("the low-order refiner uses the invariants alone: the sequence network, the "
                              "equalizer and the EM scores are made for the high-order alphabets (leave out "
                              "--sequence-net, --equalizer and --em-channel)")
        if not em_scores.gate_is_valid(self.em_gate):
            raise ConfigError(f"em_gate must be {em_scores.ALL_BURSTS!r} or dense_top<k>[_snr<dB>] / "
                              f"dense5_top<k>[_snr<dB>], got {self.em_gate!r}")
        if self.em_gate != em_scores.ALL_BURSTS and not self.em_channel:
            raise ConfigError("em_gate picks the bursts that get the EM scores (add --em-channel)")
        if self.em_ranker and not self.em_channel:
            raise ConfigError("em_ranker picks the classes the EM scores are fitted for (add --em-channel)")
        n_classes = len(GROUPS[self.group].classes)
        if not em_scores.count_is_valid(self.em_classes, n_classes):
            raise ConfigError(f"em_classes must be a count in 1..{n_classes}, got {self.em_classes!r}")
        if self.em_classes != em_scores.FAST_CLASSES and not self.em_channel:
            raise ConfigError("em_classes is how many classes get the EM scores (add --em-channel)")
        if self.em_ranker and self.dc_pass:
            raise ConfigError("em_ranker measures the EM scores on the bursts as synthesized: leave out --dc-pass")
        if self.sequence_features and not self.sequence_net:
            raise ConfigError("sequence_features needs a sequence network (--sequence-net)")
        if self.blind_view and not self.sequence_net:
            raise ConfigError("blind_view needs a sequence network (--sequence-net)")
        if self.blind_reader and not self.blind_view:
            raise ConfigError("blind_reader reads the blind view (add --blind-view)")
        if self.power_lines and not self.sequence_net:
            raise ConfigError("power_lines needs a sequence network (--sequence-net): they are read from its symbols")

    def clock_rule(self, sequence_net: SequenceNet | None) -> str:
        """The rate rule the fit clocks its bursts by: rate_rule, else the one sequence_net
        was trained on, else STRONGEST_LINE. A network trained on one clock may be fused on
        another: the refiner's perceptron is fitted to what it then gives."""
        if self.rate_rule is not None:
            return self.rate_rule
        return sequence_net.rate_rule if sequence_net is not None else STRONGEST_LINE


def routed_examples(model_dir: str | Path, cfg: RefinerFitConfig, classes: tuple[str, ...] = HIGH_ORDER_LABELS,
                    progress: Callable[[str], None] | None = None,
                    sequence_net: SequenceNet | None = None) -> dict[str, np.ndarray]:
    """Synthesize cfg.per_class bursts of each class from the model's recipe, classify them
    with the network alone, and keep the ones it calls one of `classes`: features (n, F), the
    true class's index in `classes` (n,), the network's top class index in `classes` (n,),
    SNR (n,) and burst length (n,). With cfg.equalizer, the classes' equalized scores follow
    the statistics; with cfg.em_channel, then their EM scores (for each burst the network's
    top cfg.em_classes of `classes`, as served).

    The bursts are synthesized here, chunk by chunk, from one random stream (so the examples
    do not depend on the worker count). With cfg.workers > 1, each chunk is then classified
    and measured whole in one of that many processes (each with its own copy of the network,
    on one thread), while this one synthesizes the next: at most 2 chunks per worker are in
    flight, and the examples are kept in chunk order. Before, only the statistics ran in the
    workers, and they waited while this process synthesized and classified every chunk:
    15 workers on a 16-core host gave about 360 bursts/s.

    With cfg.dc_pass, each chunk goes through the served DC pass after the network
    (Classifier.take_out_dc, routed by dc_route): the bursts it cleans are measured, and
    classified again, without their offset."""
    equalizer = tuple(classes) if cfg.equalizer else ()
    em_labels = tuple(classes) if cfg.em_channel else ()
    rule = cfg.clock_rule(sequence_net)
    pool = None
    if cfg.workers > 1:
        pool = start_pool(cfg.workers, sequence_net, equalizer, rule,
                          setup=(_load_worker_network, (str(model_dir), cfg.backend)))
    with contextlib.nullcontext() if pool is None else pool_closed_after(pool):
        return _routed_examples(model_dir, cfg, classes, progress, pool, sequence_net, equalizer, rule,
                                dc_route(model_dir, cfg, classes), em_labels, cfg.em_gate, cfg.em_classes)


_worker_network: Any = None     # a fit worker's Classifier (the network alone), set by _load_worker_network


def dc_route(model_dir: str | Path, cfg: RefinerFitConfig, classes: tuple[str, ...]) -> FitRoute | None:
    """The bursts the fit's DC pass fits rather than leak-lines, as served with this refiner:
    for the constellation refiner, those whose network top class is one of its classes (of any
    length: its min_samples is chosen only after the fit, and the DC pass's own MIN_SAMPLES
    is above the shipped refiner's); for the low-order refiner, those the model's
    constellation refiner takes, if it has one. None without cfg.dc_pass."""
    if not cfg.dc_pass:
        return None
    from rfclassify.model.meta import ModelMeta

    meta = ModelMeta.load(model_dir)
    if cfg.group == HIGH_ORDER:
        return FitRoute.of_classes(classes, meta.labels)
    if not meta.refiner:
        return FitRoute(np.zeros(0, np.int64), ())
    from rfclassify.engine.refiner import refiner_info
    return FitRoute.of_refiner(Refiner.load(model_dir, refiner_info(meta.refiner), meta.labels))


def _load_worker_network(model_dir: str, backend: str) -> None:
    from rfclassify.engine.classifier import Classifier

    global _worker_network
    _worker_network = Classifier.load(model_dir, backend=backend, refiner=False, threads=1)


def _pooled_chunk(bursts: list[np.ndarray], index: np.ndarray, n_stats: int, route: FitRoute | None,
                  em_labels: tuple[str, ...] = (), em_gate: str = em_scores.ALL_BURSTS,
                  em_count: int = em_scores.FAST_CLASSES) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """_chunk_examples in a fit worker, with its network and statistics settings."""
    sequence_net, equalizer, rate_rule = worker_statistics_settings()
    return _chunk_examples(_worker_network, bursts, index, n_stats, sequence_net, equalizer, rate_rule, route,
                           em_labels, em_gate, em_count)


def _chunk_examples(clf: Any, bursts: list[np.ndarray], index: np.ndarray, n_stats: int,
                   sequence_net: SequenceNet | None, equalizer: tuple[str, ...], rate_rule: str,
                   route: FitRoute | None = None, em_labels: tuple[str, ...] = (),
                   em_gate: str = em_scores.ALL_BURSTS, em_count: int = em_scores.FAST_CLASSES
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One chunk's examples: which bursts the network `clf` (a Classifier without a refiner)
    routes to the classes of model label indices `index` (positions into the chunk), their
    feature rows (Refiner.features) and the network's top class (model label index). With a
    DC pass `route`, the bursts it cleans are routed and measured as cleaned. With em_labels
    (the classes of `index`), each burst's EM scores are fitted for the network's top
    em_count of them, or not at all where em_gate holds it back, as
    Refiner.em_arguments picks them when served. A burst whose
    statistics fail (none should: burst_statistics does not raise) gets the invalid vector,
    as a burst without a clock does."""
    results = clf.classify(bursts)
    probs = [np.asarray(r.probabilities, np.float64) for r in results]
    snrs = [float(r.snr_db) for r in results]
    bursts = list(bursts)
    if route is not None:
        clf.take_out_dc(probs, snrs, [r.windows for r in results], bursts, route)
    top = np.array([int(np.argmax(p)) for p in probs])
    keep = np.flatnonzero(np.isin(top, index))
    if not keep.size:
        return keep, np.zeros((0, len(probs[0]) + 1 + n_stats), np.float32), keep
    em_classes = ([em_scores.em_classes(probs[i][index], em_labels, snrs[i], em_gate, em_count) for i in keep]
                  if em_labels else None)
    stats = statistics_many([bursts[i] for i in keep], sequence_net, None, equalizer, rate_rule, em_labels,
                            em_classes)
    inv = np.stack([v if v is not None else np.zeros(n_stats, np.float32) for v in stats])
    features = Refiner.features(np.stack([probs[i] for i in keep]), [snrs[i] for i in keep], inv)
    return keep, features, top[keep]


def _routed_examples(model_dir: str | Path, cfg: RefinerFitConfig, classes: tuple[str, ...],
                     progress: Callable[[str], None] | None, pool: Executor | None,
                     sequence_net: SequenceNet | None, equalizer: tuple[str, ...],
                     rate_rule: str, route: FitRoute | None, em_labels: tuple[str, ...] = (),
                     em_gate: str = em_scores.ALL_BURSTS, em_count: int = em_scores.FAST_CLASSES
                     ) -> dict[str, np.ndarray]:
    from rfclassify.model.meta import ModelMeta

    meta = ModelMeta.load(model_dir)
    index = np.array([meta.labels.index(c) for c in classes])
    n_stats = (N_INVARIANTS + (sequence_net.n_outputs if sequence_net is not None else 0) + len(equalizer)
               + (em_scores.n_scores(em_labels) if em_labels else 0))
    n_chunks = -(-cfg.per_class * len(classes) // cfg.chunk)
    clf = None
    if pool is None:
        from rfclassify.engine.classifier import Classifier

        clf = Classifier.load(model_dir, backend=cfg.backend, refiner=False)
    feats, truth, top, snrs, lengths = [], [], [], [], []
    in_flight: deque[tuple[np.ndarray, int, np.ndarray, Any]] = deque()
    ahead = 2 * cfg.workers if pool is not None else 0   # chunks left in flight after each one is queued

    def take_oldest() -> None:
        lab, length, snr, out = in_flight.popleft()
        keep, f, net_top = out.result() if isinstance(out, Future) else out
        feats.append(f)
        truth.extend(classes.index(str(lab[i])) for i in keep)
        top.extend(int(np.flatnonzero(index == t)[0]) for t in net_top)
        snrs.extend(snr[keep])
        lengths.extend([length] * keep.size)
        if progress is not None and len(feats) % 10 == 0:
            progress(f"synthesized, classified and measured {len(feats)}/{n_chunks} chunks")

    try:
        for lab, length, snr, bursts in fit_bursts(model_dir, cfg, classes):
            if pool is not None:
                out: Any = pool.submit(_pooled_chunk, bursts, index, n_stats, route, em_labels, em_gate, em_count)
            else:
                out = _chunk_examples(clf, bursts, index, n_stats, sequence_net, equalizer, rate_rule, route,
                                      em_labels, em_gate, em_count)
            in_flight.append((lab, length, snr, out))
            while len(in_flight) > ahead:
                take_oldest()
        while in_flight:
            take_oldest()
    finally:
        if clf is not None:
            clf.close()
    if len(truth) < 50:
        raise ConfigError(f"only {len(truth)} bursts were routed to the refiner; raise per_class")
    return {"features": np.concatenate(feats), "truth": np.array(truth, np.int64),
            "network_top": np.array(top, np.int64), "snr_db": np.array(snrs, np.float32),
            "length": np.array(lengths, np.int64)}


_EXAMPLE_ARRAYS = ("features", "truth", "network_top", "snr_db", "length")


def fit_bursts(model_dir: str | Path, cfg: RefinerFitConfig, classes: tuple[str, ...]
               ) -> Iterator[tuple[np.ndarray, int, np.ndarray, list[np.ndarray]]]:
    """The fit's bursts, chunk by chunk, from one random stream drawn by cfg.seed: (their
    classes, their length, their SNRs, their samples); cfg.per_class of each of `classes`
    in all, from the model's training recipe. The same settings give the same bursts, so a
    second pass over them (em_columns) finds each example's burst again."""
    from rfclassify.dsp.synth import synthesize
    from rfclassify.model.meta import ModelMeta
    from rfclassify.model.training_data import DataRecipe

    meta = ModelMeta.load(model_dir)
    recipe = DataRecipe(channel_overrides=meta.channel_overrides)
    channel = recipe.channel_config()
    snr_lo, snr_hi = meta.training_recipe.get("snr_range_db", recipe.snr_range_db)
    rng = np.random.default_rng(cfg.seed)
    labels = np.repeat(np.array(classes), cfg.per_class)
    rng.shuffle(labels)
    for start in range(0, labels.size, cfg.chunk):
        lab = labels[start:start + cfg.chunk]
        length = int(rng.choice(FIT_LENGTHS))
        snr = rng.uniform(snr_lo, snr_hi, lab.size)
        yield lab, length, snr, list(synthesize(list(lab), length, rng, snr, channel).iq)


def _pooled_em(x: np.ndarray, picks: np.ndarray, classes: tuple[str, ...]) -> np.ndarray:
    """em_statistics in a fit worker, at its rate rule."""
    return em_statistics(x, worker_statistics_settings()[2], classes, picks)


def em_columns(model_dir: str | Path, cfg: RefinerFitConfig, classes: tuple[str, ...], ex: dict[str, np.ndarray],
               picks: Sequence[np.ndarray], rate_rule: str,
               progress: Callable[[str], None] | None = None) -> np.ndarray:
    """(n, em_channel.n_scores(classes)) float32: each example's EM scores, fitted for the
    classes picks[i] (indices into `classes`; none: zeros, as a gated-off burst gets), on its
    burst found again in cfg's stream (fit_bursts): the examples are routed_examples of
    those bursts, in order, so each chunk's rows are the next of its bursts with their
    length, true class and SNR (float32). ConfigError where the rows do not follow the
    stream (examples of another seed, per_class or recipe). Each burst is clocked by
    rate_rule, as the fit's statistics were; in cfg.workers processes."""
    n = len(ex["truth"])
    out = np.zeros((n, em_scores.n_scores(classes)), np.float32)
    pool = start_pool(cfg.workers, rate_rule=rate_rule) if cfg.workers > 1 else None
    jobs: list[tuple[int, Any]] = []
    row = 0
    with contextlib.nullcontext() if pool is None else pool_closed_after(pool):
        for chunk, (lab, length, snr, bursts) in enumerate(fit_bursts(model_dir, cfg, classes), 1):
            for i, x in enumerate(bursts):
                if row < n and (int(ex["length"][row]) == length and ex["snr_db"][row] == np.float32(snr[i])
                                and classes[int(ex["truth"][row])] == lab[i]):
                    if len(picks[row]):
                        job = (pool.submit(_pooled_em, x, picks[row], tuple(classes)) if pool is not None
                               else em_statistics(x, rate_rule, tuple(classes), picks[row]))
                        jobs.append((row, job))
                    row += 1
            if progress is not None and chunk % 10 == 0:
                progress(f"EM scores: {row}/{n} examples found again, {len(jobs)} measured or queued")
        if row != n:
            raise ConfigError(f"only {row} of {n} examples were found again among the fit's bursts: they were "
                              "made with another seed, per_class or training recipe")
        for r, job in jobs:
            out[r] = job.result() if isinstance(job, Future) else job
    return out


def ranker_out_of_fold(ex: dict[str, np.ndarray], features: np.ndarray, cfg: RefinerFitConfig,
                       classes: tuple[str, ...], index: np.ndarray, sequence: SequenceNet | None, rate_rule: str,
                       equalizer: tuple[str, ...] = ()) -> np.ndarray:
    """(n, len(classes)) logits of the EM ranker for the fit's own examples, each from a
    ranker fitted (as the served one is, on `features`: every input but the EM scores) on
    the other RANKER_FOLDS - 1 folds: the picks the fit's EM scores are measured for are then
    as good as the served ranker's on new bursts, not better."""
    n = len(ex["truth"])
    fold = np.random.default_rng(cfg.seed + RANKER_SEED).permutation(n) % RANKER_FOLDS
    logits = np.zeros((n, len(classes)))
    for f in range(RANKER_FOLDS):
        rest = fold != f
        part = {k: v[rest] for k, v in ex.items() if isinstance(v, np.ndarray) and len(v) == n}
        ranker, _ = _fit_and_score(part, features[rest], cfg, classes, index, sequence, rate_rule, equalizer)
        logits[~rest] = ranker.logits(features[~rest])
    return logits


def ranked_picks(logits: np.ndarray, features: np.ndarray, model_labels: Sequence[str], classes: tuple[str, ...],
                 gate: str, count: int = em_scores.FAST_CLASSES) -> list[np.ndarray]:
    """Each row's EM classes (em_channel.em_classes, its `count` top ones) from the ranker's
    logits and the row's network SNR estimate (its feature column after the
    log-probabilities), under `gate`."""
    snr = features[:, len(model_labels)].astype(np.float64) * 10.0
    return [em_scores.em_classes(z, classes, s, gate, count) for z, s in zip(logits, snr)]


def examples_key(model_id: str, classes: tuple[str, ...], sequence_net: str | None, rate_rule: str,
                 equalizer: tuple[str, ...], dc_pass: bool, sequence_features: bool = False,
                 blind_view: bool = False, blind_reader: str | None = None,
                 power_lines: bool = False, em_channel: bool = False,
                 em_gate: str = em_scores.ALL_BURSTS, em_ranker: bool = False,
                 em_classes: int = em_scores.FAST_CLASSES) -> dict[str, Any]:
    """What a fit's examples depend on besides their bursts: the network that routed and
    scored them, the classes, the sequence network (its file's sha256) and rate rule their
    statistics came from, whether its pooled features, its blind view (and which blind
    reader, by sha256), the power lines and the EM scores are among them (and which bursts
    got the latter: em_gate; whose ranking picked their classes: em_ranker; how many:
    em_classes), the equalized classes, and whether the DC pass cleaned their bursts first.
    Examples are reused only where it matches, but examples with every burst's EM scores
    serve a fit with any gate (gate_em_columns), and a fit with an EM ranker takes any (it
    measures the EM scores its picks need again: EM_RECOMPUTED)."""
    return {"model_id": model_id, "classes": list(classes),
            "sequence_net_sha256": file_sha256(sequence_net) if sequence_net else None,
            "rate_rule": rate_rule, "equalizer": list(equalizer), "dc_pass": bool(dc_pass),
            "sequence_features": bool(sequence_features), "blind_view": bool(blind_view),
            "blind_reader_sha256": file_sha256(blind_reader) if blind_reader else None,
            "power_lines": bool(power_lines), "em_channel": bool(em_channel), "em_gate": em_gate,
            "em_ranker": bool(em_ranker), "em_classes": int(em_classes)}


#: the key's entries a fit with an EM ranker does not need to match: it keeps the stored EM
#: scores of the examples whose picks agree with its own and measures the others again
EM_RECOMPUTED = ("em_channel", "em_gate", "em_ranker", "em_classes")


def save_examples(path: str | Path, ex: dict[str, np.ndarray], key: dict[str, Any], cfg: RefinerFitConfig) -> Path:
    """Write a fit's examples (routed_examples) with their key and the synthesis settings, so
    perceptron variants can be fitted on them without making them again; with an EM ranker's
    picks (ex["em_picks"]: each row's classes, -1 past them), those too."""
    path = Path(path)
    made = {"per_class": cfg.per_class, "seed": cfg.seed, "backend": cfg.backend}
    extra = {"em_picks": ex["em_picks"]} if "em_picks" in ex else {}
    np.savez(path, **{k: ex[k] for k in _EXAMPLE_ARRAYS}, **extra, key=np.array(json.dumps(key)),
             made=np.array(json.dumps(made)))
    return path


def load_examples(path: str | Path, key: dict[str, Any], em_recomputed: bool = False
                  ) -> tuple[dict[str, np.ndarray], dict[str, Any], dict[str, Any]]:
    """Examples save_examples wrote, how they were made and their key. ConfigError for a
    missing or foreign file, or examples whose key differs from `key` (another network,
    sequence network, rate rule, classes or equalizer), naming what differs; with
    em_recomputed, the EM_RECOMPUTED entries may differ."""
    try:
        with open_npz(Path(path)) as z:
            ex = {k: z[k] for k in _EXAMPLE_ARRAYS}
            if "em_picks" in z:
                ex["em_picks"] = z["em_picks"]
            stored, made = json.loads(str(z["key"])), json.loads(str(z["made"]))
        stored.setdefault("dc_pass", False)     # examples saved before the fit had a DC pass
        stored.setdefault("sequence_features", False)   # or the sequence network's features
        stored.setdefault("blind_view", False)          # or its blind view
        stored.setdefault("blind_reader_sha256", None)  # or a blind reader
        stored.setdefault("power_lines", False)         # or the power lines
        stored.setdefault("em_channel", False)          # or the EM scores
        stored.setdefault("em_gate", em_scores.ALL_BURSTS)  # or a gate on them
        stored.setdefault("em_ranker", False)           # or an EM ranker
        stored.setdefault("em_classes", em_scores.FAST_CLASSES)  # or another count of classes
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such examples file (fit-refiner --save-examples writes one)") from None
    except (KeyError, ValueError, OSError) as e:
        raise ConfigError(f"{path}: not an examples file from fit-refiner --save-examples ({e})") from None
    differ = "; ".join(f"{k}: {stored.get(k)!r} there, {key[k]!r} here" for k in key
                       if stored.get(k) != key[k] and not (em_recomputed and k in EM_RECOMPUTED)
                       and not (k == "em_gate" and stored[k] == em_scores.ALL_BURSTS and not stored["em_ranker"]))
    if differ:
        raise ConfigError(f"{path}: examples made for another fit ({differ})")
    return ex, made, stored


def stored_em_picks(ex: dict[str, np.ndarray], stored: dict[str, Any], model_labels: Sequence[str],
                    classes: tuple[str, ...]) -> list[np.ndarray]:
    """The classes each example's stored EM scores were fitted for: an EM ranker's picks as
    saved, else the network's (em_channel.em_classes from its log-probabilities and SNR
    estimate, under the stored gate and count); none for examples without EM scores."""
    n = len(ex["truth"])
    if not stored["em_channel"]:
        return [np.zeros(0, np.int64)] * n
    if "em_picks" in ex:
        return [row[row >= 0].astype(np.int64) for row in ex["em_picks"]]
    f = ex["features"]
    columns = [list(model_labels).index(c) for c in classes]
    return ranked_picks(f[:, columns], f, model_labels, classes, stored["em_gate"], stored["em_classes"])


def packed_picks(picks: Sequence[np.ndarray], count: int = em_scores.FAST_CLASSES) -> np.ndarray:
    """(n, count) int64 of each row's picks (at most count each), -1 past them (save_examples'
    em_picks)."""
    out = np.full((len(picks), count), -1, np.int64)
    for i, p in enumerate(picks):
        out[i, :len(p)] = p
    return out


def gate_em_columns(features: np.ndarray, model_labels: Sequence[str], classes: tuple[str, ...],
                    gate: str) -> np.ndarray:
    """Feature rows (Refiner.features, the EM scores of `classes` last) with the EM scores
    zeroed where em_channel.passes_gate holds the burst back, as a gated refiner's are when
    served; the gate reads each row's network log-probabilities and SNR estimate (its first
    columns). So examples made with every burst's EM scores fit a gated refiner."""
    if gate == em_scores.ALL_BURSTS:
        return features
    columns = [list(model_labels).index(c) for c in classes]
    ranked = np.array(classes)[np.argsort(-features[:, columns], axis=1, kind="stable")]
    snr = features[:, len(model_labels)].astype(np.float64) * 10.0
    held_back = np.array([not em_scores.passes_gate(gate, r, s) for r, s in zip(ranked, snr)], bool)
    out = features.copy()
    out[held_back, -em_scores.n_scores(classes):] = 0.0
    return out


def holdout_split(n: int, cfg: RefinerFitConfig) -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
    """(held-out rows, the others) of n examples, cfg.holdout of them drawn by cfg.seed, and
    the generator that drew them (train_perceptron goes on to shuffle its batches with it)."""
    rng = np.random.default_rng(cfg.seed)
    perm = rng.permutation(n)
    n_hold = max(1, int(round(n * cfg.holdout)))
    return perm[:n_hold], perm[n_hold:], rng


def train_perceptron(x: np.ndarray, y: np.ndarray, n_classes: int, cfg: RefinerFitConfig
                     ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Weights of the refiner's perceptron trained on (x, y) with early stopping on a held-out
    share; returns (weights as Refiner arrays, the held-out row indices). With
    cfg.label_smoothing the output layer is divided by the temperature that fits the held-out
    share best (calibration.fit_temperature), which leaves its decisions as they are."""
    torch = require("torch", "fitting the refiner's perceptrons")

    torch.manual_seed(cfg.seed)
    hold, fit, rng = holdout_split(len(x), cfg)
    mean = x[fit].mean(0)
    scale = x[fit].std(0) + 1e-6
    xs = torch.tensor((x - mean) / scale, dtype=torch.float32)
    yt = torch.tensor(y, dtype=torch.long)
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], cfg.hidden), torch.nn.ReLU(),
                              torch.nn.Dropout(cfg.dropout), torch.nn.Linear(cfg.hidden, n_classes))
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    best, best_state, stale = -1.0, None, 0
    for _ in range(cfg.epochs):
        net.train()
        for b in np.array_split(rng.permutation(fit), max(1, fit.size // 256)):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(xs[b]), yt[b], label_smoothing=cfg.label_smoothing).backward()
            opt.step()
        net.eval()
        with torch.no_grad():
            acc = float((net(xs[hold]).argmax(1) == yt[hold]).float().mean())
        if acc > best:
            best, best_state, stale = acc, {k: v.detach().clone() for k, v in net.state_dict().items()}, 0
        else:
            stale += 1
            if stale >= cfg.patience:
                break
    net.load_state_dict(best_state)
    temperature = 1.0
    if cfg.label_smoothing > 0:
        from rfclassify.model.calibration import fit_temperature

        with torch.no_grad():           # net is in eval mode: every epoch ends with its held-out score
            temperature = fit_temperature(net(xs[hold]).numpy().astype(np.float64), y[hold])
    first, last = net[0], net[3]
    weights = {"mean": mean.astype(np.float32), "scale": scale.astype(np.float32),
               "w1": first.weight.detach().numpy().T.copy(), "b1": first.bias.detach().numpy().copy(),
               "w2": (last.weight.detach().numpy().T / temperature).astype(np.float32),
               "b2": (last.bias.detach().numpy() / temperature).astype(np.float32)}
    return weights, hold


def shortest_helped(by_length: dict[int, dict[str, float]]) -> int:
    """The smallest fit length from which on the refiner is at least as accurate as the network
    at every fit length (held-out); one past the longest when it loses at the longest."""
    lengths = sorted(by_length)
    shortest = lengths[-1] + 1
    for n in reversed(lengths):
        if by_length[n]["refined"] < by_length[n]["network"]:
            break
        shortest = n
    return int(shortest)


def train_ensemble(x: np.ndarray, y: np.ndarray, n_classes: int, cfg: RefinerFitConfig
                   ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """train_perceptron's weights and held-out rows; with cfg.members = M > 1, M perceptrons'
    weights stacked on a leading axis (Refiner's ensemble form) and the held-out rows none of
    them saw: the same share a single fit holds out, while member k trains on the other rows,
    early-stopping on its own share of them (seed cfg.seed + k), from its own initial weights."""
    if cfg.members == 1:
        return train_perceptron(x, y, n_classes, cfg)
    hold, rest, _ = holdout_split(len(x), cfg)
    fitted = [train_perceptron(x[rest], y[rest], n_classes, dataclasses.replace(cfg, seed=cfg.seed + k))[0]
              for k in range(cfg.members)]
    return {k: np.stack([w[k] for w in fitted]) for k in fitted[0]}, hold


def train_trees(x: np.ndarray, y: np.ndarray, n_classes: int, hold: np.ndarray, cfg: RefinerFitConfig
                ) -> tuple[TreeEnsemble, dict[str, Any]]:
    """The refiner's trees (tree_fit.fit_trees) fitted on the rows outside `hold`, the
    perceptrons' rows, stopped early on their own share of them (seed cfg.seed + TREES_SEED)."""
    from rfclassify.model.tree_fit import TreeFitConfig, fit_trees

    rest = np.setdiff1d(np.arange(len(x)), hold)
    early, fit, _ = holdout_split(rest.size, dataclasses.replace(cfg, seed=cfg.seed + TREES_SEED))
    return fit_trees(x, y, n_classes, rest[early], rest[fit],
                     TreeFitConfig(leaves=cfg.tree_leaves, learning_rate=cfg.tree_lr, share=cfg.tree_share,
                                   seed=cfg.seed))


def _fit_and_score(ex: dict[str, np.ndarray], features: np.ndarray, cfg: RefinerFitConfig,
                   classes: tuple[str, ...], index: np.ndarray, sequence: SequenceNet | None, rate_rule: str,
                   equalizer: tuple[str, ...] = (), em_channel: bool = False,
                   em_gate: str = em_scores.ALL_BURSTS) -> tuple[Refiner, dict[str, Any]]:
    """A refiner trained on `features` (rows of ex, clocked by rate_rule), its min_samples
    chosen and its held-out scores against the network's, as served (shorter bursts keep the
    network's answer)."""
    weights, hold = train_ensemble(features, ex["truth"], len(classes), cfg)
    trees, tree_facts = (train_trees(features, ex["truth"], len(classes), hold, cfg) if cfg.trees
                         else (None, None))
    y, network, length = ex["truth"][hold], ex["network_top"][hold], ex["length"][hold]
    refiner = Refiner(labels=classes, index=index, sequence=sequence, equalizer=equalizer, rate_rule=rate_rule,
                      trees=trees, em_channel=em_channel, em_gate=em_gate, em_count=cfg.em_classes, **weights)
    pred = refiner.logits(features[hold]).argmax(1)
    by_length = {n: {"bursts": int(np.sum(length == n)),
                     "network": float(np.mean(network[length == n] == y[length == n])),
                     "refined": float(np.mean(pred[length == n] == y[length == n]))}
                 for n in FIT_LENGTHS if np.any(length == n)}
    refiner = dataclasses.replace(refiner, min_samples=shortest_helped(by_length))
    pred = np.where(length >= refiner.min_samples, pred, network)
    high = ex["snr_db"][hold] >= 10.0
    scores = {
        "holdout_bursts": int(hold.size), "holdout_by_length": by_length, "min_samples": refiner.min_samples,
        "holdout_accuracy": {"network": float(np.mean(network == y)), "refined": float(np.mean(pred == y))},
        "holdout_accuracy_snr_ge_10db": {"network": float(np.mean(network[high] == y[high])),
                                         "refined": float(np.mean(pred[high] == y[high]))},
    }
    if trees is not None:   # each fuser alone on the same held-out bursts, as served (min_samples)
        parts = {"perceptrons": refiner.perceptron_logits(features[hold]).argmax(1),
                 "trees": trees.raw_scores(features[hold]).argmax(1)}
        parts = {k: np.where(length >= refiner.min_samples, v, network) for k, v in parts.items()}
        for key, rows in (("holdout_accuracy", slice(None)), ("holdout_accuracy_snr_ge_10db", high)):
            scores[key].update({k: float(np.mean(v[rows] == y[rows])) for k, v in parts.items()})
        scores["trees"] = tree_facts
    return refiner, scores


#: the SequenceNet flags whose columns follow its log-probabilities, in SequenceNet.outputs' order
_OUTPUT_FLAGS = ("with_features", "blind_view", "power_lines")


def _without(sequence: SequenceNet, *options: str) -> SequenceNet:
    """sequence with the SequenceNet flags `options` off (the blind view's reader goes with it)."""
    return dataclasses.replace(sequence, **{o: False for o in options},
                               **({"blind_reader": None} if "blind_view" in options else {}))


def _fit_without(ex: dict[str, np.ndarray], cfg: RefinerFitConfig, classes: tuple[str, ...], index: np.ndarray,
                 sequence: SequenceNet, option: str, n_invariant: int, rate_rule: str,
                 equalizer: tuple[str, ...], em_channel: bool = False) -> dict[str, Any]:
    """The scores of a perceptron fitted on the same examples without what the sequence
    network's `option` (one of _OUTPUT_FLAGS) adds to them: its columns start after the
    n_invariant columns before the sequence network's and its outputs of the flags before
    `option`, and are as many as the option adds."""
    lighter = _without(sequence, option)
    start = n_invariant + _without(sequence, *_OUTPUT_FLAGS[_OUTPUT_FLAGS.index(option):]).n_outputs
    keep = np.r_[0:start, start + sequence.n_outputs - lighter.n_outputs:ex["features"].shape[1]]
    return _fit_and_score(ex, ex["features"][:, keep], cfg, classes, index, lighter, rate_rule, equalizer,
                          em_channel)[1]


def last_blocks_kept(n_columns: int, n_equalizer: int, n_em: int, keep_equalizer: bool = True,
                     keep_em: bool = True) -> np.ndarray:
    """The feature columns a fit keeps of n_columns whose last blocks are the equalized
    scores (n_equalizer) then the EM scores (n_em), without either block where asked."""
    em_start = n_columns - n_em
    eq_start = em_start - n_equalizer
    return np.r_[0:eq_start, eq_start:em_start if keep_equalizer else eq_start,
                 em_start:n_columns if keep_em else em_start]


def _ranked_em_examples(model_dir: str | Path, cfg: RefinerFitConfig, model_labels: Sequence[str],
                        classes: tuple[str, ...], index: np.ndarray, ex: dict[str, np.ndarray], stored: dict[str, Any],
                        sequence: SequenceNet | None, rule: str, equalizer: tuple[str, ...],
                        progress: Callable[[str], None] | None) -> tuple[dict[str, np.ndarray], Refiner, dict]:
    """(the examples with the EM scores of the EM ranker's picks last, the ranker, its report)
    for a fit with cfg.em_ranker: the ranker fitted on every input but the EM scores (the
    served one on all examples; out of fold for the picks, ranker_out_of_fold), each row's
    picks under cfg.em_gate, and the EM scores of the rows whose picks differ from those the
    stored scores were fitted for (stored: the examples' key) measured again (em_columns)."""
    n_em = em_scores.n_scores(classes)
    n = len(ex["truth"])
    before = stored_em_picks(ex, stored, model_labels, classes)
    f = ex["features"]
    base = (f[:, last_blocks_kept(f.shape[1], len(equalizer), n_em, keep_em=False)] if stored["em_channel"]
            else f)
    ranker, scores = _fit_and_score(ex, base, cfg, classes, index, sequence, rule, equalizer)
    if progress is not None:
        progress("fitting the EM ranker out of fold")
    picks = ranked_picks(ranker_out_of_fold(ex, base, cfg, classes, index, sequence, rule, equalizer), base,
                         model_labels, classes, cfg.em_gate, cfg.em_classes)
    same = np.array([set(a.tolist()) == set(b.tolist()) for a, b in zip(before, picks)], bool)
    columns = np.zeros((n, n_em), np.float32)
    if stored["em_channel"]:
        columns[same] = f[same, -n_em:]
    again = [p if not s else np.zeros(0, np.int64) for p, s in zip(picks, same)]
    measured = em_columns(model_dir, cfg, classes, ex, again, rule, progress)
    columns[~same] = measured[~same]
    truth_in = np.array([int(t) in set(p.tolist()) for t, p in zip(ex["truth"], picks)], bool)
    picked = np.array([len(p) > 0 for p in picks], bool)
    report = {"scores": scores, "folds": RANKER_FOLDS, "bursts_picked": int(picked.sum()),
              "truth_among_picks": float(truth_in[picked].mean()) if picked.any() else None,
              "scores_kept": int((same & picked).sum()), "scores_measured": int(sum(len(p) > 0 for p in again))}
    out = dict(ex, features=np.concatenate([base, columns], axis=1), em_picks=packed_picks(picks, cfg.em_classes))
    return out, ranker, report


def fit_refiner(model_dir: str | Path, cfg: RefinerFitConfig = RefinerFitConfig(),
                progress: Callable[[str], None] | None = None, examples: str | Path | None = None,
                save_examples_to: str | Path | None = None) -> dict[str, Any]:
    """Fit, save refiner.npz into model_dir and record it in model.json; returns the report.
    (cfg.group low-order: refiner_low_order.npz and model.json's low_order_refiner.)
    With `examples`, the perceptrons are fitted on examples an earlier fit saved
    (`save_examples_to`, the same network, sequence network, rate rule and equalizer) instead
    of making them, and cfg's synthesis settings give way to theirs.
    With a sequence network, a second perceptron is fitted on the same examples without its
    outputs and saved as refiner_light.npz (model.json's refiner.light): the cheaper variant
    a box short of CPU can serve instead (Classifier.load refiner_sequence=False). The light
    variant has neither the sequence network, nor the equalized scores, nor the EM scores,
    nor trees; with the equalizer, the report's `without_equalizer` scores one more
    perceptron fitted without its scores (not saved), to tell what they add, and with the EM
    scores `without_em_channel` the same for them."""
    from rfclassify.model.meta import ModelMeta

    require("torch", "fitting the refiner's perceptrons")     # before minutes of examples, not after
    if cfg.trees:
        require("lightgbm", "fitting the refiner's trees")
    meta = ModelMeta.load(model_dir)
    classes = tuple(c for c in GROUPS[cfg.group].classes if c in meta.labels)
    if len(classes) < 2:
        raise ConfigError(f"{model_dir}: the model has {len(classes)} of the refiner's classes; it needs at least 2")
    t0 = time.time()
    sequence = SequenceNet.load(cfg.sequence_net) if cfg.sequence_net else None
    if sequence is not None and (cfg.sequence_features or cfg.blind_view or cfg.power_lines):
        reader = SequenceNet.load(cfg.blind_reader) if cfg.blind_reader else None
        try:
            sequence = dataclasses.replace(sequence, with_features=cfg.sequence_features, blind_view=cfg.blind_view,
                                           blind_reader=reader, power_lines=cfg.power_lines)
        except ValueError as exc:
            raise ConfigError(f"{cfg.sequence_net}: {exc}") from None
    equalizer = classes if cfg.equalizer else ()
    rule = cfg.clock_rule(sequence)
    key = examples_key(meta.model_id, classes, cfg.sequence_net, rule, equalizer, cfg.dc_pass,
                       cfg.sequence_features, cfg.blind_view, cfg.blind_reader, cfg.power_lines, cfg.em_channel,
                       cfg.em_gate, cfg.em_ranker, cfg.em_classes)
    index = np.array([meta.labels.index(c) for c in classes])
    n_em = em_scores.n_scores(classes) if cfg.em_channel else 0
    ranker, ranker_report = None, None
    if examples is not None:
        ex, made, stored = load_examples(examples, key, em_recomputed=cfg.em_ranker)
        cfg = dataclasses.replace(cfg, **made)
    else:
        # an EM ranker's picks need the other statistics first: the EM scores come in a second pass
        made_by = (dataclasses.replace(cfg, em_channel=False, em_gate=em_scores.ALL_BURSTS, em_ranker=False,
                                       em_classes=em_scores.FAST_CLASSES)
                   if cfg.em_ranker else cfg)
        ex = routed_examples(model_dir, made_by, classes, progress, sequence)
        stored = dict(key, em_channel=made_by.em_channel, em_ranker=False)
    if cfg.em_ranker:
        ex, ranker, ranker_report = _ranked_em_examples(model_dir, cfg, meta.labels, classes, index, ex, stored,
                                                        sequence, rule, equalizer, progress)
    if save_examples_to is not None and (examples is None or cfg.em_ranker):
        save_examples(save_examples_to, ex, key, cfg)
    t_data = time.time() - t0
    if cfg.em_channel and not cfg.em_ranker:
        ex["features"] = gate_em_columns(ex["features"], meta.labels, classes, cfg.em_gate)
    refiner, scores = _fit_and_score(ex, ex["features"], cfg, classes, index, sequence, rule, equalizer,
                                     cfg.em_channel, cfg.em_gate)
    refiner = dataclasses.replace(refiner, em_ranker=ranker)
    report = {
        "classes": list(classes), "config": asdict(cfg), "lengths": list(FIT_LENGTHS),
        "bursts_synthesized": cfg.per_class * len(classes), "bursts_routed": int(len(ex["truth"])),
        "rate_rule": rule, **scores, "data_s": round(t_data, 1),
    }
    if examples is not None:
        report["examples"] = Path(examples).name
    info: dict[str, Any] = {"file": GROUPS[cfg.group].file, "classes": list(classes), "fit": report}
    n_invariant = len(meta.labels) + 1 + N_INVARIANTS     # the light variant's columns
    if ranker_report is not None:
        report["em_ranker"] = ranker_report
    if equalizer:
        keep = last_blocks_kept(ex["features"].shape[1], len(equalizer), n_em, keep_equalizer=False)
        _, report["without_equalizer"] = _fit_and_score(ex, ex["features"][:, keep], cfg, classes, index,
                                                        sequence, rule, (), cfg.em_channel)
    if n_em and ranker_report is not None:      # the ranker is that fit
        report["without_em_channel"] = ranker_report["scores"]
    elif n_em:
        keep = last_blocks_kept(ex["features"].shape[1], len(equalizer), n_em, keep_em=False)
        _, report["without_em_channel"] = _fit_and_score(ex, ex["features"][:, keep], cfg, classes, index,
                                                         sequence, rule, equalizer)
    for option, name in (("with_features", "without_sequence_features"), ("blind_view", "without_blind_view"),
                         ("power_lines", "without_power_lines")):
        if sequence is not None and getattr(sequence, option):
            report[name] = _fit_without(ex, cfg, classes, index, sequence, option, n_invariant, rule, equalizer,
                                        cfg.em_channel)
    if sequence is not None:
        report["sequence_net"] = {"file": Path(cfg.sequence_net).name, "sha256": key["sequence_net_sha256"],
                                  "params": sequence.n_params,
                                  **{k: sequence.info.get(k) for k in ("training_bursts", "examples", "train_s",
                                                                       "eval_accuracy_by_length", "config")}}
        # the same examples without the sequence network's columns: the cheaper variant, and
        # without trees (held out, they lowered it: docs/model.md, twenty-eighth session)
        light, light_scores = _fit_and_score(ex, ex["features"][:, :n_invariant], dataclasses.replace(cfg, trees=False),
                                             classes, index, None, rule)
        light_path = light.save(Path(model_dir) / LIGHT_REFINER_FILE)
        info["light"] = {"file": LIGHT_REFINER_FILE, "sha256": file_sha256(light_path), "fit": light_scores}
    report["total_s"] = round(time.time() - t0, 1)
    info["sha256"] = file_sha256(refiner.save(Path(model_dir) / info["file"]))
    # every burst goes through the new refiner until the skip is chosen again for it: the
    # threshold was chosen where the refiners it was measured with changed no answer
    meta.with_updates(**{GROUPS[cfg.group].meta_key: info}, refiner_skip_above=1.0,
                      refiner_skip_temperature=1.0).save(model_dir)
    return report
