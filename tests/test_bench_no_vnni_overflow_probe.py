"""The pieces of benchmarks/no_vnni_overflow_probe.py: which products it pairs, that its
im2col is the convolution ONNX Runtime computes, and that the saturation it finds reaches the
network's outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmark_modules import load_benchmark

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

probe = load_benchmark("no_vnni_overflow_probe")
#: what the oldest ONNX Runtime we install reads (1.23 on Python 3.10: IR <= 11)
IR_VERSION = 9


def _conv(w: np.ndarray, *, zero_point: int = 0, stride: int = 1, dilation: int = 1,
          pads: tuple[int, int] = (0, 0)) -> object:
    return probe.QuantizedConv(name="c", input_u8="a", input_scale=1.0, input_zero_point=zero_point,
                               weight_scale=np.ones(w.shape[0], np.float32), pairs=probe.filter_pairs(w),
                               kernel=w.shape[-1], stride=stride, dilation=dilation, pads=pads)


def test_pairs_are_adjacent_channels_of_one_tap():
    # channel 0's taps +127, channel 1's -127: paired by channel (ONNX Runtime's order) every
    # pair cancels; paired by tap, 255 x 127 x 2 would overflow
    w = np.zeros((1, 2, 1, 2), np.int8)
    w[0, 0, 0, :], w[0, 1, 0, :] = 127, -127
    full = np.full((1, 2, 1, 4), 255, np.uint8)
    assert not probe.pair_overflow_error(_conv(w), full).any()
    w[0, 1, 0, :] = 127                                   # now each pair is 64,770
    err = probe.pair_overflow_error(_conv(w), full)
    assert err.shape == (1, 1, 3)
    np.testing.assert_array_equal(err, 2 * (32767 - 64770))
    assert not probe.pair_overflow_error(_conv(w), np.full((1, 2, 1, 4), 128, np.uint8)).any()  # 32,512 fits
    np.testing.assert_array_equal(probe.pair_overflow_error(_conv(-w), full), 2 * (-32768 + 64770))


def test_im2col_is_the_convolution_onnxruntime_computes():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (2, 3, 1, 11)).astype(np.uint8)
    w = rng.integers(-127, 128, (4, 3, 1, 3)).astype(np.int8)     # 9 products: an odd count, padded
    conv = _conv(w, zero_point=7, stride=2, dilation=2, pads=(2, 1))
    acc = np.einsum("nlpk,mpk->nml", probe.im2col(a, conv), conv.pairs)
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[1, 3], strides=[1, 2],
                            dilations=[1, 2], pads=[0, 2, 0, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w.astype(np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    # ONNX Runtime pads (a - zero point) with 0.0: the same as padding a with the zero point
    y = sess.run(None, {"x": a.astype(np.float32) - 7})[0][:, :, 0, :]
    np.testing.assert_array_equal(acc - 7 * w.astype(np.int64).sum(axis=(1, 2, 3))[None, :, None], y)


def _tiny_int8_graph(path) -> None:
    """iq -> Q(uint8) -> DQ -> Conv(int8 weights 127, 127 on the two channels) -> Q -> DQ ->
    mean: 'logits' and 'snr_db' both read the convolution's output."""
    init = [numpy_helper.from_array(np.array(1.0, np.float32), "sa"),
            numpy_helper.from_array(np.array(0, np.uint8), "za"),
            numpy_helper.from_array(np.full((1, 2, 1, 1), 127, np.int8), "w8"),
            numpy_helper.from_array(np.array([1.0], np.float32), "sw"),
            numpy_helper.from_array(np.array([0], np.int8), "zw"),
            numpy_helper.from_array(np.array(300.0, np.float32), "sy"),
            numpy_helper.from_array(np.array(0, np.uint8), "zy")]
    nodes = [helper.make_node("QuantizeLinear", ["iq", "sa", "za"], ["iq_q"]),
             helper.make_node("DequantizeLinear", ["iq_q", "sa", "za"], ["iq_dq"]),
             helper.make_node("DequantizeLinear", ["w8", "sw", "zw"], ["w"], axis=0),
             helper.make_node("Conv", ["iq_dq", "w"], ["y"], name="conv", kernel_shape=[1, 1]),
             helper.make_node("QuantizeLinear", ["y", "sy", "zy"], ["y_q"]),
             helper.make_node("DequantizeLinear", ["y_q", "sy", "zy"], ["y_dq"]),
             helper.make_node("ReduceMean", ["y_dq"], ["logits"], axes=[2, 3], keepdims=0),
             helper.make_node("ReduceMean", ["y_dq"], ["snr_db"], axes=[1, 2, 3], keepdims=0)]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("iq", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("logits", "snr_db")],
                              init)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION), str(path))


def test_the_saturation_reaches_the_outputs(tmp_path):
    _tiny_int8_graph(tmp_path / "g.onnx")
    emulation = probe.Emulation(tmp_path / "g.onnx")
    assert [c.name for c in emulation.convs] == ["conv"]
    x = np.zeros((2, 2, 1, 4), np.float32)
    x[0] = 255.0                        # 255 x 127 twice: 64,770 exact, 32,767 saturated
    x[1] = 100.0                        # 25,400: no overflow
    (plain, snr_plain), (saturated, snr_saturated) = emulation.run(x)
    np.testing.assert_allclose(plain[:, 0], [64800, 25500])           # the output step is 300
    np.testing.assert_allclose(saturated[:, 0], [32700, 25500])
    np.testing.assert_allclose(snr_saturated, [32700, 25500])
    np.testing.assert_array_equal(emulation.saturated, [4])            # 4 of 8 outputs
    np.testing.assert_array_equal(emulation.outputs, [8])


def test_the_shipped_graph_unchanged_without_corrections():
    from rfclassify.model.meta import ModelMeta

    shipped = Path(__file__).resolve().parents[1] / "models"
    path = shipped / ModelMeta.load(shipped).int8_onnx_file
    emulation = probe.Emulation(path)
    model = onnx.load(str(path))
    convs = [n.name for n in model.graph.node if n.op_type == "Conv"]
    assert [c.name for c in emulation.convs] == [n for n in convs if not n.startswith(("/head/", "/snr_head/"))]
    x = np.random.default_rng(0).standard_normal((3, 2, 1, 256)).astype(np.float32)
    plain, _ = emulation.run(x)
    reference = probe._session(model, optimized=False).run(["logits", "snr_db"], {"iq": x})
    for got, want in zip(plain, reference):
        np.testing.assert_array_equal(got, want)
