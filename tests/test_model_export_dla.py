"""ONNX export (BN folded, dynamic and static graphs, parity) and the DLA-limit checker."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

from rfclassify.dsp.windows import DEFAULT_BUCKETS_SAMPLES  # noqa: E402
from rfclassify.model.dla_check import check_onnx_for_dla  # noqa: E402
from rfclassify.model.export import export_model_dir, export_onnx, fold_batchnorm, onnx_parity  # noqa: E402
from rfclassify.model.network import load_trained  # noqa: E402


@pytest.fixture(scope="module")
def net(tiny_model_dir):
    model, _ = load_trained(tiny_model_dir)
    return model


def _ops(path):
    return {n.op_type for n in onnx.load(str(path)).graph.node}


def test_fold_batchnorm_keeps_outputs(net):
    x = torch.randn(4, 2, 1, 256)
    folded = fold_batchnorm(net)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    with torch.no_grad():
        a, b = net(x), folded(x)
    assert torch.allclose(a[0], b[0], atol=1e-4) and torch.allclose(a[1], b[1], atol=1e-3)


def test_an_opset_outside_what_the_exporter_writes_is_a_config_error(net, tmp_path):
    """Past torch's most (23 for torch 2.13) the exporter raised a RuntimeError of its own."""
    from rfclassify._exceptions import ConfigError

    top = torch.onnx._constants.ONNX_MAX_OPSET
    for bad in (16, top + 1, 10 ** 30):
        with pytest.raises(ConfigError, match=f"opset must be in 17..{top}"):
            export_onnx(net, tmp_path / "m.onnx", opset=bad)
    assert not (tmp_path / "m.onnx").exists()


def test_a_static_batch_past_the_dlas_limit_is_refused_before_any_work(tiny_model_dir, tmp_path, capsys):
    """--static-batch took up to 65536: the graphs then failed their own DLA check after a
    parity check at that batch (more than 5 minutes at 5,000 on the shipped model here)."""
    from rfclassify._exceptions import ConfigError
    from rfclassify.cli import main
    from rfclassify.model.export import export_model_dir

    with pytest.raises(SystemExit) as usage:
        main(["export", "--model-dir", str(tiny_model_dir), "--out", str(tmp_path / "a"), "--static-batch", "4097"])
    assert usage.value.code == 2
    assert "--static-batch" in capsys.readouterr().err and not (tmp_path / "a").exists()
    with pytest.raises(ConfigError, match="static batch 5000 outside 1..4096"):
        export_model_dir(tiny_model_dir, tmp_path / "b", static_batch=5000)
    assert not (tmp_path / "b").exists()


def test_a_model_export_cannot_make_is_refused_before_its_out_is_touched(tiny_model_dir, tmp_path, capsys):
    """An opset out of range left --out half made (weights and refiners, no model.json), and a
    bucket the network's downsampling does not divide ended in a ValueError traceback
    (sixty-sixth session)."""
    import json
    import shutil

    from rfclassify.cli import main

    assert main(["export", "--model-dir", str(tiny_model_dir), "--out", str(tmp_path / "o5"), "--opset", "5"]) == 2
    assert "opset must be in 17.." in capsys.readouterr().err and not (tmp_path / "o5").exists()
    model = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model)
    data = json.loads((model / "model.json").read_text())
    (model / "model.json").write_text(json.dumps({**data, "buckets_samples": [100, 1024]}))
    assert main(["export", "--model-dir", str(model), "--out", str(tmp_path / "b100")]) == 2
    err = capsys.readouterr().err
    assert "buckets [100] of model.json are not multiples" in err and "Traceback" not in err
    assert not (tmp_path / "b100").exists()


def test_dynamic_export_parity_and_axes(net, tmp_path):
    path = export_onnx(net, tmp_path / "m.onnx")
    assert "BatchNormalization" not in _ops(path)
    proto = onnx.load(str(path))
    dims = [d.dim_param for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert dims[0] and dims[3] and proto.opset_import[0].version >= 17
    rng = np.random.default_rng(1)
    for length in (128, 1024):
        rep = onnx_parity(path, net, rng.standard_normal((3, 2, 1, length)).astype(np.float32))
        assert rep["max_abs_logit_diff"] < 1e-3
        assert rep["max_abs_snr_db_diff"] < 1e-2


def test_static_graphs_pass_dla_check_for_every_bucket(net, tmp_path):
    for b in DEFAULT_BUCKETS_SAMPLES:
        path = export_onnx(net, tmp_path / f"L{b}.onnx", static_length=b)
        assert check_onnx_for_dla(path) == [], b
        assert "GlobalAveragePool" not in _ops(path) and "ReduceMean" not in _ops(path)
    # the same graph with a fixed batch is fully static
    fixed = export_onnx(net, tmp_path / "fixed.onnx", static_length=1024, batch_size=4)
    assert check_onnx_for_dla(fixed, allow_dynamic_batch=False) == []


def test_dynamic_graph_is_flagged(net, tmp_path):
    reasons = " ".join(v.reason for v in check_onnx_for_dla(export_onnx(net, tmp_path / "d.onnx")))
    assert "dynamic dimension 3" in reasons
    assert "not a DLA layer" in reasons  # ReduceMean / Reshape of the serving graph


def test_export_model_dir_writes_everything(tiny_model_dir, tmp_path):
    rep = export_model_dir(tiny_model_dir, tmp_path / "out", parity_lengths=(256,))
    out = tmp_path / "out"
    assert (out / "model.onnx").is_file() and (out / "model.pt").is_file() and (out / "model.json").is_file()
    assert sorted(int(b) for b in rep["static"]) == list(DEFAULT_BUCKETS_SAMPLES)
    assert rep["dla_ok_all_buckets"]
    assert rep["worst"]["max_abs_logit_diff"] < 1e-3
    assert rep["worst"]["max_abs_softmax_diff"] < 1e-4


# -- deliberately bad graphs --------------------------------------------------------------------

def _graph(nodes, in_shape, out_shape, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _weight(name, shape):
    return helper.make_tensor(name, TensorProto.FLOAT, shape, np.zeros(int(np.prod(shape)), np.float32).tolist())


def _reasons(model):
    return [v.reason for v in check_onnx_for_dla(model)]


def test_conv_kernel_33_is_caught():
    m = _graph([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[1, 33], pads=[0, 16, 0, 16])],
               [1, 2, 1, 128], [1, 4, 1, 128], [_weight("w", [4, 2, 1, 33])])
    assert any("kernel" in r for r in _reasons(m))


def test_conv_padding_not_below_kernel_is_caught():
    m = _graph([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[1, 3], pads=[0, 3, 0, 3])],
               [1, 2, 1, 128], [1, 4, 1, 132], [_weight("w", [4, 2, 1, 3])])
    assert any("not smaller than the kernel" in r for r in _reasons(m))


def test_conv_stride_9_and_dilation_33_are_caught():
    m = _graph([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[1, 3], strides=[1, 9],
                                 dilations=[1, 33])],
               [1, 2, 1, 1024], [1, 4, 1, 104], [_weight("w", [4, 2, 1, 3])])
    r = " ".join(_reasons(m))
    assert "stride" in r and "dilation" in r


def test_conv_kernel_is_read_from_the_weight_when_kernel_shape_is_left_out():
    """ONNX lets Conv omit kernel_shape (it is the weight's shape); the kernel went unchecked then."""
    m = _graph([helper.make_node("Conv", ["x", "w"], ["y"])],
               [1, 2, 1, 128], [1, 4, 1, 65], [_weight("w", [4, 2, 1, 64])])
    assert any("kernel [1, 64] outside 1..32" in r for r in _reasons(m))
    ok = _graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[0, 3, 0, 3])],
                [1, 2, 1, 128], [1, 4, 1, 128], [_weight("w", [4, 2, 1, 7])])
    assert _reasons(ok) == []


def test_conv_output_channels_above_8192_are_caught():
    m = _graph([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[1, 1])],
               [1, 2, 1, 8], [1, 9000, 1, 8], [_weight("w", [9000, 2, 1, 1])])
    assert any("9000 output channels outside 1..8192" in r for r in _reasons(m))


@pytest.mark.parametrize("in_shape, why", [([8192, 2, 1, 128], "batch 8192; DLA takes a batch of at most 4096"),
                                           ([8, 2, 1, 16384], "dimension 3 of 16384; DLA takes at most 8192")])
def test_a_batch_above_4096_or_a_dimension_above_8192_is_caught(in_shape, why):
    """The DLA's general limits (batch 4096, other dimensions 8192) passed as 'ok' before."""
    m = _graph([helper.make_node("Relu", ["x"], ["y"])], in_shape, in_shape)
    violations = check_onnx_for_dla(m)
    assert {(v.op_type, v.node) for v in violations} == {("input", "x"), ("output", "y")}
    assert all(why in v.reason for v in violations)
    at_limit = [4096, 2, 1, 8192]
    assert check_onnx_for_dla(_graph([helper.make_node("Relu", ["x"], ["y"])], at_limit, at_limit)) == []


def test_pool_window_9_is_caught():
    m = _graph([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1, 9], strides=[1, 9])],
               [1, 2, 1, 81], [1, 2, 1, 9])
    assert any("window" in r for r in _reasons(m))


def test_gemm_and_global_pool_are_caught():
    m = _graph([helper.make_node("GlobalAveragePool", ["x"], ["p"]),
                helper.make_node("Flatten", ["p"], ["f"]),
                helper.make_node("Gemm", ["f", "w"], ["y"], transB=1)],
               [1, 2, 1, 64], [1, 3], [_weight("w", [3, 2])])
    ops = {v.op_type for v in check_onnx_for_dla(m)}
    assert {"GlobalAveragePool", "Flatten", "Gemm"} <= ops


def test_conv1d_on_3d_input_is_caught(tmp_path):
    class OneD(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(2, 4, 5, padding=2)

        def forward(self, x):
            return self.conv(x)

    path = tmp_path / "c1d.onnx"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(OneD(), (torch.zeros(1, 2, 128),), str(path), dynamo=False, opset_version=17)
    assert any("2-D convolution only" in r for r in _reasons(onnx.load(str(path))))


def test_concat_off_channel_axis_is_caught():
    m = _graph([helper.make_node("Concat", ["x", "x"], ["y"], axis=3)], [1, 2, 1, 8], [1, 2, 1, 16])
    assert any("channel axis" in r for r in _reasons(m))
    ok = _graph([helper.make_node("Concat", ["x", "x"], ["y"], axis=1)], [1, 2, 1, 8], [1, 4, 1, 8])
    assert _reasons(ok) == []


@pytest.mark.parametrize("merge", ["concat", "add"])
def test_product_stem_exports_folded_dla_legal_and_in_parity(tmp_path, randomize_batchnorm, merge):
    from rfclassify.model.network import PRODUCT_STEM, build_network

    torch.manual_seed(3)
    net = randomize_batchnorm(build_network({"product_stem": {**PRODUCT_STEM, "merge": merge}})).eval()
    path = export_onnx(net, tmp_path / "p.onnx")
    ops = _ops(path)
    assert "BatchNormalization" not in ops and {"Mul", "Concat"} <= ops
    x = np.random.default_rng(2).standard_normal((3, 2, 1, 512)).astype(np.float32)
    rep = onnx_parity(path, net, x)
    assert rep["max_abs_logit_diff"] < 1e-3 and rep["max_abs_snr_db_diff"] < 1e-2
    for b in (128, 4096):
        assert check_onnx_for_dla(export_onnx(net, tmp_path / f"p{b}.onnx", static_length=b)) == [], b
