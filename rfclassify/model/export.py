"""ONNX export of the classifier: BatchNorm folded, one dynamic graph and per-bucket static graphs.

* Dynamic graph (``static_length=None``), for ONNX Runtime: input ``iq`` (batch, 2, 1, length)
  with batch and length dynamic; outputs ``logits`` (batch, 28) and ``snr_db`` (batch,).
  Global pooling is a ReduceMean.
* Static graph (``static_length=L``), for TensorRT/DLA (DLA needs min = opt = max): length
  fixed to L; batch dynamic unless ``batch_size`` is given. Global pooling is a chain of
  AveragePool windows <= 8, and the outputs stay 4-D — ``logits`` (batch, 28, 1, 1) and
  ``snr_db`` (batch, 1, 1, 1) — because a Flatten/Reshape is not a DLA layer; the backend
  reshapes them (free: the memory layout is already (batch, 28)).

BatchNorm is folded into the preceding convolution (torch.nn.utils.fusion.fuse_conv_bn_eval),
so no BatchNormalization node reaches the graph.
"""

from __future__ import annotations

import copy
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from rfclassify._optional import require
from rfclassify.model.meta import INPUT_NAME, OUTPUT_NAMES


def fold_batchnorm(model: Any) -> Any:
    """An eval-mode copy of `model` with every conv+BN pair (ConvBN modules) folded into one conv."""
    torch = require("torch", "ONNX export")
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    folded = copy.deepcopy(model).eval()
    for mod in folded.modules():
        conv, bn = getattr(mod, "conv", None), getattr(mod, "bn", None)
        if isinstance(conv, torch.nn.Conv2d) and isinstance(bn, torch.nn.BatchNorm2d):
            mod.conv = fuse_conv_bn_eval(conv, bn)
            mod.bn = torch.nn.Identity()
    return folded


def export_onnx(model: Any, path: str | os.PathLike[str], opset: int = 17,
                static_length: int | None = None, batch_size: int | None = None) -> Path:
    """Write `model` (BN folded) as ONNX to `path`; see the module docstring for the two forms.

    `batch_size` fixes the batch dimension (only meaningful with `static_length`)."""
    torch = require("torch", "ONNX export")
    if opset < 17:
        raise ValueError(f"opset must be >= 17, got {opset}")
    net = fold_batchnorm(model)
    if static_length is not None:
        ds = getattr(net, "downsample", 1)
        if static_length % ds:
            raise ValueError(f"static_length {static_length} is not a multiple of the "
                             f"network's downsampling factor {ds}")
        net.static_length = int(static_length)
        net.squeeze_outputs = False
    length = int(static_length or 1024)
    dummy = torch.zeros(int(batch_size or 1), 2, 1, length)
    axes: dict[str, dict[int, str]] = {}
    if batch_size is None:
        axes = {INPUT_NAME: {0: "batch"}, **{n: {0: "batch"} for n in OUTPUT_NAMES}}
    if static_length is None:
        axes.setdefault(INPUT_NAME, {})[3] = "length"
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # the TorchScript exporter is deprecated in favour of torch.export, which needs
        # onnxscript (not installed); the TorchScript path is still the supported one here
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(net, (dummy,), str(out), input_names=[INPUT_NAME],
                          output_names=list(OUTPUT_NAMES), opset_version=int(opset),
                          dynamic_axes=axes or None, do_constant_folding=True, dynamo=False)
    return out


def static_onnx_name(length: int, batch_size: int | None = None) -> str:
    """File name of a per-bucket static graph, e.g. model_L1024.onnx or model_L1024_B8.onnx."""
    return f"model_L{length}" + (f"_B{batch_size}" if batch_size else "") + ".onnx"


def _softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def onnx_parity(onnx_path: str | os.PathLike[str], model: Any, x: np.ndarray) -> dict[str, float]:
    """Largest |ONNX Runtime - torch| of logits, softmax and SNR on input x (B, 2, 1, L)."""
    torch = require("torch", "export parity")
    ort = require("onnxruntime", "export parity")
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got_logits, got_snr = sess.run(list(OUTPUT_NAMES), {INPUT_NAME: x.astype(np.float32)})
    with torch.no_grad():
        ref_logits, ref_snr = (t.numpy() for t in model.eval()(torch.from_numpy(x.astype(np.float32))))
    got_logits = got_logits.reshape(ref_logits.shape)
    got_snr = got_snr.reshape(ref_snr.shape)
    return {
        "max_abs_logit_diff": float(np.max(np.abs(got_logits - ref_logits))),
        "max_abs_softmax_diff": float(np.max(np.abs(_softmax(got_logits) - _softmax(ref_logits)))),
        "max_abs_snr_db_diff": float(np.max(np.abs(got_snr - ref_snr))),
    }
