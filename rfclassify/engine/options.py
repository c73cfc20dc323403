"""The model/backend command-line options shared by `classify`, `bench` and the daemon (one group)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rfclassify._argtypes import MAX_WIDTH, thread_count
from rfclassify.engine.select import BACKEND_CHOICES, PRECISION_CHOICES


def add_model_arguments(parser: argparse.ArgumentParser, *, backend: bool = True,
                        suppress_default: bool = False, fill_defaults: bool = True) -> None:
    """--model-dir, and (unless backend=False) --backend, --precision, --device, --threads.

    suppress_default: leave --model-dir out of the namespace unless given (for a subparser
    that repeats its parent's options).
    fill_defaults=False: --backend and --precision are None unless given, so that a value
    from elsewhere (the daemon's config file) is not overridden by "auto"."""
    g = parser.add_argument_group("model and backend")
    g.add_argument("--model-dir", type=model_dir_path, default=argparse.SUPPRESS if suppress_default else None,
                   help="model directory (default: $RFCLASSIFY_MODEL_DIR or the shipped models/)")
    if not backend:
        return
    auto = "auto" if fill_defaults else None
    g.add_argument("--backend", choices=BACKEND_CHOICES, default=auto,
                   help="inference backend (default: auto = tensorrt, torch on CUDA, else onnxruntime)")
    g.add_argument("--precision", choices=PRECISION_CHOICES, default=auto,
                   help="numeric precision (default: auto = the best the backend has artifacts for)")
    g.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: chosen with the backend)")
    g.add_argument("--threads", type=thread_count, default=None,
                   help="CPU threads (default: all this process may use)")


def model_dir_path(text: str) -> Path:
    """argparse type for --model-dir: a path, but not an empty one (Path("") would mean ".")."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty (leave the option out for the default model)")
    return Path(text)


def positive_ints(text: str) -> tuple[int, ...]:
    """argparse type: '1,64,1024' -> (1, 64, 1024)."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def batch_sizes(text: str) -> tuple[int, ...]:
    """argparse type: positive_ints, each at most _argtypes.MAX_WIDTH as the CLI's other batch
    sizes (10**30 reached numpy's 'maximum allowed dimension' as a traceback)."""
    values = positive_ints(text)
    if max(values) > MAX_WIDTH:
        raise argparse.ArgumentTypeError(f"batch sizes must be in 1..{MAX_WIDTH}, got {text[:40]!r}")
    return values


def names(text: str) -> tuple[str, ...]:
    """argparse type: 'onnxruntime,torch' -> ('onnxruntime', 'torch')."""
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    if not values:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return values
