"""What does the INT8 graph lose on an x86 CPU without VNNI?

ONNX Runtime runs each DequantizeLinear -> Conv -> QuantizeLinear of the INT8 graph as an
integer convolution of uint8 activations and int8 weights (U8S8). On x86 CPUs without VNNI
(SSE4.1, AVX2, AVX-512 before Cascade Lake / Zen 4) its kernels multiply them with
vpmaddubsw, which adds each adjacent pair of products into a *saturating* int16 before the
32-bit sum: 255 x 127 x 2 = 64,770 does not fit in 32,767. VNNI's vpdpbusd, and ARM's dot
product or widening instructions, add in 32 bits and never saturate. ONNX Runtime knows
(session option ``session.x64quantprecision``, off by default, turns such weights into uint8
on those CPUs, for its slower uint8 x uint8 kernels).

This machine has VNNI, so the probe emulates the other: ONNX Runtime reorders each filter
to (tap, input channel) with the channel innermost (``QLinearConv::ReorderFilter``) and its
im2col rows likewise, so the pairs are channels 2j and 2j+1 of one tap. For each quantized
convolution, in graph order, it takes the convolution's real uint8 input, finds every pair
whose sum leaves the int16 range, and adds the error (clipped minus exact, times the input
and weight scales) to the convolution's output before its QuantizeLinear, so the error
travels on through the rest of the network as it would on such a CPU. The network alone (no
refiners) on a labeled HDF5 file, each burst windowed and its windows' answers averaged as the
Classifier does; the graph runs with ONNX Runtime's optimizations off (the
same arithmetic in float; its answers are compared with the real, fused session's).

Printed: the mean accuracy over SNR, at >= 10 dB and the SNR estimate's error at 0..20 dB for the
real session, the emulation without and with saturation; the paired difference (+- 1 SE);
per convolution, the share of its outputs with a saturated pair. A measurement, not a test;
tests/test_bench_no_vnni_overflow_probe.py checks its parts. Results:
benchmarks/no_vnni_overflow_probe.md.

    PYTHONPATH=. python3 benchmarks/no_vnni_overflow_probe.py FILE.h5 [--model-dir models]
        [--bursts 4096] [--batch 128] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfclassify.model.meta import INPUT_NAME, OUTPUT_NAMES, ModelMeta  # noqa: E402

INT16_MIN, INT16_MAX = -32768, 32767


@dataclass
class QuantizedConv:
    """One integer convolution of the INT8 graph, as the emulation needs it."""

    name: str
    input_u8: str            # the uint8 tensor its DequantizeLinear reads
    input_scale: float
    input_zero_point: int
    weight_scale: np.ndarray  # (M,) float32, per output channel
    pairs: np.ndarray         # (M, K/2, 2) int32: the filter in (tap, channel) order, paired
    kernel: int
    stride: int
    dilation: int
    pads: tuple[int, int]     # before, after (along the length)

    @property
    def outputs(self) -> int:
        return self.pairs.shape[0]


def filter_pairs(w: np.ndarray) -> np.ndarray:
    """(M, C, 1, k) int8 weights -> (M, ceil(kC/2), 2) int32: each output channel's filter in
    ONNX Runtime's (tap, input channel) order, channel innermost, zero-padded to an even length
    and cut into the adjacent pairs vpmaddubsw adds."""
    m, c, _, k = w.shape
    flat = w[:, :, 0, :].astype(np.int32).transpose(0, 2, 1).reshape(m, k * c)
    if flat.shape[1] % 2:
        flat = np.pad(flat, ((0, 0), (0, 1)))
    return flat.reshape(m, -1, 2)


def im2col(a: np.ndarray, conv: QuantizedConv) -> np.ndarray:
    """(n, C, 1, L) uint8 -> (n, L_out, ceil(kC/2), 2) int32, each output position's inputs in
    the filter's order; padding takes the input's zero point (the value of 0.0)."""
    x = a[:, :, 0, :].astype(np.int32)
    x = np.pad(x, ((0, 0), (0, 0), conv.pads), constant_values=conv.input_zero_point)
    k, s, d = conv.kernel, conv.stride, conv.dilation
    length = (x.shape[-1] - d * (k - 1) - 1) // s + 1
    taps = np.stack([x[:, :, t * d: t * d + s * (length - 1) + 1: s] for t in range(k)], axis=2)
    cols = taps.transpose(0, 3, 2, 1).reshape(x.shape[0], length, -1)
    if cols.shape[-1] % 2:
        cols = np.pad(cols, ((0, 0), (0, 0), (0, 1)))
    return cols.reshape(x.shape[0], length, -1, 2)


def pair_overflow_error(conv: QuantizedConv, a: np.ndarray) -> np.ndarray:
    """(n, M, L_out) int64: what saturating every pair sum to int16 changes in each output's
    integer accumulator (0 where no pair leaves the range). Only pairs holding an input large
    enough to overflow with the channel's largest pair of weights are computed."""
    cols = im2col(a, conv)
    n, length = cols.shape[:2]
    err = np.zeros((n, conv.outputs, length), np.int64)
    w = conv.pairs
    reach = np.abs(w).sum(-1).max(0)                      # (P,) largest |w1| + |w2| of each pair
    threshold = np.where(reach > 0, INT16_MAX / np.maximum(reach, 1), np.inf)
    nn, ll, pp = np.nonzero(cols.max(-1) > threshold)
    if nn.size:
        sums = cols[nn, ll, pp, 0][:, None] * w[:, pp, 0].T + cols[nn, ll, pp, 1][:, None] * w[:, pp, 1].T
        lost = np.clip(sums, INT16_MIN, INT16_MAX) - sums   # (hits, M)
        np.add.at(err, (nn, slice(None), ll), lost)
    return err


def quantized_convs(model: Any) -> list[QuantizedConv]:
    """Every Conv of the Q/DQ graph whose input and weights come through DequantizeLinear, in
    graph order (the fp32 heads are left out)."""
    from onnx import helper, numpy_helper

    init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    producer = {out: node for node in model.graph.node for out in node.output}
    convs = []
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        act, wdq = producer.get(node.input[0]), producer.get(node.input[1])
        if act is None or wdq is None or act.op_type != "DequantizeLinear" or wdq.op_type != "DequantizeLinear":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        pads = attrs.get("pads", [0, 0, 0, 0])
        convs.append(QuantizedConv(
            name=node.name, input_u8=act.input[0],
            input_scale=float(init[act.input[1]]), input_zero_point=int(init[act.input[2]]),
            weight_scale=np.atleast_1d(init[wdq.input[1]]).astype(np.float32),
            pairs=filter_pairs(init[wdq.input[0]]), kernel=int(attrs["kernel_shape"][1]),
            stride=int(attrs.get("strides", [1, 1])[1]), dilation=int(attrs.get("dilations", [1, 1])[1]),
            pads=(int(pads[1]), int(pads[3]))))
    return convs


def correction_input(i: int) -> str:
    return f"overflow_correction_{i}"


def instrumented(model: Any, convs: list[QuantizedConv]) -> Any:
    """A copy of the graph where each quantized Conv's output gets `correction_input(i)` added
    (a float input, broadcast; zeros leave the graph as it was) and each one's uint8 input is
    a graph output."""
    import onnx
    from onnx import TensorProto, helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    by_name = {node.name: node for node in g.node}
    nodes = list(g.node)
    added = {}
    for i, conv in enumerate(convs):
        node = by_name[conv.name]
        raw, fixed = node.output[0], node.output[0] + "_overflow"
        for other in nodes:
            for j, name in enumerate(other.input):
                if name == raw:
                    other.input[j] = fixed
        added[conv.name] = helper.make_node("Add", [raw, correction_input(i)], [fixed], name=fixed)
        g.input.append(helper.make_tensor_value_info(correction_input(i), TensorProto.FLOAT, None))
        g.output.append(helper.make_tensor_value_info(conv.input_u8, TensorProto.UINT8, None))
    del g.node[:]
    for node in nodes:       # each Add right after its Conv keeps the order topological
        g.node.append(node)
        if node.name in added:
            g.node.append(added[node.name])
    return out


def _session(model_or_path: Any, optimized: bool) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if not optimized:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = model_or_path if isinstance(model_or_path, str) else model_or_path.SerializeToString()
    return ort.InferenceSession(source, sess_options=opts, providers=["CPUExecutionProvider"])


class Emulation:
    """The INT8 graph run with and without the non-VNNI pair saturation."""

    def __init__(self, int8_path: str | Path) -> None:
        import onnx

        model = onnx.load(str(int8_path))
        self.convs = quantized_convs(model)
        self.session = _session(instrumented(model, self.convs), optimized=False)
        self.saturated = np.zeros(len(self.convs))
        self.outputs = np.zeros(len(self.convs))

    def run(self, x: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(logits, snr) without saturation, then with it (convolution by convolution: each
        one's input is read with the corrections of the ones before it in place)."""
        feeds: dict[str, np.ndarray] = {INPUT_NAME: x}
        for i in range(len(self.convs)):
            feeds[correction_input(i)] = np.zeros((1, 1, 1, 1), np.float32)
        plain = self.session.run(list(OUTPUT_NAMES), feeds)
        for i, conv in enumerate(self.convs):
            a = self.session.run([conv.input_u8], feeds)[0]
            err = pair_overflow_error(conv, a)
            self.saturated[i] += np.count_nonzero(err)
            self.outputs[i] += err.size
            scale = (conv.input_scale * conv.weight_scale)[None, :, None]
            feeds[correction_input(i)] = (err * scale).astype(np.float32)[:, :, None, :]
        return plain, self.session.run(list(OUTPUT_NAMES), feeds)


def probe(path: str | Path, model_dir: str | Path, bursts: int, batch: int) -> dict[str, Any]:
    """Each burst windowed as serving does (normalization, rate rule, bucket windows), every
    arm's windows aggregated per burst as the Classifier does (no DC pass, no refiners)."""
    from rfclassify._exceptions import MessageError
    from rfclassify.data.reader import DatasetReader
    from rfclassify.dsp.windows import burst_to_windows, to_model_input
    from rfclassify.engine.results import aggregate_windows

    meta = ModelMeta.load(model_dir)
    if not meta.int8_onnx_file:
        raise SystemExit(f"{model_dir}: model.json names no INT8 graph (run rfclassify calibrate)")
    int8 = Path(model_dir) / meta.int8_onnx_file
    emulation, real = Emulation(int8), _session(str(int8), optimized=True)
    arms = ("real", "plain", "saturated")
    rows: dict[str, list[Any]] = {k: [] for k in ("truth", "snr", *arms, *("snr_" + a for a in arms))}
    t0, rejected = time.perf_counter(), 0
    with DatasetReader(path) as ds:
        indices = np.unique(np.linspace(0, len(ds) - 1, min(bursts, len(ds))).round().astype(np.int64))
        for chunk in np.array_split(indices, max(1, indices.size // 512)):
            by_bucket: dict[int, list[tuple[int, Any]]] = {}
            for i, burst in zip(chunk, ds.read(chunk)):
                try:
                    w = burst_to_windows(burst, meta.bucket_policy)
                except MessageError:
                    rejected += 1
                    continue
                by_bucket.setdefault(w.bucket_samples, []).append((int(i), w))
            for members in by_bucket.values():
                x = to_model_input(np.concatenate([w.windows for _, w in members]))
                out: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {a: [] for a in arms}
                for start in range(0, x.shape[0], batch):
                    part = x[start:start + batch]
                    plain, saturated = emulation.run(part)
                    out["real"].append(real.run(list(OUTPUT_NAMES), {INPUT_NAME: part}))
                    out["plain"].append(plain)
                    out["saturated"].append(saturated)
                for a in arms:
                    logits = np.concatenate([o[0] for o in out[a]])
                    snr = np.concatenate([np.ravel(o[1]) for o in out[a]])
                    end = 0
                    for _, w in members:
                        probs, s = aggregate_windows(logits[end:end + w.n_windows], snr[end:end + w.n_windows],
                                                     meta.temperature)
                        end += w.n_windows
                        rows[a].append(int(probs.argmax()))
                        rows["snr_" + a].append(s - w.snr_offset_db)
                rows["truth"] += [int(ds.label_index[i]) for i, _ in members]
                rows["snr"] += [float(ds.snr_db[i]) for i, _ in members]
            print(f"{len(rows['truth'])} bursts, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    r = {k: np.asarray(v) for k, v in rows.items()}
    result = summarize(r, emulation, str(path), str(model_dir))
    result["rejected"] = rejected
    return result


def _se(d: np.ndarray) -> float:
    return float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else float("nan")


def summarize(r: dict[str, np.ndarray], emulation: Emulation, path: str, model_dir: str) -> dict[str, Any]:
    """Each arm's accuracy as `rfclassify evaluate` reports it (accuracy_summary), the paired
    difference of the saturated arm from the plain one, and where the pairs saturated."""
    from rfclassify.model.evaluate import accuracy_summary

    truth, snr = r["truth"], r["snr"]
    high = snr >= 10
    arms = {}
    for key in ("real", "plain", "saturated"):
        summary = accuracy_summary(truth, r[key], snr, r["snr_" + key])
        arms[key] = {"mean_accuracy_over_snr": round(100 * summary["mean_accuracy_over_snr"], 3),
                     "accuracy_ge_10db": round(100 * summary["accuracy_snr_ge_10db"], 3),
                     "snr_mae_0_20_db": round(summary["snr_mae_db_0_20"], 4)}
    d = (r["saturated"] == truth).astype(float) - (r["plain"] == truth).astype(float)
    return {
        "file": path, "model_dir": model_dir, "bursts": int(truth.size), "arms": arms,
        "saturated_minus_plain": {"accuracy": round(100 * d.mean(), 3), "accuracy_se": round(100 * _se(d), 3),
                                  "ge_10db": round(100 * d[high].mean(), 3), "ge_10db_se": round(100 * _se(d[high]), 3),
                                  "top1_agreement": round(100 * float(np.mean(r["saturated"] == r["plain"])), 3),
                                  "max_abs_snr_db": round(float(np.abs(r["snr_saturated"] - r["snr_plain"]).max()), 4)},
        "plain_vs_real_top1_agreement": round(100 * float(np.mean(r["plain"] == r["real"])), 3),
        "saturated_output_share": {c.name: float(s / max(o, 1)) for c, s, o in
                                   zip(emulation.convs, emulation.saturated, emulation.outputs)},
    }


def report(result: dict[str, Any]) -> str:
    lines = [f"{result['file']}: {result['bursts']} bursts, network alone ({result['model_dir']})",
             f"{'arm':36s} {'over SNR':>8s} {'>=10dB':>7s} {'SNR MAE 0..20':>14s}"]
    names = {"real": "real session (this CPU)", "plain": "emulated, no saturation (VNNI, ARM)",
             "saturated": "emulated, x86 without VNNI"}
    for key, arm in result["arms"].items():
        lines.append(f"{names[key]:36s} {arm['mean_accuracy_over_snr']:8.2f} {arm['accuracy_ge_10db']:7.2f} "
                     f"{arm['snr_mae_0_20_db']:11.3f} dB")
    d = result["saturated_minus_plain"]
    lines.append(f"without VNNI minus with, burst by burst: {d['accuracy']:+.3f} +- {d['accuracy_se']:.3f}, "
                 f"{d['ge_10db']:+.3f} +- {d['ge_10db_se']:.3f} at >= 10 dB; "
                 f"top-1 agreement {d['top1_agreement']:.2f} %, "
                 f"largest SNR estimate change {d['max_abs_snr_db']:.3f} dB")
    lines.append(f"emulation without saturation against the real session: top-1 agreement "
                 f"{result['plain_vs_real_top1_agreement']:.2f} %")
    lines.append("outputs with a saturated pair, per convolution:")
    lines += [f"  {name:48s} {share:.2e}" for name, share in result["saturated_output_share"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", help="labeled HDF5 dataset (rfclassify dataset generate)")
    ap.add_argument("--model-dir", default="models")
    ap.add_argument("--bursts", type=int, default=4096, help="bursts taken evenly over the file")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args(argv)
    result = probe(args.data, args.model_dir, args.bursts, args.batch)
    print(report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
