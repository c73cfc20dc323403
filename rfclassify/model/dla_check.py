"""Static check of an ONNX graph against the Orin DLA layer limits (docs: /work/shared/DESIGN.md).

TensorRT is not installable here, so this is the check we can run everywhere: every node is
held against the DLA restrictions of TensorRT 10.3 (2-D convolution, kernel 1..32 (from the
weight where `kernel_shape` is left out), stride 1..8, padding 0..31 and < kernel, dilation
1..32, output channels 1..8192; max/average pooling, window 1..8, stride
1..16; ReLU/Sigmoid/Tanh/Clip/LeakyReLU; elementwise Add/Mul/Max/Min/Sub; Concat on the
channel axis; Softmax over channels) plus the ops TensorRT folds away (Identity, Constant,
QuantizeLinear/DequantizeLinear). A node outside these would fall back to the GPU (or fail
without GPU_FALLBACK). DLA also needs fixed shapes (an optimization profile with
min = opt = max): by default a dynamic *batch* axis is accepted, since the engine builder pins
it with such a profile; any other dynamic dimension is a violation, as is a static batch above
4096 or another dimension of the graph's inputs and outputs above 8192 (the DLA restrictions
page's general limits).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from rfclassify._optional import require

CONV_KERNEL = (1, 32)
CONV_STRIDE = (1, 8)
CONV_PAD_MAX = 31
CONV_DILATION = (1, 32)
CONV_CHANNELS = (1, 8192)     # output maps
#: the DLA's general limits: the batch, and every other dimension
MAX_BATCH = 4096
MAX_DIM = 8192
POOL_WINDOW = (1, 8)
POOL_STRIDE = (1, 16)

ACTIVATIONS = frozenset({"Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu"})
ELEMENTWISE = frozenset({"Add", "Mul", "Max", "Min", "Sub"})
FOLDED = frozenset({"Identity", "Constant", "QuantizeLinear", "DequantizeLinear"})
POOLS = frozenset({"MaxPool", "AveragePool"})


@dataclass(frozen=True)
class Violation:
    """One reason a node (or the graph's I/O) cannot run on DLA."""

    node: str      # node name, or the tensor name for a shape problem
    op_type: str   # ONNX op type, or "input"/"output"
    reason: str

    def __str__(self) -> str:
        return f"{self.op_type} {self.node}: {self.reason}"


def _attrs(node: Any) -> dict[str, Any]:
    onnx = require("onnx", "the DLA check")
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _in_range(values: list[int], lo_hi: tuple[int, int]) -> bool:
    return all(lo_hi[0] <= int(v) <= lo_hi[1] for v in values)


def _shapes(model: Any) -> dict[str, tuple[int | None, ...]]:
    """Shape of every tensor whose rank is known (after ONNX shape inference); None for a
    dimension that is not a fixed number."""
    onnx = require("onnx", "the DLA check")
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - inference is best effort; shapes then come from initializers only
        inferred = model
    g = inferred.graph
    shapes: dict[str, tuple[int | None, ...]] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.tensor_type.HasField("shape"):
            shapes[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None
                                    for d in vi.type.tensor_type.shape.dim)
    shapes.update({i.name: tuple(int(d) for d in i.dims) for i in g.initializer})
    return shapes


def _check_conv(node: Any, a: dict[str, Any], shapes: dict[str, tuple[int | None, ...]]) -> list[str]:
    out = []
    weight = shapes.get(node.input[1]) if len(node.input) > 1 else None
    # ONNX lets kernel_shape be left out, to be read from the weight (out, in, *kernel)
    kernel = list(a.get("kernel_shape", [])) or [d for d in (weight or ())[2:] if d is not None]
    if kernel:
        spatial = len(kernel)
    elif weight is not None:
        spatial = len(weight) - 2
    else:
        spatial = len(shapes.get(node.input[0], (None,) * 4)) - 2
    if spatial != 2:
        out.append(f"{spatial}-D convolution; DLA runs 2-D convolution only (write a 1-D conv as 1xk)")
        return out
    if kernel and not _in_range(kernel, CONV_KERNEL):
        out.append(f"kernel {kernel} outside {CONV_KERNEL[0]}..{CONV_KERNEL[1]}")
    if weight and weight[0] is not None and not _in_range([weight[0]], CONV_CHANNELS):
        out.append(f"{weight[0]} output channels outside {CONV_CHANNELS[0]}..{CONV_CHANNELS[1]}")
    strides = list(a.get("strides", [1, 1]))
    if not _in_range(strides, CONV_STRIDE):
        out.append(f"stride {strides} outside {CONV_STRIDE[0]}..{CONV_STRIDE[1]}")
    dil = list(a.get("dilations", [1, 1]))
    if not _in_range(dil, CONV_DILATION):
        out.append(f"dilation {dil} outside {CONV_DILATION[0]}..{CONV_DILATION[1]}")
    out += _check_pads(a, kernel, CONV_PAD_MAX)
    return out


def _check_pads(a: dict[str, Any], kernel: list[int], pad_max: int) -> list[str]:
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
        return [f"auto_pad {a['auto_pad']!r}; export explicit pads"]
    pads = list(a.get("pads", [0] * (2 * len(kernel))))
    out = []
    if any(p < 0 or p > pad_max for p in pads):
        out.append(f"padding {pads} outside 0..{pad_max}")
    n = len(kernel)
    if kernel and any(pads[i] >= kernel[i % n] and pads[i] > 0 for i in range(len(pads))):
        out.append(f"padding {pads} not smaller than the kernel {kernel}")
    return out


def _check_pool(a: dict[str, Any]) -> list[str]:
    out = []
    kernel = list(a.get("kernel_shape", []))
    if len(kernel) != 2:
        out.append(f"{len(kernel)}-D pooling; DLA pools 2-D tensors only")
    if not _in_range(kernel, POOL_WINDOW):
        out.append(f"window {kernel} outside {POOL_WINDOW[0]}..{POOL_WINDOW[1]}")
    strides = list(a.get("strides", [1] * len(kernel)))
    if not _in_range(strides, POOL_STRIDE):
        out.append(f"stride {strides} outside {POOL_STRIDE[0]}..{POOL_STRIDE[1]}")
    out += _check_pads(a, kernel, POOL_WINDOW[1] - 1)
    return out


def _check_node(node: Any, shapes: dict[str, tuple[int | None, ...]]) -> list[str]:
    op = node.op_type
    a = _attrs(node)
    if op == "Conv":
        return _check_conv(node, a, shapes)
    if op in POOLS:
        return _check_pool(a)
    if op in ACTIVATIONS or op in ELEMENTWISE or op in FOLDED:
        return []
    if op in ("Concat", "Softmax"):
        rank = len(shapes.get(node.input[0] if op == "Softmax" else node.output[0], (None,) * 4))
        axis = int(a.get("axis", 1 if op == "Concat" else -1))
        if axis < 0:
            axis += rank
        if rank != 4 or axis != 1:
            return [f"axis {axis} of a rank-{rank} tensor; DLA supports only the channel axis (1) of 4-D"]
        return []
    if op in ("GlobalAveragePool", "GlobalMaxPool"):
        return ["global pooling has a window of the whole length (> 8 on DLA); use a chain of pools"]
    return [f"op {op} is not a DLA layer"]


def _check_dims(value_infos: Any, kind: str, allow_dynamic_batch: bool) -> list[Violation]:
    out = []
    for vi in value_infos:
        dims = vi.type.tensor_type.shape.dim
        for axis, d in enumerate(dims):
            static = d.HasField("dim_value") and d.dim_value > 0
            if not static and not (axis == 0 and allow_dynamic_batch):
                name = d.dim_param or "?"
                out.append(Violation(vi.name, kind, f"dynamic dimension {axis} ({name}); DLA needs fixed shapes"))
            elif static and axis == 0 and d.dim_value > MAX_BATCH:
                out.append(Violation(vi.name, kind, f"batch {d.dim_value}; DLA takes a batch of at most {MAX_BATCH}"))
            elif static and axis > 0 and d.dim_value > MAX_DIM:
                out.append(Violation(vi.name, kind, f"dimension {axis} of {d.dim_value}; DLA takes at most "
                                                    f"{MAX_DIM} in a non-batch dimension"))
    return out


def check_onnx_for_dla(model_or_path: Any, require_static: bool = True,
                       allow_dynamic_batch: bool = True) -> list[Violation]:
    """Every reason the graph cannot run entirely on DLA; an empty list means it can.

    `model_or_path`: an onnx.ModelProto or a file path. `require_static`: flag dynamic
    dimensions of the graph inputs/outputs (the batch axis only if not allow_dynamic_batch),
    and static ones above the DLA's limits (batch 4096, other dimensions 8192)."""
    onnx = require("onnx", "the DLA check")
    model = onnx.load(os.fspath(model_or_path)) if isinstance(model_or_path, (str, os.PathLike)) else model_or_path
    shapes = _shapes(model)
    out: list[Violation] = []
    if require_static:
        init = {i.name for i in model.graph.initializer}
        inputs = [i for i in model.graph.input if i.name not in init]
        out += _check_dims(inputs, "input", allow_dynamic_batch)
        out += _check_dims(model.graph.output, "output", allow_dynamic_batch)
    for i, node in enumerate(model.graph.node):
        for reason in _check_node(node, shapes):
            out.append(Violation(node.name or f"#{i}", node.op_type, reason))
    return out


def summarize(violations: list[Violation], limit: int = 10) -> str:
    """One line (ok) or a few lines naming the violations."""
    if not violations:
        return "DLA check: ok (every node within the DLA limits)"
    lines = [f"DLA check: {len(violations)} violation(s)"]
    lines += [f"  {v}" for v in violations[:limit]]
    if len(violations) > limit:
        lines.append(f"  ... and {len(violations) - limit} more")
    return "\n".join(lines)
