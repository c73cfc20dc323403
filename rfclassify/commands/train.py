"""`rfclassify train`: train the classifier on synthesized (or HDF5) data; see docs/model.md."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
from typing import TYPE_CHECKING, Any

from rfclassify._argtypes import MAX_WIDTH, count, finite_float, int_range, learning_rate, path_text, seed, worker_count

if TYPE_CHECKING:
    from rfclassify.model.resume import Checkpoint
    from rfclassify.model.train import TrainConfig

# argparse dest -> TrainConfig field, where the two names differ
FIELD_OF_OPTION: dict[str, str] = {"out": "out_dir", "buckets": "buckets_samples"}
# options whose default is None, TrainConfig's applied in config_from_args: left out of a
# --resume, they are the checkpoint's (resume.RUN_SETTINGS, resume.RESUME_MAY_CHANGE)
LEFT_OUT_IS_NONE = ("data", "time_budget_s", "steps", "batch_size", "lr", "buckets", "target_sps", "normalization",
                    "channel_overrides", "snr_focus", "schedule", "warmup_steps", "decay_steps",
                    "ema_half_life_steps", "arch")


def train_defaults() -> dict[str, Any]:
    """TrainConfig's plain field defaults by field name: the one place they are written."""
    from rfclassify.model.train import TrainConfig  # numpy; only when `train` is the command

    return {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rfclassify.dsp.windows import NORMALIZATIONS  # numpy, like train_defaults
    from rfclassify.model.train import SCHEDULES

    d = train_defaults()
    parser.add_argument("--out", type=path_text, required=True,
                        help="output directory (model.pt, model.json, logs, curves)")
    parser.add_argument("--device", default=d["device"], help=f"auto | cpu | cuda | cuda:N (default {d['device']})")
    # the options that define a run default to None (see LEFT_OUT_IS_NONE): TrainConfig's default
    # for a new run, the checkpoint's for a --resume
    parser.add_argument("--data", type=path_text, default=None, metavar="FILE.h5",
                        help="train from an HDF5 dataset instead of synthesizing on the fly")
    parser.add_argument("--time-budget-s", type=finite_float, default=None,
                        help="wall time of the whole run; the LR schedule anneals over it")
    parser.add_argument("--steps", type=count(), default=None, help="number of optimizer steps")
    parser.add_argument("--batch-size", type=int_range(2, MAX_WIDTH), default=None,
                        help=f"bursts per training batch (default {d['batch_size']})")
    parser.add_argument("--lr", type=learning_rate, default=None,
                        help=f"peak learning rate (AdamW; default {d['lr']:g})")
    parser.add_argument("--workers", type=worker_count, default=d["workers"],
                        help="data-synthesis processes (0: make batches in this process, reproducible)")
    parser.add_argument("--seed", type=seed, default=d["seed"])
    parser.add_argument("--buckets", type=int, nargs="+", default=None, metavar="N",
                        help=f"length buckets to train (samples; default {' '.join(map(str, d['buckets_samples']))})")
    parser.add_argument("--val-per-bucket", type=int_range(1, 1_000_000), default=d["val_per_bucket"],
                        help="held-out synthesized bursts per bucket for validation and temperature")
    parser.add_argument("--log-every", type=count(), default=d["log_every"], help="steps between progress lines")
    parser.add_argument("--checkpoint-every-s", type=finite_float, default=d["checkpoint_every_s"], metavar="S",
                        help="write checkpoint.pt every S seconds of training (0: after every step; "
                             f"default {d['checkpoint_every_s']:g}) and at the end")
    # JSON text, not the dict: None stands for TrainConfig's default (no overrides)
    parser.add_argument("--arch", default=None, metavar="JSON",
                        help="network constructor overrides as JSON (default: network.DEFAULT_ARCH); with "
                             "--init-from, the parent's network with residual units appended to its stages")
    parser.add_argument("--channels-last", action="store_true", default=d["channels_last"],
                        help="CUDA only: NHWC activations for the convolutions (try if the GPU is the bottleneck)")
    parser.add_argument("--cuda-graphs", action="store_true", default=d["cuda_graphs"],
                        help="CUDA only: capture each bucket's training step as a CUDA graph and replay it "
                             "(removes the per-kernel launch cost that bounds the eager loop)")
    parser.add_argument("--target-sps", type=finite_float, default=None, metavar="SPS",
                        help="resample every burst to about SPS samples/symbol before bucketing "
                             "(blind symbol-rate estimate; recorded in model.json so serving does the same)")
    parser.add_argument("--normalization", choices=NORMALIZATIONS, default=None,
                        help="per-burst normalization: remove_dc subtracts the mean; keep_dc keeps it relative "
                             "to the rest (a centred carrier stays visible); recorded in model.json so serving "
                             "does the same (default: the parent's with --init-from, the checkpoint's with "
                             "--resume, else remove_dc)")
    parser.add_argument("--channel-overrides", default=None, metavar="JSON",
                        help="impairment-chain settings that differ from the full chain, as JSON of "
                             "rfclassify.dsp.channel.ChannelConfig fields, e.g. '{\"dc_offset_db_range\": [-40, 6]}' "
                             "(synthesized data only; recorded in the recipe)")
    parser.add_argument("--snr-focus", type=finite_float, nargs=3, default=None, metavar=("LO", "HI", "SHARE"),
                        help="draw SHARE of the synthesized bursts' SNRs from LO..HI dB instead of the whole "
                             "-20..30 dB range, which the rest keeps (validation stays uniform; recorded in "
                             "the recipe)")
    parser.add_argument("--schedule", choices=SCHEDULES, default=None,
                        help="learning-rate schedule: cosine (warmup, then cosine over --steps or "
                             "--time-budget-s) or wsd (warmup-stable-decay, in steps: warmup over "
                             "--warmup-steps, the peak held, a linear decay over the last --decay-steps "
                             f"of --steps; for runs over several sittings) (default {d['schedule']})")
    parser.add_argument("--warmup-steps", type=count(0), default=None,
                        help=f"--schedule wsd: steps of linear warmup (default {d['warmup_steps']}; with "
                             "--decay-steps at most --steps)")
    parser.add_argument("--decay-steps", type=count(0), default=None,
                        help="--schedule wsd: decay the rate linearly over the last N steps of --steps "
                             f"(default {d['decay_steps']}: no decay, a trunk to resume)")
    parser.add_argument("--stop-after-s", type=finite_float, default=d["stop_after_s"], metavar="S",
                        help="end this invocation after S seconds with checkpoint.pt and no model "
                             "(--resume continues it, schedule included; SIGTERM ends it the same way)")
    parser.add_argument("--ema-half-life-steps", type=count(0), default=None, metavar="N",
                        help="keep a moving average of the weights with a half-life of N steps (kept in "
                             "checkpoints, continued by --resume) and write it as the model "
                             f"(default {d['ema_half_life_steps']}: off)")
    parser.add_argument("--resume", type=path_text, default=d["resume"], metavar="CKPT",
                        help="continue from a checkpoint.pt, with its run's settings: --data, --batch-size, "
                             "--lr, --buckets, --target-sps, --normalization, --channel-overrides, --snr-focus, "
                             "--schedule, --warmup-steps and --arch left out are the checkpoint's, and given "
                             "otherwise are refused; --steps/--time-budget-s (together), --decay-steps and "
                             "--ema-half-life-steps left out are the checkpoint's and may be changed; the rest "
                             "(--seed, --workers, --device, --out, --stop-after-s, ...) are this invocation's")
    parser.add_argument("--init-from", type=path_text, default=d["init_from"], metavar="MODEL_DIR",
                        help="start from a trained model's weights (and network) with a new optimizer and "
                             "schedule; give a seed other than the parent's for new data")


def _json_object(text: str | None, option: str) -> dict[str, Any]:
    """The JSON object an option's text holds ({} when not given); ConfigError otherwise."""
    from rfclassify._exceptions import ConfigError

    try:
        value = json.loads(text) if text else {}
    except ValueError as exc:
        raise ConfigError(f"{option} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{option} must be a JSON object")
    return value


def config_from_args(args: argparse.Namespace, checkpoint: Checkpoint | None = None) -> TrainConfig:
    """The TrainConfig the parsed options describe: TrainConfig's defaults for what was left out,
    or with --resume the checkpoint's (resume.resume_settings), read from `checkpoint` (the
    caller's, to hand on to train(): the file is read once) or, None, from args.resume here.
    ConfigError for a bad --arch, overrides or bucket list, and for a --resume given a setting
    of its run otherwise."""
    from rfclassify._exceptions import ConfigError
    from rfclassify.dsp.windows import BucketPolicy
    from rfclassify.model.resume import Checkpoint, resume_settings
    from rfclassify.model.train import TrainConfig

    # validates the list (ConfigError -> exit 2)
    buckets = BucketPolicy(tuple(args.buckets)).buckets_samples if args.buckets is not None else None
    run = {
        "data": args.data, "time_budget_s": args.time_budget_s, "steps": args.steps, "batch_size": args.batch_size,
        "lr": args.lr, "buckets_samples": buckets, "target_sps": args.target_sps, "normalization": args.normalization,
        "channel_overrides": (None if args.channel_overrides is None
                              else _json_object(args.channel_overrides, "--channel-overrides")),
        "snr_focus": tuple(args.snr_focus) if args.snr_focus else None, "schedule": args.schedule,
        "warmup_steps": args.warmup_steps, "decay_steps": args.decay_steps,
        "ema_half_life_steps": args.ema_half_life_steps,
        "arch": None if args.arch is None else _json_object(args.arch, "--arch"),
    }
    if args.resume and not args.init_from:  # (both: TrainConfig says "not both")
        checkpoint = Checkpoint(args.resume) if checkpoint is None else checkpoint
        run = resume_settings(run, checkpoint.contents, checkpoint.path)
    if args.warmup_steps is not None and (run["schedule"] or train_defaults()["schedule"]) != "wsd":
        # the cosine schedule warms up over a fraction of the run; the option was ignored
        raise ConfigError("--warmup-steps works with --schedule wsd only (the cosine schedule warms up over the "
                          f"first {train_defaults()['warmup_fraction']:.0%} of the run)")
    return TrainConfig(
        out_dir=args.out, device=args.device, workers=args.workers, seed=args.seed,
        val_per_bucket=args.val_per_bucket, log_every=args.log_every, channels_last=args.channels_last,
        cuda_graphs=args.cuda_graphs, checkpoint_every_s=args.checkpoint_every_s, resume=args.resume,
        init_from=args.init_from, stop_after_s=args.stop_after_s,
        **{name: value for name, value in run.items() if value is not None},  # None: TrainConfig's default
        # as given (`rfclassify -v train ...` recorded nothing before the sixty-sixth session)
        command="rfclassify " + shlex.join(args._argv) if getattr(args, "_argv", None) else "",
    )


def run(args: argparse.Namespace) -> int:
    import signal

    from rfclassify.model.resume import Checkpoint
    from rfclassify.model.train import train

    # read on first use (after the options' own checks), once: for the run's settings and by train()
    checkpoint = Checkpoint(args.resume) if args.resume else None
    result = train(config_from_args(args, checkpoint), checkpoint)
    # a run stopped by SIGTERM (its checkpoint written) ends as a process SIGTERM ends
    return 128 + int(signal.SIGTERM) if result.get("terminated") else 0
