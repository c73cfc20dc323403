"""The training loop: cross-entropy + SNR regression, AdamW, a time-based warmup/cosine schedule.

Progress is ``max(step / steps, elapsed / time budget)``, so a ``--time-budget-s`` run ends
with a fully annealed learning rate however fast the machine is. The budget is the wall time
of the whole call (worker start-up included); the loop stops early enough to validate, fit
the temperature and write every file before it runs out. ``--init-from`` starts from a
trained model's weights with a new optimizer and schedule (a warm restart); the run records
its parent and the totals over every run behind it.

A run longer than one sitting (the lent GPU's device time is 30 minutes a session) uses the
warmup-stable-decay schedule (``--schedule wsd``): warmup over ``--warmup-steps``, the peak
rate held, and a linear decay over the last ``--decay-steps`` of ``--steps``. Its trunk runs
with no decay and ``--stop-after-s``, which ends an invocation with a checkpoint and no
model; each sitting ``--resume``s it, and a decay branch (``--resume`` the trunk's
checkpoint with ``--steps`` = its step + N and ``--decay-steps N``) makes a finished model
at any point without ending the trunk. The schedule is counted in steps, so it is the same
on any GPU. A ``--resume`` takes the settings that define its run from the checkpoint
(resume.py), and SIGTERM ends an invocation as ``--stop-after-s`` does, with a checkpoint.

When data workers cannot keep up, the loop reuses recent batches (kept on the device) with a
fresh random augmentation instead of waiting: a constant carrier-phase rotation and, for half
of them, complex conjugation (spectral inversion, as an I/Q swap in a receiver makes). Both
are physical, keep unit power and zero mean, and leave every class and SNR unchanged. No
circular time shift: its wrap point is a discontinuity no receiver ever sees.
"""

from __future__ import annotations

import hashlib
import math
import queue
import shutil
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rfclassify._atomic import failed_write, replacing
from rfclassify._cpus import usable_cpu_count
from rfclassify._exceptions import ConfigError, InputError, InternalError, ModelNotFoundError, first_line
from rfclassify._optional import require
from rfclassify.dsp.windows import BucketPolicy, check_normalization
from rfclassify.engine.select import torch_device
from rfclassify.labels import LABELS, NOISE_LABEL
from rfclassify.model import training_data as td
from rfclassify.model.train_step import make_step, set_lr

if TYPE_CHECKING:
    from rfclassify.model.resume import Checkpoint

CHECKPOINT_FILE = "checkpoint.pt"
LOG_FILE = "train_log.json"
CURVE_FILE = "training_curves.png"
#: learning-rate schedules: warmup + cosine over the progress (lr_at), warmup-stable-decay in steps (lr_for_step)
SCHEDULES = ("cosine", "wsd")
#: --schedule wsd's warmup when --warmup-steps is left out (the cosine schedule warms up over warmup_fraction)
WSD_WARMUP_STEPS = 2000


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run depends on (recorded in train_log.json and model.json)."""

    out_dir: str
    device: str = "auto"
    data: str | None = None           # HDF5 file; None = synthesize on the fly
    time_budget_s: float | None = None
    steps: int | None = None
    batch_size: int = 256
    lr: float = 3e-3
    weight_decay: float = 0.02
    warmup_fraction: float = 0.04
    final_lr_fraction: float = 0.01
    label_smoothing: float = 0.05
    snr_loss_weight: float = 0.1
    workers: int = 2
    seed: int = 0
    buckets_samples: tuple[int, ...] = td.DataRecipe().buckets_samples
    max_uses: int = 4                 # a generated batch trains at most this many times
    replay_batches: int = 64          # recent batches kept on the device for reuse
    val_per_bucket: int = 1024
    log_every: int = 100
    checkpoint_every_s: float = 180.0
    resume: str | None = None
    init_from: str | None = None      # model directory whose weights start the run (new optimizer and schedule)
    channels_last: bool = False       # NHWC activations on CUDA (tensor-core friendly; not measured yet)
    cuda_graphs: bool = False         # replay each bucket's step as a CUDA graph (train_step.GraphedStep)
    target_sps: float | None = None   # symbol-rate normalizer (rfclassify.dsp.rate); None: off
    #: per-burst normalization (rfclassify.dsp.windows.NORMALIZATIONS); None: the parent's with
    #: --init-from, the checkpoint's with --resume, remove_dc otherwise
    normalization: str | None = None
    #: ChannelConfig fields that differ from the full chain for synthesized data ({}: the full chain)
    channel_overrides: dict[str, Any] = field(default_factory=dict)
    #: (lo dB, hi dB, share) of synthesized bursts drawn in that SNR band (DataRecipe.snr_focus); None: uniform
    snr_focus: tuple[float, float, float] | None = None
    arch: dict[str, Any] = field(default_factory=dict)
    #: learning-rate schedule (SCHEDULES): warmup + cosine over the run's progress, or
    #: warmup-stable-decay in steps (lr_for_step)
    schedule: str = "cosine"
    warmup_steps: int = WSD_WARMUP_STEPS  # wsd only: steps of linear warmup
    decay_steps: int = 0              # wsd only: the last steps of --steps, decayed linearly
    #: end this invocation after this many seconds of its own with a checkpoint and no model
    #: (--resume continues it); None: run the schedule to its end
    stop_after_s: float | None = None
    #: keep an exponential moving average of the weights with this half-life in steps, continued
    #: across --resume, and write it as the model (weight_average.py); 0: off
    ema_half_life_steps: int = 0
    command: str = ""

    def _network_arch(self) -> dict[str, Any]:
        """The constructor overrides of the network this run trains: --arch, on the parent's with --init-from.

        An unreadable parent falls back to --arch alone; train() then names the problem."""
        if not self.init_from:
            return dict(self.arch)
        from rfclassify.model.meta import ModelMeta

        try:
            parent = ModelMeta.load(self.init_from).arch or {}
        except ModelNotFoundError:
            parent = {}
        return {**parent, **self.arch}

    def __post_init__(self) -> None:
        if self.steps is None and self.time_budget_s is None:
            raise ConfigError("give --steps or --time-budget-s (or both)")
        if self.steps is not None and self.steps < 1:
            raise ConfigError(f"--steps must be >= 1, got {self.steps}")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise ConfigError(f"--time-budget-s must be > 0, got {self.time_budget_s}")
        if self.batch_size < 2 or self.workers < 0 or self.max_uses < 1:
            raise ConfigError("--batch-size must be >= 2, --workers >= 0")
        if not 0 < self.lr <= 10:  # torch's optimizer raised on a negative one, overflowed on 1e300
            raise ConfigError(f"--lr must be in (0, 10], got {self.lr:g}")
        BucketPolicy(tuple(self.buckets_samples))  # the bucket list's rule (ConfigError), as the CLI's
        if self.val_per_bucket < 1 or self.log_every < 1:  # once an IndexError, a ZeroDivisionError
            raise ConfigError(f"--val-per-bucket and --log-every must be >= 1, got {self.val_per_bucket} "
                              f"and {self.log_every}")
        if self.init_from and self.resume:
            raise ConfigError("give --init-from or --resume, not both: a checkpoint already holds the weights")
        # before any device time is spent: the product only ships networks the DLA can run, at
        # every bucket it trains (with --init-from the network is the parent's, with --arch on top)
        from rfclassify.model.network import DEFAULT_ARCH, arch_problems, dla_arch_problems, io_problems

        unknown = sorted(set(self.arch) - set(DEFAULT_ARCH))
        if unknown:  # a misspelt key was kept "for the record" and the default network trained
            raise ConfigError(f"--arch has no key {', '.join(map(repr, unknown))} (the keys: "
                              f"{', '.join(DEFAULT_ARCH)})")
        arch = self._network_arch()     # with --init-from, read from the parent's model.json
        problems = arch_problems(arch)
        if problems:
            raise ConfigError("this network's arch cannot build a network: " + "; ".join(problems))
        problems = io_problems(arch)    # the run trains every label of LABELS, from I and Q
        if problems:
            where = (f"the network of --resume {self.resume}" if self.resume else
                     f"the network of --init-from {self.init_from}{' with --arch' if self.arch else ''}"
                     if self.init_from else "--arch")
            raise ConfigError(f"{where}: {'; '.join(problems)}")
        problems = dla_arch_problems(arch, tuple(self.buckets_samples))
        if problems:
            raise ConfigError("this network and bucket list would not run on the DLA: " + "; ".join(problems))
        if self.normalization is not None:
            check_normalization(self.normalization)
        if self.channel_overrides and self.data:
            raise ConfigError("--channel-overrides works with synthesized data only, not with --data")
        if self.snr_focus is not None and self.data:
            raise ConfigError("--snr-focus works with synthesized data only, not with --data")
        # checks the overrides and the focus before any device time
        td.DataRecipe(channel_overrides=self.channel_overrides, snr_focus=self.snr_focus)
        if self.target_sps is not None and self.data:
            raise ConfigError("--target-sps works with synthesized data only, not with --data")
        if self.target_sps is not None:
            from rfclassify.dsp.rate import SymbolRateNormalizer

            SymbolRateNormalizer(self.target_sps)  # validates the range
        self._check_schedule()

    def _check_schedule(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"--schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.stop_after_s is not None and self.stop_after_s <= 0:
            raise ConfigError(f"--stop-after-s must be > 0, got {self.stop_after_s}")
        if self.checkpoint_every_s < 0:
            raise ConfigError(f"--checkpoint-every-s must be >= 0 (0: after every step), got {self.checkpoint_every_s}")
        if self.ema_half_life_steps < 0:
            raise ConfigError(f"--ema-half-life-steps must be >= 0 (0: off), got {self.ema_half_life_steps}")
        if self.schedule == "cosine":
            if self.decay_steps:
                raise ConfigError("--decay-steps works with --schedule wsd only")
            if self.warmup_steps != WSD_WARMUP_STEPS:  # was ignored: cosine warms up over its first 4 %
                raise ConfigError("--warmup-steps works with --schedule wsd only (the cosine schedule warms up "
                                  f"over the first {self.warmup_fraction:.0%} of the run)")
            return
        # wsd counts steps, so the same schedule holds on any GPU and across sittings
        if self.steps is None or self.time_budget_s is not None:
            raise ConfigError("--schedule wsd is counted in steps: give --steps and no --time-budget-s")
        if self.warmup_steps < 0 or not 0 <= self.decay_steps <= self.steps:
            raise ConfigError(f"--warmup-steps must be >= 0 and --decay-steps within 0..--steps "
                              f"({self.steps}), got {self.warmup_steps} and {self.decay_steps}")
        # a run from step 0 (a resumed one is past its warmup, or chose where its decay starts):
        # a decay that began inside the warmup never reached --lr, nor decayed to its end
        if not self.resume and self.warmup_steps + self.decay_steps > self.steps:
            raise ConfigError(f"--warmup-steps {self.warmup_steps} and --decay-steps {self.decay_steps} add up to "
                              f"more than --steps {self.steps}: the rate would "
                              f"{'start its decay before the warmup ends' if self.decay_steps else 'never reach --lr'}"
                              "; give fewer warmup steps (--warmup-steps 0 starts at the peak)")

    def finish_reserve_s(self) -> float:
        """Time kept back from the budget for validation, calibration and saving."""
        return 0.0 if self.time_budget_s is None else min(25.0, 0.08 * self.time_budget_s)


def lr_for_step(step: int, cfg: TrainConfig) -> float:
    """Warmup-stable-decay: linear warmup over warmup_steps, cfg.lr held, then a linear decay to
    final_lr_fraction * cfg.lr over the last decay_steps of cfg.steps."""
    if step < cfg.warmup_steps:
        return cfg.lr * max(step / cfg.warmup_steps, 0.01)
    start = cfg.steps - cfg.decay_steps
    if step < start:
        return cfg.lr
    q = min((step - start) / max(cfg.decay_steps, 1), 1.0)
    return cfg.lr * (1.0 - (1.0 - cfg.final_lr_fraction) * q)


def lr_at(progress: float, cfg: TrainConfig) -> float:
    """Linear warmup to cfg.lr, then cosine down to final_lr_fraction * cfg.lr at progress 1."""
    p = min(max(progress, 0.0), 1.0)
    if p < cfg.warmup_fraction:
        return cfg.lr * max(p / cfg.warmup_fraction, 0.01)
    q = (p - cfg.warmup_fraction) / max(1e-9, 1.0 - cfg.warmup_fraction)
    lo = cfg.final_lr_fraction
    return cfg.lr * (lo + (1 - lo) * 0.5 * (1 + math.cos(math.pi * q)))


def augment(x: Any, gen: Any) -> Any:
    """Random carrier-phase rotation and (half the time) conjugation of a (B, 2, 1, L) batch."""
    torch = require("torch")
    b = x.shape[0]
    theta = torch.rand(b, 1, 1, generator=gen, device=x.device) * (2 * math.pi)
    sign = torch.where(torch.rand(b, 1, 1, generator=gen, device=x.device) < 0.5, -1.0, 1.0)
    i, q = x[:, 0], x[:, 1] * sign
    c, s = torch.cos(theta), torch.sin(theta)
    return torch.stack((i * c - q * s, i * s + q * c), dim=1)


def weights_digest(state: dict[str, Any]) -> str:
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        h.update(state[k].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class _Source:
    """Fresh batches from the chosen source, plus device-side reuse when the source lags.

    With worker processes, a thread receives batches (unpickling releases the GIL while it
    waits on the pipe) so the training loop only copies ready arrays to the device.
    `stop_asked` (set on SIGTERM) ends a wait for data: next() returns None."""

    def __init__(self, cfg: TrainConfig, recipe: td.DataRecipe, pin: bool, pool: Any = None,
                 stop_asked: threading.Event | None = None) -> None:
        self.pool: td.SynthPool | None = pool  # anything with get(timeout), qsize(), close()
        self.pin = pin
        self.stop_asked = stop_asked or threading.Event()
        self.iter = None
        self.cfg = cfg
        self.waited = 0.0
        self.error: BaseException | None = None  # before the receiver starts: it may set it at once
        if pool is None and cfg.data:
            self.iter = td.hdf5_batches(cfg.data, recipe, cfg.seed)
        elif pool is None and cfg.workers == 0:
            self.iter = td.inline_batches(recipe, cfg.seed)
        else:
            self.pool = pool or td.SynthPool(recipe, cfg.seed, cfg.workers, cfg.val_per_bucket)
            self.ready: queue.Queue[td.Batch] = queue.Queue(maxsize=8)
            self.stop = threading.Event()
            self.thread = threading.Thread(target=self._receive, name="rfc-batch-receiver", daemon=True)
            self.thread.start()
        self.ring: list[list[Any]] = []  # [batch tensors, uses]

    def _receive(self) -> None:
        try:
            while not self.stop.is_set():
                batch = self.pool.get(timeout=0.5)
                if batch is not None:
                    batch = _as_tensors(batch, self.pin)
                while batch is not None and not self.stop.is_set():
                    try:
                        self.ready.put(batch, timeout=0.5)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:  # a dead worker: report it to the training loop
            self.error = exc

    def _wait(self, timeout_s: float) -> td.Batch | None:
        """The next fresh batch; None once a stop is asked. InternalError (one line, exit 1) for a
        dead worker or none in `timeout_s`: a RuntimeError's traceback before."""
        t0 = time.perf_counter()
        deadline = t0 + timeout_s
        while time.perf_counter() < deadline:
            if self.stop_asked.is_set():   # first: a stop may be why the workers are gone
                return None
            if self.error is not None:
                raise InternalError(f"the data pipeline failed: {first_line(self.error)}")
            try:
                batch = self.ready.get(timeout=0.5)
                self.waited += time.perf_counter() - t0
                return batch
            except queue.Empty:
                continue
        raise InternalError(f"no training batch from the {self.cfg.workers} data worker(s) in {timeout_s:.0f} s "
                            "(a machine too loaded to synthesize? try fewer --workers)")

    @property
    def non_finite(self) -> set[int]:
        """File indices of the --data bursts left out for NaN or infinite samples."""
        return getattr(self.iter, "non_finite", set())

    @property
    def unreadable(self) -> set[int]:
        """File indices of the --data bursts left out because their samples cannot be read."""
        return getattr(self.iter, "unreadable", set())

    def next(self, to_device: Any) -> tuple[Any, bool] | None:
        """(device batch, fresh?) — reuses a recent batch instead of waiting when possible; None
        when a stop was asked while it waited for data."""
        if self.pool is None:
            return to_device(_as_tensors(next(self.iter), False)), True
        try:
            batch = self.ready.get_nowait()
        except queue.Empty:
            spare = [r for r in self.ring if r[1] < self.cfg.max_uses]
            if spare:
                pick = min(spare, key=lambda r: r[1])
                pick[1] += 1
                return pick[0], False
            batch = self._wait(120.0)
            if batch is None:
                return None
        dev = to_device(batch)
        self.ring.append([dev, 1])
        if len(self.ring) > self.cfg.replay_batches:
            self.ring.pop(0)
        return dev, True

    def qsize(self) -> int:
        return self.pool.qsize() + self.ready.qsize() if self.pool else -1

    def close(self) -> None:
        if self.pool:
            self.stop.set()
            self.thread.join(timeout=5.0)
            self.pool.close()


def train(cfg: TrainConfig, checkpoint: Checkpoint | None = None) -> dict[str, Any]:
    """Run one training; writes model.pt, model.json, train_log.json, curves and checkpoints to cfg.out_dir
    (a sitting ended by --stop-after-s or SIGTERM writes the checkpoint, the log and the curves only;
    the result then says "paused", and "terminated" for SIGTERM). `checkpoint`: cfg.resume's, where
    the caller has it (`rfclassify train` reads it once, for the run's settings and here); None:
    cfg.resume is read here."""
    if checkpoint is not None and checkpoint.path != cfg.resume:
        raise ValueError(f"the checkpoint given is {checkpoint.path!r}, cfg.resume {cfg.resume!r}")
    stop_asked = threading.Event()
    restore = _stop_on_sigterm(stop_asked)
    try:
        return _train(cfg, stop_asked, restore, checkpoint)
    finally:
        restore()


def _stop_on_sigterm(stop_asked: threading.Event) -> Any:
    """Make SIGTERM set `stop_asked`, which the loop answers as --stop-after-s does (a checkpoint
    to --resume, the data workers stopped), instead of ending the process where it stands (its
    workers went on synthesizing for good). A second SIGTERM acts as before. Only the main
    thread may set a handler; elsewhere this does nothing. Returns what restores the previous one."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)
    previous = signal.SIG_DFL if previous is None else previous  # None: set outside Python

    def asked(signum: int, frame: Any) -> None:
        stop_asked.set()
        signal.signal(signal.SIGTERM, previous)

    signal.signal(signal.SIGTERM, asked)
    return lambda: signal.signal(signal.SIGTERM, previous)


def _train(cfg: TrainConfig, stop_asked: threading.Event, loop_ended: Any = lambda: None,
           checkpoint: Checkpoint | None = None) -> dict[str, Any]:
    """train(), `loop_ended` called once the training loop is over: SIGTERM ends the process
    again from there (validation and the atomic writes), where the flag went unread and the
    run went on to exit 0."""
    from rfclassify.model import resume  # here: resume.py imports this module's TrainConfig

    t_start = time.perf_counter()
    started_utc = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    torch = require("torch", "training")
    from rfclassify.model.network import build_network, count_parameters

    device = torch_device(cfg.device)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    torch.backends.cudnn.benchmark = True
    if cfg.workers and not cfg.data:
        # the synth workers own the cores; torch's spinning OpenMP threads would fight them
        torch.set_num_threads(max(1, usable_cpu_count() - cfg.workers))
    parent: dict[str, Any] | None = None
    ck: dict[str, Any] | None = None
    if cfg.init_from:
        model, parent = _load_parent(cfg.init_from)
        if cfg.arch:  # a deeper network that starts as the parent (network.grow_network)
            from rfclassify.model.network import grow_network

            try:
                grown = grow_network(model, model.arch, {**model.arch, **cfg.arch})  # --arch overrides the parent's
            except ValueError as exc:
                raise ConfigError(f"--arch with --init-from: {exc}") from None
            parent["grown_from_parameters"] = count_parameters(model)
            model = grown
        if parent["target_sps"] != cfg.target_sps:
            raise ConfigError(f"--target-sps {cfg.target_sps} differs from the parent model's "
                              f"{parent['target_sps']}: its weights learned the other input")
        if parent["seed"] == cfg.seed:
            print(f"warning: --seed {cfg.seed} is the parent model's seed, so this run synthesizes the "
                  "bursts it already trained on; give another seed for new data", file=sys.stderr, flush=True)
    else:
        if cfg.resume:
            ck = (resume.Checkpoint(cfg.resume) if checkpoint is None else checkpoint).contents
            resume.check_continuation(cfg, ck)
        if ck and ck.get("config", {}).get("seed") == cfg.seed:
            print(f"warning: --seed {cfg.seed} is the checkpoint's, so the data starts again from the bursts "
                  "its run began with; give each sitting of a resumed run its own seed", file=sys.stderr,
                  flush=True)
        model = build_network(ck["arch"] if ck and ck.get("arch") else cfg.arch or None)
    if cfg.normalization is None:  # keep what the weights learned on, unless told otherwise
        inherited = parent["normalization"] if parent else resume.recorded(ck, "normalization") if ck else "remove_dc"
        cfg = replace(cfg, normalization=inherited)
    recipe = td.DataRecipe(buckets_samples=tuple(cfg.buckets_samples), batch_size=cfg.batch_size,
                           target_sps=cfg.target_sps, normalization=cfg.normalization,
                           channel_overrides=dict(cfg.channel_overrides), snr_focus=cfg.snr_focus)
    model = model.to(device)
    graphs = cfg.cuda_graphs and device.startswith("cuda")
    layout = torch.channels_last if cfg.channels_last and device.startswith("cuda") else torch.contiguous_format
    model = model.to(memory_format=layout)
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.99),
                            fused=device.startswith("cuda"), capturable=graphs)
    step, prior_s, history = 0, 0.0, []
    examples = {"fresh": 0, "reused": 0}
    earlier: list[str] = []       # the commands of the runs a --resume continues, oldest first
    if cfg.resume:
        try:
            model.load_state_dict(ck["model"])
        except RuntimeError:  # a checkpoint from before the network was recorded in it
            raise ConfigError(f"{cfg.resume} holds another network than this one; give the --arch it was "
                              "trained with") from None
        opt.load_state_dict(_on_device(ck["optimizer"], device))
        for g in opt.param_groups:  # a checkpoint of an eager run can continue with graphs and back
            g["capturable"] = graphs
        step, prior_s, history = ck["step"], ck["elapsed_s"], ck["history"]
        examples = dict(ck.get("examples", examples))
        parent = ck.get("parent")
        # a checkpoint from before the chain was kept names only the run that wrote it
        earlier = list(ck.get("commands") or [ck.get("config", {}).get("command", "")])
    ema = _weight_average(model, cfg, ck if cfg.resume else None, step)
    gen = torch.Generator(device=device)
    gen.manual_seed(cfg.seed + step)
    noise_idx = LABELS.index(NOISE_LABEL)
    use_bf16 = device.startswith("cuda")
    budget = None if cfg.time_budget_s is None else cfg.time_budget_s - cfg.finish_reserve_s()

    def to_device(b: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(t.to(device, non_blocking=True) for t in b)

    def progress(elapsed: float) -> float:
        p = 0.0 if cfg.steps is None else step / cfg.steps
        return max(p, 0.0 if budget is None else elapsed / budget)

    # NOISE has only a nominal SNR and NaN means "no noise added": neither trains the SNR head
    train_step = make_step(model, opt, cuda_graphs=graphs, max_grad_norm=5.0,
                           label_smoothing=cfg.label_smoothing, snr_loss_weight=cfg.snr_loss_weight,
                           noise_idx=noise_idx, bf16=use_bf16)
    src = _Source(cfg, recipe, pin=device.startswith("cuda"), stop_asked=stop_asked)
    # running sums stay on the device (no per-step synchronization): loss, ce, snr_loss, correct
    sums = torch.zeros(4, device=device)
    n_since_log = [0, 0]  # examples, steps
    t_loop = time.perf_counter()
    # a resumed run's counts start at the checkpoint's, so its first rate counts from there too
    last_log_t, last_ck_t = t_loop, t_loop
    last_examples = examples["fresh"] + examples["reused"]
    first_step_s = None
    # wall time per step by bucket: constant when the host (kernel launches) is the bottleneck,
    # proportional to length when the GPU is (the launch queue fills and the host waits)
    step_time: dict[int, list[float]] = {}
    t_prev = None
    paused = False
    try:
        model.train()
        while True:
            elapsed = prior_s + time.perf_counter() - t_start
            if progress(elapsed) >= 1.0:
                break
            if stop_asked.is_set() or (cfg.stop_after_s is not None and elapsed - prior_s >= cfg.stop_after_s):
                paused = True
                break
            set_lr(opt, lr_for_step(step, cfg) if cfg.schedule == "wsd" else lr_at(progress(elapsed), cfg))
            got = src.next(to_device)
            if got is None:  # SIGTERM while waiting for data
                paused = True
                break
            (x, y, s), fresh = got
            examples["fresh" if fresh else "reused"] += int(x.shape[0])
            x = augment(x, gen).contiguous(memory_format=layout)
            sums += train_step(x, y, s)
            step += 1
            if ema is not None:
                ema.update()
            n_since_log[0] += int(x.shape[0])
            n_since_log[1] += 1
            t_now = time.perf_counter()
            if t_prev is not None:
                acc = step_time.setdefault(int(x.shape[-1]), [0, 0.0])
                acc[0] += 1
                acc[1] += t_now - t_prev
            t_prev = t_now
            if first_step_s is None:
                first_step_s = time.perf_counter() - t_start
            now = time.perf_counter()
            if step % cfg.log_every == 0:
                history.append(_log_line(step, prior_s + now - t_start, opt, sums, n_since_log,
                                         examples, last_examples, now - last_log_t, src))
                _check_finite(sums, model, step, cfg, history[-1])
                sums.zero_()
                n_since_log = [0, 0]
                last_log_t, last_examples = now, examples["fresh"] + examples["reused"]
            if now - last_ck_t >= cfg.checkpoint_every_s:
                _check_finite(sums, model, step, cfg)
                _checkpoint(out, model, opt, step, prior_s + now - t_start, history, examples, cfg, parent,
                            earlier, ema)
                last_ck_t = now
        loop_ended()  # from here SIGTERM ends the process, as before
        paused = paused or stop_asked.is_set()  # one that came after the loop's last look
        train_s = prior_s + time.perf_counter() - t_start
        _check_finite(sums, model, step, cfg)  # the steps since the last log
        if step == 0 and not paused:  # random weights are no model; the budget ran out first
            raise ConfigError(f"no training step ran: the --time-budget-s of {cfg.time_budget_s:g} s was "
                              f"spent before the first one ({elapsed - prior_s:.1f} s to start); give more. "
                              "Nothing was written")
        val = src.pool.validation(timeout=120.0) if src.pool and not paused else None
    finally:
        src.close()
    dropped = len(src.non_finite)
    if dropped:
        print(f"warning: left out {dropped} burst(s) of {cfg.data} with NaN or infinite samples (file indices "
              f"{', '.join(map(str, sorted(src.non_finite)[:10]))}{', ...' if dropped > 10 else ''})",
              file=sys.stderr, flush=True)
    _checkpoint(out, model, opt, step, train_s, history, examples, cfg, parent, earlier, ema)
    if paused:
        return _pause(out, step, train_s, history, cfg, earlier, progress(train_s), stop_asked.is_set())
    if ema is not None:  # the model written is the average (validation and temperature included)
        ema.copy_to(model)
    if val is None:
        val = td.validation_set(recipe, cfg.val_per_bucket, td.seed_streams(cfg.seed, 1)[0])
    return _finish(model, cfg, recipe, val, history, {
        "steps": step, "train_s": round(train_s, 1), "first_step_s": round(first_step_s or 0.0, 1),
        "examples_fresh": examples["fresh"], "examples_reused": examples["reused"],
        "data_wait_s": round(src.waited, 1), "device": device,
        "ms_per_step_by_bucket": {str(b): round(1e3 * t / max(n, 1), 2) for b, (n, t) in sorted(step_time.items())},
        "device_name": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
        "parameters": count_parameters(model), "torch": torch.__version__,
        "started_utc": started_utc, **_lineage(parent, step, train_s, examples),
        **({"commands": [*earlier, cfg.command]} if earlier else {}),
        **({"weight_average": ema.record()} if ema is not None else {}),
        **({"non_finite_bursts_left_out": dropped} if dropped else {}),
        # warned of as they were found (training_data.HDF5Batches), before the first step for a compressed file
        **({"unreadable_bursts_left_out": len(src.unreadable)} if src.unreadable else {}),
    }, t_start)


def _check_finite(sums: Any, model: Any, step: int, cfg: TrainConfig, row: dict[str, float] | None = None) -> None:
    """InputError (exit 2) once the loss summed since the last log, or a weight, is NaN or infinite:
    the network is lost from there on, and the run went on to write it as model.pt, exit 0. Called
    before anything is written, so the files of the run before stay as they were.

    Bursts reach the network at unit power and --data bursts with NaN or infinite samples are
    left out, so this is the run diverging, nearly always at too high a --lr: a setting the user
    gives and can change, hence a user error (exit 2; exit 1 would print "internal error"). A
    resumed run keeps its --lr (resume.RUN_SETTINGS): its way on is another --seed."""
    torch = require("torch")
    if row is not None:  # at a log line: its loss is read already
        finite = math.isfinite(row["loss"])
    else:  # before a write: one synchronization for the sums and every weight
        finite = bool(torch.stack([torch.isfinite(sums).all(),
                                   *(torch.isfinite(p).all() for p in model.parameters())]).all())
    if not finite:
        again = ("a resumed run keeps its --lr: --resume the checkpoint again with another --seed, or start "
                 "anew with a lower --lr" if cfg.resume else "give a lower --lr")
        raise InputError(f"the training loss is not finite (NaN or infinite) at step {step}: the run diverged, "
                         f"most likely at too high a learning rate (--lr {cfg.lr:g}); stopped without writing the "
                         f"network (checkpoint.pt and model.pt, where there are, are from before); {again}")


def _write_log(out: Path, doc: dict[str, Any], history: list[dict[str, float]]) -> None:
    """train_log.json (doc, then the history) and, once there is a history, the curves PNG: what a
    pause and a finished run both leave."""
    from rfclassify.model.evaluate import write_json

    write_json(out / LOG_FILE, {**doc, "history": history})
    if history:
        from rfclassify.model.plots import training_curves

        # a handle: savefig takes the format from a path's suffix, and the temporary one's is .tmp
        with replacing(out / CURVE_FILE) as tmp, open(tmp, "wb") as fh:
            training_curves(history, fh)


def _pause(out: Path, step: int, train_s: float, history: list[dict[str, float]], cfg: TrainConfig,
           earlier: list[str], done: float, terminated: bool = False) -> dict[str, Any]:
    """End an invocation at --stop-after-s or on SIGTERM (`terminated`; its checkpoint written):
    the log so far, no validation, no model."""
    _write_log(out, {"paused_at_step": step, "progress": round(done, 6), "commands": [*earlier, cfg.command]},
               history)
    print(f"{'stopped by SIGTERM' if terminated else 'paused'}: step {step}, {done:.1%} of the schedule, "
          f"{train_s:.0f}s trained in all; continue with --resume {out / CHECKPOINT_FILE}", flush=True)
    return {"paused": True, "terminated": terminated, "steps": step, "progress": done, "out_dir": str(out)}


def _predict(model: Any, x: np.ndarray, batch: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """fp32 (logits, snr_db) of model on numpy input, in batches on the model's device."""
    torch = require("torch")
    dev = next(model.parameters()).device
    outs = []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            lg, sn = model(torch.from_numpy(x[i:i + batch]).to(dev))
            outs.append((lg.float().cpu().numpy(), sn.float().cpu().numpy()))
    return np.concatenate([o[0] for o in outs]), np.concatenate([o[1] for o in outs])


def _finish(model: Any, cfg: TrainConfig, recipe: td.DataRecipe, val: dict[int, td.Batch],
            history: list[dict[str, float]], run: dict[str, Any], t_start: float) -> dict[str, Any]:
    """Validate per bucket, fit the temperature, write model.pt, model.json, the log and the curves."""
    from rfclassify.model.calibration import calibrate
    from rfclassify.model.evaluate import accuracy_summary
    from rfclassify.model.flops import flops_per_bucket
    from rfclassify.model.meta import ModelMeta

    out = Path(cfg.out_dir)
    model.eval()
    per_bucket, all_logits, all_labels = {}, [], []
    for b, batch in sorted(val.items()):
        logits, snr = _predict(model, batch["x"])
        per_bucket[str(b)] = accuracy_summary(batch["label"], logits.argmax(1), batch["snr_db"], snr)
        all_logits.append(logits)
        all_labels.append(batch["label"])
    cal = calibrate(np.concatenate(all_logits), np.concatenate(all_labels))
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    model_id = f"rfc-resnet-{datetime.now(timezone.utc):%Y%m%d}-{weights_digest(state)[:8]}"
    _remove_stale_products(out)
    _save_torch(state, out / "model.pt")   # a failed write (a full disk) leaves the old model whole
    model_cpu = model.to("cpu")
    flops = flops_per_bucket(model_cpu, recipe.buckets_samples)
    training = {
        **run, "command": cfg.command, "seed": cfg.seed, "config": asdict(cfg),
        "recipe": recipe.to_dict(), "validation": {"per_bucket": per_bucket,
                                                     "per_bucket_examples": cfg.val_per_bucket},
        "flops_per_bucket": {str(k): v for k, v in flops.items()},
        "calibration": cal,
        # this invocation (a resumed run's train_s also counts the earlier ones)
        "total_s": round(time.perf_counter() - t_start, 1),
    }
    meta = ModelMeta(model_id=model_id, buckets_samples=recipe.buckets_samples,
                     min_samples=recipe.min_samples, temperature=round(cal["temperature"], 5),
                     unknown_threshold=cal["unknown_threshold"], arch=model_cpu.arch,
                     symbol_rate=recipe.rate.to_dict() if recipe.rate else {},
                     normalization=recipe.normalization,
                     extra={"training": {k: v for k, v in training.items() if k != "config"},
                            "validation_accuracy": {b: v["accuracy"] for b, v in per_bucket.items()}})
    meta.save(out)
    _write_log(out, {"model_id": model_id, "training": training}, history)
    accs = " ".join(f"{b}:{v['accuracy']:.3f}" for b, v in per_bucket.items())
    print(f"done: {model_id} steps {run['steps']} in {run['train_s']}s; validation accuracy {accs}; "
          f"T={cal['temperature']:.3f} unknown<{cal['unknown_threshold']}; "
          f"total {training['total_s']}s", flush=True)
    return {"model_id": model_id, "out_dir": str(out), **training}


def _as_tensors(b: td.Batch, pin: bool) -> tuple[Any, ...]:
    """numpy batch -> CPU tensors (x, label, snr_db), page-locked for asynchronous copies to CUDA."""
    torch = require("torch")
    out = tuple(torch.from_numpy(b[k]) for k in ("x", "label", "snr_db"))
    return tuple(t.pin_memory() for t in out) if pin else out


def _log_line(step: int, elapsed: float, opt: Any, sums: Any, counts: list[int], examples: dict[str, int],
              last_examples: int, dt: float, src: _Source) -> dict[str, float]:
    loss, ce, snr_loss, correct = (float(v) for v in sums.cpu())
    n, k = float(counts[0]), float(max(counts[1], 1))
    seen = examples["fresh"] + examples["reused"]
    row = {
        "step": step, "elapsed_s": round(elapsed, 2), "lr": float(opt.param_groups[0]["lr"]),
        "loss": loss / k, "ce": ce / k, "snr_loss": snr_loss / k, "train_acc": correct / max(n, 1.0),
        "examples_per_s": (seen - last_examples) / max(dt, 1e-9),
        "fresh_fraction": examples["fresh"] / max(seen, 1),
        "queue": src.qsize(), "data_wait_s": src.waited,
    }
    print(f"step {step:6d} {elapsed:7.1f}s lr {row['lr']:.2e} loss {row['loss']:.3f} "
          f"acc {row['train_acc']:.3f} {row['examples_per_s']:8.0f} ex/s fresh {row['fresh_fraction']:.0%} "
          f"queue {row['queue']} data-wait {row['data_wait_s']:.1f}s", file=sys.stdout, flush=True)
    return row


def _load_parent(model_dir: str) -> tuple[Any, dict[str, Any]]:
    """(CPU model in train mode, lineage record) of the trained model that starts a warm-started run."""
    from rfclassify.model.network import load_trained

    model, meta = load_trained(model_dir)
    t = meta.extra.get("training", {})
    own = {"steps": t.get("steps", 0), "train_s": t.get("train_s", 0.0),
           "examples": t.get("examples_fresh", 0) + t.get("examples_reused", 0)}
    lineage = t.get("lineage", own)  # the parent's totals already count its own ancestors
    return model.train(), {"model_id": meta.model_id, "seed": t.get("seed"), "steps": lineage["steps"],
                           "train_s": lineage["train_s"], "examples": lineage["examples"],
                           "target_sps": meta.symbol_rate.get("target_sps"), "normalization": meta.normalization}


def _lineage(parent: dict[str, Any] | None, step: int, train_s: float, examples: dict[str, int]) -> dict[str, Any]:
    """Run-record fields for a warm-started run: its parent and the totals over all the runs behind it."""
    if parent is None:
        return {}
    grown = {"grown_from_parameters": parent["grown_from_parameters"]} if "grown_from_parameters" in parent else {}
    return {"init_from": parent["model_id"], **grown, "lineage": {
        "steps": parent["steps"] + step, "train_s": round(parent["train_s"] + train_s, 1),
        "examples": parent["examples"] + examples["fresh"] + examples["reused"]}}


def _on_device(state: Any, device: str) -> Any:
    """An optimizer's state dict with its tensors on `device`, as they were when train() read the
    checkpoint there itself (it is read once, on the CPU): torch's load_state_dict leaves each
    parameter's step count where it finds it unless the saved group was fused or capturable, and
    --cuda-graphs (capturable) needs it on the GPU."""
    torch = require("torch")
    if isinstance(state, torch.Tensor):
        return state.to(device)
    if isinstance(state, dict):
        return {k: _on_device(v, device) for k, v in state.items()}
    if isinstance(state, list):
        return [_on_device(v, device) for v in state]
    return state


def _weight_average(model: Any, cfg: TrainConfig, ck: dict[str, Any] | None, step: int) -> Any:
    """The run's weight average (None when --ema-half-life-steps is 0): the checkpoint's
    continued, or a new one from the live weights at `step` (said, with the step)."""
    if not cfg.ema_half_life_steps:
        return None
    from rfclassify.model.weight_average import WeightAverage

    kept = (ck or {}).get("ema")
    if kept and kept["half_life_steps"] != cfg.ema_half_life_steps:
        print(f"the weight average kept since step {kept['since_step']} goes on with a half-life of "
              f"{cfg.ema_half_life_steps} steps instead of {kept['half_life_steps']}", flush=True)
    if not kept:
        print(f"the weight average starts at step {step} (half-life {cfg.ema_half_life_steps} steps)", flush=True)
    return WeightAverage(model, cfg.ema_half_life_steps, kept["weights"] if kept else None,
                         since_step=kept["since_step"] if kept else step)


def _remove_stale_products(out: Path) -> None:
    """Remove from `out` what export, calibrate and fit-refiner made of the network trained there
    before: the new model.json names model.onnx as every model does, and the old graph would have
    served under the new id (and been calibrated, evaluated, put on its card) before the
    sixty-sixth session."""
    from rfclassify.engine.refiner import LIGHT_REFINER_FILE, LOW_ORDER_REFINER_FILE, REFINER_FILE
    from rfclassify.quant.cpu_int8 import INT8_ONNX_FILE
    from rfclassify.quant.tensorrt_int8 import CALIBRATION_CACHE_FILE, TRT_QDQ_FILE

    names = ("model.onnx", "export_report.json", INT8_ONNX_FILE, TRT_QDQ_FILE, CALIBRATION_CACHE_FILE,
             REFINER_FILE, LIGHT_REFINER_FILE, LOW_ORDER_REFINER_FILE)
    gone = [n for n in names if (out / n).is_file()]
    for name in gone:
        (out / name).unlink()
    if (out / "static").is_dir():
        shutil.rmtree(out / "static")
        gone.append("static/")
    if gone:
        print(f"removed the earlier network's {', '.join(gone)} from {out}: they are not this network's "
              "(run export again)", flush=True)


def _checkpoint(out: Path, model: Any, opt: Any, step: int, elapsed_s: float, history: list[dict[str, float]],
                examples: dict[str, int], cfg: TrainConfig, parent: dict[str, Any] | None = None,
                earlier: list[str] | None = None, ema: Any = None) -> None:
    """Write the checkpoint a --resume continues; `earlier`: the commands of the runs this one
    continues, kept with its own so the finished model records the whole chain; `ema`: the
    weight average to continue (absent when the run keeps none)."""
    kept = None if ema is None else {"weights": ema.state_dict(), **ema.record()}
    _save_torch({"model": model.state_dict(), "arch": model.arch, "optimizer": opt.state_dict(), "step": step,
                 "elapsed_s": elapsed_s, "history": history, "examples": examples,
                 "config": asdict(cfg), "parent": parent, "commands": [*(earlier or []), cfg.command],
                 "ema": kept}, out / CHECKPOINT_FILE)


def _save_torch(obj: Any, path: Path) -> None:
    """torch.save `obj` as `path`, replaced whole (`replacing`). Through a handle of this
    process's: given a path, torch's own writer takes a write that fails (a full disk) for a
    RuntimeError "unexpected pos" that names no errno and no file (a traceback, exit 1); through
    a handle the OSError is there to find, and is raised naming `path` (`failed_write`: exit 1)."""
    torch = require("torch")
    with replacing(path) as tmp:
        handle = open(tmp, "wb")   # a folder that takes no file: the OSError names it (exit 2)
        try:
            with handle:
                torch.save(obj, handle)
        except (OSError, RuntimeError) as exc:
            failure = failed_write(path, exc)
            if failure is None:
                raise
            raise failure from exc
