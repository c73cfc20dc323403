"""Training batches: synthesized on the fly by worker processes, or read from an HDF5 dataset.

Every batch holds one length bucket. Model input is made by the shared serving code
(`rfclassify.dsp.windows.normalize_batch` / `to_model_input`), so training sees exactly what
serving feeds the network. On-the-fly data uses the full impairment chain
(`ChannelConfig()`), SNR uniform over the recipe's range, labels uniform, and a share of the
smallest bucket's batches made of short bursts (64..127 samples) zero-padded as the bucket rule
pads them.

With a symbol-rate normalizer (``DataRecipe.target_sps``), a burst's bucket is only known once
it has been resampled (``rfclassify.dsp.rate``), as in serving. Then bursts are synthesized
at a bucket's length (drawn as above), resampled, and each lands in the bucket of its
resampled length: one random window of it, or zero-padded when shorter than the smallest
bucket. ``RateBatches`` collects those rows until a bucket has a full batch. The SNR target
becomes the SNR the network sees, full-band SNR + ``snr_offset_db``; serving subtracts it.

Workers are spawned (no fork: the parent has torch and maybe CUDA), each with its own
SeedSequence child, and push ready float32 batches (plain numpy dicts) through a bounded
queue. Nothing here imports torch.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from rfclassify._exceptions import ConfigError, InputError, InternalError
from rfclassify.dsp.rate import SymbolRateNormalizer, snr_offset_db
from rfclassify.dsp.windows import BucketPolicy, normalize_batch, to_model_input
from rfclassify.labels import LABEL_TO_INDEX, LABELS

Batch = dict[str, np.ndarray]  # x float32 (B,2,1,L), label int64 (B,), snr_db float32 (B,)

#: share of training *time* per bucket of the default bucket list, by length
DEFAULT_TIME_SHARE: dict[int, float] = {128: 0.08, 256: 0.08, 512: 0.14, 1024: 0.40, 2048: 0.15, 4096: 0.15}


def default_time_share(buckets_samples: tuple[int, ...]) -> tuple[float, ...]:
    """The time shares of a bucket list: DEFAULT_TIME_SHARE's for its lengths, any other list
    (given on the command line) 1024 double and the rest equal. By length, not position: a
    list of six other lengths once took the default's shares in order (256..8192 gave 2048
    the 40 % meant for 1024)."""
    if sorted(buckets_samples) == sorted(DEFAULT_TIME_SHARE):
        return tuple(DEFAULT_TIME_SHARE[b] for b in buckets_samples)
    return tuple(2.0 if b == 1024 else 1.0 for b in buckets_samples)


@dataclass(frozen=True)
class DataRecipe:
    """How on-the-fly training data is drawn (recorded in the training log and model card)."""

    buckets_samples: tuple[int, ...] = BucketPolicy().buckets_samples
    #: share of training *time* per bucket (batches are drawn with probability share / length);
    #: None: default_time_share of the bucket list
    time_share: tuple[float, ...] | None = None
    snr_range_db: tuple[float, float] = (-20.0, 30.0)
    #: (lo dB, hi dB, share): that share of training bursts draws its SNR from [lo, hi] instead of
    #: the whole range, which the rest keeps (None: uniform over snr_range_db). Validation stays
    #: uniform over snr_range_db, so runs with and without a focus validate alike
    snr_focus: tuple[float, float, float] | None = None
    batch_size: int = 256
    #: fraction of the smallest bucket's rows that are short bursts, zero-padded to it
    short_fraction: float = 0.25
    min_samples: int = BucketPolicy().min_samples
    labels: tuple[str, ...] = LABELS
    channel: str = "full"  # ChannelConfig(): every impairment on
    target_sps: float | None = None  # resample to this many samples/symbol (None: no resampling)
    normalization: str = "remove_dc"  # per-burst normalization (rfclassify.dsp.windows.NORMALIZATIONS)
    #: ChannelConfig fields that differ from the full chain (e.g. a wider DC-offset range); {}: none
    channel_overrides: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.channel_config()  # ConfigError for an unknown field or a bad value, before any worker starts
        # BucketPolicy checks the normalization and refuses a rate normalizer with keep_dc: fail
        # here, not in a worker
        _ = self.policy
        if self.snr_focus is not None:
            lo, hi, share = self.snr_focus
            r_lo, r_hi = self.snr_range_db
            if not (r_lo <= lo < hi <= r_hi) or not 0.0 < share <= 1.0:
                raise ConfigError(f"an SNR focus needs {r_lo:g} <= lo < hi <= {r_hi:g} dB and a share in (0, 1]; "
                                  f"got {lo:g} {hi:g} {share:g}")
        if self.time_share is None or len(self.time_share) != len(self.buckets_samples):
            object.__setattr__(self, "time_share", default_time_share(tuple(self.buckets_samples)))

    def channel_config(self) -> Any:
        """The impairment chain bursts are drawn with: ChannelConfig() with channel_overrides applied."""
        from rfclassify.dsp.channel import ChannelConfig

        unknown = sorted(set(self.channel_overrides) - {f.name for f in fields(ChannelConfig)})
        if unknown:
            raise ConfigError(f"unknown channel setting(s) {', '.join(unknown)}; see rfclassify.dsp.channel.ChannelConfig")
        try:
            return ChannelConfig(**self.channel_overrides)
        except (TypeError, ValueError) as exc:  # a value of the wrong kind
            raise ConfigError(f"bad channel setting: {exc}") from None

    def bucket_probabilities(self) -> np.ndarray:
        """Probability that a batch is of each bucket (time share over cost per batch ~ length)."""
        w = np.asarray(self.time_share, float) / np.asarray(self.buckets_samples, float)
        return w / w.sum()

    @property
    def rate(self) -> SymbolRateNormalizer | None:
        return None if self.target_sps is None else SymbolRateNormalizer(self.target_sps)

    @property
    def policy(self) -> BucketPolicy:
        return BucketPolicy(self.buckets_samples, self.min_samples, rate=self.rate,
                            normalization=self.normalization)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["bucket_probabilities"] = [round(float(p), 4) for p in self.bucket_probabilities()]
        return d


def _draw(recipe: DataRecipe, bucket: int, n: int, rng: np.random.Generator
          ) -> tuple[list[str], np.ndarray, list[tuple[int, int, int]]]:
    """Labels, SNRs and (first row, end row, length) parts of n bursts drawn for `bucket`."""
    label_idx = rng.integers(0, len(recipe.labels), n)
    labels = [recipe.labels[i] for i in label_idx]
    snr = rng.uniform(*recipe.snr_range_db, n).astype(np.float32)
    if recipe.snr_focus is not None:  # no extra draws without one: unfocused runs keep their bursts
        lo, hi, share = recipe.snr_focus
        focused = rng.random(n) < share
        snr[focused] = rng.uniform(lo, hi, int(focused.sum())).astype(np.float32)
    n_short = 0
    if bucket == min(recipe.buckets_samples) and recipe.min_samples < bucket:
        n_short = int(round(recipe.short_fraction * n))
    parts = [(0, n - n_short, bucket)]
    if n_short:
        parts.append((n - n_short, n, int(rng.integers(recipe.min_samples, bucket))))
    return labels, snr, parts


def make_batch(recipe: DataRecipe, bucket: int, n: int, rng: np.random.Generator) -> Batch:
    """One batch of `n` synthesized, normalized bursts for `bucket` (no symbol-rate normalizer)."""
    from rfclassify.dsp.synth import synthesize  # scipy etc.: only in workers

    if recipe.target_sps is not None:
        raise ValueError("a rate-normalizing recipe makes batches with RateBatches")
    labels, snr, parts = _draw(recipe, bucket, n, rng)
    channel = recipe.channel_config()
    x = np.zeros((n, 2, 1, bucket), np.float32)
    y = np.zeros(n, np.int64)
    s = np.zeros(n, np.float32)
    for lo, hi, length in parts:
        if hi <= lo:
            continue
        sb = synthesize(labels[lo:hi], length, rng, snr_db=snr[lo:hi], channel=channel)
        x[lo:hi, :, :, :length] = to_model_input(normalize_batch(sb.iq, recipe.normalization))
        y[lo:hi] = sb.label_index
        s[lo:hi] = sb.snr_db
    return {"x": x, "label": y, "snr_db": s}


def make_rate_rows(recipe: DataRecipe, bucket: int, n: int, rng: np.random.Generator) -> dict[int, Batch]:
    """n bursts drawn for `bucket`, rate-normalized and cut as serving cuts them, by the bucket they land in."""
    from rfclassify.dsp.synth import synthesize

    policy = recipe.policy
    rate = policy.rate
    if rate is None:
        raise ValueError("make_rate_rows needs a recipe with target_sps; use make_batch")
    labels, snr, parts = _draw(recipe, bucket, n, rng)
    channel = recipe.channel_config()
    out: dict[int, list[Batch]] = {}
    for lo, hi, length in parts:
        if hi <= lo:
            continue
        sb = synthesize(labels[lo:hi], length, rng, snr_db=snr[lo:hi], channel=channel)
        iq = normalize_batch(sb.iq, recipe.normalization)
        grid = rate.grid_index(iq)
        for k in np.unique(grid):
            rows = np.flatnonzero(grid == k)
            y = rate.resample(iq[rows], int(k))
            m = y.shape[1]
            b = policy.bucket_for_length(m)
            w = np.zeros((rows.size, b), np.complex64)
            if m >= b:  # one random window, as training data is one window per burst
                start = rng.integers(0, m - b + 1, rows.size)
                w[:] = y[np.arange(rows.size)[:, None], start[:, None] + np.arange(b)[None, :]]
            else:
                w[:, :m] = y
            out.setdefault(b, []).append({
                "x": to_model_input(w), "label": sb.label_index[rows].astype(np.int64),
                "snr_db": (sb.snr_db[rows] + np.float32(snr_offset_db(int(k)))).astype(np.float32)})
    return {b: _concat(parts_b) for b, parts_b in out.items()}


def _concat(parts: list[Batch]) -> Batch:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


class RateBatches:
    """Single-bucket batches of rate-normalized bursts: rows collect per bucket until one is full."""

    def __init__(self, recipe: DataRecipe, rng: np.random.Generator) -> None:
        self.recipe, self.rng = recipe, rng
        self.pending: dict[int, list[Batch]] = {}
        self.counts: dict[int, int] = {}

    def add(self, rows: dict[int, Batch]) -> None:
        for b, batch in rows.items():
            self.pending.setdefault(b, []).append(batch)
            self.counts[b] = self.counts.get(b, 0) + len(batch["label"])

    def take(self, bucket: int, n: int) -> Batch:
        """The first n rows collected for `bucket` (the caller checked there are n)."""
        whole = _concat(self.pending[bucket])
        head = {k: v[:n] for k, v in whole.items()}
        rest = {k: v[n:] for k, v in whole.items()}
        self.pending[bucket] = [rest] if len(rest["label"]) else []
        self.counts[bucket] -= n
        return head

    def next(self) -> Batch:
        """The next full batch of recipe.batch_size rows, synthesizing as needed."""
        r, n = self.recipe, self.recipe.batch_size
        probs = r.bucket_probabilities()
        while True:
            full = [b for b, c in self.counts.items() if c >= n]
            if full:
                return self.take(max(full, key=lambda b: self.counts[b]), n)
            bucket = int(self.rng.choice(r.buckets_samples, p=probs))
            self.add(make_rate_rows(r, bucket, n, self.rng))


def _rate_validation_set(recipe: DataRecipe, per_bucket: int, rng: np.random.Generator) -> dict[int, Batch]:
    """per_bucket rate-normalized bursts in each bucket, drawing where rows are still missing."""
    acc = RateBatches(recipe, rng)
    for _ in range(64 * len(recipe.buckets_samples) * max(1, per_bucket // 256 + 1)):
        short = [b for b in recipe.buckets_samples if acc.counts.get(b, 0) < per_bucket]
        if not short:
            break
        acc.add(make_rate_rows(recipe, short[-1], 256, rng))
    return {int(b): acc.take(b, min(per_bucket, acc.counts.get(b, 0)))
            for b in recipe.buckets_samples if acc.counts.get(b, 0)}


def validation_set(recipe: DataRecipe, per_bucket: int, seed_seq: np.random.SeedSequence) -> dict[int, Batch]:
    """A fixed held-out set: `per_bucket` bursts per bucket, from its own seed stream, SNR uniform
    over the recipe's range (a training focus does not shape it)."""
    rng = np.random.default_rng(seed_seq)
    recipe = replace(recipe, snr_focus=None)
    if recipe.target_sps is not None:
        return _rate_validation_set(recipe, per_bucket, rng)
    out: dict[int, Batch] = {}
    for b in recipe.buckets_samples:
        out[int(b)] = _concat([make_batch(recipe, b, min(256, per_bucket - i), rng)
                               for i in range(0, per_bucket, 256)])
    return out


def seed_streams(seed: int, n_workers: int) -> tuple[np.random.SeedSequence, list[np.random.SeedSequence]]:
    """(validation stream, one stream per worker): validation does not depend on the worker count."""
    children = np.random.SeedSequence(seed).spawn(n_workers + 1)
    return children[0], children[1:]


def synthesized_batches(recipe: DataRecipe, rng: np.random.Generator) -> Iterator[Batch]:
    """Training batches forever, each of one bucket drawn by the recipe's probabilities."""
    if recipe.target_sps is not None:
        acc = RateBatches(recipe, rng)
        while True:
            yield acc.next()
    probs = recipe.bucket_probabilities()
    while True:
        bucket = int(rng.choice(recipe.buckets_samples, p=probs))
        yield make_batch(recipe, bucket, recipe.batch_size, rng)


def _worker_setup() -> None:
    """First thing in a data worker: become_child_worker, deaf to Ctrl-C and SIGTERM (`timeout`
    signals the whole process group: the workers died at once, and the trainer read that as a
    failed pipeline, exit 1, instead of pausing with a checkpoint; the trainer stops them), and
    ended with the process that started it (a trainer killed where it could not stop them left
    them synthesizing, a core each, for good)."""
    from rfclassify.engine.refiner_pool import become_child_worker

    become_child_worker()


def _worker_main(recipe: DataRecipe, seed_seq: np.random.SeedSequence, out_q: Any, stop: Any) -> None:
    _worker_setup()
    batches = synthesized_batches(recipe, np.random.default_rng(seed_seq))
    while not stop.is_set():
        batch = next(batches)
        while not stop.is_set():
            try:
                out_q.put(batch, timeout=0.5)
                break
            except queue.Full:
                continue
    # stopped: the batches still in this process's queue buffer are nobody's. Without this the
    # exit waits to write them into a pipe no one reads, for good (and SIGTERM is ignored here)
    out_q.cancel_join_thread()


def _val_main(recipe: DataRecipe, per_bucket: int, seed_seq: np.random.SeedSequence, out_q: Any) -> None:
    _worker_setup()
    out_q.put(validation_set(recipe, per_bucket, seed_seq))


_SINGLE_THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


class SynthPool:
    """N spawned processes that synthesize batches forever (+1 that makes the validation set).

    `get(timeout)` returns the next batch or None. Use as a context manager so workers are
    always stopped."""

    def __init__(self, recipe: DataRecipe, seed: int, n_workers: int, val_per_bucket: int = 0,
                 queue_batches: int | None = None) -> None:
        if n_workers < 1:
            raise ValueError("SynthPool needs at least one worker")
        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        self._q = ctx.Queue(maxsize=queue_batches or max(4, 3 * n_workers))
        self._val_q = ctx.Queue(maxsize=1)
        val_seq, worker_seqs = seed_streams(seed, n_workers)
        self._procs = [ctx.Process(target=_worker_main, args=(recipe, s, self._q, self._stop),
                                   daemon=True, name=f"rfc-synth-{i}") for i, s in enumerate(worker_seqs)]
        if val_per_bucket > 0:
            self._procs.append(ctx.Process(target=_val_main, args=(recipe, val_per_bucket, val_seq, self._val_q),
                                           daemon=True, name="rfc-synth-val"))
        saved = {k: os.environ.get(k) for k in _SINGLE_THREAD_ENV}
        os.environ.update({k: "1" for k in _SINGLE_THREAD_ENV})  # children inherit: one core each
        from rfclassify.engine.refiner_pool import starting_processes

        try:
            with starting_processes():   # deaf to Ctrl-C from their first line, none lost mid-spawn
                for p in self._procs:
                    p.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def get(self, timeout: float | None = None) -> Batch | None:
        """The next batch; waits at most `timeout` seconds (None: forever, 0: not at all)."""
        try:
            if timeout == 0:
                batch = self._q.get_nowait()
            else:
                batch = self._q.get(timeout=timeout)
        except queue.Empty:
            batch = None
        if batch is None and timeout != 0:
            self._check_alive()
        return batch

    def validation(self, timeout: float | None = None) -> dict[int, Batch] | None:
        try:
            return self._val_q.get(timeout=timeout)
        except queue.Empty:
            return None

    def qsize(self) -> int:
        try:
            return self._q.qsize()
        except NotImplementedError:  # macOS
            return -1

    def _check_alive(self) -> None:
        dead = [p.name for p in self._procs if p.exitcode not in (None, 0)]
        if dead:
            raise InternalError(f"data worker(s) died: {', '.join(dead)} (exit code "
                                f"{', '.join(str(p.exitcode) for p in self._procs if p.exitcode not in (None, 0))})")

    def close(self) -> None:
        self._stop.set()
        deadline = time.monotonic() + 5.0
        for p in self._procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in self._procs:
            if p.is_alive():   # SIGKILL: the workers ignore SIGTERM (_worker_setup), and one left
                p.kill()       # alive made the interpreter's exit wait for it forever
                p.join(timeout=5.0)
        for q in (self._q, self._val_q):
            q.cancel_join_thread()
            q.close()

    def __enter__(self) -> SynthPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def inline_batches(recipe: DataRecipe, seed: int) -> Iterator[Batch]:
    """Batches made in this process (--workers 0): slow but bit-reproducible, for tests and debugging."""
    _, (seq,) = seed_streams(seed, 1)
    yield from synthesized_batches(recipe, np.random.default_rng(seq))


class HDF5Batches:
    """Batches drawn from an HDF5 dataset forever (an iterator): each burst becomes one random
    window of its bucket.

    Bursts are normalized whole, then cropped (or zero-padded) to their serving bucket by
    DatasetReader.iter_batches, so every batch has a single bucket length. A burst whose window
    holds a NaN or an infinity is left out (the reader makes such a burst all NaN, so every
    window of it shows it), and `non_finite` collects the file indices of those: one such burst
    turned the whole network into NaNs. A bucket's later epochs draw from its finite bursts
    alone, so one with two or more of them keeps giving batches however its first epoch fell; a
    bucket with fewer is dropped (said once, on stderr), and a file with no bucket left is an
    InputError.

    A burst whose samples cannot be read (a damaged compressed chunk of /iq, a /length past the
    reader's MAX_READ_SAMPLES) is left out too, and `unreadable` collects those: found before
    the first batch (DatasetReader.unreadable_bursts), else as a batch meets one, each said on
    stderr with the count. More than MAX_UNREADABLE_SHARE of the file, or every burst of one of
    its labels, is an InputError: a bad copy to replace, not bursts to do without. Before the
    seventy-first session the first batch to draw such a burst ended the run, nothing written."""

    def __init__(self, path: str, recipe: DataRecipe, seed: int) -> None:
        if recipe.target_sps is not None:
            raise ValueError("training from an HDF5 dataset with a symbol-rate normalizer is not supported")
        if recipe.batch_size < 2:  # batch norm needs two bursts a batch (TrainConfig refuses fewer)
            raise ValueError(f"training batches need two bursts or more, got a batch size of {recipe.batch_size}")
        self.non_finite: set[int] = set()
        self.unreadable: set[int] = set()
        # a function of its own, not a method: a generator holding `self` would make a cycle,
        # and the file stayed open until the garbage collector came, past the last reference
        self._batches = _hdf5_draw(path, recipe, seed, self.non_finite, self.unreadable)

    def __iter__(self) -> HDF5Batches:
        return self

    def __next__(self) -> Batch:
        return next(self._batches)


def _hdf5_draw(path: str, recipe: DataRecipe, seed: int, non_finite: set[int],
               unreadable: set[int]) -> Iterator[Batch]:
    """HDF5Batches' draw, adding to `non_finite` and `unreadable` the file indices of the bursts
    it leaves out for those reasons."""
    from rfclassify.data.reader import DatasetReader

    policy = recipe.policy
    rng = np.random.default_rng(seed_streams(seed, 1)[1][0])
    with DatasetReader(path) as reader:
        # the file's label indices count its own `labels` list; the network's, LABELS (the two
        # were taken as one before the sixty-sixth session: a file listing them in another order
        # trained every burst against the wrong class)
        to_model = np.array([LABEL_TO_INDEX.get(n, -1) for n in reader.labels], np.int64)
        foreign = sorted({reader.labels[i] for i in np.unique(reader.label_index) if to_model[i] < 0})
        if foreign:
            raise ConfigError(f"{path}: labels the model does not classify: {', '.join(foreign)}")
        # a compressed /iq is read through once here (an uncompressed one has nothing that fails
        # to decode): the share rule holds before the first step, not minutes into the run
        unreadable.update(reader.unreadable_bursts().tolist())
        said = _say_unreadable(path, reader, unreadable, 0)
        pools = {b: reader.indices_for_bucket(b, policy) for b in recipe.buckets_samples}
        if unreadable:
            pools = {b: p[~np.isin(p, list(unreadable))] for b, p in pools.items()}
        # batch norm needs two bursts a batch: a bucket of one burst is left out, and so is an
        # epoch's last batch of one (torch's ValueError, a traceback, ended such a run)
        present = [b for b in recipe.buckets_samples if pools[b].size >= 2]
        if not present:
            raise ConfigError(f"{path}: no bucket has two bursts long enough for it "
                              f"(buckets {', '.join(map(str, recipe.buckets_samples))} samples)")
        iters: dict[int, Iterator[Any]] = {}
        while True:
            probs = recipe.bucket_probabilities()[[recipe.buckets_samples.index(b) for b in present]]
            b = int(rng.choice(present, p=probs / probs.sum()))
            batch = next(iters.get(b, iter(())), None)
            if batch is None or len(batch.label_index) < 2:  # epoch of this bucket done: reshuffle
                if non_finite or unreadable:
                    # without the bursts found non-finite: a bucket whose few finite bursts fell one
                    # to a batch gave no batch in an epoch, and was dropped for good
                    pools[b] = pools[b][~np.isin(pools[b], list(non_finite | unreadable))]
                if pools[b].size < 2:
                    print(f"warning: {path}: bucket {b} has {pools[b].size} burst(s) without NaN or infinite "
                          f"samples{' that can be read' if unreadable else ''}; it is left out of training "
                          "(two make a batch)", file=sys.stderr, flush=True)
                    present.remove(b)
                    if not present:
                        raise InputError(f"{path}: no bucket has two bursts without NaN or infinite samples "
                                         f"({len(non_finite)} left out"
                                         f"{f', {len(unreadable)} unreadable' if unreadable else ''})")
                    continue
                iters[b] = reader.iter_batches(recipe.batch_size, length_samples=b, shuffle_rng=rng,
                                               indices=pools[b], normalize=True,
                                               normalization=recipe.normalization, unreadable=unreadable)
                batch = next(iters[b], None)
            if len(unreadable) > said:   # a batch met bursts that cannot be read, not found before
                said = _say_unreadable(path, reader, unreadable, said, late=True)
            if batch is None or len(batch.label_index) < 2:   # they were all of it, or all but one
                continue
            x = to_model_input(batch.iq)
            labels, snr_db = to_model[batch.label_index], batch.snr_db.astype(np.float32)
            finite = np.isfinite(x).all(axis=(1, 2, 3))
            if not finite.all():
                non_finite.update(int(i) for i in batch.indices[~finite])
                if finite.sum() < 2:
                    continue
                x, labels, snr_db = x[finite], labels[finite], snr_db[finite]
            yield {"x": x, "label": labels, "snr_db": snr_db}  # NaN SNR (no noise): no SNR loss


#: the share of a --data file's bursts that may be unreadable for training to go on without them.
#: A bit flip costs one chunk of /iq, 65,536 samples (64 bursts of 1,024): a few per cent of a
#: file worth training on. Past a tenth the copy is bad and skews what is learned; make it again.
MAX_UNREADABLE_SHARE = 0.1


def _say_unreadable(path: str, reader: Any, unreadable: set[int], said: int, late: bool = False) -> int:
    """Warn on stderr of the bursts in `unreadable` (file indices) where more than the `said`
    warned of before (`late`: found as batches were read), and return how many there are;
    InputError instead where training cannot do without them: more than MAX_UNREADABLE_SHARE of
    the file, or every burst of one of its labels."""
    from rfclassify.data.reader import MAX_READ_SAMPLES

    if len(unreadable) <= said:
        return said
    n, bad = len(reader), np.fromiter(unreadable, np.int64)
    too_long = int((reader.lengths[bad] > MAX_READ_SAMPLES).sum())
    ranges = [f"{lo}..{hi - 1}" for lo, hi in reader.damaged_ranges()]
    why = [f"{bad.size - too_long} with samples in chunks of /iq that cannot be read"
           + (f" (samples {', '.join(ranges[:3])}{f' and {len(ranges) - 3} more' if len(ranges) > 3 else ''})"
              if ranges else "")] if bad.size > too_long else []
    why += [f"{too_long} longer than the {MAX_READ_SAMPLES:,} samples read"] if too_long else []
    readable = np.ones(n, dtype=bool)
    readable[bad] = False
    lost = sorted({reader.labels[i] for i in np.unique(reader.label_index)}
                  - {reader.labels[i] for i in np.unique(reader.label_index[readable])})
    head = f"{path}: {bad.size} of {n} bursts ({bad.size / n:.1%}) cannot be read ({'; '.join(why)})"
    if bad.size > MAX_UNREADABLE_SHARE * n or lost:
        raise InputError(f"{head}: " + (f"more than the {MAX_UNREADABLE_SHARE:.0%} training does without"
                                        if bad.size > MAX_UNREADABLE_SHARE * n else
                                        f"every burst of {', '.join(lost)}, which the model would not learn")
                         + "; make the file again or copy it anew")
    print(f"warning: {head}; left out of training"
          + (f" ({bad.size - said} {'more ' if said else ''}found as batches were read)" if late else ""),
          file=sys.stderr, flush=True)
    return bad.size


def hdf5_batches(path: str, recipe: DataRecipe, seed: int) -> HDF5Batches:
    """Training batches from an HDF5 dataset (HDF5Batches)."""
    return HDF5Batches(path, recipe, seed)
