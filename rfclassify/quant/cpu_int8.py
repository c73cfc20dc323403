"""INT8 for ONNX Runtime on the CPU: the model's fp32 ONNX graph, calibrated on the shipped
calibration set, rewritten as a Q/DQ graph, with what model.json records about it.

The precision plan (``cpu_int8_plan``): every node of the trunk runs in INT8 (ONNX Runtime
fuses each DequantizeLinear -> Conv -> QuantizeLinear into an integer convolution), with uint8
activations, asymmetric and per tensor, and int8 weights, symmetric and per output channel
(U8S8: ONNX Runtime's fast form on x86; the symmetric int8 activations TensorRT wants ran
slower than fp32 here, ../shared/DESIGN.md). The two heads stay fp32 (``FP32_PREFIXES``):
1x1 convolutions on the pooled features, a few thousand multiply-adds a burst, whose outputs
are the logits and the SNR estimate themselves.

Calibration (``calibration_windows``) runs the bursts exactly as serving sees them: each burst
normalized whole with the model's own normalization and cut into its bucket's windows
(``burst_to_windows`` with the model's ``BucketPolicy``), every bucket in batches of its own
length. The range of every activation (``activation_statistics``) is the central
``PERCENTILE`` % of its values over all of them, from a histogram between its minimum and
maximum (``clipped_range``): the minimum and maximum themselves (MinMax) spend the 256 steps
on a few outliers, the strong receiver DC offsets of the calibration set, and tripled the SNR
estimate's error (docs/model.md, "INT8 on the CPU"). ONNX Runtime's own histogram calibrators
cannot merge batches of different lengths, so the ranges are computed here and handed to its
quantizer.

Rounding the weights to int8 moves the mean of a convolution's outputs, for inputs (after a
ReLU) whose means are not zero; through 23 convolutions that shifted the SNR estimate by
a third of a dB and the probabilities of low-SNR bursts. Each INT8 convolution's bias is
corrected by that shift before quantizing (``correct_rounding_bias``: its input's per-channel
means over the calibration windows times the weights' rounding error, the bias correction of
Nagel et al., "Data-Free Quantization", 2019).

The INT8 graph is tied to the fp32 graph it was made from: model.json ``extra.int8`` records
the sha256 of both, and the ONNX Runtime backend refuses an INT8 graph whose source is no
longer the model's ``model.onnx`` (``int8_problem``). So the model directory changes only
once a calibration is complete: its three INT8 files and model.json are written under
temporary names beside them and checked, then renamed, model.json last
(``calibrate_model_dir``); a calibration stopped before (Ctrl-C, SIGTERM, an error) leaves
the directory as it was (the INT8 files were once replaced first, and a Ctrl-C during the
agreement check left model.json recording other files' sha256s: the old INT8 graph was gone,
and serving fell back to fp32).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rfclassify._atomic import replacing_together, write_atomic
from rfclassify._digest import file_sha256
from rfclassify._exceptions import ConfigError, InputError, MessageError, ModelNotFoundError
from rfclassify._optional import require
from rfclassify.model.meta import INPUT_NAME, META_FILE, OUTPUT_NAMES, ModelMeta
from rfclassify.model.provenance import file_problem

INT8_ONNX_FILE = "model_int8.onnx"
#: nodes whose names start with one of these stay fp32 (the classification and SNR heads)
FP32_PREFIXES: tuple[str, ...] = ("/head/", "/snr_head/")
#: bursts of each label per bucket that the INT8 graph is compared with the fp32 one on
AGREEMENT_PER_LABEL = 8
QUANT_FORMAT = "QDQ"
ACTIVATIONS = "uint8, asymmetric, per tensor"
WEIGHTS = "int8, symmetric, per output channel"
#: the share of each activation's values its INT8 range covers, two-sided (a tensor that is
#: never negative keeps 0 as its floor)
PERCENTILE = 99.99
HISTOGRAM_BINS = 4096
#: samples per calibration batch (windows x bucket length): bounds the memory of every
#: activation of one batch held at once
BATCH_SAMPLES = 1 << 16
METHOD = f"percentile {PERCENTILE:g} (histogram of {HISTOGRAM_BINS} bins)"
BIAS_CORRECTION = "each INT8 convolution's bias moved back by its weights' rounding error times its input's mean"
#: nodes whose outputs need no range of their own: shape arithmetic, and reshapes that only
#: relabel a tensor
_NO_RANGE_OPS = frozenset({"Shape", "Slice", "Concat", "Constant", "Reshape", "Flatten"})


def default_calibration_path() -> Path:
    """calibration_data/calibration.h5, shipped beside the package (calibration_data/README.md)."""
    return Path(__file__).resolve().parents[2] / "calibration_data" / "calibration.h5"


def cpu_int8_plan(node_names: Sequence[str]) -> dict[str, list[str]]:
    """Which nodes of the fp32 graph run in INT8 and which stay fp32 (FP32_PREFIXES)."""
    fp32 = [n for n in node_names if n.startswith(FP32_PREFIXES)]
    kept = set(fp32)
    return {"int8": [n for n in node_names if n not in kept], "fp32": fp32}


def calibration_windows(path: str | os.PathLike[str], meta: ModelMeta,
                        max_bursts: int | None = None) -> tuple[dict[int, np.ndarray], dict[str, Any]]:
    """The calibration set as the model sees it: {bucket: (n, 2, 1, bucket) float32 model input}
    and what was read ({"bursts", "rejected", "rejected_by_reason", "samples_sha256"}: the
    bursts serving would reject, left out, counted by its reject reason (too_short,
    non_finite, zero_power...); the file's whole samples). max_bursts takes that many, spread
    evenly over the file."""
    from rfclassify.data.reader import DatasetReader
    from rfclassify.dsp.windows import burst_to_windows, to_model_input

    policy = meta.bucket_policy
    by_bucket: dict[int, list[np.ndarray]] = {}
    rejected: dict[str, int] = {}
    with DatasetReader(path) as ds:
        n = len(ds)
        if n == 0:
            raise InputError(f"{path}: the calibration set holds no bursts")
        take = n if max_bursts is None else max(1, min(int(max_bursts), n))
        indices = np.unique(np.linspace(0, n - 1, take).round().astype(np.int64))
        for burst in ds.read(indices):
            try:
                w = burst_to_windows(burst, policy)
            except MessageError as exc:   # a burst serving would reject is not what it calibrates for
                rejected[exc.reason] = rejected.get(exc.reason, 0) + 1
                continue
            by_bucket.setdefault(w.bucket_samples, []).append(w.windows)
        samples_sha256 = ds.samples_sha256()
    if not by_bucket:
        raise InputError(f"{path}: every calibration burst was rejected as serving would reject it "
                         f"({rejected_text(rejected)})")
    windows = {b: to_model_input(np.concatenate(ws)) for b, ws in sorted(by_bucket.items())}
    return windows, {"bursts": int(indices.size), "rejected": sum(rejected.values()),
                     "rejected_by_reason": dict(sorted(rejected.items())), "samples_sha256": samples_sha256}


def rejected_text(by_reason: dict[str, int]) -> str:
    """Rejected bursts by reason, for a line: "2 too_short, 1 non_finite"."""
    return ", ".join(f"{n} {reason}" for reason, n in sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0])))


def calibration_batches(windows: dict[int, np.ndarray]) -> Iterator[np.ndarray]:
    """Each bucket's windows in batches of about BATCH_SAMPLES samples (one length per batch)."""
    for x in windows.values():
        step = max(1, BATCH_SAMPLES // x.shape[-1])
        for start in range(0, x.shape[0], step):
            yield x[start:start + step]


def clipped_range(counts: np.ndarray, lo: float, hi: float, percentile: float = PERCENTILE) -> tuple[float, float]:
    """The range holding the central `percentile` % of values whose histogram over [lo, hi] is
    `counts` (equal bins), its edges rounded outwards to bin edges; a floor of 0 stays 0
    (after a ReLU), and the range always holds 0 (as INT8's zero point must)."""
    if not 0 < percentile <= 100:
        raise ConfigError(f"percentile must be in (0, 100], got {percentile}")
    total = int(counts.sum())
    if total == 0 or hi <= lo:
        return min(lo, 0.0), max(hi, 0.0)
    edges = np.linspace(lo, hi, counts.size + 1)
    cum = np.cumsum(counts)
    tail = (100.0 - percentile) / 200.0 * total
    first = int(np.searchsorted(cum, tail, side="right"))        # the bin holding the low cut
    last = int(np.searchsorted(cum, total - tail, side="left"))  # the bin holding the high cut
    rmin = lo if lo >= 0 else float(edges[first])
    rmax = float(edges[min(last + 1, counts.size)])
    return min(rmin, 0.0), max(rmax, 0.0)


def activation_tensors(model: Any, plan: dict[str, list[str]]) -> list[str]:
    """The tensors the INT8 graph quantizes: the input and the outputs of the INT8 nodes (not
    the graph's outputs, nor shape arithmetic)."""
    int8 = set(plan["int8"])
    outputs = {o.name for o in model.graph.output}
    names = [i.name for i in model.graph.input]
    names += [o for node in model.graph.node if node.name in int8 and node.op_type not in _NO_RANGE_OPS
              for o in node.output if o not in outputs]
    return names


def int8_weights(w: np.ndarray) -> np.ndarray:
    """A convolution's weights (out, in, kh, kw) as the quantizer stores them, back in float:
    symmetric int8 per output channel, a float32 scale of max|w| / 127, the float32 quotient
    rounded half to even (as ONNX Runtime's quantizer computes them, ties included)."""
    w = np.asarray(w, np.float32)
    absmax = np.abs(w).reshape(w.shape[0], -1).max(axis=1).astype(np.float64)
    scale = (2.0 * absmax / 254.0).astype(np.float32)
    scale = np.where(scale > 0, scale, np.float32(1.0)).reshape(-1, *([1] * (w.ndim - 1)))
    return np.clip(np.rint(w / scale), -127, 127).astype(np.float64) * scale.astype(np.float64)


def rounding_bias(w: np.ndarray, input_mean: np.ndarray) -> np.ndarray:
    """How much rounding a convolution's weights to int8 moves the mean of each of its outputs,
    for inputs whose channels have these means (edges of the window aside): subtract it from
    the bias and the INT8 convolution's outputs are centred where the fp32 one's are."""
    dw = int8_weights(w) - np.asarray(w, np.float64)
    return dw.sum(axis=(2, 3)) @ np.asarray(input_mean, np.float64)


def correct_rounding_bias(model: Any, nodes: Sequence[str], means: dict[str, np.ndarray]) -> int:
    """Subtract rounding_bias from the bias of each named convolution (in place, on the fp32
    graph the quantizer then reads); means: each convolution's input's per-channel mean over
    the calibration windows. Returns how many were corrected (a convolution without a bias
    is left alone)."""
    from onnx import numpy_helper

    init = {i.name: i for i in model.graph.initializer}
    wanted = set(nodes)
    done = 0
    for node in model.graph.node:
        if node.name not in wanted or node.op_type != "Conv" or len(node.input) < 3:
            continue
        w = numpy_helper.to_array(init[node.input[1]])
        bias = numpy_helper.to_array(init[node.input[2]]).astype(np.float64)
        bias -= rounding_bias(w, means[node.input[0]])
        init[node.input[2]].CopyFrom(numpy_helper.from_array(bias.astype(np.float32), node.input[2]))
        done += 1
    return done


def conv_inputs(model: Any, nodes: Sequence[str]) -> list[str]:
    """The input tensors of the named convolutions."""
    wanted = set(nodes)
    return list(dict.fromkeys(n.input[0] for n in model.graph.node if n.name in wanted and n.op_type == "Conv"))


def activation_statistics(model: Any, names: Sequence[str], mean_names: Sequence[str],
                          windows: dict[int, np.ndarray], percentile: float = PERCENTILE
                          ) -> tuple[dict[str, tuple[float, float]], dict[str, np.ndarray]]:
    """Over the calibration windows: each of `names`' range (clipped_range; one pass for its
    minimum and maximum, one for its histogram between them), and each of `mean_names`'
    per-channel mean (axis 1)."""
    onnx = require("onnx", "INT8 calibration")
    ort = require("onnxruntime", "INT8 calibration")
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    every = list(dict.fromkeys([*names, *mean_names]))
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in every)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    # no fusions: every tensor asked for must stay in the graph as the quantizer sees it
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(probe.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"])
    lo = dict.fromkeys(names, np.inf)
    hi = dict.fromkeys(names, -np.inf)
    sums: dict[str, Any] = dict.fromkeys(mean_names, 0.0)
    seen = dict.fromkeys(mean_names, 0)
    for x in calibration_batches(windows):
        out = dict(zip(every, sess.run(every, {INPUT_NAME: x}), strict=True))
        for n in names:
            lo[n] = min(lo[n], float(out[n].min()))
            hi[n] = max(hi[n], float(out[n].max()))
        for n in mean_names:
            v = np.moveaxis(out[n], 1, 0).reshape(out[n].shape[1], -1)
            sums[n] = sums[n] + v.sum(axis=1, dtype=np.float64)
            seen[n] += v.shape[1]
    counts = {n: np.zeros(HISTOGRAM_BINS, np.int64) for n in names}
    for x in calibration_batches(windows):
        for n, v in zip(names, sess.run(list(names), {INPUT_NAME: x}), strict=True):
            if hi[n] > lo[n]:
                counts[n] += np.histogram(v, bins=HISTOGRAM_BINS, range=(lo[n], hi[n]))[0]
    ranges = {n: clipped_range(counts[n], lo[n], hi[n], percentile) for n in names}
    return ranges, {n: np.asarray(sums[n]) / max(seen[n], 1) for n in mean_names}


def measure(fp32_path: str | os.PathLike[str], workdir: str | os.PathLike[str], windows: dict[int, np.ndarray],
            percentile: float = PERCENTILE) -> tuple[Path, dict[str, list[str]], dict[str, tuple[float, float]]]:
    """Calibrate fp32_path on `windows` (calibration_windows): its graph prepared as ONNX Runtime's
    quantizer expects and bias-corrected (``correct_rounding_bias``), saved in workdir; the
    plan; and the range of every tensor the plan quantizes (``activation_tensors``). Both the
    CPU graph and TensorRT's artifacts (rfclassify.quant.tensorrt_int8) are written from these."""
    onnx = require("onnx", "INT8 calibration")
    from onnxruntime.quantization.shape_inference import quant_pre_process

    # shape inference and ONNX Runtime's basic fusions first (tensor names are kept)
    prepared = Path(workdir) / "prepared.onnx"
    quant_pre_process(str(fp32_path), str(prepared), skip_symbolic_shape=True)
    model = onnx.load(str(prepared))
    plan = cpu_int8_plan([node.name for node in model.graph.node])
    # ranges and means of the fp32 graph's activations: what the INT8 graph approximates
    ranges, means = activation_statistics(model, activation_tensors(model, plan),
                                          conv_inputs(model, plan["int8"]), windows, percentile)
    correct_rounding_bias(model, plan["int8"], means)
    corrected = Path(workdir) / "corrected.onnx"
    onnx.save(model, str(corrected))
    return corrected, plan, ranges


def write_qdq(corrected: Path, out_path: str | os.PathLike[str], plan: dict[str, list[str]],
              ranges: dict[str, tuple[float, float]], windows: dict[int, np.ndarray],
              symmetric: bool = False) -> None:
    """Write the Q/DQ graph of `corrected` (measure's) to out_path, every activation quantized to
    its range in `ranges`: uint8 asymmetric (ONNX Runtime's fast U8S8), or with symmetric=True
    int8 symmetric, scale max(|low|, |high|) / 127 and zero point 0 (TensorRT's form). Weights
    int8, symmetric, per output channel; the plan's fp32 nodes stay float. In TensorRT's form the
    weights stay float behind a QuantizeLinear/DequantizeLinear pair and the biases stay float:
    ONNX Runtime's default, int8 weights and int32 biases behind a DequantizeLinear, is not what
    TensorRT's ONNX parser takes (its DequantizeLinear reads INT8 alone, onnx-tensorrt's
    operator table; before the sixty-seventh session the graph held 23 int32 biases)."""
    quantization = require("onnxruntime.quantization", "INT8 calibration")
    batches = calibration_batches(windows)

    class Reader(quantization.CalibrationDataReader):
        # ONNX Runtime's MinMax pass runs too; every activation's range is then overridden
        def get_next(self) -> dict[str, np.ndarray] | None:
            x = next(batches, None)
            return None if x is None else {INPUT_NAME: x}

    out = Path(out_path)
    overrides = {n: [{"rmin": np.array(a, np.float32), "rmax": np.array(b, np.float32)}]
                 for n, (a, b) in ranges.items()}
    part = corrected.with_name(out.name + ".part")
    quantization.quantize_static(
        str(corrected), str(part), Reader(), quant_format=quantization.QuantFormat.QDQ,
        activation_type=quantization.QuantType.QInt8 if symmetric else quantization.QuantType.QUInt8,
        weight_type=quantization.QuantType.QInt8,
        per_channel=True, calibrate_method=quantization.CalibrationMethod.MinMax,
        nodes_to_exclude=plan["fp32"],
        extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True,
                       "TensorQuantOverrides": overrides,
                       **({"QuantizeBias": False, "AddQDQPairToWeight": True} if symmetric else {})},
        calibration_providers=["CPUExecutionProvider"])
    write_atomic(out, part.read_bytes())


def quantize_onnx(fp32_path: str | os.PathLike[str], out_path: str | os.PathLike[str],
                  windows: dict[int, np.ndarray], percentile: float = PERCENTILE) -> dict[str, list[str]]:
    """Write the CPU's Q/DQ INT8 graph of fp32_path to out_path, calibrated on `windows`
    (calibration_windows); returns the plan."""
    with tempfile.TemporaryDirectory(prefix="rfclassify-calibrate-") as tmp:
        corrected, plan, ranges = measure(fp32_path, tmp, windows, percentile)
        write_qdq(corrected, out_path, plan, ranges, windows)
    return plan


def _session(path: Path) -> Any:
    ort = require("onnxruntime", "INT8 calibration")
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def agreement(fp32_path: Path, int8_path: Path, meta: ModelMeta, seed: int = 0) -> dict[str, dict[str, float]]:
    """The INT8 graph against the fp32 one (``agreement_of`` their ONNX Runtime sessions)."""
    ref, got = _session(fp32_path), _session(int8_path)
    return agreement_of(lambda x: ref.run(list(OUTPUT_NAMES), {INPUT_NAME: x}),
                        lambda x: got.run(list(OUTPUT_NAMES), {INPUT_NAME: x}), meta, seed=seed)


def agreement_of(reference: Callable[[np.ndarray], Sequence[np.ndarray]],
                 candidate: Callable[[np.ndarray], Sequence[np.ndarray]], meta: ModelMeta, seed: int = 0,
                 buckets: Sequence[int] | None = None) -> dict[str, dict[str, float]]:
    """How far `candidate` answers from `reference` (each: model input -> (logits, snr_db)) on
    freshly synthesized bursts (AGREEMENT_PER_LABEL of each label per bucket, SNR 0..30 dB,
    normalized as the model expects): top-1 agreement, the largest softmax difference, the
    mean and largest SNR estimate difference."""
    from rfclassify.dsp.synth import synthesize
    from rfclassify.dsp.windows import normalize_batch, to_model_input
    from rfclassify.model.calibration import softmax

    rng = np.random.default_rng(seed)
    labels = [label for label in meta.labels for _ in range(AGREEMENT_PER_LABEL)]
    report: dict[str, dict[str, float]] = {}
    for bucket in buckets or meta.buckets_samples:
        bursts = synthesize(labels, bucket, rng, snr_db=rng.uniform(0, 30, len(labels)))
        x = to_model_input(normalize_batch(bursts.iq, meta.normalization))
        (l32, s32), (l8, s8) = reference(x), candidate(x)
        l32, l8 = np.reshape(l32, (len(labels), -1)), np.reshape(l8, (len(labels), -1))
        p32, p8 = softmax(l32), softmax(l8)
        snr_diff = np.abs(np.ravel(s8) - np.ravel(s32))
        report[str(bucket)] = {
            "bursts": len(labels),
            "top1_agreement": round(float(np.mean(p32.argmax(1) == p8.argmax(1))), 4),
            "max_abs_softmax_diff": round(float(np.max(np.abs(p32 - p8))), 4),
            "mean_abs_snr_db_diff": round(float(snr_diff.mean()), 3),
            "max_abs_snr_db_diff": round(float(snr_diff.max()), 3)}
    return report


def _check_graphs(model_dir: str | os.PathLike[str], meta: ModelMeta) -> None:
    """ModelNotFoundError naming model.onnx or a static graph that does not parse, before any
    INT8 file is replaced: a damaged static graph failed after both INT8 graphs were rewritten
    and before model.json was, which then refused them (a protobuf traceback, sixty-sixth session);
    or that is not the graph model.json records (another model's: its calibration would record
    it as this model's, rfclassify.model.provenance)."""
    onnx = require("onnx", "INT8 calibration")
    static = (meta.extra.get("export") or {}).get("static_files") or {}
    for name in [meta.onnx_file, *static.values()]:
        path = Path(model_dir) / name
        if not path.is_file() and name != meta.onnx_file:
            continue   # a static graph not exported: write_artifacts leaves it out
        foreign = file_problem(meta, model_dir, name)
        if foreign:
            raise ModelNotFoundError(foreign)
        try:
            onnx.load(str(path), load_external_data=False)
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and its kin
            raise ModelNotFoundError(f"{path}: not a readable ONNX graph ({type(exc).__name__}: {exc}); "
                                     "export the model again (`rfclassify export`)") from None


def calibrate_model_dir(model_dir: str | os.PathLike[str], calibration: str | os.PathLike[str] | None = None,
                        max_bursts: int | None = None) -> dict[str, Any]:
    """Calibrate the model in model_dir and write its INT8 graph (INT8_ONNX_FILE) beside model.onnx;
    model.json then names it (int8_onnx_file) and records how it was made (extra.int8, returned).
    The same ranges make TensorRT's INT8 artifacts (rfclassify.quant.tensorrt_int8), recorded
    in extra.tensorrt_int8. All of them, model.json included, are written under temporary names
    and checked before any replaces its file, model.json last (replacing_together): stopped
    before that, the directory is left as it was."""
    ort = require("onnxruntime", "INT8 calibration")
    meta = ModelMeta.load(model_dir)
    fp32 = Path(model_dir) / meta.onnx_file
    if not fp32.is_file():
        raise ConfigError(f"{fp32} does not exist: export the model first (`rfclassify export`)")
    _check_graphs(model_dir, meta)
    cal = Path(calibration) if calibration is not None else default_calibration_path()
    windows, read = calibration_windows(cal, meta, max_bursts)
    from rfclassify.quant import tensorrt_int8

    model_dir = Path(model_dir)
    final = [model_dir / INT8_ONNX_FILE, model_dir / tensorrt_int8.TRT_QDQ_FILE,
             model_dir / tensorrt_int8.CALIBRATION_CACHE_FILE, model_dir / META_FILE]
    with tempfile.TemporaryDirectory(prefix="rfclassify-calibrate-") as tmp, \
            replacing_together(final) as (out, qdq, cache, meta_file):
        corrected, plan, ranges = measure(fp32, tmp, windows)
        write_qdq(corrected, out, plan, ranges, windows)
        trt_record = tensorrt_int8.write_artifacts(model_dir, meta, corrected, plan, ranges, windows,
                                                   qdq_path=qdq, cache_path=cache)
        record = {
            "file": INT8_ONNX_FILE, "sha256": file_sha256(out), "source_onnx_sha256": file_sha256(fp32),
            "format": QUANT_FORMAT, "activations": ACTIVATIONS, "weights": WEIGHTS, "method": METHOD,
            "bias_correction": BIAS_CORRECTION,
            "fp32_nodes": plan["fp32"], "int8_nodes": len(plan["int8"]),
            "calibration": {"file": cal.name, **read,
                            "windows_per_bucket": {str(b): int(x.shape[0]) for b, x in windows.items()}},
            "onnxruntime": ort.__version__,
            "agreement": agreement(fp32, out, meta),
        }
        extra = dict(meta.extra)
        extra["int8"] = record
        extra["tensorrt_int8"] = trt_record
        # ModelMeta writes the file (its format in one place), in the work folder; its bytes go
        # to model.json's temporary name, renamed last
        written = meta.with_updates(int8_onnx_file=INT8_ONNX_FILE, extra=extra).save(tmp)
        meta_file.write_bytes(written.read_bytes())
    return record


def int8_problem(meta: ModelMeta, model_dir: str | os.PathLike[str]) -> str | None:
    """Why the model's INT8 graph cannot be served (None when it can): model.json names none, the
    file is missing, or it is not the file calibrated from this model.onnx (model.json extra.int8
    records both digests; a model.json without that record is trusted as it stands)."""
    if not meta.int8_onnx_file:
        return (f"INT8 artifacts are not calibrated yet for model {meta.model_id!r} "
                "(model.json has no int8_onnx_file); run `rfclassify calibrate`")
    record = meta.extra.get("int8")
    record = record if isinstance(record, dict) else {}
    return calibrated_file_problem(Path(model_dir) / meta.int8_onnx_file, "INT8 graph", record.get("sha256"),
                                   Path(model_dir) / meta.onnx_file, record.get("source_onnx_sha256"))


def calibrated_file_problem(path: Path, what: str, digest: str | None, source: Path,
                            source_digest: str | None) -> str | None:
    """Why a file `rfclassify calibrate` wrote (`what` names it) cannot be used, or None: it cannot
    be read or does not exist, it is not the file model.json records (`digest`, when recorded),
    or it was calibrated from another `source` (model.onnx; `source_digest`, when recorded), or
    that source cannot be read to tell (a missing one is not checked)."""
    try:
        present = path.is_file()
    except OSError as exc:   # a name past the file system's limits, say
        return f"the {what} {path} cannot be read ({exc.strerror or exc})"
    if not present:
        return f"the {what} {path} does not exist; run `rfclassify calibrate`"
    # a file that is there but cannot be read (its mode, an I/O error) was a PermissionError
    # traceback from the digest before the seventieth session
    try:
        if digest and file_sha256(path) != digest:
            return f"{path} is not the {what} model.json records (sha256 differs); run `rfclassify calibrate`"
    except OSError as exc:
        return f"the {what} {path} cannot be read ({exc.strerror or exc})"
    try:
        stale = bool(source_digest) and source.is_file() and file_sha256(source) != source_digest
    except OSError as exc:
        return f"{source} cannot be read ({exc.strerror or exc}), so the {what} {path} cannot be checked against it"
    if stale:
        return (f"{path} was calibrated from another {source.name} (re-exported since); "
                "run `rfclassify calibrate` again")
    return None
