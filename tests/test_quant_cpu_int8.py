"""`rfclassify calibrate`: the INT8 graph for ONNX Runtime on the CPU, its ranges, its provenance,
and the shipped one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rfclassify._digest import file_sha256
from rfclassify._exceptions import ConfigError, ModelNotFoundError
from rfclassify.model.meta import ModelMeta

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from rfclassify.cli import main  # noqa: E402
from rfclassify.engine import select  # noqa: E402
from rfclassify.engine.onnxruntime_backend import OnnxRuntimeBackend  # noqa: E402
from rfclassify.quant import cpu_int8  # noqa: E402
from rfclassify.quant.cpu_int8 import INT8_ONNX_FILE, clipped_range, cpu_int8_plan  # noqa: E402
from rfclassify.quant.tensorrt_int8 import CALIBRATION_CACHE_FILE, TRT_QDQ_FILE  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[1] / "models"


# --- the ranges ---------------------------------------------------------------------------

def test_clipped_range_cuts_the_tails_it_is_asked_to():
    counts = np.zeros(100, np.int64)
    counts[0] = 1           # one outlier at the bottom bin, [-10, -9.8)
    counts[50:60] = 1000    # the bulk in [0, 2)
    counts[99] = 1          # one at the top, [9.8, 10]
    assert clipped_range(counts, -10.0, 10.0, 100.0) == (-10.0, 10.0)
    lo, hi = clipped_range(counts, -10.0, 10.0, 99.9)   # 0.05 % of 10,002 is 5 values each side
    assert (lo, hi) == pytest.approx((0.0, 2.0))


def test_clipped_range_keeps_a_relu_floor_and_always_holds_zero():
    counts = np.full(10, 100, np.int64)
    assert clipped_range(counts, 0.0, 5.0, 90.0)[0] == 0.0          # never negative: floor stays 0
    assert clipped_range(counts, 2.0, 5.0, 90.0)[0] == 0.0          # INT8 needs 0 in its range
    assert clipped_range(np.zeros(10, np.int64), 3.0, 3.0) == (0.0, 3.0)
    with pytest.raises(ConfigError, match="percentile"):
        clipped_range(counts, 0.0, 1.0, 0.0)


def test_bias_correction_recentres_a_convolution_whose_weights_were_rounded():
    rng = np.random.default_rng(3)
    w = rng.normal(0, 0.3, (4, 3, 1, 5)).astype(np.float32)
    x = rng.normal(0, 1, (3, 4000)) + np.array([[2.0], [0.5], [3.0]])   # inputs after a ReLU: means not 0

    def conv_mean(weights, bias):   # "valid" 1-D correlation, mean over positions
        out = [sum(np.correlate(x[c], weights[o, c, 0], "valid") for c in range(3)) + bias[o] for o in range(4)]
        return np.array([o.mean() for o in out])

    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Conv", ["x", "w", "b"], ["y"], name="c")], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 1, None])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 1, None])],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(np.zeros(4, np.float32), "b")])
    model = onnx.helper.make_model(graph)
    assert cpu_int8.correct_rounding_bias(model, ["c"], {"x": x.mean(axis=1)}) == 1
    corrected = onnx.numpy_helper.to_array(model.graph.initializer[1])
    target = conv_mean(w, np.zeros(4))
    rounded = cpu_int8.int8_weights(w)
    before = np.abs(conv_mean(rounded, np.zeros(4)) - target).max()
    after = np.abs(conv_mean(rounded, corrected) - target).max()
    assert before > 1e-3 and after < before / 20


def test_the_int8_graph_rounds_the_weights_as_the_bias_correction_assumes(calibrated, tiny_model_dir):
    """correct_rounding_bias models ONNX Runtime's weight quantizer; if the two disagreed, the
    correction would move the biases by the wrong amount."""
    source = onnx.load(str(tiny_model_dir / "model.onnx"))
    fp32 = {i.name: onnx.numpy_helper.to_array(i) for i in source.graph.initializer}
    graph = onnx.load(str(calibrated[0] / INT8_ONNX_FILE)).graph
    q = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    checked = 0
    for name, w in fp32.items():
        if w.ndim == 4 and f"{name}_quantized" in q:
            stored = q[f"{name}_quantized"].astype(np.float64) * q[f"{name}_scale"].reshape(-1, 1, 1, 1)
            np.testing.assert_allclose(stored, cpu_int8.int8_weights(w), rtol=1e-6, atol=1e-9)
            checked += 1
    assert checked >= 15


def test_the_plan_keeps_the_heads_fp32_and_quantizes_the_trunk(tiny_model_dir):
    names = [n.name for n in onnx.load(str(tiny_model_dir / "model.onnx")).graph.node]
    plan = cpu_int8_plan(names)
    assert plan["fp32"] and all(n.startswith(("/head/", "/snr_head/")) for n in plan["fp32"])
    assert "/stem/conv/Conv" in plan["int8"]
    assert sorted(plan["int8"] + plan["fp32"]) == sorted(names)


# --- calibrating a model directory -----------------------------------------------------------

def test_calibrate_writes_the_int8_graph_and_records_where_it_came_from(calibrated):
    model_dir, record = calibrated
    meta = ModelMeta.load(model_dir)
    assert meta.int8_onnx_file == INT8_ONNX_FILE
    assert meta.extra["int8"] == json.loads(json.dumps(record))
    assert record["sha256"] == file_sha256(model_dir / INT8_ONNX_FILE)
    assert record["source_onnx_sha256"] == file_sha256(model_dir / "model.onnx")
    assert record["calibration"]["bursts"] == 84
    assert set(record["agreement"]) == {str(b) for b in meta.buckets_samples}
    graph = onnx.load(str(model_dir / INT8_ONNX_FILE)).graph
    ops = [n.op_type for n in graph.node]
    assert ops.count("QuantizeLinear") >= 10 and ops.count("DequantizeLinear") >= 10
    # the heads read float weights: no DequantizeLinear feeds them
    dq_outputs = {o for n in graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    heads = [n for n in graph.node if n.name.startswith(("/head/", "/snr_head/")) and n.op_type == "Conv"]
    assert heads and not any(i in dq_outputs for n in heads for i in n.input[1:])
    # the activations' zero points are uint8, the weights' int8
    zero_points = {i.name: i.data_type for i in graph.initializer if i.name.endswith("_zero_point")}
    assert onnx.TensorProto.UINT8 in zero_points.values() and onnx.TensorProto.INT8 in zero_points.values()


def test_precision_auto_serves_the_int8_graph_once_it_exists(calibrated, tiny_model_dir):
    model_dir, _ = calibrated
    sel = select.select_backend(ModelMeta.load(model_dir), model_dir, backend="onnxruntime")
    assert sel.precision == "int8"
    assert select.select_backend(ModelMeta.load(tiny_model_dir), tiny_model_dir,
                                 backend="onnxruntime").precision == "fp32"
    meta = ModelMeta.load(model_dir)
    x = np.random.default_rng(1).standard_normal((3, 2, 1, 256)).astype(np.float32)
    with OnnxRuntimeBackend(meta, model_dir, precision="int8") as b8, OnnxRuntimeBackend(meta, model_dir) as b32:
        assert b8.onnx_file == INT8_ONNX_FILE
        (l8, s8), (l32, s32) = b8.infer(x), b32.infer(x)
    assert l8.shape == l32.shape and s8.shape == s32.shape
    assert not np.array_equal(l8, l32)                    # it is another graph ...
    assert np.abs(l8 - l32).max() < 0.5 * np.abs(l32).max()   # ... of the same network


def test_an_int8_graph_of_another_model_onnx_is_refused(calibrated, tmp_path):
    model_dir = tmp_path / "m"
    shutil.copytree(calibrated[0], model_dir)
    with open(model_dir / "model.onnx", "ab") as f:   # re-exported since: the bytes differ
        f.write(b"\0")
    meta = ModelMeta.load(model_dir)   # and export recorded them (without the record: another model's graph)
    meta = meta.with_updates(extra={**meta.extra, "export": {"onnx_sha256": file_sha256(model_dir / "model.onnx")}})
    with pytest.raises(ModelNotFoundError, match="calibrated from another model.onnx"):
        select.select_backend(meta, model_dir, backend="onnxruntime", precision="int8")
    assert "calibrated from another" in (select.select_backend(meta, model_dir, backend="onnxruntime")
                                         .precision_reason)


def test_a_changed_int8_graph_is_refused(calibrated, tmp_path):
    model_dir = tmp_path / "m"
    shutil.copytree(calibrated[0], model_dir)
    with open(model_dir / INT8_ONNX_FILE, "ab") as f:
        f.write(b"\0")
    with pytest.raises(ModelNotFoundError, match="sha256 differs"):
        select.select_backend(ModelMeta.load(model_dir), model_dir, backend="onnxruntime", precision="int8")
    (model_dir / INT8_ONNX_FILE).unlink()
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        select.select_backend(ModelMeta.load(model_dir), model_dir, backend="onnxruntime", precision="int8")
    named = ModelMeta.load(model_dir).with_updates(int8_onnx_file="x" * 5000)   # model.json edited by hand
    with pytest.raises(ModelNotFoundError, match="cannot be read"):
        select.select_backend(named, model_dir, backend="onnxruntime", precision="int8")


def test_export_keeps_the_int8_graph_of_the_same_weights_and_drops_a_stale_one(calibrated, tmp_path):
    torch = pytest.importorskip("torch")
    from rfclassify.model.export import export_model_dir

    out = tmp_path / "copy"        # same weights, another directory: the INT8 graph goes along
    rep = export_model_dir(calibrated[0], out, parity_lengths=(256,))
    assert rep["int8"].startswith("kept") and (out / INT8_ONNX_FILE).is_file()
    assert select.select_backend(ModelMeta.load(out), out, backend="onnxruntime").precision == "int8"
    # TensorRT's cache was made before there were static graphs: it is dropped, and its copies go
    assert rep["tensorrt_int8"].startswith("dropped") and "static graphs" in rep["tensorrt_int8"]
    assert not (out / TRT_QDQ_FILE).exists() and not (out / CALIBRATION_CACHE_FILE).exists()
    assert "tensorrt_int8" not in ModelMeta.load(out).extra
    cpu_int8.calibrate_model_dir(out, max_bursts=28)   # now it names them, and goes along
    rep = export_model_dir(out, tmp_path / "again", parity_lengths=(256,))
    assert rep["tensorrt_int8"].startswith("kept") and (tmp_path / "again" / CALIBRATION_CACHE_FILE).is_file()
    assert "tensorrt_int8" in ModelMeta.load(tmp_path / "again").extra
    state = torch.load(out / "model.pt", weights_only=True)  # new weights: the INT8 graph no longer belongs to them
    key = next(k for k in state if k.endswith("weight") and state[k].ndim == 4)
    state[key] = state[key] * 1.5
    torch.save(state, out / "model.pt")
    rep = export_model_dir(out, parity_lengths=(256,))
    assert rep["int8"].startswith("dropped") and "calibrated from another model.onnx" in rep["int8"]
    assert rep["tensorrt_int8"].startswith("dropped") and "calibrated from another model.onnx" in rep["tensorrt_int8"]
    meta = ModelMeta.load(out)
    assert meta.int8_onnx_file == "" and "int8" not in meta.extra and "tensorrt_int8" not in meta.extra
    stale = tmp_path / "stale"     # into another directory: no copy of a dropped graph is left there
    export_model_dir(calibrated[0], tmp_path / "fresh", parity_lengths=(256,))
    state = torch.load(tmp_path / "fresh" / "model.pt", weights_only=True)
    state[key] = state[key] * 1.5
    torch.save(state, tmp_path / "fresh" / "model.pt")
    shutil.copy2(calibrated[0] / "model.json", tmp_path / "fresh" / "model.json")   # still names the INT8 graph
    shutil.copy2(calibrated[0] / INT8_ONNX_FILE, tmp_path / "fresh" / INT8_ONNX_FILE)
    rep = export_model_dir(tmp_path / "fresh", stale, parity_lengths=(256,))
    assert rep["int8"].startswith("dropped") and not (stale / INT8_ONNX_FILE).exists()
    assert select.select_backend(meta, out, backend="onnxruntime").precision == "fp32"


def test_calibrate_cli_mistakes_are_one_line(tmp_path, tiny_model_dir, capsys):
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    assert main(["calibrate", "--model-dir", str(model_dir), "--data", str(tmp_path / "none.h5")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "none.h5" in err
    (model_dir / "model.onnx").unlink()
    assert main(["calibrate", "--model-dir", str(model_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rfclassify export" in err
    assert not (model_dir / INT8_ONNX_FILE).exists()


def test_calibrate_cli_reports_what_it_wrote(tmp_path, tiny_model_dir, capsys):
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    assert main(["calibrate", "--model-dir", str(model_dir), "--bursts", "56"]) == 0
    out = capsys.readouterr().out
    assert "calibrated on 56 bursts of calibration.h5" in out
    assert f"wrote {model_dir}/{INT8_ONNX_FILE}" in out and "top-1 agreement" in out
    assert ModelMeta.load(model_dir).int8_onnx_file == INT8_ONNX_FILE
    assert f"wrote {model_dir}/{TRT_QDQ_FILE} (TensorRT's Q/DQ graph" in out
    assert f"{model_dir}/{CALIBRATION_CACHE_FILE} (the DLA's calibration cache" in out


# --- the shipped INT8 graph ----------------------------------------------------------------------

def test_the_shipped_int8_graph_is_the_one_calibrated_from_the_shipped_onnx():
    meta = ModelMeta.load(SHIPPED)
    assert meta.int8_onnx_file == INT8_ONNX_FILE, "models/ ships an INT8 graph (rfclassify calibrate)"
    record = meta.extra["int8"]
    assert record["sha256"] == file_sha256(SHIPPED / meta.int8_onnx_file)
    assert record["source_onnx_sha256"] == file_sha256(SHIPPED / meta.onnx_file), (
        "models/model.onnx changed since models/model_int8.onnx was calibrated: run `rfclassify calibrate`")


def test_the_shipped_int8_graph_keeps_the_network_s_answers_and_its_snr():
    """On fresh bursts at 10..30 dB the INT8 graph calls what the fp32 one calls and estimates
    the SNR within a third of a dB, without a bias (this graph 0.35 dB, mean -0.20; without the
    bias correction 0.50 dB, mean -0.47; with min/max ranges about 1 dB: docs/model.md)."""
    from rfclassify.dsp.synth import synthesize
    from rfclassify.dsp.windows import normalize_batch, to_model_input

    meta = ModelMeta.load(SHIPPED)
    rng = np.random.default_rng(20261207)
    labels = [label for label in meta.labels for _ in range(4)]
    bursts = synthesize(labels, 1024, rng, snr_db=rng.uniform(10, 30, len(labels)))
    x = to_model_input(normalize_batch(bursts.iq, meta.normalization))
    with OnnxRuntimeBackend(meta, SHIPPED, precision="int8") as b8, OnnxRuntimeBackend(meta, SHIPPED) as b32:
        (l8, s8), (l32, s32) = b8.infer(x), b32.infer(x)
    assert np.mean(l8.argmax(1) == l32.argmax(1)) >= 0.93
    snr_diff = np.ravel(s8) - np.ravel(s32)
    assert np.mean(np.abs(snr_diff)) < 0.43 and abs(np.mean(snr_diff)) < 0.35


def test_evaluate_serves_int8_by_default_fp32_when_asked_and_the_card_describes_it(
        calibrated, tiny_dataset, tmp_path, capsys):
    model_dir = tmp_path / "m"
    shutil.copytree(calibrated[0], model_dir)
    runs = {}
    for precision in ("auto", "fp32"):
        out = tmp_path / precision
        assert main(["evaluate", str(tiny_dataset), "--model-dir", str(model_dir), "--backend", "onnxruntime",
                     "--precision", precision, "--out", str(out), "--card", "--name", precision]) == 0
        runs[precision] = json.loads((out / "evaluation.json").read_text())["run"]["precision"]
    assert runs == {"auto": "int8", "fp32": "fp32"}
    assert "bursts via onnxruntime fp32" in capsys.readouterr().out
    md = (model_dir / "MODEL_CARD.md").read_text()
    assert "### INT8 on the CPU (ONNX Runtime)" in md and "made by `rfclassify calibrate`" in md
    assert md.count("| 4096 | 224 |") == 1                                  # the agreement table
    trt = md.split("### INT8 for TensorRT (never run in TensorRT)", 1)[1].split("\n#", 1)[0]
    assert f"`{CALIBRATION_CACHE_FILE}`" in trt and trt.count("\n| 4096 | ") == 1   # and TensorRT's pair's
    assert "backend onnxruntime int8 on cpu" in md and "backend onnxruntime fp32 on cpu" in md
    plain = tmp_path / "plain"
    shutil.copytree(calibrated[0], plain)
    meta = ModelMeta.load(plain)
    meta.with_updates(int8_onnx_file="").save(plain)         # a model without an INT8 graph
    assert main(["evaluate", str(tiny_dataset), "--model-dir", str(plain), "--backend", "onnxruntime",
                 "--out", str(tmp_path / "p"), "--card"]) == 0
    assert "INT8 on the CPU" not in (plain / "MODEL_CARD.md").read_text()
