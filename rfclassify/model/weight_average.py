"""An exponential moving average of a network's weights, kept beside its training.

A trunk trained at a held peak rate wobbles from snapshot to snapshot (about a point at
>= 10 dB between nearby steps, fiftieth session); the mean of two snapshots 8,000 steps apart
read 1.5 points over SNR above the later one. The average kept here is that mean made
continuous: every step pulls it towards the live weights by 1 - 0.5 ** (1 / half_life_steps),
batch-norm statistics included, so it can be read off a paused trunk without a decay branch.
"""

from __future__ import annotations

from typing import Any

from rfclassify._optional import require


class WeightAverage:
    """The running average of `model`'s floating-point weights and buffers (integer buffers,
    such as batch norm's step counter, are the live model's). `state`: an average to continue
    (a checkpoint's), else it starts at the live weights; `since_step`: the training step it
    started at. Build it once the model's tensors are final (device, memory format, loaded
    weights): it reads them by reference."""

    def __init__(self, model: Any, half_life_steps: int, state: dict[str, Any] | None = None,
                 since_step: int = 0) -> None:
        if half_life_steps < 1:
            raise ValueError(f"half_life_steps must be >= 1, got {half_life_steps}")
        self.half_life_steps = half_life_steps
        self.since_step = since_step
        self.weight = 1.0 - 0.5 ** (1.0 / half_life_steps)
        live = model.state_dict()  # detached tensors that share the parameters' storage
        self._names = [k for k, v in live.items() if v.is_floating_point()]
        self._live = [live[k] for k in self._names]
        source = live if state is None else state
        missing = [k for k in self._names if k not in source]
        if missing:
            raise ValueError(f"the average to continue lacks {', '.join(missing[:3])}: another network")
        self._avg = [source[k].detach().to(device=v.device, dtype=v.dtype).clone()
                     for k, v in zip(self._names, self._live)]

    def update(self) -> None:
        """Pull the average one step towards the live weights."""
        torch = require("torch")
        with torch.no_grad():
            torch._foreach_lerp_(self._avg, self._live, self.weight)

    def record(self) -> dict[str, int]:
        """Its settings, as the run's record and the checkpoint keep them."""
        return {"half_life_steps": self.half_life_steps, "since_step": self.since_step}

    def state_dict(self) -> dict[str, Any]:
        """The averaged tensors by name (a checkpoint keeps them to continue the average)."""
        return dict(zip(self._names, self._avg))

    def copy_to(self, model: Any) -> None:
        """Put the average into `model` (the one it was built on), in place."""
        model.load_state_dict({**model.state_dict(), **self.state_dict()})
