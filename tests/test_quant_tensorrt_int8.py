"""TensorRT's INT8 artifacts (rfclassify.quant.tensorrt_int8): the calibration cache's text, the
scales DLA's sums need, the symmetric Q/DQ graph, and the shipped pair. TensorRT never reads
them here; these tests hold them to the format and to the calibration they came from."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from rfclassify._digest import file_sha256
from rfclassify._exceptions import InputError
from rfclassify.model.meta import ModelMeta
from rfclassify.quant import tensorrt_int8
from rfclassify.quant.tensorrt_int8 import (CALIBRATION_CACHE_FILE, TRT_QDQ_FILE, cache_text, equalize_scales,
                                            parse_cache, retarget_cache, symmetric_scales, version_code)

SHIPPED = Path(__file__).resolve().parents[1] / "models"


class _Node:   # the fields scale_groups reads of an ONNX NodeProto
    def __init__(self, op_type: str, *inputs: str, output: str = "") -> None:
        self.op_type, self.input, self.output = op_type, list(inputs), [output] if output else []


# --- the cache's text -----------------------------------------------------------------------

def test_version_codes_are_tensorrts_own():
    assert version_code("8.5.2.2") == 8502          # JetPack 5.1
    assert version_code("8.6.1") == 8601
    assert version_code("10.3.0") == 100300         # JetPack 6.1/6.2
    assert version_code("11.4.1") == 110401
    assert version_code("10") == 100000
    for bad in ("ten", "10.x", "8.100.0", ""):
        with pytest.raises(InputError, match="not a TensorRT version"):
            version_code(bad)


def test_cache_text_is_the_float32_bit_pattern_of_each_scale():
    text = cache_text({"iq": 1.0, "/stem/Relu_output_0": 0.5, "t": 1 / 127})
    lines = text.splitlines()
    assert lines[:3] == ["TRT-100300-EntropyCalibration2", "iq: 3f800000", "/stem/Relu_output_0: 3f000000"]
    assert lines[3] == "t: " + struct.pack(">f", np.float32(1 / 127)).hex()
    code, algorithm, scales = parse_cache(text)
    assert (code, algorithm) == (100300, "EntropyCalibration2")
    assert scales == pytest.approx({"iq": 1.0, "/stem/Relu_output_0": 0.5, "t": 1 / 127}, rel=1e-7)


def test_a_cache_that_cannot_be_read_says_where():
    with pytest.raises(InputError, match="first line"):
        parse_cache("iq: 3f800000\n")
    with pytest.raises(InputError, match="line 3"):
        parse_cache("TRT-8601-EntropyCalibration2\niq: 3f800000\niq 3f80\n")
    with pytest.raises(InputError, match="positive"):
        cache_text({"iq": 0.0})
    with pytest.raises(InputError, match="cannot be written"):
        cache_text({"a: b": 1.0})


def test_retargeting_changes_the_header_alone():
    text = cache_text({"iq": 0.25, "x": 2.0}, "10.3.0")
    moved = retarget_cache(text, "8.6.2")
    assert moved.splitlines()[0] == "TRT-8602-EntropyCalibration2"
    assert moved.splitlines()[1:] == text.splitlines()[1:]


def test_symmetric_scales_cover_the_wider_side():
    scales = symmetric_scales({"relu": (0.0, 12.7), "signed": (-25.4, 3.0), "dead": (0.0, 0.0)})
    assert scales["relu"] == pytest.approx(0.1)
    assert scales["signed"] == pytest.approx(0.2)
    assert scales["dead"] > 0


def test_sum_inputs_share_the_largest_scale_and_chained_sums_join():
    nodes = [_Node("Add", "a", "b"), _Node("Relu", "s"), _Node("Add", "b", "c"), _Node("Add", "x", "y")]
    scales, grown = equalize_scales({"a": 1.0, "b": 3.0, "c": 2.0, "x": 0.5, "y": 0.25, "z": 9.0}, nodes)
    assert scales == {"a": 3.0, "b": 3.0, "c": 3.0, "x": 0.5, "y": 0.5, "z": 9.0}
    assert grown == 3


def test_a_poolings_input_and_output_share_the_larger_scale_and_join_its_sum():
    """DLA's INT8 pooling needs equal input and output ranges (NvInfer.h, IPoolingLayer); only
    the sums were equalized before the sixty-seventh session."""
    nodes = [_Node("MaxPool", "r", output="p"), _Node("Add", "p", "q"), _Node("AveragePool", "u", output="v"),
             _Node("Relu", "v", output="w")]
    scales, grown = equalize_scales({"r": 2.0, "p": 1.5, "q": 4.0, "u": 1.0, "v": 0.5, "w": 0.25}, nodes)
    assert scales == {"r": 4.0, "p": 4.0, "q": 4.0, "u": 1.0, "v": 1.0, "w": 0.25}
    assert grown == 3


# --- calibrated artifacts -------------------------------------------------------------------

onnx = pytest.importorskip("onnx")


def _initializers(graph) -> dict[str, np.ndarray]:
    return {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}


def test_calibrate_writes_tensorrts_qdq_graph_in_tensorrts_form(calibrated):
    model_dir, _ = calibrated
    record = ModelMeta.load(model_dir).extra["tensorrt_int8"]
    assert record["qdq_sha256"] == file_sha256(model_dir / TRT_QDQ_FILE)
    graph = onnx.load(str(model_dir / TRT_QDQ_FILE)).graph
    init = _initializers(graph)
    producers = {o: n for n in graph.node for o in n.output}
    qs = [n for n in graph.node if n.op_type == "QuantizeLinear"]
    assert len(qs) >= 20
    for q in (q for q in qs if q.input[0] not in init):     # activations: int8, symmetric, per tensor
        zp = init[q.input[2]]
        assert zp.dtype == np.int8 and zp.size == 1 and int(zp) == 0
    weights = [n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] in init
               and init[n.input[0]].ndim == 4]
    assert weights
    for q in weights:                              # weights: per output channel (axis 0), zero point 0
        w, scale = init[q.input[0]], init[q.input[1]]
        assert scale.shape == (w.shape[0],) and not np.any(init[q.input[2]])
        axis = [a.i for a in q.attribute if a.name == "axis"]
        assert axis in ([], [0])
    adds = [n for n in graph.node if n.op_type == "Add"]
    assert adds and all(producers[i].op_type == "DequantizeLinear" for n in adds for i in n.input)
    # TensorRT's parser dequantizes INT8 alone: weights float behind a Q/DQ pair, biases float
    # (23 int32 biases behind DequantizeLinear before the sixty-seventh session)
    dequantized = [init[dq.input[0]] for dq in graph.node if dq.op_type == "DequantizeLinear" and dq.input[0] in init]
    assert not dequantized, [a.dtype for a in dequantized]
    convs = [n for n in graph.node if n.op_type == "Conv" and len(n.input) == 3 and n.input[2] in init]
    assert convs and all(init[n.input[2]].dtype == np.float32 for n in convs)
    assert all(producers[n.input[1]].op_type == "DequantizeLinear"
               and producers[producers[n.input[1]].input[0]].op_type == "QuantizeLinear"
               and init[producers[producers[n.input[1]].input[0]].input[0]].dtype == np.float32
               for n in graph.node if n.op_type == "Conv" and n.input[1] in producers)
    heads = [n for n in graph.node if n.name.startswith(("/head/", "/snr_head/")) and n.op_type == "Conv"]
    assert heads and not any(i in producers and producers[i].op_type == "DequantizeLinear"
                             for n in heads for i in n.input[1:])
    for key in ("agreement_qdq", "agreement_cache_scales"):
        assert set(record[key]) == {str(b) for b in ModelMeta.load(model_dir).buckets_samples}


def test_both_artifacts_carry_the_calibrations_ranges_and_the_cache_makes_each_sums_inputs_equal(
        calibrated, tmp_path):
    from rfclassify.quant import cpu_int8

    model_dir, _ = calibrated
    meta = ModelMeta.load(model_dir)
    windows, _ = cpu_int8.calibration_windows(cpu_int8.default_calibration_path(), meta, 84)
    _, _, ranges = cpu_int8.measure(model_dir / "model.onnx", tmp_path, windows)   # as calibrate measured
    code, _, cache = parse_cache((model_dir / CALIBRATION_CACHE_FILE).read_text())
    assert code == version_code(tensorrt_int8.CACHE_TENSORRT_VERSION)
    source = onnx.load(str(model_dir / "model.onnx")).graph
    own = symmetric_scales(ranges)
    assert "iq" in cache and set(cache) == set(own)       # no static graphs here: every ranged tensor
    assert not any(n.startswith(("/head/", "/snr_head/")) for n in cache)
    groups = tensorrt_int8.scale_groups(source.node)
    assert groups
    in_sums = set().union(*groups)
    for group in groups:
        assert len({cache[t] for t in group}) == 1
        assert cache[min(group)] == pytest.approx(max(own[t] for t in group), rel=1e-7)
    assert all(cache[t] == pytest.approx(own[t], rel=1e-7) for t in own if t not in in_sums)
    # the Q/DQ graph quantizes each tensor to its own range (ONNX Runtime gives a MaxPool's
    # output its input's scale, so those are left out)
    qdq = onnx.load(str(model_dir / TRT_QDQ_FILE)).graph
    init = _initializers(qdq)
    pooled = {o for n in source.node if n.op_type == "MaxPool" for o in n.output}
    checked = [(q.input[0], float(init[q.input[1]])) for q in qdq.node
               if q.op_type == "QuantizeLinear" and q.input[0] in own and q.input[0] not in pooled]
    assert len(checked) > 20
    for t, scale in checked:
        assert scale == pytest.approx(own[t], rel=1e-6), t


def test_tensorrt_artifacts_are_refused_when_missing_or_replaced(calibrated, tmp_path, tiny_model_dir):
    meta = ModelMeta.load(tiny_model_dir)
    assert "not calibrated" in tensorrt_int8.artifact_problem(meta, tiny_model_dir, "qdq")
    model_dir = tmp_path / "m"
    shutil.copytree(calibrated[0], model_dir)
    meta = ModelMeta.load(model_dir)
    assert tensorrt_int8.artifact_problem(meta, model_dir, "qdq") is None
    assert tensorrt_int8.artifact_problem(meta, model_dir, "calibration_cache") is None
    with open(model_dir / CALIBRATION_CACHE_FILE, "a") as f:
        f.write("extra: 3f800000\n")
    assert "sha256 differs" in tensorrt_int8.artifact_problem(meta, model_dir, "calibration_cache")
    (model_dir / TRT_QDQ_FILE).unlink()
    assert "does not exist" in tensorrt_int8.artifact_problem(meta, model_dir, "qdq")


def test_a_static_graph_that_cannot_be_read_is_a_problem_named_not_a_traceback(tmp_path):
    """file_sha256's OSError reached the user from artifact_problem (the backend's selection)."""
    if not Path("/proc/self/mem").is_file():
        pytest.skip("needs Linux's /proc/self/mem (a regular file whose first read fails, for root too)")
    model_dir = tmp_path / "m"
    shutil.copytree(SHIPPED, model_dir)
    meta = ModelMeta.load(model_dir)
    graph = model_dir / sorted(meta.extra["export"]["static_files"].values())[0]
    graph.unlink()
    graph.symlink_to("/proc/self/mem")
    problem = tensorrt_int8.artifact_problem(meta, model_dir, "calibration_cache")
    assert f"cannot be checked against its static graph: {graph} cannot be read" in problem, problem


# --- the shipped pair -----------------------------------------------------------------------

def test_the_shipped_artifacts_are_the_recorded_ones_and_name_the_static_graphs_tensors():
    meta = ModelMeta.load(SHIPPED)
    record = meta.extra["tensorrt_int8"]
    assert record["source_onnx_sha256"] == file_sha256(SHIPPED / meta.onnx_file)
    for which in ("qdq", "calibration_cache"):
        assert tensorrt_int8.artifact_problem(meta, SHIPPED, which) is None
    _, _, cache = parse_cache((SHIPPED / CALIBRATION_CACHE_FILE).read_text())
    static = meta.extra["export"]["static_files"]
    assert set(record["static_sha256"]) == set(static)
    for bucket, rel in static.items():
        assert record["static_sha256"][bucket] == file_sha256(SHIPPED / rel)
        graph = onnx.load(str(SHIPPED / rel)).graph
        names = {i.name for i in graph.input} | {o for n in graph.node for o in n.output}
        assert set(cache) <= names
    assert len(cache) == record["cache_tensors"]
    json.dumps(record)
    # the rules the reviewer of the sixty-seventh session found broken in the shipped pair
    for bucket, rel in static.items():
        graph = onnx.load(str(SHIPPED / rel)).graph
        pools = [n for n in graph.node if n.op_type in tensorrt_int8.POOLING_OPS]
        assert pools and all(cache[n.input[0]] == cache[n.output[0]] for n in pools
                             if n.input[0] in cache and n.output[0] in cache), bucket
    qdq = onnx.load(str(SHIPPED / TRT_QDQ_FILE)).graph
    init = _initializers(qdq)
    assert not [d.input[0] for d in qdq.node if d.op_type == "DequantizeLinear" and d.input[0] in init]
