"""TensorRT's INT8 artifacts, made from the same calibration as the CPU's INT8 graph: one set of
activation ranges, two artifacts (../shared/DESIGN.md).

* ``TRT_QDQ_FILE``, a Q/DQ ONNX graph in TensorRT's form, for the GPU (explicit quantization;
  TensorRT 11 accepts nothing else): activations int8, symmetric, per tensor (zero point 0,
  scale max(|low|, |high|) / 127 from the clipped ranges of ``cpu_int8.activation_statistics``),
  weights int8, symmetric, per output channel (stored float behind a Q/DQ pair, TensorRT
  rounding them itself), biases float and corrected for the weights' rounding as on the CPU,
  the residual sums' inputs quantized (ONNX Runtime's quantizer puts Q/DQ on both inputs of
  every Add), the two heads float (the CPU plan's fp32 nodes).
* ``CALIBRATION_CACHE_FILE``, a calibration cache for the DLA (implicit quantization, which DLA
  INT8 needs and TensorRT 8.5-10.x still reads): the text TensorRT's own calibrators write,
  ``TRT-<version>-EntropyCalibration2`` then ``tensor: <hex>`` per tensor, hex the float32 bit
  pattern of the scale. It names the tensors of the per-bucket static graphs
  (``models/static/``, which the DLA engines are built from): the input and every trunk
  activation. The heads' tensors are left out (TensorRT then runs those layers in FP16).
  DLA's INT8 elementwise sum needs both inputs at one scale, and its INT8 pooling its input
  and output at one scale, so the inputs of every residual Add and the input and output of
  every pooling, with what they share with other such groups, take the largest scale among
  them (``equalize_scales``). TensorRT rounds the static graphs' weights itself, so the bias
  correction does not reach the DLA (0.1 points, 0.09 dB of SNR error, docs/model.md).

The cache is written for ``CACHE_TENSORRT_VERSION`` (JetPack 6.1/6.2's TensorRT); the engine
builder rewrites its first line for the TensorRT it runs (``retarget_cache``), since TensorRT
may ignore a cache whose header names another version. TensorRT itself never ran here: both
artifacts are checked by format and, for the Q/DQ graph and the cache's scales, by running
them in ONNX Runtime (``agreement``; ONNX Runtime's symmetric int8 is not TensorRT's kernels).
"""

from __future__ import annotations

import os
import re
import struct
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rfclassify._atomic import write_atomic
from rfclassify._digest import file_sha256, model_file_sha256
from rfclassify._exceptions import InputError, ModelNotFoundError
from rfclassify._optional import require

TRT_QDQ_FILE = "model_trt_int8.onnx"
CALIBRATION_CACHE_FILE = "model_trt_int8.calib"
#: the TensorRT of JetPack 6.1/6.2, the current Jetson target (../shared/DESIGN.md)
CACHE_TENSORRT_VERSION = "10.3.0"
CACHE_ALGORITHM = "EntropyCalibration2"
ACTIVATIONS = "int8, symmetric, per tensor"
WEIGHTS = "int8, symmetric, per output channel (stored float behind a Q/DQ pair)"
QMAX = 127
_HEADER = re.compile(r"^TRT-(\d+)-(\w+)$")
_LINE = re.compile(r"^(.+): ([0-9a-f]{8})$")


def version_code(version: str) -> int:
    """TensorRT's number for a version, as its cache header writes it: 8.6.1 -> 8601 (major
    below 10: major*1000 + minor*100 + patch), 10.3.0 -> 100300 (from 10: major*10000 + minor*100
    + patch)."""
    parts = str(version).split(".")
    try:
        major, minor, patch = (int(p) for p in (parts + ["0", "0"])[:3])
    except ValueError:
        raise InputError(f"not a TensorRT version: {version!r}") from None
    if min(major, minor, patch) < 0 or minor > 99 or patch > 99:
        raise InputError(f"not a TensorRT version: {version!r}")
    return major * 10000 + minor * 100 + patch if major >= 10 else major * 1000 + minor * 100 + patch


def symmetric_scales(ranges: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Each tensor's symmetric int8 scale, max(|low|, |high|) / 127 as float32 (a tensor that
    was always 0 gets 1/127, any positive scale representing it exactly)."""
    out = {}
    for name, (lo, hi) in ranges.items():
        amax = max(abs(float(lo)), abs(float(hi)))
        out[name] = float(np.float32(amax / QMAX if amax > 0 else 1.0 / QMAX))
    return out


#: DLA's INT8 pooling needs its input's and output's dynamic ranges equal (NvInfer.h,
#: IPoolingLayer: "When running pooling layer with DeviceType::kDLA in Int8 mode, the dynamic
#: ranges for input and output tensors must be equal")
POOLING_OPS = ("MaxPool", "AveragePool")


def scale_groups(nodes: Iterable[Any]) -> list[set[str]]:
    """Tensors that must share one scale on the DLA: the inputs of each elementwise sum (Add),
    and a pooling node's input with its output; merged where groups share a tensor."""
    parent: dict[str, str] = {}

    def root(t: str) -> str:
        while parent.setdefault(t, t) != t:
            t = parent[t]
        return t

    for node in nodes:
        if node.op_type == "Add" and len(node.input) == 2:
            tied = list(node.input)
        elif node.op_type in POOLING_OPS and node.input and node.output:
            tied = [node.input[0], node.output[0]]
        else:
            continue
        a, b = root(tied[0]), root(tied[1])
        parent[a] = b
    groups: dict[str, set[str]] = {}
    for t in parent:
        groups.setdefault(root(t), set()).add(t)
    return [g for g in groups.values() if len(g) > 1]


def equalize_scales(scales: dict[str, float], nodes: Iterable[Any]) -> tuple[dict[str, float], int]:
    """`scales` with every group of ``scale_groups`` at the largest scale in it, as DLA's INT8
    elementwise sums and pooling require; and how many tensors' scales grew. Tensors without a
    scale are left out of their group. (Before the sixty-seventh session only the sums were
    equalized: the five MaxPools of every shipped DLA engine broke the pooling rule.)"""
    out = dict(scales)
    grown = 0
    for group in scale_groups(nodes):
        known = [t for t in group if t in out]
        if not known:
            continue
        top = max(out[t] for t in known)
        for t in known:
            if out[t] < top:
                out[t] = top
                grown += 1
    return out, grown


def cache_text(scales: dict[str, float], version: str = CACHE_TENSORRT_VERSION) -> str:
    """A TensorRT calibration cache naming these tensors' scales, header for `version`."""
    lines = [f"TRT-{version_code(version)}-{CACHE_ALGORITHM}"]
    for name, scale in scales.items():
        if "\n" in name or ": " in name:
            raise InputError(f"tensor name {name!r} cannot be written in a calibration cache")
        if not (scale > 0 and np.isfinite(scale)):
            raise InputError(f"tensor {name!r} has scale {scale}; a calibration cache needs a positive one")
        lines.append(f"{name}: {struct.pack('>f', scale).hex()}")
    return "\n".join(lines) + "\n"


def parse_cache(text: str) -> tuple[int, str, dict[str, float]]:
    """(version code, algorithm, {tensor: scale}) of a calibration cache; InputError, naming
    the line, for anything else."""
    lines = text.splitlines()
    head = _HEADER.match(lines[0].strip()) if lines else None
    if head is None:
        raise InputError("not a TensorRT calibration cache: the first line is not TRT-<version>-<algorithm>")
    scales: dict[str, float] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        m = _LINE.match(line.rstrip())
        if m is None:
            raise InputError(f"calibration cache line {number} is not 'tensor: <8 hex digits>': {line[:80]!r}")
        scales[m.group(1)] = struct.unpack(">f", bytes.fromhex(m.group(2)))[0]
    return int(head.group(1)), head.group(2), scales


def retarget_cache(text: str, version: str) -> str:
    """The cache with its header naming `version` (the tensors' lines unchanged)."""
    _, algorithm, _ = parse_cache(text)
    body = text.split("\n", 1)[1] if "\n" in text else ""
    return f"TRT-{version_code(version)}-{algorithm}\n{body}"


def static_tensor_names(paths: Sequence[Path]) -> set[str] | None:
    """The tensor names every one of these graphs has (inputs and node outputs), or None when
    there are no graphs."""
    onnx = require("onnx", "TensorRT's INT8 artifacts")
    common: set[str] | None = None
    for path in paths:
        graph = onnx.load(str(path), load_external_data=False).graph
        names = {i.name for i in graph.input} | {o for n in graph.node for o in n.output}
        common = names if common is None else common & names
    return common


def cache_scales(ranges: dict[str, tuple[float, float]], graph_nodes: Iterable[Any],
                 names: set[str] | None) -> tuple[dict[str, float], int]:
    """The scales the DLA cache holds: the symmetric scale of every ranged tensor that the
    static graphs have (all of them when `names` is None), sum inputs and pooling inputs and
    outputs equalized; and how many scales the equalization grew."""
    scales = symmetric_scales({n: r for n, r in ranges.items() if names is None or n in names})
    return equalize_scales(scales, graph_nodes)


def write_artifacts(model_dir: Path, meta: Any, corrected: Path, plan: dict[str, list[str]],
                    ranges: dict[str, tuple[float, float]], windows: dict[int, np.ndarray], *,
                    qdq_path: Path | None = None, cache_path: Path | None = None) -> dict[str, Any]:
    """Write TRT_QDQ_FILE and CALIBRATION_CACHE_FILE into model_dir from one calibration
    (cpu_int8.measure's graph, plan and ranges); returns model.json's ``extra.tensorrt_int8``.
    qdq_path and cache_path: write them there instead (the temporary files that calibrate
    renames to those names once the whole set is made and checked); the record names them
    by their names in model_dir all the same."""
    onnx = require("onnx", "TensorRT's INT8 artifacts")
    from rfclassify.quant.cpu_int8 import agreement, write_qdq

    model_dir = Path(model_dir)
    qdq = qdq_path or model_dir / TRT_QDQ_FILE
    write_qdq(corrected, qdq, plan, ranges, windows, symmetric=True)
    static_files = dict((meta.extra.get("export") or {}).get("static_files") or {})
    static_paths = [model_dir / f for f in static_files.values() if (model_dir / f).is_file()]
    nodes = list(onnx.load(str(corrected)).graph.node)
    scales, grown = cache_scales(ranges, nodes, static_tensor_names(static_paths) if static_paths else None)
    cache = cache_path or model_dir / CALIBRATION_CACHE_FILE
    write_atomic(cache, cache_text(scales))
    fp32 = model_dir / meta.onnx_file
    record: dict[str, Any] = {
        "qdq_file": TRT_QDQ_FILE, "qdq_sha256": file_sha256(qdq),
        "calibration_cache_file": CALIBRATION_CACHE_FILE, "calibration_cache_sha256": file_sha256(cache),
        "calibration_cache_tensorrt": CACHE_TENSORRT_VERSION,
        "source_onnx_sha256": file_sha256(fp32),
        "static_sha256": {b: file_sha256(model_dir / f) for b, f in static_files.items() if (model_dir / f).is_file()},
        "activations": ACTIVATIONS, "weights": WEIGHTS,
        "cache_tensors": len(scales), "cache_scales_equalized": grown,
        "agreement_qdq": agreement(fp32, qdq, meta),
    }
    # the cache's scales (equalized sums included) as ONNX Runtime runs them: a Q/DQ graph of
    # the same weights whose activation ranges are the cache's, made only to be measured
    with tempfile.TemporaryDirectory(prefix="rfclassify-dla-scales-") as tmpdir:
        emulated = Path(tmpdir) / "dla_scales.onnx"
        cached = {n: (-s * QMAX, s * QMAX) for n, s in scales.items()}
        write_qdq(corrected, emulated, plan, {**ranges, **cached}, windows, symmetric=True)
        record["agreement_cache_scales"] = agreement(fp32, emulated, meta)
    return record


def artifact_problem(meta: Any, model_dir: str | os.PathLike[str], which: str) -> str | None:
    """Why TensorRT's INT8 artifact `which` ('qdq' or 'calibration_cache') cannot be used, or None:
    model.json records none, the file is missing, it is not the one recorded, or it was
    calibrated from another model.onnx (the cache: or from other static graphs)."""
    record = meta.extra.get("tensorrt_int8")
    if not isinstance(record, dict) or not record.get(f"{which}_file"):
        return (f"TensorRT's INT8 artifacts are not calibrated for model {meta.model_id!r} "
                "(model.json has no extra.tensorrt_int8); run `rfclassify calibrate`")
    from rfclassify.quant.cpu_int8 import calibrated_file_problem

    path = Path(model_dir) / record[f"{which}_file"]
    what = "TensorRT Q/DQ graph" if which == "qdq" else "DLA calibration cache"
    problem = calibrated_file_problem(path, what, record.get(f"{which}_sha256"), Path(model_dir) / meta.onnx_file,
                                      record.get("source_onnx_sha256"))
    if problem:
        return problem
    if which == "calibration_cache":   # it names the static graphs' tensors
        static = (meta.extra.get("export") or {}).get("static_files") or {}
        digests = record.get("static_sha256") or {}
        if set(static) != set(digests):
            return (f"{path} was calibrated for the static graphs of buckets {sorted(digests, key=int)}, "
                    f"not {sorted(static, key=int)}; run `rfclassify calibrate` again")
        for bucket, digest in digests.items():
            graph = Path(model_dir) / static.get(bucket, f"static graph of bucket {bucket}")
            try:
                changed = not graph.is_file() or model_file_sha256(graph) != digest
            except ModelNotFoundError as exc:
                return f"{path} cannot be checked against its static graph: {exc}"
            if changed:
                return (f"{path} was calibrated for another {graph.name} (re-exported since); "
                        "run `rfclassify calibrate` again")
    return None
