"""A small FLOP counter for the classifier: multiply-adds of convolutions, counted by forward hooks.

FLOPs are reported as 2 x multiply-accumulates of Conv2d layers (BatchNorm, ReLU, pooling
and the residual adds are a few percent and fold or fuse on every backend we target), for
one example at a given input length.
"""

from __future__ import annotations

from typing import Any

from rfclassify._optional import require


def conv_macs(model: Any, length: int, in_channels: int = 2) -> int:
    """Multiply-accumulates of every Conv2d for one (1, in_channels, 1, length) input."""
    torch = require("torch", "counting FLOPs")
    total = [0]

    def hook(mod, _inputs, output):
        k = mod.kernel_size[0] * mod.kernel_size[1]
        total[0] += int(output.numel()) * (mod.in_channels // mod.groups) * k

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, torch.nn.Conv2d)]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(torch.zeros(1, in_channels, 1, length))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return total[0]


def flops_per_bucket(model: Any, buckets_samples: tuple[int, ...] | list[int]) -> dict[int, int]:
    """{bucket length: FLOPs (2 x MACs) for one window of that length}."""
    return {int(b): 2 * conv_macs(model, int(b)) for b in buckets_samples}
