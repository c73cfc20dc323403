"""Backends: the shared input checks, ORT/torch agreement, the life cycle."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from rfclassify._exceptions import ConfigError, InputError, ModelNotFoundError
from rfclassify.engine.onnxruntime_backend import OnnxRuntimeBackend
from rfclassify.engine.torch_backend import TorchBackend
from rfclassify.model.meta import ModelMeta


@pytest.fixture(scope="module")
def meta(tiny_model_dir):
    return ModelMeta.load(tiny_model_dir)


@pytest.fixture(scope="module")
def ort(meta, tiny_model_dir):
    with OnnxRuntimeBackend(meta, tiny_model_dir, threads=1) as backend:
        yield backend


def _x(batch: int, length: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 2, 1, length)).astype(np.float32)


@pytest.mark.parametrize(
    ("x", "match"),
    [
        (_x(2, 128).astype(np.float64), "float32"),
        (_x(2, 128)[:, :1], "shape"),
        (_x(2, 128).reshape(2, 2, 128), "shape"),
        (_x(2, 128).reshape(2, 1, 2, 128), "shape"),
        (np.zeros((0, 2, 1, 128), np.float32), "empty batch"),
        (_x(2, 100), "not a configured bucket"),
        (_x(2, 256)[..., ::2], "contiguous"),
        ([[0.0]], "numpy array"),
    ],
)
def test_bad_input_is_a_clear_input_error(ort, x, match):
    with pytest.raises(InputError, match=match):
        ort.infer(x)


def test_batch_above_max_batch_size_is_refused(meta, tiny_model_dir):
    backend = OnnxRuntimeBackend(meta, tiny_model_dir, max_batch_size=4)
    with pytest.raises(InputError, match="max_batch_size 4"):
        backend.infer(_x(5, 128))


def test_outputs_have_the_contract_shapes_and_dtypes(ort, meta):
    logits, snr_db = ort.infer(_x(3, 256))
    assert logits.shape == (3, len(meta.labels)) and logits.dtype == np.float32
    assert snr_db.shape == (3,) and snr_db.dtype == np.float32


def test_onnxruntime_and_torch_agree(ort, meta, tiny_model_dir):
    x = _x(4, 1024, seed=1)
    with TorchBackend(meta, tiny_model_dir, device="cpu") as torch_backend:
        t_logits, t_snr = torch_backend.infer(x)
    o_logits, o_snr = ort.infer(x)
    assert np.ptp(t_logits) > 0.1  # the outputs vary, so agreement means something
    np.testing.assert_allclose(o_logits, t_logits, atol=2e-3, rtol=1e-3)
    np.testing.assert_allclose(o_snr, t_snr, atol=2e-3, rtol=1e-3)


def test_rows_are_independent_of_the_rest_of_the_batch(ort):
    x = _x(5, 128, seed=2)
    alone, _ = ort.infer(np.ascontiguousarray(x[2:3]))
    batched, _ = ort.infer(x)
    np.testing.assert_allclose(batched[2:3], alone, atol=1e-4)


def test_unsupported_precision_or_device_is_refused_up_front(meta, tiny_model_dir):
    with pytest.raises(ConfigError, match="fp16"):
        OnnxRuntimeBackend(meta, tiny_model_dir, precision="fp16")
    with pytest.raises(ConfigError, match="cannot run on device"):
        OnnxRuntimeBackend(meta, tiny_model_dir, device="cuda:0")
    with pytest.raises(ConfigError, match="supports fp32"):
        TorchBackend(meta, tiny_model_dir, precision="fp16", device="cpu")


def test_int8_without_calibrated_artifacts_says_so(meta, tiny_model_dir):
    with pytest.raises(ModelNotFoundError, match="not calibrated yet"):
        OnnxRuntimeBackend(meta, tiny_model_dir, precision="int8")


def test_close_then_infer_loads_again(meta, tiny_model_dir):
    backend = OnnxRuntimeBackend(meta, tiny_model_dir)
    first, _ = backend.infer(_x(1, 128))
    backend.close()
    assert not backend.loaded
    again, _ = backend.infer(_x(1, 128))
    np.testing.assert_array_equal(first, again)


def test_warmup_rejects_a_length_that_is_not_a_bucket(ort):
    with pytest.raises(InputError, match="bucket"):
        ort.warmup(buckets_samples=(100,))
    ort.warmup(buckets_samples=(128,), batch_sizes=(1, 2))


@pytest.mark.cuda
@pytest.mark.parametrize(("precision", "graphs"), [("fp32", True), ("fp16", True), ("fp16", False)])
def test_cuda_graphs_match_eager_cpu(meta, tiny_model_dir, precision, graphs):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    x = _x(37, 1024, seed=3)  # not a graph batch size: padded up to 64
    with TorchBackend(meta, tiny_model_dir, device="cpu") as cpu:
        ref_logits, ref_snr = cpu.infer(x)
    with TorchBackend(meta, tiny_model_dir, device="cuda:0", precision=precision,
                      cuda_graphs=graphs) as gpu:
        gpu.warmup(buckets_samples=(1024,), batch_sizes=(1, 64))
        logits, snr = gpu.infer(x)
        one, _ = gpu.infer(np.ascontiguousarray(x[:1]))
        assert ((1024, 64) in gpu._graphs and (1024, 1) in gpu._graphs) == graphs
    tol = 5e-2 if precision == "fp16" else 2e-3
    np.testing.assert_allclose(logits, ref_logits, atol=tol, rtol=tol)
    np.testing.assert_allclose(snr, ref_snr, atol=tol * 10, rtol=tol)
    np.testing.assert_allclose(one, ref_logits[:1], atol=tol, rtol=tol)


def test_cuda_graph_batch_sizes_always_cover_max_batch_size(meta, tiny_model_dir):
    # construction needs no GPU (torch is only touched at load), so the plan is testable here
    b = TorchBackend(meta, tiny_model_dir, device="cuda:0", precision="fp16", max_batch_size=100)
    assert b.graph_batch_sizes == (1, 8, 64, 100) and b.warmup_batch_sizes == (1, 8, 64, 100)
    eager = TorchBackend(meta, tiny_model_dir, device="cuda:0", max_batch_size=100, cuda_graphs=False)
    assert eager.warmup_batch_sizes == (1,)
    assert TorchBackend(meta, tiny_model_dir, device="cpu").warmup_batch_sizes == (1,)


def _graph(path, *, n_logits=28, batch="batch", length="length", op=None, opset=17):
    """A small ONNX graph with the model's input and output names: iq (batch, 2, 1, length) ->
    logits (batch, n_logits), each channel's mean times a matrix, and snr_db (batch,) their mean;
    or, with `op`, that one operator of `opset` on the input as logits (an operator ONNX Runtime
    has no CPU kernel for)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper, save

    iq = helper.make_tensor_value_info("iq", TensorProto.FLOAT, [batch, 2, 1, length])
    outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("snr_db", TensorProto.FLOAT, None)]
    if op:
        nodes, init = [helper.make_node(op, ["iq"], ["logits"]), helper.make_node("Identity", ["iq"], ["snr_db"])], []
    else:
        w = np.random.default_rng(0).standard_normal((2, n_logits)).astype(np.float32)
        nodes = [helper.make_node("ReduceMean", ["iq"], ["m"], axes=[2, 3], keepdims=0),
                 helper.make_node("MatMul", ["m", "w"], ["logits"]),
                 helper.make_node("ReduceMean", ["logits"], ["snr_db"], axes=[1], keepdims=0)]
        init = [numpy_helper.from_array(w, "w")]
    graph = helper.make_graph(nodes, "g", [iq], outs, init)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), path)


@pytest.fixture
def model_copy(tiny_model_dir, tmp_path):
    return shutil.copytree(tiny_model_dir, tmp_path / "model")


def test_the_graph_checks_pass_a_graph_that_fits(meta, model_copy):
    _graph(model_copy / "model.onnx")
    with OnnxRuntimeBackend(meta, model_copy, threads=1) as backend:
        logits, snr_db = backend.infer(_x(3, 256))
    assert logits.shape == (3, 28) and snr_db.shape == (3,)


@pytest.mark.parametrize(("graph", "match"), [
    # another network's graph beside this model.json: was "internal error: onnxruntime backend
    # returned shapes (1, 24)" at the first burst
    ({"n_logits": 24}, r"'logits' have shape \['batch', 24\], not \(batch, 28\)"),
    # a static graph (static/model_L128.onnx) as model.onnx: was onnxruntime's traceback on a longer burst
    ({"length": 128}, "length axis is fixed at 128, and this backend feeds 128 to 4096"),
    ({"batch": 8}, "batch axis is fixed at 8, and this backend feeds 1 to 1024"),
])
def test_a_graph_of_another_network_is_refused_at_load_as_the_users_files(meta, model_copy, graph, match):
    _graph(model_copy / "model.onnx", **graph)
    backend = OnnxRuntimeBackend(meta, model_copy, threads=1)
    with pytest.raises(ModelNotFoundError, match="model.onnx is not an ONNX graph of this model: .*" + match):
        backend.load()
    assert not backend.loaded


def test_a_fixed_batch_of_one_is_a_fit_where_one_is_all_it_is_fed(meta, model_copy):
    _graph(model_copy / "model.onnx", batch=1)
    with OnnxRuntimeBackend(meta, model_copy, threads=1, max_batch_size=1) as backend:
        assert backend.infer(_x(1, 128))[0].shape == (1, 28)


def test_the_int8_graph_has_the_same_checks(meta, model_copy):
    # a model.json without extra.int8 trusts its int8_onnx_file as it stands (cpu_int8.int8_problem)
    _graph(model_copy / "model_int8.onnx", n_logits=24)
    int8 = meta.with_updates(int8_onnx_file="model_int8.onnx")
    with pytest.raises(ModelNotFoundError, match="model_int8.onnx is not an ONNX graph of this model"):
        OnnxRuntimeBackend(int8, model_copy, precision="int8", threads=1).load()


def test_an_operator_without_a_cpu_kernel_is_the_files_fault(meta, model_copy):
    # onnxruntime's NOT_IMPLEMENTED (Abs of opset 1) was "internal error", exit 1
    _graph(model_copy / "model.onnx", op="Abs", opset=1)
    with pytest.raises(ModelNotFoundError, match="model.onnx is damaged or not an ONNX graph.*NOT_IMPLEMENTED"):
        OnnxRuntimeBackend(meta, model_copy, threads=1).load()


@pytest.mark.parametrize("backend", [OnnxRuntimeBackend, TorchBackend])
def test_arch_n_classes_other_than_the_label_count_is_refused_before_any_burst(model_copy, backend):
    # both backends failed at the first inference ("internal error ... returned shapes (1, 24)")
    data = json.loads((model_copy / "model.json").read_text())
    data["arch"]["n_classes"] = 24
    (model_copy / "model.json").write_text(json.dumps(data))
    with pytest.raises(ModelNotFoundError, match="arch.n_classes is 24 but labels lists 28"):
        backend(ModelMeta.load(model_copy), model_copy)


def test_an_unfit_model_dir_is_one_line_and_exit_2(model_copy, tmp_path, capsys):
    from rfclassify.cli import main

    _graph(model_copy / "model.onnx", n_logits=24)
    burst = tmp_path / "burst.npy"
    np.save(burst, np.exp(1j * np.linspace(0, 300, 1024)).astype(np.complex64))
    assert main(["classify", str(burst), "--model-dir", str(model_copy), "--backend", "onnxruntime"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not an ONNX graph of this model" in err and "internal error" not in err


def test_torch_threads_none_or_0_take_the_usable_cores_not_an_earlier_loads(meta, tiny_model_dir, monkeypatch):
    # torch's thread count is the process's: a load with threads None kept an earlier load's 1
    torch = pytest.importorskip("torch")
    import rfclassify.engine.torch_backend as torch_backend

    monkeypatch.setattr(torch_backend, "usable_cpu_count", lambda: 3)
    before = torch.get_num_threads()
    try:
        with TorchBackend(meta, tiny_model_dir, threads=1):
            assert torch.get_num_threads() == 1
        for threads in (None, 0):
            with TorchBackend(meta, tiny_model_dir, threads=threads):
                assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_two_threads_first_calls_load_the_backend_once(meta, tiny_model_dir, monkeypatch):
    """load() ran outside the backend's lock: two threads' first infer calls both loaded it
    (two sessions; on CUDA, graphs captured twice) before the sixty-seventh session."""
    import threading
    import time

    loads = []
    real = OnnxRuntimeBackend._load

    def slow_load(self):
        loads.append(threading.get_ident())
        time.sleep(0.2)                          # the window another thread's first call fell into
        real(self)

    monkeypatch.setattr(OnnxRuntimeBackend, "_load", slow_load)
    backend = OnnxRuntimeBackend(meta, tiny_model_dir, threads=1)
    start = threading.Barrier(2)
    shapes = []

    def first_call():
        start.wait()
        shapes.append(backend.infer(_x(2, 256))[0].shape)

    threads = [threading.Thread(target=first_call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    backend.close()
    assert shapes == [(2, 28), (2, 28)] and len(loads) == 1
