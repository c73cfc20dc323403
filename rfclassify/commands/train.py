"""`rfclassify train`: train the classifier on synthesized (or HDF5) data; see docs/model.md."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from rfclassify.dsp.windows import DEFAULT_BUCKETS_SAMPLES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output directory (model.pt, model.json, logs, curves)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    parser.add_argument("--data", default=None, metavar="FILE.h5",
                        help="train from an HDF5 dataset instead of synthesizing on the fly")
    parser.add_argument("--time-budget-s", type=float, default=None,
                        help="wall time of the whole run; the LR schedule anneals over it")
    parser.add_argument("--steps", type=int, default=None, help="number of optimizer steps")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (AdamW)")
    parser.add_argument("--workers", type=int, default=2,
                        help="data-synthesis processes (0: make batches in this process, reproducible)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--buckets", type=int, nargs="+", default=list(DEFAULT_BUCKETS_SAMPLES),
                        metavar="N", help="length buckets to train (samples)")
    parser.add_argument("--val-per-bucket", type=int, default=1024,
                        help="held-out synthesized bursts per bucket for validation and temperature")
    parser.add_argument("--log-every", type=int, default=100, help="steps between progress lines")
    parser.add_argument("--checkpoint-every-s", type=float, default=180.0)
    parser.add_argument("--arch", default=None, metavar="JSON",
                        help="network constructor overrides as JSON (default: network.DEFAULT_ARCH)")
    parser.add_argument("--channels-last", action="store_true",
                        help="CUDA only: NHWC activations for the convolutions (try if the GPU is the bottleneck)")
    parser.add_argument("--resume", default=None, metavar="CKPT", help="continue from a checkpoint.pt")


def run(args: argparse.Namespace) -> int:
    from rfclassify._exceptions import ConfigError
    from rfclassify.dsp.windows import BucketPolicy
    from rfclassify.model.train import TrainConfig, train

    policy = BucketPolicy(tuple(args.buckets))  # validates the list (ConfigError -> exit 2)
    try:
        arch = json.loads(args.arch) if args.arch else {}
    except ValueError as exc:
        raise ConfigError(f"--arch is not valid JSON: {exc}") from None
    if not isinstance(arch, dict):
        raise ConfigError("--arch must be a JSON object")
    cfg = TrainConfig(
        out_dir=args.out, device=args.device, data=args.data, time_budget_s=args.time_budget_s,
        steps=args.steps, batch_size=args.batch_size, lr=args.lr, workers=args.workers,
        seed=args.seed, buckets_samples=policy.buckets_samples, val_per_bucket=args.val_per_bucket,
        log_every=args.log_every, arch=arch, channels_last=args.channels_last, checkpoint_every_s=args.checkpoint_every_s, resume=args.resume,
        command="rfclassify " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["train"] else "",
    )
    train(cfg)
    return 0
