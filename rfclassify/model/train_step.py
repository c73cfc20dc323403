"""One optimization step of the classifier: the loss, run eagerly or replayed as a CUDA graph.

The loss is cross-entropy (label smoothing) plus a weighted smooth-L1 of the SNR estimate in
dB, masked for NOISE (its SNR is nominal) and for bursts without noise (NaN SNR). A step is
zero-grad, forward, loss, backward, gradient-norm clip, optimizer step; it returns a (4,)
device tensor [loss, cross-entropy, SNR loss, correct predictions] without synchronizing.

Why graphs: one eager step of this network is about 4,300 small kernels, so on an H200 the
loop is bound by the host launching them (32 ms per step at batch 1024 whatever the window
length, measured). `GraphedStep` captures the whole step once per input shape (one shape
per length bucket) and then replays it with one launch. Capture needs an optimizer built
with ``capturable=True`` and tensor learning rates (`set_lr` updates them in place), a few
eager warm-up steps per shape on a side stream first (cuDNN autotuning, lazy state), and
autocast without its weight-cast cache. Each graph gets its own memory pool and its own
gradient buffers; parameters and optimizer state are shared by all of them.
"""

from __future__ import annotations

from typing import Any

from rfclassify._optional import require

#: eager steps of a shape before its graph is captured
GRAPH_WARMUP_STEPS = 3


def step_losses(model: Any, x: Any, y: Any, s: Any, *, label_smoothing: float, snr_loss_weight: float,
                noise_idx: int, bf16: bool) -> tuple[Any, Any]:
    """(total loss, (4,) stats tensor [loss, ce, snr_loss, correct]) of one batch."""
    torch = require("torch")
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16, cache_enabled=False):
        logits, snr_pred = model(x)
    ce = torch.nn.functional.cross_entropy(logits.float(), y, label_smoothing=label_smoothing)
    mask = ((y != noise_idx) & torch.isfinite(s)).float()
    snr_l = torch.nn.functional.smooth_l1_loss(snr_pred.float(), torch.nan_to_num(s), beta=1.0, reduction="none")
    snr_loss = (snr_l * mask).sum() / mask.sum().clamp(min=1.0)
    loss = ce + snr_loss_weight * snr_loss
    stats = torch.stack([loss.detach(), ce.detach(), snr_loss.detach(), (logits.argmax(1) == y).sum().float()])
    return loss, stats


def set_lr(opt: Any, lr: float) -> None:
    """Set every param group's learning rate (in place when it is a tensor, as capture needs)."""
    for g in opt.param_groups:
        if hasattr(g["lr"], "fill_"):
            g["lr"].fill_(lr)
        else:
            g["lr"] = lr


class EagerStep:
    """The plain step: what CPU runs and the default on CUDA."""

    def __init__(self, model: Any, opt: Any, *, max_grad_norm: float, **loss_args: Any) -> None:
        self.model, self.opt, self.max_grad_norm, self.loss_args = model, opt, max_grad_norm, loss_args

    def __call__(self, x: Any, y: Any, s: Any) -> Any:
        torch = require("torch")
        self.opt.zero_grad(set_to_none=True)
        loss, stats = step_losses(self.model, x, y, s, **self.loss_args)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.opt.step()
        return stats


class GraphedStep(EagerStep):
    """The same step, captured as one CUDA graph per input shape and replayed (see module docstring)."""

    def __init__(self, model: Any, opt: Any, **kwargs: Any) -> None:
        super().__init__(model, opt, **kwargs)
        torch = require("torch")
        if not all(g.get("capturable") for g in opt.param_groups):
            raise ValueError("GraphedStep needs an optimizer built with capturable=True")
        for g in opt.param_groups:  # captured kernels read the LR from device memory
            if not hasattr(g["lr"], "fill_"):
                g["lr"] = torch.tensor(float(g["lr"]), device=next(model.parameters()).device)
        self.seen: dict[tuple[int, ...], int] = {}
        self.graphs: dict[tuple[int, ...], tuple[Any, tuple[Any, Any, Any], Any]] = {}
        self.side = torch.cuda.Stream()

    def __call__(self, x: Any, y: Any, s: Any) -> Any:
        torch = require("torch")
        key = tuple(x.shape)
        if key in self.graphs:
            graph, (xs, ys, ss), stats = self.graphs[key]
            xs.copy_(x)
            ys.copy_(y)
            ss.copy_(s)
            graph.replay()
            return stats.clone()
        n = self.seen.get(key, 0)
        self.seen[key] = n + 1
        if n < GRAPH_WARMUP_STEPS:  # real training steps, on a side stream as capture requires
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                out = super().__call__(x, y, s)
            torch.cuda.current_stream().wait_stream(self.side)
            return out
        static = (x.clone(), y.clone(), s.clone())
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # data threads pin memory meanwhile
            stats = super().__call__(*static)
        self.graphs[key] = (graph, static, stats)
        graph.replay()  # capture records the step without running it
        return stats.clone()


def make_step(model: Any, opt: Any, *, cuda_graphs: bool, **kwargs: Any) -> EagerStep:
    """GraphedStep when asked for (CUDA only), else EagerStep."""
    return (GraphedStep if cuda_graphs else EagerStep)(model, opt, **kwargs)
