"""A stand-in for TensorRT's runtime, so the TensorRT backend's own work - pycuda's context,
stream, pinned and mapped buffers, copies, the DLA's fixed-batch pieces, the engine cache, the
`engine` command - runs on a real CUDA GPU where TensorRT cannot be installed (every machine of
this project).

Only the calls the backend makes exist. An "engine" is the network itself, run by torch on the
CUDA stream the backend hands to ``execute_async_v3``, reading its input from and writing its
outputs to the device addresses the backend bound: so data that does not reach the GPU, outputs
read before the stream is synchronized, or a buffer bound to the wrong tensor show as wrong
answers. What TensorRT refuses is refused the same way: a shape outside the selected profile
(False), enqueueing before every address and the activation memory are set (False), a profile
index that does not exist (RuntimeError). Nothing here says anything about TensorRT itself:
its builder, its kernels and its INT8 are not stood in for (the builder is replaced whole).
"""

from __future__ import annotations

import enum
import json
import types
from dataclasses import asdict
from typing import Any

import numpy as np

from rfclassify.model.meta import INPUT_NAME, OUTPUT_NAMES

VERSION = "10.3.0"    # JetPack 6.1/6.2's: the plans the stand-in is given are that TensorRT's
LOGITS, SNR = OUTPUT_NAMES


def serialized(part: Any) -> bytes:
    """What the stand-in's 'builder' makes of one part of a plan (tensorrt_plan.EnginePart)."""
    return json.dumps({"standin": VERSION, "part": asdict(part)}).encode()


class _DataType(enum.Enum):
    FLOAT = 0


class _Raw:
    """A device address seen as a float32 array (torch reads it through this interface)."""

    def __init__(self, address: int, shape: tuple[int, ...]) -> None:
        self.__cuda_array_interface__ = {"shape": tuple(int(n) for n in shape), "typestr": "<f4",
                                         "data": (int(address), False), "version": 2}


def module(net: Any, n_labels: int, dla_cores: int = 2) -> types.ModuleType:
    """A module to put in sys.modules as ``tensorrt``: its engines run `net` (a torch module on
    the GPU, eval mode, fp32) and record every execution's input shape in ``executions``; its
    runtime reports `dla_cores` DLA cores (``num_DLA_cores``; an AGX Orin's 2 by default)."""
    import torch

    trt = types.ModuleType("tensorrt")
    trt.__version__ = VERSION
    trt.executions = []
    trt.DataType = _DataType
    trt.nptype = lambda dtype: {_DataType.FLOAT: np.float32}[dtype]
    trt.ExecutionContextAllocationStrategy = types.SimpleNamespace(USER_MANAGED="user managed")
    trt.LayerInformationFormat = types.SimpleNamespace(JSON="json")

    class Logger:
        WARNING = 2

        def __init__(self, severity: int = WARNING) -> None:
            self.severity = severity

    class Inspector:
        def __init__(self, engine: Engine) -> None:
            self.engine = engine

        def get_engine_information(self, fmt: str) -> str:
            assert fmt == "json"
            return json.dumps({"Layers": [f"stand-in: the network in torch ({self.engine.tag})"]})

    class Engine:
        device_memory_size_v2 = 1 << 20     # activation memory the backend must provide

        def __init__(self, part: dict[str, Any], dla_core: int) -> None:
            self.tag = part["tag"]
            self.profiles = part["profiles"]
            self.dla_core = dla_core
            self.names = (INPUT_NAME, LOGITS, SNR)

        @property
        def num_io_tensors(self) -> int:
            return len(self.names)

        def get_tensor_name(self, i: int) -> str:
            return self.names[i]

        def get_tensor_dtype(self, name: str) -> _DataType:
            return _DataType.FLOAT

        def create_execution_context(self, strategy: str) -> Context:
            assert strategy == "user managed", strategy
            return Context(self)

        def create_engine_inspector(self) -> Inspector:
            return Inspector(self)

    class Context:
        def __init__(self, engine: Engine) -> None:
            self.engine = engine
            self.profile: dict[str, Any] | None = None
            self.shape: tuple[int, ...] | None = None
            self.addresses: dict[str, int] = {}
            self.memory: tuple[int, int] | None = None

        def set_device_memory(self, address: int, size: int) -> None:
            assert size >= self.engine.device_memory_size_v2
            self.memory = (int(address), int(size))

        def set_optimization_profile_async(self, index: int, stream_handle: int) -> bool:
            if not 0 <= index < len(self.engine.profiles):
                raise RuntimeError(f"profile {index} does not exist")
            self.profile, self.shape = self.engine.profiles[index], None
            return True

        def set_input_shape(self, name: str, shape: tuple[int, ...]) -> bool:
            p = self.profile
            ok = (name == INPUT_NAME and p is not None and len(shape) == 4 and tuple(shape[1:]) == (2, 1, p["bucket"])
                  and p["min_batch"] <= shape[0] <= p["max_batch"])
            if ok:
                self.shape = tuple(int(n) for n in shape)
            return ok

        def get_tensor_shape(self, name: str) -> tuple[int, ...]:
            n = self.shape[0]
            return {INPUT_NAME: self.shape, LOGITS: (n, n_labels), SNR: (n,)}[name]

        def set_tensor_address(self, name: str, address: int) -> bool:
            assert name in self.engine.names
            self.addresses[name] = int(address)
            return True

        def execute_async_v3(self, stream_handle: int) -> bool:
            if self.shape is None or self.memory is None or set(self.addresses) != set(self.engine.names):
                return False
            trt.executions.append((self.engine.tag, self.engine.dla_core, self.shape))
            n = self.shape[0]
            with torch.cuda.stream(torch.cuda.ExternalStream(stream_handle)), torch.inference_mode():
                torch.as_tensor(_Raw(self.memory[0], (self.memory[1] // 4,)), device="cuda").fill_(float("nan"))
                x = torch.as_tensor(_Raw(self.addresses[INPUT_NAME], self.shape), device="cuda")
                logits, snr = net(x.clone())
                torch.as_tensor(_Raw(self.addresses[LOGITS], (n, n_labels)), device="cuda").copy_(logits)
                torch.as_tensor(_Raw(self.addresses[SNR], (n,)), device="cuda").copy_(snr.reshape(n))
            return True

    class Runtime:
        num_DLA_cores = dla_cores

        def __init__(self, logger: Logger) -> None:
            self.DLA_core = -1

        def deserialize_cuda_engine(self, data: bytes) -> Engine | None:
            try:
                record = json.loads(data)
            except ValueError:
                return None    # as TensorRT returns None for a file it cannot read
            return Engine(record["part"], self.DLA_core)

    trt.Logger, trt.Runtime = Logger, Runtime
    return trt
