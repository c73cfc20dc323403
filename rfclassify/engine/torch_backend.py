"""PyTorch: eager fp32 on the CPU, CUDA graphs in fp16 (or fp32) on a GPU.

On CUDA a small network at small batch is launch-bound (DESIGN.md: eager batch 1 on an H200
is about 3.8 ms; a CUDA graph cut it about 11x). So each (bucket, batch size) gets ONE
captured graph with static input/output buffers, captured at warmup or on first use; a batch
is padded up to the nearest captured batch size (rows are independent in eval mode, so the
padding rows never change the real rows' outputs) and a batch above the largest size is an
input error (the Classifier splits batches to ``max_batch_size``).
"""

from __future__ import annotations

import bisect
import logging
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rfclassify._cpus import usable_cpu_count
from rfclassify._exceptions import BackendError, ConfigError
from rfclassify._optional import require
from rfclassify.engine.base import DEFAULT_BATCH_SIZES, Backend
from rfclassify.engine.devices import device_kind
from rfclassify.model.meta import ModelMeta

log = logging.getLogger(__name__)


class TorchBackend(Backend):
    """build_network(meta.arch) with model.pt weights; eager on CPU, CUDA graphs on GPU."""

    name: ClassVar[str] = "torch"
    precisions_by_device: ClassVar[dict[str, tuple[str, ...]]] = {
        "cpu": ("fp32",),
        "cuda": ("fp16", "fp32"),
    }

    def __init__(self, meta: ModelMeta, model_dir: str | Path, *,
                 graph_batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES,
                 cuda_graphs: bool = True, threads: int | None = None, **kwargs: Any) -> None:
        super().__init__(meta, model_dir, **kwargs)
        self._cuda = device_kind(self.device) == "cuda"
        sizes = sorted({int(n) for n in graph_batch_sizes if 1 <= int(n) <= self.max_batch_size})
        if self.max_batch_size not in sizes:
            sizes.append(self.max_batch_size)  # so every legal batch has a graph to pad up to
        self.graph_batch_sizes = tuple(sizes)
        self.cuda_graphs = bool(cuda_graphs) and self._cuda
        # torch's thread count is the process's, not this backend's: a load sets it every time
        # (None or 0: the cores this process may use), or it kept an earlier load's count
        self.threads = int(threads) if threads else usable_cpu_count()
        self._net: Any = None
        self._dtype: Any = None
        self._graphs: dict[tuple[int, int], tuple[Any, Any, Any, Any]] = {}
        self._pool: Any = None

    @classmethod
    def artifact_problem(cls, meta: ModelMeta, model_dir: str | Path, precision: str, *,
                         dla_core: int | None = None) -> str | None:
        return cls.missing_file(model_dir, meta.weights_file)

    @property
    def warmup_batch_sizes(self) -> tuple[int, ...]:
        return self.graph_batch_sizes if self.cuda_graphs else (1,)

    def _load(self) -> None:
        torch = require("torch", "the torch backend")
        torch.set_num_threads(self.threads)
        if self._cuda and not torch.cuda.is_available():
            raise ConfigError(f"device {self.device} asked for, but torch sees no CUDA GPU")
        from rfclassify.model.network import load_trained

        net, _ = load_trained(self.model_dir)  # build_network(meta.arch) + model.pt, eval, CPU
        self._dtype = torch.float16 if self.precision == "fp16" else torch.float32
        self._net = net.to(device=self.device, dtype=self._dtype)
        if self._cuda:
            # cuDNN's tensor-core convolutions want NHWC: measured on an H200 at batch 1024
            # (bucket 1024) a graph replay took 3.0 ms fp16 channels_last vs 4.6 ms NCHW.
            self._net = self._net.to(memory_format=torch.channels_last)
            self._pool = torch.cuda.graph_pool_handle()

    def _infer(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        torch = require("torch")
        if not self._cuda:
            with torch.inference_mode():
                logits, snr_db = self._net(torch.from_numpy(x))
            return logits.numpy(), snr_db.numpy()
        if not self.cuda_graphs:
            with torch.inference_mode():
                t = torch.from_numpy(x).to(self.device, dtype=self._dtype)
                t = t.to(memory_format=torch.channels_last)
                logits, snr_db = self._net(t)
            return logits.float().cpu().numpy(), snr_db.float().cpu().numpy()
        n = x.shape[0]
        size = self.graph_batch_sizes[bisect.bisect_left(self.graph_batch_sizes, n)]
        graph, static_in, out_logits, out_snr = self._graph(x.shape[3], size)
        with torch.cuda.device(self.device):  # replay on the stream of this backend's GPU
            static_in[:n].copy_(torch.from_numpy(x))  # host->device and fp32->fp16 in one copy
            graph.replay()
            return out_logits[:n].float().cpu().numpy(), out_snr[:n].float().cpu().numpy()

    def _warmup(self, bucket_samples: int, batch_size: int) -> None:
        if self.cuda_graphs:
            size = self.graph_batch_sizes[bisect.bisect_left(self.graph_batch_sizes, batch_size)]
            self._graph(bucket_samples, size)
        else:
            super()._warmup(bucket_samples, batch_size)

    def _graph(self, length: int, size: int) -> tuple[Any, Any, Any, Any]:
        """The captured graph for (length, size), capturing it first if needed."""
        key = (length, size)
        if key not in self._graphs:
            with require("torch").cuda.device(self.device):  # capture on this backend's GPU
                self._graphs[key] = self._capture(length, size)
        return self._graphs[key]

    def _capture(self, length: int, size: int) -> tuple[Any, Any, Any, Any]:
        torch = require("torch")
        log.info("capturing CUDA graph: bucket %d, batch %d, %s", length, size, self.precision)
        static_in = torch.zeros((size, 2, 1, length), device=self.device, dtype=self._dtype)
        static_in = static_in.to(memory_format=torch.channels_last)
        try:
            with torch.no_grad():  # no_grad, not inference_mode: the captured outputs are read later
                # Warm up on a side stream first (cuDNN picks its kernels, the allocator
                # settles), as torch.cuda.graphs requires before capture.
                side = torch.cuda.Stream(device=self.device)
                side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(side):
                    for _ in range(3):
                        self._net(static_in)
                torch.cuda.current_stream(self.device).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                # One pool for all graphs: they never run concurrently (infer holds the lock)
                # and each replay rewrites its own intermediates before reading them.
                with torch.cuda.graph(graph, pool=self._pool):
                    out_logits, out_snr = self._net(static_in)
        except RuntimeError as exc:
            raise BackendError(f"CUDA graph capture failed (bucket {length}, batch {size}): {exc}") from exc
        return graph, static_in, out_logits, out_snr

    def _close(self) -> None:
        self._graphs.clear()
        self._net = None
        self._pool = None
        if self._cuda:
            require("torch").cuda.empty_cache()
