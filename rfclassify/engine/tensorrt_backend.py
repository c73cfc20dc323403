"""TensorRT on the GPU or a DLA core: the Jetson backend. Engines come from the plan
(rfclassify.engine.tensorrt_plan) through the engine cache (rfclassify.engine.tensorrt_engines);
this module runs them with pycuda.

The GPU plan is one engine with one optimization profile per bucket: each profile gets its
own execution context (a context holds one profile at a time, and switching costs a stream
synchronisation), bound once to buffers for the largest batch. A DLA plan is one engine per
bucket at a fixed batch: a batch is cut into pieces of that size, the last one padded with
zeros and its padding dropped. On a Jetson (an integrated GPU) the host buffers are mapped
into the GPU's address space (zero-copy); elsewhere they are pinned and copied.

**TensorRT never ran here**: it cannot be installed on any machine of this project
(../shared/DESIGN.md). The calls follow TensorRT's documented Python API (name-based I/O,
``execute_async_v3``, 8.5 and later); tests marked ``tensorrt`` run them where it imports. The
pycuda half ran on a lent GPU host with TensorRT stood in for (tests/test_engine_tensorrt_pycuda.py).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rfclassify._exceptions import BackendError
from rfclassify._optional import require
from rfclassify.engine.base import Backend
from rfclassify.engine.devices import device_index
from rfclassify.engine.tensorrt_plan import EnginePlan, Profile, batch_pieces, check_dla_core, plan_engines
from rfclassify.model.meta import INPUT_NAME, OUTPUT_NAMES, ModelMeta
from rfclassify.model.provenance import file_problem

LOGITS, SNR = OUTPUT_NAMES


def maps_host_memory(cuda: Any, dev: Any) -> bool:
    """Whether the engines read and write mapped host buffers (zero-copy) instead of device
    buffers filled by copies: on an integrated GPU (a Jetson), whose memory is the host's."""
    return bool(dev.get_attribute(cuda.device_attribute.INTEGRATED))


@dataclass
class _Slot:
    """One execution context and the buffers bound to it (one profile of one engine)."""

    context: Any
    batch: int                 # the most it takes (DLA: exactly this)
    fixed_batch: bool
    host: dict[str, np.ndarray]
    device: dict[str, Any]     # DeviceAllocation, or None where the host buffer is mapped


class TensorRTBackend(Backend):
    """INT8 / fp16 / fp32 engines on cuda:N, optionally on a DLA core with GPU fallback."""

    name: ClassVar[str] = "tensorrt"
    precisions_by_device: ClassVar[dict[str, tuple[str, ...]]] = {"cuda": ("int8", "fp16", "fp32")}

    def __init__(self, meta: ModelMeta, model_dir: str | Path, *, dla_core: int | None = None,
                 dla_batch: int | None = None, engine_cache: str | Path | None = None,
                 threads: int | None = None, rebuild: bool = False, cancel: threading.Event | None = None,
                 **kwargs: Any) -> None:
        self.dla_core = dla_core        # before the base checks the files this placement reads
        super().__init__(meta, model_dir, **kwargs)   # threads: CPU threads, which TensorRT does not use
        self.rebuild = bool(rebuild)
        self.cancel = cancel            # set: Cancelled before the next engine build (the daemon's stop)
        self.dla_batch = dla_batch      # None: the plan's (tensorrt_plan.plan_engines)
        self.engine_cache = Path(engine_cache) if engine_cache else None
        self.plan: EnginePlan | None = None
        self.built: list[str] = []
        self._slots: dict[int, _Slot] = {}
        self._engines: list[Any] = []
        self._scratches: list[Any] = []
        self._cuda: Any = None
        self._ctx: Any = None
        self._stream: Any = None

    @classmethod
    def artifact_problem(cls, meta: ModelMeta, model_dir: str | Path, precision: str, *,
                         dla_core: int | None = None) -> str | None:
        if precision == "int8":   # the GPU's engine is built from the Q/DQ graph, a DLA's from the cache
            from rfclassify.quant.tensorrt_int8 import artifact_problem

            return artifact_problem(meta, model_dir, "qdq" if dla_core is None else "calibration_cache")
        return cls.missing_file(model_dir, meta.onnx_file)

    @classmethod
    def foreign_file(cls, meta: ModelMeta, model_dir: str | Path, precision: str, *,
                     dla_core: int | None = None) -> str | None:
        # model.onnx (the GPU's graph, and the source of both INT8 artifacts), and on a DLA the
        # static graphs its engines are parsed from; the INT8 artifacts carry their own digests
        names = [meta.onnx_file]
        if dla_core is not None:
            static = (meta.extra.get("export") or {}).get("static_files") or {}
            names += [name for _, name in sorted(static.items())]
        return next((p for name in names if (p := file_problem(meta, model_dir, name))), None)

    @property
    def warmup_batch_sizes(self) -> tuple[int, ...]:
        return (1, min(64, self.max_batch_size))

    def _load(self) -> None:
        from rfclassify.engine import tensorrt_engines as te

        trt, logger = te.load_tensorrt()
        if self.dla_core is not None:   # a core this device lacks: one line, not TensorRT's error at build
            check_dla_core(self.dla_core, int(trt.Runtime(logger).num_DLA_cores))
        cuda = require("pycuda.driver", "the TensorRT backend")
        cuda.init()
        index = device_index(self.device)
        dev = cuda.Device(index)
        self._ctx = dev.retain_primary_context()
        self._ctx.push()
        try:
            self.plan = plan_engines(self.meta, self.precision, trt.__version__, dla_core=self.dla_core,
                                     max_batch=self.max_batch_size, dla_batch=self.dla_batch,
                                     buckets=self.buckets_samples)
            ident = te.device_id(cuda, index, self.dla_core)
            zero_copy = maps_host_memory(cuda, dev)
            self._cuda, self._stream = cuda, cuda.Stream()
            files = te.digests(self.plan, self.model_dir, self.meta)
            for part in self.plan.engines:
                path, built = te.ensure_engine(trt, logger, self.meta, self.model_dir, self.plan, part, ident, files,
                                               self.engine_cache, rebuild=self.rebuild, cancel=self.cancel)
                if built:
                    self.built.append(path.name)
                engine = te.deserialize(trt, logger, path, self.dla_core)
                self._engines.append(engine)
                scratch = self._scratch(engine)
                self._scratches.append(scratch[0])
                for index, profile in enumerate(part.profiles):
                    self._slots[profile.bucket] = self._bind(engine, scratch, index, profile, zero_copy)
        except BaseException:
            self._release()
            self._ctx.pop()
            self._ctx.detach()
            self._ctx = None
            raise
        self._ctx.pop()

    def _scratch(self, engine: Any) -> tuple[Any, int]:
        """One block of activation memory for all of an engine's contexts (they run one at a time,
        on one stream, under the backend's lock), instead of a block per profile: (allocation,
        size). The size is the most any profile needs (device_memory_size_v2 from TensorRT 10.1,
        device_memory_size before)."""
        size = int(getattr(engine, "device_memory_size_v2", None) or engine.device_memory_size)
        return (self._cuda.mem_alloc(size) if size else None), size

    def _context(self, engine: Any, scratch: tuple[Any, int]) -> Any:
        """An execution context using the engine's shared activation memory."""
        trt = require("tensorrt")
        memory, size = scratch
        strategy = getattr(trt, "ExecutionContextAllocationStrategy", None)   # TensorRT 10
        context = (engine.create_execution_context(strategy.USER_MANAGED) if strategy is not None
                   else engine.create_execution_context_without_device_memory())
        if context is None:
            raise BackendError("TensorRT could not create an execution context (out of GPU memory?)")
        if memory is not None:
            if hasattr(context, "set_device_memory"):      # 10.1 and later
                context.set_device_memory(int(memory), size)
            else:
                context.device_memory = int(memory)
        return context

    def _bind(self, engine: Any, scratch: tuple[Any, int], index: int, profile: Profile, zero_copy: bool) -> _Slot:
        """A context on optimization profile `index` (`profile`), bound to buffers for its largest
        batch; a profile whose batch is fixed (min = max: the DLA's) runs exactly that batch."""
        cuda, trt = self._cuda, require("tensorrt")
        context = self._context(engine, scratch)
        try:
            context.set_optimization_profile_async(index, self._stream.handle)
        except RuntimeError as exc:   # the binding raises where the C++ call returns false
            raise BackendError(f"TensorRT could not select optimization profile {index}: {exc}") from None
        self._stream.synchronize()
        largest = profile.shapes()[2]
        if not context.set_input_shape(INPUT_NAME, largest):
            raise BackendError(f"input shape {largest} is outside optimization profile {index}")
        host: dict[str, np.ndarray] = {}
        device: dict[str, Any] = {}
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            shape = tuple(context.get_tensor_shape(name))
            dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
            if zero_copy:   # Jetson: the GPU reads and writes the pinned host buffer itself
                buf = cuda.pagelocked_empty(shape, dtype, mem_flags=cuda.host_alloc_flags.DEVICEMAP)
                address = int(buf.base.get_device_pointer())
                device[name] = None
            else:
                buf = cuda.pagelocked_empty(shape, dtype)
                device[name] = cuda.mem_alloc(buf.nbytes)
                address = int(device[name])
            host[name] = buf
            context.set_tensor_address(name, address)
        missing = [n for n in (INPUT_NAME, *OUTPUT_NAMES) if n not in host]
        if missing:
            raise BackendError(f"the engine has no tensors {missing}; it was not built from this model's graph")
        return _Slot(context, profile.max_batch, profile.min_batch == profile.max_batch, host, device)

    def _run(self, slot: _Slot, x: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
        n = x.shape[0]
        batch = slot.batch if slot.fixed_batch else n
        if not slot.fixed_batch and not slot.context.set_input_shape(INPUT_NAME, (n, 2, 1, length)):
            raise BackendError(f"input shape {(n, 2, 1, length)} is outside the engine's profile")
        inp = slot.host[INPUT_NAME]
        inp[:n] = x
        if n < batch:
            inp[n:batch] = 0.0
        cuda, stream = self._cuda, self._stream
        if slot.device[INPUT_NAME] is not None:
            cuda.memcpy_htod_async(slot.device[INPUT_NAME], inp[:batch], stream)   # the rows this run reads
        if not slot.context.execute_async_v3(stream.handle):
            raise BackendError("TensorRT failed to enqueue the inference")
        for name in OUTPUT_NAMES:
            if slot.device[name] is not None:
                cuda.memcpy_dtoh_async(slot.host[name][:batch], slot.device[name], stream)
        stream.synchronize()
        logits = slot.host[LOGITS].reshape(slot.host[LOGITS].shape[0], -1)[:n]
        snr = slot.host[SNR].reshape(slot.host[SNR].shape[0], -1)[:n, 0]
        return logits.astype(np.float32, copy=True), snr.astype(np.float32, copy=True)

    def _infer(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        length = x.shape[3]
        slot = self._slots[length]
        self._ctx.push()
        try:
            pieces = [self._run(slot, x[a:b], length) for a, b in batch_pieces(x.shape[0], slot.batch)]
        finally:
            self._ctx.pop()
        return np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces])

    def _release(self) -> None:
        self._slots.clear()     # contexts and buffers go before their engines (and the scratch blocks,
        self._scratches.clear()  # which the contexts use)
        self._engines.clear()
        self._stream = None

    def _close(self) -> None:
        self._ctx.push()
        try:
            self._release()
        finally:
            self._ctx.pop()
        self._ctx.detach()
        self._ctx = None
