"""Backends: the shared input checks, ORT/torch agreement, the life cycle."""

from __future__ import annotations

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
