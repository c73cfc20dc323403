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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rfclassify._atomic import copy_atomic, replacing, temporary_name, write_atomic, write_error
from rfclassify._exceptions import ConfigError
from rfclassify._optional import require
from rfclassify.model.meta import INPUT_NAME, OUTPUT_NAMES, ModelMeta


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


def check_opset(opset: int) -> None:
    """ConfigError unless this torch exports `opset` (17 up to its ONNX_MAX_OPSET: 23 for torch
    2.13; past it a RuntimeError out of the exporter)."""
    torch = require("torch", "ONNX export")
    top = getattr(getattr(torch.onnx, "_constants", None), "ONNX_MAX_OPSET", None)
    if opset < 17 or (top is not None and opset > top):
        raise ConfigError(f"opset must be in 17..{top or 'the most this torch exports'}, got {opset}")


def export_onnx(model: Any, path: str | os.PathLike[str], opset: int = 17,
                static_length: int | None = None, batch_size: int | None = None) -> Path:
    """Write `model` (BN folded) as ONNX to `path`; see the module docstring for the two forms.

    `batch_size` fixes the batch dimension (only meaningful with `static_length`)."""
    torch = require("torch", "ONNX export")
    check_opset(opset)
    net = fold_batchnorm(model)
    if static_length is not None:
        ds = getattr(net, "downsample", 1)
        if static_length % ds:
            raise ConfigError(f"static_length {static_length} is not a multiple of the "
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
    try:   # written whole or not at all: a full disk left part of a graph under its name
        with replacing(out) as tmp, warnings.catch_warnings():
            # the TorchScript exporter is deprecated in favour of torch.export, which needs
            # onnxscript (not installed); the TorchScript path is still the supported one here
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(net, (dummy,), str(tmp), input_names=[INPUT_NAME],
                              output_names=list(OUTPUT_NAMES), opset_version=int(opset),
                              dynamic_axes=axes or None, do_constant_folding=True, dynamo=False)
    except OSError as exc:   # torch's close of a full disk's file names none: the graph's path
        if exc.filename is None or Path(exc.filename) == temporary_name(out):
            raise write_error(out, exc) from exc
        raise
    return out


def static_onnx_name(length: int, batch_size: int | None = None) -> str:
    """File name of a per-bucket static graph, e.g. model_L1024.onnx or model_L1024_B8.onnx."""
    return f"model_L{length}" + (f"_B{batch_size}" if batch_size else "") + ".onnx"


def onnx_parity(onnx_path: str | os.PathLike[str], model: Any, x: np.ndarray) -> dict[str, float]:
    """Largest |ONNX Runtime - torch| of logits, softmax and SNR on input x (B, 2, 1, L)."""
    from rfclassify.model.calibration import softmax

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
        "max_abs_softmax_diff": float(np.max(np.abs(softmax(got_logits) - softmax(ref_logits)))),
        "max_abs_snr_db_diff": float(np.max(np.abs(got_snr - ref_snr))),
    }


def parity_inputs(length: int, seed: int = 0, n_random: int = 4, n_real: int = 8,
                  normalization: str = "remove_dc") -> dict[str, np.ndarray]:
    """Random Gaussian input and real synthesized bursts of `length` samples, normalized as the model expects."""
    from rfclassify.dsp.synth import synthesize
    from rfclassify.dsp.windows import normalize_batch, to_model_input
    from rfclassify.labels import LABELS

    rng = np.random.default_rng(seed)
    labels = [LABELS[i] for i in rng.integers(0, len(LABELS), n_real)]
    real = synthesize(labels, length, rng, snr_db=rng.uniform(0, 30, n_real))
    return {"random": rng.standard_normal((n_random, 2, 1, length)).astype(np.float32),
            "synth": to_model_input(normalize_batch(real.iq, normalization))}


def _worst(reports: list[dict[str, float]]) -> dict[str, float]:
    return {k: max(r[k] for r in reports) for k in reports[0]} if reports else {}


def export_model_dir(model_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None,
                     opset: int = 17, static_batch: int | None = None,
                     parity_lengths: tuple[int, ...] = (128, 1000, 4096)) -> dict[str, Any]:
    """Export a trained model directory: model.onnx, static/model_L<b>.onnx per bucket, a parity
    and DLA report (export_report.json); model.json in out_dir records the files and results.

    out_dir defaults to model_dir; a different out_dir gets a copy of the weights so it is a
    complete model directory. The model's INT8 graph stays named in model.json (and is copied)
    only while it is the one calibrated from the model.onnx written (report["int8"] says)."""
    import json

    from rfclassify.model.dla_check import check_onnx_for_dla
    from rfclassify.model.network import load_trained

    model, meta = load_trained(model_dir)
    # refused before anything is copied or written (an --out half made, a traceback for a bucket,
    # before the sixty-sixth session)
    check_opset(opset)
    from rfclassify.model.dla_check import MAX_BATCH

    if static_batch is not None and not 1 <= static_batch <= MAX_BATCH:
        raise ConfigError(f"static batch {static_batch} outside 1..{MAX_BATCH}, the DLA's batch limit")
    factor = getattr(model, "downsample", 1)
    uneven = [b for b in meta.buckets_samples if b % factor]
    if uneven:
        raise ConfigError(f"buckets {uneven} of model.json are not multiples of the network's downsampling "
                          f"factor {factor}: no static graph can be made for them")
    out = Path(out_dir or model_dir)
    out.mkdir(parents=True, exist_ok=True)
    if out.resolve() != Path(model_dir).resolve():
        for name in (meta.weights_file, "train_log.json", "training_curves.png", meta.refiner.get("file", ""),
                     meta.refiner.get("light", {}).get("file", ""), meta.low_order_refiner.get("file", "")):
            if name and (Path(model_dir) / name).is_file():   # whole or not at all (a full disk)
                copy_atomic(Path(model_dir) / name, out / name)
    dyn = export_onnx(model, out / meta.onnx_file, opset=opset)
    report: dict[str, Any] = {"opset": opset, "onnx_file": meta.onnx_file, "static_batch": static_batch,
                              "dynamic": {}, "static": {}}
    for length in parity_lengths:
        inputs = parity_inputs(length, normalization=meta.normalization)
        report["dynamic"][str(length)] = {k: onnx_parity(dyn, model, x) for k, x in inputs.items()}
    for b in meta.buckets_samples:
        rel = f"static/{static_onnx_name(b, static_batch)}"
        path = export_onnx(model, out / rel, opset=opset, static_length=b, batch_size=static_batch)
        inputs = parity_inputs(b, normalization=meta.normalization)
        if static_batch:
            inputs = {k: np.resize(x, (static_batch, *x.shape[1:])) for k, x in inputs.items()}
        violations = check_onnx_for_dla(path)
        report["static"][str(b)] = {
            "file": rel, "parity": {k: onnx_parity(path, model, x) for k, x in inputs.items()},
            "dla_violations": [str(v) for v in violations]}
    every = [p for d in report["dynamic"].values() for p in d.values()]
    every += [p for s in report["static"].values() for p in s["parity"].values()]
    report["worst"] = _worst(every)
    report["dla_ok_all_buckets"] = all(not s["dla_violations"] for s in report["static"].values())
    write_atomic(out / "export_report.json", json.dumps(report, indent=2) + "\n")
    extra = dict(meta.extra)
    from rfclassify._digest import file_sha256

    extra["export"] = {"opset": opset, "static_files": {b: s["file"] for b, s in report["static"].items()},
                       "static_batch": static_batch, "parity_worst": report["worst"],
                       "dla_ok_all_buckets": report["dla_ok_all_buckets"],
                       # the graphs' digests tie them to this model.json (rfclassify.model.provenance)
                       "onnx_sha256": file_sha256(dyn),
                       "static_sha256": {b: file_sha256(out / s["file"]) for b, s in report["static"].items()}}
    meta = meta.with_updates(extra=extra)
    report["int8"] = _carry_int8(meta, Path(model_dir), out)
    if report["int8"].startswith("dropped"):
        extra.pop("int8", None)
        meta = meta.with_updates(int8_onnx_file="", extra=extra)
    report["tensorrt_int8"] = _carry_tensorrt_int8(meta, Path(model_dir), out)
    if report["tensorrt_int8"].startswith("dropped"):
        extra.pop("tensorrt_int8", None)
        meta = meta.with_updates(extra=extra)
    meta.save(out)
    return report


def _copy_in(model_dir: Path, out: Path, names: list[str]) -> list[Path]:
    """Copy the named files of model_dir that exist into out (another directory), each whole or
    not at all (_atomic.copy_atomic); the copies made."""
    copied = []
    for name in names:
        src, dst = model_dir / name, out / name
        if name and src.is_file() and src.resolve() != dst.resolve():
            copy_atomic(src, dst)
            copied.append(dst)
    return copied


def _carry(model_dir: Path, out: Path, names: list[str], problem: Callable[[], str | None], kept: str) -> str:
    """Copy calibrated files `names` into out, then keep them ("kept: <kept>") unless
    `problem()` (asked of the copies) says why they no longer belong to the model just written:
    then the copies are removed and the report says "dropped: <why>"."""
    copied = _copy_in(model_dir, out, names)
    why = problem()
    if why:
        for path in copied:
            path.unlink()
        return f"dropped: {why}"
    return f"kept: {kept}"


def _carry_int8(meta: ModelMeta, model_dir: Path, out: Path) -> str:
    """What becomes of the model's INT8 graph (rfclassify.quant.cpu_int8) after an export: kept
    (copied to another out directory) while it is the one calibrated from the model.onnx just
    written (export is deterministic for the same weights and torch), else dropped from
    model.json with the reason (and its copy removed): an INT8 graph of another fp32 graph must
    be calibrated again."""
    from rfclassify.quant.cpu_int8 import int8_problem

    if not meta.int8_onnx_file:
        return "none"
    return _carry(model_dir, out, [meta.int8_onnx_file], lambda: int8_problem(meta, out),
                  f"{meta.int8_onnx_file} was calibrated from this model.onnx")


def _carry_tensorrt_int8(meta: ModelMeta, model_dir: Path, out: Path) -> str:
    """The same as _carry_int8 for TensorRT's INT8 artifacts (rfclassify.quant.tensorrt_int8),
    whose calibration cache must also name the static graphs just written."""
    from rfclassify.quant.tensorrt_int8 import artifact_problem

    record = meta.extra.get("tensorrt_int8")
    if not isinstance(record, dict):
        return "none"
    names = [record.get("qdq_file", ""), record.get("calibration_cache_file", "")]
    return _carry(model_dir, out, names,
                  lambda: artifact_problem(meta, out, "qdq") or artifact_problem(meta, out, "calibration_cache"),
                  f"{', '.join(names)} were calibrated from this model.onnx and its static graphs")
