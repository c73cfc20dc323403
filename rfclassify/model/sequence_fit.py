"""Train the sequence network (rfclassify.engine.sequence_net) on synthesized high-order bursts.

Bursts of the 12 high-order classes are drawn from a model's training recipe (its impairment
chain) at lengths spread over the buckets, SNR uniform over cfg.snr_range_db, and taken to
their clocked symbol channels (rfclassify.dsp.symbol_sequence; with cfg.front "equalized"
also the best alphabet's equalized symbols, rfclassify.dsp.sequence_fronts, from the central
MAX_SYMBOLS as served) in cfg.workers processes, their blind clock's rate picked by
cfg.rate_rule (rfclassify.dsp.symbol_clock.RATE_RULES) and their residual carrier taken out
by cfg.carrier (rfclassify.dsp.symbol_sequence.CARRIER_PASSES), both stored with the network; a
random window of at most cfg.max_keep symbols of each is kept (float16). The set sits on the
training device as one padded tensor, filled chunk by chunk from a background thread; training
starts once cfg.start_bursts are in (0: all of them) and the rest keep arriving while it runs,
so a GPU run spends its time budget training rather than waiting for its data. Every step
draws a batch from the bursts in so far, a window length from cfg.crops and a random window of
each burst, so short bursts (fewer symbols than the window) are trained on as they come,
masked. The network trains for cfg.train_s seconds, or cfg.max_steps steps where that comes
first (AdamW, warm-up then linear decay over whichever budget is further spent). Every
cfg.eval_every steps it is scored on fresh bursts of every length (SNR 10..30 dB, whole
sequences as served) and saved, batch norm folded, as the numpy network serving runs, so a
run stopped early still leaves its last weights. With start_bursts below bursts the run
depends on timing (how many bursts each step could draw from), so it is not bit-reproducible;
start_bursts 0 is, up to the time budget's step count; with a step limit the time budget
does not reach, it is the same on a fast machine and a loaded one, learning rate included.

It does not need the CNN: the refiner (rfclassify.model.refiner_fit, ``--sequence-net``)
fuses the two. The ninth session's probe (benchmarks/sequence_refiner_scale.py) found the
network needs about a million examples; a GPU trains it in minutes, a CPU does not.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from rfclassify._cpus import keep_one_blas_thread
from rfclassify._exceptions import ConfigError
from rfclassify._optional import require
from rfclassify.dsp.sequence_fronts import FRONTS, burst_front_sequence, front_channels
from rfclassify.dsp.symbol_clock import RATE_RULES, STRONGEST_LINE
from rfclassify.dsp.symbol_sequence import CARRIER_LINES, CARRIER_PASSES, MAX_SYMBOLS
from rfclassify.engine.select import torch_device
from rfclassify.engine.sequence_net import LOG_COUNT_SCALE, SequenceNet
from rfclassify.labels import HIGH_ORDER_LABELS

log = logging.getLogger(__name__)

SEQUENCE_NET_FILE = "sequence_net.npz"
EVAL_SNR_RANGE_DB = (10.0, 30.0)


@dataclass(frozen=True)
class SequenceFitConfig:
    bursts: int = 600_000               # training bursts synthesized (all 12 classes, shuffled)
    start_bursts: int = 0               # training starts once this many are made (0: all of them)
    train_s: float = 540.0              # training time (after the data is made)
    max_steps: int = 0                  # training also ends after this many steps (0: no step limit)
    seed: int = 20261209
    lengths: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096)   # burst lengths drawn, uniformly
    snr_range_db: tuple[float, float] = (0.0, 30.0)
    max_keep: int = 256                 # symbols kept per training burst
    crops: tuple[int, ...] = (32, 64, 128, 256)   # window lengths a step draws from
    width: int = 48
    blocks: int = 3
    kernel: int = 5
    hidden: int = 128
    gates: bool = False                 # a squeeze-and-excitation gate on each block's output
    front: str = "clocked"              # the input's channels (rfclassify.dsp.sequence_fronts.FRONTS)
    rate_rule: str = STRONGEST_LINE     # how the bursts' blind clock picks the rate (symbol_clock.RATE_RULES)
    carrier: str = CARRIER_LINES        # their second carrier pass (symbol_sequence.CARRIER_PASSES)
    batch: int = 512
    lr: float = 2e-3
    weight_decay: float = 1e-4
    warmup_steps: int = 300
    eval_per_length: int = 1000         # fresh evaluation bursts per length
    eval_every: int = 1000              # steps between evaluations (and saves)
    workers: int = 2                    # processes making the sequences
    device: str = "cpu"
    chunk: int = 300                    # bursts a worker synthesizes at a time (one length)
    labels: tuple[str, ...] = field(default=HIGH_ORDER_LABELS)

    def __post_init__(self) -> None:
        if self.bursts < 2 * len(self.labels):
            raise ConfigError(f"bursts must be >= {2 * len(self.labels)}, got {self.bursts}")
        if self.kernel < 1 or self.kernel % 2 == 0:
            raise ConfigError(f"kernel must be odd, got {self.kernel}")
        if self.train_s <= 0 or self.batch < 1 or self.width < 1 or self.hidden < 1 or self.blocks < 0:
            raise ConfigError("train_s, batch, width and hidden must be positive, blocks >= 0")
        if self.max_steps < 0:
            raise ConfigError(f"max_steps must be >= 0 (0: no step limit), got {self.max_steps}")
        if not self.crops or min(self.crops) < 1 or max(self.crops) > self.max_keep:
            raise ConfigError(f"crops must lie in 1..max_keep ({self.max_keep}), got {self.crops}")
        if self.workers < 0:
            raise ConfigError(f"workers must be >= 0, got {self.workers}")
        if self.front not in FRONTS:
            raise ConfigError(f"front must be one of {', '.join(FRONTS)}, got {self.front!r}")
        if self.rate_rule not in RATE_RULES:
            raise ConfigError(f"rate_rule must be one of {', '.join(RATE_RULES)}, got {self.rate_rule!r}")
        if self.carrier not in CARRIER_PASSES:
            raise ConfigError(f"carrier must be one of {', '.join(CARRIER_PASSES)}, got {self.carrier!r}")
        if not 0 <= self.start_bursts <= self.bursts:
            raise ConfigError(f"start_bursts must lie in 0..bursts ({self.bursts}), got {self.start_bursts}")


# -- the network ------------------------------------------------------------------------
def make_torch_net(cfg: SequenceFitConfig):
    """The torch module sequence_net.SequenceNet runs: forward(x (B, C, L), mask (B, 1, L))
    -> logits (B, K). Every activation is masked, so padding acts as the zero padding of a
    lone sequence."""
    import torch
    from torch import nn

    class TorchSequenceNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.ModuleList([nn.Conv1d(front_channels(cfg.front), 64, 1), nn.Conv1d(64, cfg.width, 1)])
            pad = cfg.kernel // 2
            self.blocks = nn.ModuleList(nn.ModuleList([
                nn.Conv1d(cfg.width, cfg.width, cfg.kernel, padding=pad), nn.BatchNorm1d(cfg.width),
                nn.Conv1d(cfg.width, cfg.width, cfg.kernel, padding=pad), nn.BatchNorm1d(cfg.width)])
                for _ in range(cfg.blocks))
            self.head = nn.ModuleList([nn.Linear(2 * cfg.width + 1, cfg.hidden), nn.Linear(cfg.hidden, len(cfg.labels))])
            squeeze = max(4, cfg.width // 4)
            self.gates = nn.ModuleList(nn.ModuleList([nn.Linear(cfg.width, squeeze), nn.Linear(squeeze, cfg.width)])
                                       for _ in range(cfg.blocks if cfg.gates else 0))

        def forward(self, x, mask):
            h = x * mask
            for conv in self.embed:
                h = torch.relu(conv(h)) * mask
            n = mask.sum(-1).clamp_min(1)
            for i, (conv_a, norm_a, conv_b, norm_b) in enumerate(self.blocks):
                t = torch.relu(norm_a(conv_a(h))) * mask
                u = norm_b(conv_b(t))
                if self.gates:
                    squeeze, excite = self.gates[i]
                    u = u * torch.sigmoid(excite(torch.relu(squeeze((u * mask).sum(-1) / n))))[..., None]
                h = torch.relu(h + u) * mask
            z = torch.cat([h.sum(-1) / n, (h - 1e4 * (1 - mask)).amax(-1), torch.log(n) / LOG_COUNT_SCALE], 1)
            return self.head[1](torch.relu(self.head[0](z)))

    return TorchSequenceNet()


def to_sequence_net(model, labels: tuple[str, ...], info: dict[str, Any], cfg: SequenceFitConfig) -> SequenceNet:
    """The numpy network of a trained torch one (reading cfg.front, trained on cfg.rate_rule's
    clock and cfg.carrier's second pass), each batch norm folded into its convolution."""
    def arr(t) -> np.ndarray:
        return t.detach().float().cpu().numpy().astype(np.float32)

    def folded(conv, norm) -> tuple[np.ndarray, np.ndarray]:
        s = arr(norm.weight) / np.sqrt(arr(norm.running_var) + norm.eps)
        return arr(conv.weight) * s[:, None, None], (arr(conv.bias) - arr(norm.running_mean)) * s + arr(norm.bias)

    embed = tuple((arr(c.weight), arr(c.bias)) for c in model.embed)
    blocks = tuple((*folded(a, na), *folded(b, nb)) for a, na, b, nb in model.blocks)
    head = tuple((arr(lin.weight), arr(lin.bias)) for lin in model.head)
    gates = tuple((arr(a.weight), arr(a.bias), arr(b.weight), arr(b.bias)) for a, b in model.gates)
    return SequenceNet(embed, blocks, head, tuple(labels), info, gates, cfg.front, cfg.rate_rule, cfg.carrier)


# -- data -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChunkJob:
    """One chunk of synthesized bursts to turn into sequences (_make_chunk), in a worker process."""
    seed: int
    bursts: int
    overrides: dict[str, Any]               # the channel's (DataRecipe.channel_overrides)
    labels: tuple[str, ...]
    lengths: tuple[int, ...]                # the chunk's one burst length is drawn from these
    snr_range: tuple[float, float]
    max_keep: int | None                    # a random crop of at most this many symbols; None: whole
    front: str
    rate_rule: str
    carrier: str


def _make_chunk(job: ChunkJob) -> tuple[list[np.ndarray], list[int], int]:
    """(sequences as float16, class indices, burst length) of one chunk of synthesized bursts;
    bursts without a sequence are left out. max_keep None keeps whole sequences (as served);
    the equalized front is always made of the served (central) symbols, its cost bounded."""
    from rfclassify.dsp.synth import synthesize
    from rfclassify.model.training_data import DataRecipe

    rng = np.random.default_rng(job.seed)
    length = int(rng.choice(job.lengths))
    cls = rng.integers(0, len(job.labels), job.bursts)
    snr = rng.uniform(*job.snr_range, job.bursts)
    channel = DataRecipe(channel_overrides=job.overrides).channel_config()
    batch = synthesize([job.labels[c] for c in cls], length, rng, snr, channel)
    seqs, ys = [], []
    max_keep = job.max_keep
    for iq, c in zip(batch.iq, cls, strict=True):
        whole = max_keep is None or job.front != "clocked"
        s = burst_front_sequence(iq, job.front, job.labels, max_symbols=MAX_SYMBOLS if whole else None,
                                 rate_rule=job.rate_rule, carrier=job.carrier)
        if s is None:
            continue
        if max_keep is not None and s.shape[1] > max_keep:
            a = int(rng.integers(0, s.shape[1] - max_keep + 1))
            s = s[:, a:a + max_keep]
        seqs.append(s.astype(np.float16))
        ys.append(int(c))
    return seqs, ys, length


def _jobs(n_bursts: int, seed: int, cfg: SequenceFitConfig, overrides: dict[str, Any],
          snr_range: tuple[float, float], max_keep: int | None, lengths: tuple[int, ...] | None) -> list[ChunkJob]:
    """The chunks of about n_bursts bursts: each its own seed and one length, drawn from
    cfg.lengths; lengths given: one chunk set per length instead."""
    def job(seed: int, bursts: int, lengths: tuple[int, ...]) -> ChunkJob:
        return ChunkJob(seed, bursts, overrides, tuple(cfg.labels), lengths, snr_range, max_keep, cfg.front,
                        cfg.rate_rule, cfg.carrier)

    if lengths is None:
        return [job(seed + i, cfg.chunk, tuple(cfg.lengths)) for i in range(max(1, -(-n_bursts // cfg.chunk)))]
    per_length = max(1, -(-n_bursts // len(lengths)))
    return [job(seed + 1000 * j + i, min(cfg.chunk, per_length - a), (n,))
            for j, n in enumerate(lengths) for i, a in enumerate(range(0, per_length, cfg.chunk))]


def data_pool(workers: int):
    """A spawned pool of `workers` processes of one BLAS thread each (keep_one_blas_thread),
    for making sequences: with every BLAS thread in each of 15 processes, the fitted carrier
    pass made no chunk in ten minutes on the 16-core H200 host (eighteenth session)."""
    from multiprocessing import get_context

    return get_context("spawn").Pool(workers, initializer=keep_one_blas_thread)


def _chunks(jobs: list, workers: int, make: Callable = _make_chunk) -> Iterator:
    """make (_make_chunk unless given: a picklable function of one job) of every job, in job
    order, in a data_pool of `workers` processes (in this one for <= 1); closing the
    generator stops the processes."""
    if workers <= 1:
        yield from map(make, jobs)
        return
    with data_pool(workers) as pool:
        yield from pool.imap(make, jobs)


def make_sequences(n_bursts: int, seed: int, cfg: SequenceFitConfig, overrides: dict[str, Any],
                   snr_range: tuple[float, float], max_keep: int | None,
                   lengths: tuple[int, ...] | None = None) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """(sequences, class indices, burst lengths) of about n_bursts synthesized bursts, made in
    cfg.workers processes chunk by chunk (each chunk its own seed and one length); lengths
    given: one chunk set per length instead of drawing them."""
    seqs: list[np.ndarray] = []
    ys: list[int] = []
    lens: list[int] = []
    for s, y, n in _chunks(_jobs(n_bursts, seed, cfg, overrides, snr_range, max_keep, lengths), cfg.workers):
        seqs += s
        ys += y
        lens += [n] * len(y)
    return seqs, np.array(ys, np.int64), np.array(lens, np.int64)


class _StreamedSet:
    """The training set on the device, (capacity, C, max_keep) float16 plus symbol counts and
    classes, filled in job order by a background thread that makes the chunks; take() moves
    what has arrived onto the device (in the training thread, between steps)."""

    def __init__(self, jobs: list[ChunkJob], workers: int, max_keep: int, channels: int, dev) -> None:
        import torch

        capacity = sum(job.bursts for job in jobs)     # check_fits has held it to the device's memory
        self.x = torch.zeros((capacity, channels, max_keep), dtype=torch.float16, device=dev)
        self.n = torch.zeros(capacity, dtype=torch.int64, device=dev)
        self.y = torch.zeros(capacity, dtype=torch.int64, device=dev)
        self.count = 0
        self.done = False
        self.chunks_made = 0
        self._max_keep = max_keep
        self._dev = dev
        self._queue: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._make, args=(jobs, workers), name="sequence-data", daemon=True)
        self._thread.start()

    @staticmethod
    def check_fits(jobs: list[ChunkJob], max_keep: int, channels: int, dev) -> None:
        """MemoryError, naming the sizes, where the set would not fit the device's memory (the
        machine's for the CPU): an absurd burst count otherwise reaches torch's allocator, whose
        RuntimeError reads as a crash, or the kernel's out-of-memory killer, after minutes of
        making the evaluation set."""
        import torch

        capacity = sum(job.bursts for job in jobs)
        need = capacity * (channels * max_keep * 2 + 2 * 8)     # x float16, n and y int64
        if dev.type == "cuda":
            have, where = torch.cuda.get_device_properties(dev).total_memory, str(dev)
        else:
            have, where = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine"
        if need > have:
            raise MemoryError(f"the training set of {capacity} bursts needs {need / 2**30:.1f} GiB and "
                              f"{where} has {have / 2**30:.1f} GiB: ask for fewer bursts")

    def _make(self, jobs: list[ChunkJob], workers: int) -> None:
        chunks = _chunks(jobs, workers)
        try:
            for chunk in chunks:
                self._queue.put(chunk)
                if self._stop.is_set():
                    break
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread, which raises it
            self._queue.put(exc)
        finally:
            chunks.close()
            self._queue.put(None)

    def take(self, until: int | None = None, progress: Callable[[str], None] | None = None) -> None:
        """Move the chunks that have arrived onto the device; until given, wait for chunks
        until `until` bursts are in or the data is all made (saying so every 100 chunks)."""
        import torch

        t0 = time.perf_counter()
        while not self.done:
            waiting = until is not None and self.count < until
            try:
                item = self._queue.get(block=waiting)
            except queue.Empty:
                return
            if item is None:
                self.done = True
                return
            if isinstance(item, BaseException):
                raise item
            seqs, ys, _ = item
            self.chunks_made += 1
            if progress is not None and waiting and self.chunks_made % 100 == 0:
                progress(f"made {self.chunks_made} chunks, {self.count} sequences ({time.perf_counter() - t0:.0f} s)")
            if not ys:
                continue
            x, n = _padded(seqs, self._max_keep)
            a, b = self.count, self.count + len(ys)
            self.x[a:b] = torch.from_numpy(x).to(self._dev)
            self.n[a:b] = torch.from_numpy(n).to(self._dev)
            self.y[a:b] = torch.tensor(ys, dtype=torch.int64, device=self._dev)
            self.count = b

    def close(self) -> None:
        """Stop making chunks (the processes end with the thread, at its next chunk)."""
        self._stop.set()
        self._thread.join()


def _padded(seqs: list[np.ndarray], width: int) -> tuple[np.ndarray, np.ndarray]:
    """(x (N, C, width) float16 zero-padded, lengths (N,)) of one or more (C, n) sequences."""
    x = np.zeros((len(seqs), seqs[0].shape[0], width), np.float16)
    n = np.zeros(len(seqs), np.int64)
    for i, s in enumerate(seqs):
        x[i, :, :s.shape[1]] = s[:, :width]
        n[i] = min(s.shape[1], width)
    return x, n


# -- training ---------------------------------------------------------------------------
def predict_sequences(model, seqs: list[np.ndarray], device: str) -> np.ndarray:
    """The torch network's class of each whole sequence (as served), in batches of like lengths."""
    import torch

    model.eval()
    pred = np.zeros(len(seqs), np.int64)
    order = np.argsort([s.shape[1] for s in seqs], kind="stable")
    with torch.no_grad():
        for a in range(0, order.size, 512):
            idx = order[a:a + 512]
            x, n = _padded([seqs[i] for i in idx], max(seqs[i].shape[1] for i in idx))
            xt = torch.from_numpy(x).float().to(device)
            m = (torch.arange(x.shape[2], device=device)[None, :] < torch.from_numpy(n).to(device)[:, None])
            pred[idx] = model(xt, m[:, None, :].float()).argmax(1).cpu().numpy()
    model.train()
    return pred


def _accuracy_by_length(model, seqs: list[np.ndarray], y: np.ndarray, lens: np.ndarray, device: str
                        ) -> dict[int, float]:
    """Accuracy of whole sequences (as served), per burst length."""
    pred = predict_sequences(model, seqs, device)
    return {int(n): float(np.mean(pred[lens == n] == y[lens == n])) for n in np.unique(lens)}


def draw_windows(data: _StreamedSet, cfg: SequenceFitConfig, gen, rng: np.random.Generator):
    """One training batch from the bursts in so far: (indices, windows (B, C, crop) float32,
    mask (B, 1, crop)), the crop drawn from cfg.crops and each burst's window at random, so
    bursts shorter than the crop come masked."""
    import torch

    dev = data.x.device
    arange = torch.arange(cfg.max_keep, device=dev)
    idx = torch.randint(0, data.count, (cfg.batch,), device=dev, generator=gen)
    crop = int(rng.choice(cfg.crops))
    n = data.n[idx]
    start = (torch.rand(cfg.batch, device=dev, generator=gen) * (n - crop).clamp_min(0).add(1)).long()
    pos = (start[:, None] + arange[None, :crop]).clamp_max(cfg.max_keep - 1)
    xb = torch.gather(data.x[idx], 2, pos[:, None, :].expand(-1, data.x.shape[1], -1)).float()
    mask = ((arange[None, :crop] < (n - start)[:, None]).float())[:, None, :]
    return idx, xb, mask


def fit_sequence_net(out_path: str | Path, cfg: SequenceFitConfig = SequenceFitConfig(),
                     channel_overrides: dict[str, Any] | None = None,
                     progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Make the data, train, save the numpy network to out_path (at every evaluation and at
    the end); returns the report (also stored in the network's info)."""
    torch = require("torch", "fitting the sequence network")

    say = progress or (lambda line: None)
    cfg = replace(cfg, device=torch_device(cfg.device))
    overrides = dict(channel_overrides or {})
    jobs = _jobs(cfg.bursts, cfg.seed, cfg, overrides, cfg.snr_range_db, cfg.max_keep, None)
    dev = torch.device(cfg.device)
    _StreamedSet.check_fits(jobs, cfg.max_keep, front_channels(cfg.front), dev)   # before any data is made
    n_eval = cfg.eval_per_length * len(cfg.lengths)   # made in this process's memory, before training
    need = n_eval * (front_channels(cfg.front) * cfg.max_keep * 4 + 2 * 8)
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > have:   # it grew until the kernel stepped in, without a word, before the sixty-sixth session
        raise MemoryError(f"the evaluation set of {n_eval} bursts needs {need / 2**30:.1f} GiB and this machine "
                          f"has {have / 2**30:.1f} GiB: ask for a smaller --eval-per-length")
    t0 = time.perf_counter()
    torch.manual_seed(cfg.seed)
    ev_seqs, ev_y, ev_len = make_sequences(cfg.eval_per_length * len(cfg.lengths), cfg.seed + 7_000_000, cfg,
                                           overrides, EVAL_SNR_RANGE_DB, None, lengths=cfg.lengths)
    data = _StreamedSet(jobs, cfg.workers, cfg.max_keep, front_channels(cfg.front), dev)
    try:
        return _train(out_path, cfg, overrides, data, (ev_seqs, ev_y, ev_len), t0, say)
    finally:
        data.close()


def _train(out_path: str | Path, cfg: SequenceFitConfig, overrides: dict[str, Any], data: _StreamedSet,
           evaluation: tuple[list[np.ndarray], np.ndarray, np.ndarray], t0: float, say: Callable[[str], None]
           ) -> dict[str, Any]:
    """fit_sequence_net's training loop, on the set `data` fills."""
    import torch

    ev_seqs, ev_y, ev_len = evaluation
    data.take(until=cfg.start_bursts or cfg.bursts, progress=say)
    if data.count < 2 * len(cfg.labels):
        raise ConfigError(f"only {data.count} of {cfg.bursts} bursts had a clocked sequence")
    t_data = time.perf_counter() - t0
    at_start = data.count
    say(f"training starts on {at_start} sequences ({len(ev_seqs)} held out for evaluation; {t_data:.0f} s)"
        + ("" if data.done else "; the rest keep coming"))
    dev = data.x.device
    model = make_torch_net(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator(device=dev)
    gen.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    history: list[dict[str, Any]] = []
    report: dict[str, Any] = {}

    def checkpoint(step: int, loss: float, elapsed_s: float) -> None:
        acc = _accuracy_by_length(model, ev_seqs, ev_y, ev_len, cfg.device)
        history.append({"step": step, "train_s": round(elapsed_s, 1), "loss": round(loss, 4), "bursts": data.count,
                        "eval_accuracy": {str(k): round(v, 4) for k, v in acc.items()}})
        report.update({"config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()},
                       "channel_overrides": overrides, "training_bursts": data.count,
                       "bursts_at_start": at_start, "steps": step,
                       "examples": step * cfg.batch, "data_s": round(t_data, 1), "train_s": round(elapsed_s, 1),
                       "eval_bursts": len(ev_seqs), "eval_snr_range_db": list(EVAL_SNR_RANGE_DB),
                       "eval_accuracy_by_length": history[-1]["eval_accuracy"], "history": history})
        net = to_sequence_net(model, cfg.labels, report, cfg)
        report["params"] = net.n_params
        net.save(out_path)
        say(f"step {step} ({elapsed_s:.0f} s, {step / max(elapsed_s, 1e-9):.0f} steps/s, {data.count} bursts): "
            f"loss {loss:.3f}, held-out accuracy by length " + ", ".join(f"{k}: {100 * v:.1f} %" for k, v in acc.items()))

    def progress(step: int, elapsed: float) -> float:
        """How far through its budget the run is (the learning rate decays to it): its time or,
        with a step limit, its steps, whichever is further."""
        return max(elapsed / cfg.train_s, step / cfg.max_steps if cfg.max_steps else 0.0)

    t1 = time.perf_counter()
    step, loss_value = 0, float("nan")
    while (elapsed := time.perf_counter() - t1) < cfg.train_s and (cfg.max_steps == 0 or step < cfg.max_steps):
        data.take()
        idx, xb, mask = draw_windows(data, cfg, gen, rng)
        for g in opt.param_groups:
            g["lr"] = cfg.lr * min(1.0, (step + 1) / cfg.warmup_steps) * max(0.02, 1 - progress(step, elapsed))
        loss = torch.nn.functional.cross_entropy(model(xb, mask), data.y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if step % cfg.eval_every == 0:
            loss_value = loss.item()
            checkpoint(step, loss_value, time.perf_counter() - t1)
    checkpoint(step, loss.item() if step else loss_value, time.perf_counter() - t1)
    report["total_s"] = round(time.perf_counter() - t0, 1)
    to_sequence_net(model, cfg.labels, report, cfg).save(out_path)
    return report


def report_summary(report: dict[str, Any]) -> str:
    """One line for the command's output and logs."""
    acc = report["eval_accuracy_by_length"]
    return (f"{report['training_bursts']} bursts, {report['steps']} steps ({report['examples']} examples) in "
            f"{report['train_s']:.0f} s; held-out accuracy (SNR 10..30 dB) "
            + ", ".join(f"{k}: {100 * v:.1f} %" for k, v in acc.items()))
