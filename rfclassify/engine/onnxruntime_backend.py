"""ONNX Runtime on the CPU: the backend of every machine without a GPU (and of CI).

fp32 runs ``models/model.onnx`` (dynamic batch and length). int8 runs the Q/DQ ONNX named by
``ModelMeta.int8_onnx_file``, which `rfclassify calibrate` makes (``rfclassify.quant.cpu_int8``);
without it, or with one calibrated from another model.onnx, asking for int8 here is an error
that says so (precision 'auto' then runs fp32). Either graph is checked against model.json when
its session loads (``_graph_problem``), so another network's graph is the user's error then,
not an internal one at the first burst; and model.onnx must be the graph model.json records
(``foreign_file``, rfclassify.model.provenance), so another model's graph of the same network
is refused too, whichever precision was asked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rfclassify._cpus import usable_cpu_count
from rfclassify._exceptions import BackendError, ModelNotFoundError, first_line
from rfclassify._optional import require
from rfclassify.engine.base import Backend
from rfclassify.model.meta import INPUT_NAME, OUTPUT_NAMES, ModelMeta
from rfclassify.model.provenance import file_problem


class OnnxRuntimeBackend(Backend):
    """CPUExecutionProvider session with every graph optimization on."""

    name: ClassVar[str] = "onnxruntime"
    precisions_by_device: ClassVar[dict[str, tuple[str, ...]]] = {"cpu": ("fp32", "int8")}

    def __init__(self, meta: ModelMeta, model_dir: str | Path, *, threads: int | None = None,
                 spin: bool = False, **kwargs: Any) -> None:
        super().__init__(meta, model_dir, **kwargs)
        # ORT's threads busy-wait after each run by default. On a small shared CPU that steals
        # the cores the daemon's ingest/publish threads (and a same-process benchmark
        # baseline) need: measured here, spinning off cost ~7% at batch 1 and gained ~25%
        # at batch 64 under load. spin=True restores ORT's default.
        self.spin = bool(spin)
        # One inference at a time per process (the daemon has one inference thread), so all
        # cores go to intra-op parallelism; inter-op threads would only contend with them.
        self.threads = int(threads) if threads else usable_cpu_count()
        self._session: Any = None

    @classmethod
    def artifact_problem(cls, meta: ModelMeta, model_dir: str | Path, precision: str, *,
                         dla_core: int | None = None) -> str | None:
        if precision == "int8":
            from rfclassify.quant.cpu_int8 import int8_problem

            problem = int8_problem(meta, model_dir)
            return f"{problem}, or use fp32" if problem else None
        return cls.missing_file(model_dir, meta.onnx_file)

    @classmethod
    def foreign_file(cls, meta: ModelMeta, model_dir: str | Path, precision: str, *,
                     dla_core: int | None = None) -> str | None:
        # model.onnx for int8 too: the INT8 graph is checked by its own digest (artifact_problem),
        # and a model.onnx of another model is no stale source of it to fall back from (precision
        # auto ran such a graph under this model's id before the seventy-first session)
        return file_problem(meta, model_dir, meta.onnx_file)

    @property
    def onnx_file(self) -> str:
        """The ONNX file this precision runs, relative to the model directory."""
        return self.meta.int8_onnx_file if self.precision == "int8" else self.meta.onnx_file

    def _load(self) -> None:
        ort = require("onnxruntime", "the CPU inference backend")
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3  # errors only: its warnings are about graph fusions
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.spin else "0")
        # "session.x64quantprecision" stays off: on x86 without VNNI it would move the INT8
        # graph to slower uint8 x uint8 kernels to prevent int16 pair overflows that changed one
        # answer of the shipped graph in 27,428 bursts (benchmarks/no_vnni_overflow_probe.md)
        path = self.model_file(self.onnx_file)
        try:   # onnxruntime's own report of an unreadable file reads as a damaged graph ("system error 13")
            with path.open("rb") as f:
                f.read(1)
        except OSError as exc:
            raise ModelNotFoundError(f"{path} cannot be read ({exc.strerror or exc}); "
                                     "make it readable to this user or restore the model") from None
        from onnxruntime.capi.onnxruntime_pybind11_state import (
            Fail, InvalidArgument, InvalidGraph, InvalidProtobuf, NotImplemented as OrtNotImplemented)

        try:
            session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        except (InvalidProtobuf, InvalidGraph, InvalidArgument, Fail, OrtNotImplemented) as exc:
            # the file, not this program; onnxruntime before 1.31 reports an empty or graphless
            # file as a plain FAIL "Load model from ... failed" (1.23 and 1.30 seen); an operator
            # with no CPU kernel (an old opset's Abs, say) is NOT_IMPLEMENTED
            if isinstance(exc, Fail) and "Load model from" not in str(exc):
                raise BackendError(f"onnxruntime cannot load {path}: {exc}") from exc
            raise ModelNotFoundError(f"{path} is damaged or not an ONNX graph of this model ({first_line(exc)}); "
                                     "export it again (`rfclassify export`) or restore the model") from None
        except Exception as exc:  # onnxruntime raises its own exception types
            raise BackendError(f"onnxruntime cannot load {path}: {exc}") from exc
        problem = self._graph_problem(session)
        if problem:
            # another network's graph (or a static one) would fail only at the first burst
            raise ModelNotFoundError(f"{path} is not an ONNX graph of this model: {problem}; "
                                     "export it again (`rfclassify export`) or restore the model")
        self._session = session

    def _graph_problem(self, session: Any) -> str | None:
        """Why the loaded graph cannot take this backend's input or give model.json's outputs, or
        None: one float input 'iq' whose batch and length axes are not fixed at other sizes than
        the ones fed, and outputs 'logits' (batch, one per label) and 'snr_db'."""
        inputs = session.get_inputs()
        if [i.name for i in inputs] != [INPUT_NAME]:
            return f"its inputs are {[i.name for i in inputs]}, not [{INPUT_NAME!r}]"
        shape = list(inputs[0].shape or ())
        if inputs[0].type != "tensor(float)" or len(shape) != 4:
            return f"its input {INPUT_NAME!r} is {inputs[0].type} {shape}, not float (batch, 2, 1, length)"
        fed = (("batch", 1, self.max_batch_size), ("channel", 2, 2), ("row", 1, 1),
               ("length", min(self.buckets_samples), max(self.buckets_samples)))
        for dim, (axis, lo, hi) in zip(shape, fed):
            if isinstance(dim, int) and not lo == dim == hi:
                sizes = f"{lo}" if lo == hi else f"{lo} to {hi}"
                return f"its input's {axis} axis is fixed at {dim}, and this backend feeds {sizes}"
        outputs = {o.name: list(o.shape or ()) for o in session.get_outputs()}
        if any(name not in outputs for name in OUTPUT_NAMES):
            return f"its outputs are {list(outputs)}, not {list(OUTPUT_NAMES)}"
        logits = outputs[OUTPUT_NAMES[0]]
        if len(logits) != 2 or (isinstance(logits[1], int) and logits[1] != self.n_labels):
            return (f"its {OUTPUT_NAMES[0]!r} have shape {logits}, not (batch, {self.n_labels}) for the "
                    f"{self.n_labels} labels of model.json (another network's graph?)")
        return None

    def _infer(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits, snr_db = self._session.run(list(OUTPUT_NAMES), {INPUT_NAME: x})
        return logits, snr_db

    def _close(self) -> None:
        self._session = None
