"""The TensorRT backend's own work on a real CUDA GPU, with TensorRT replaced by a stand-in
(tests/tensorrt_standin.py: its engines are the network run by torch on the backend's stream).

Real here: pycuda (context, stream, pinned and mapped buffers, the copies and the
synchronisation), the backend's binding of contexts to profiles, the DLA's fixed-batch pieces,
the engine cache (keys, files, records, a second load building nothing), Classifier.load picking
the backend, and `rfclassify engine build|inspect|selftest`. Not real: anything TensorRT does
(building, its kernels, INT8, the DLA): tests/test_engine_tensorrt.py's `tensorrt` tests run those
where TensorRT imports. These run where pycuda and a CUDA GPU are and TensorRT is not: the lent GPU
hosts (pycuda built for them: docs/engine.md); they skip everywhere else.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

SHIPPED = Path(__file__).resolve().parents[1] / "models"

pytestmark = pytest.mark.cuda


@pytest.fixture(name="trt")
def standin_fixture(monkeypatch):
    """The stand-in as `tensorrt`, the builder replaced by the stand-in's; skips without pycuda
    or a CUDA GPU, and where the real TensorRT imports (its own tests run there)."""
    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("tensorrt imports here: tests/test_engine_tensorrt.py runs the real thing")
    pytest.importorskip("pycuda.driver", reason="pycuda is not installed (pip install 'rfclassify[jetson]')")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    import tensorrt_standin

    from rfclassify.engine import tensorrt_engines as te
    from rfclassify.model.network import load_trained

    net, meta = load_trained(SHIPPED)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)   # compared with fp32 below
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    module = tensorrt_standin.module(net.to("cuda").eval(), len(meta.labels))
    monkeypatch.setitem(sys.modules, "tensorrt", module)
    monkeypatch.setattr(te, "build_engine", lambda trt, logger, plan, part, model_dir, timing: (
        tensorrt_standin.serialized(part)))
    return module


@pytest.fixture(scope="module", name="reference")
def reference_fixture():
    from rfclassify.engine.onnxruntime_backend import OnnxRuntimeBackend
    from rfclassify.model.meta import ModelMeta

    with OnnxRuntimeBackend(ModelMeta.load(SHIPPED), SHIPPED, precision="fp32") as ref:
        yield ref


def _bursts(n: int, length: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 2, 1, length)).astype(np.float32)


def _backend(tmp_path, **kwargs):
    from rfclassify.engine.tensorrt_backend import TensorRTBackend
    from rfclassify.model.meta import ModelMeta

    return TensorRTBackend(ModelMeta.load(SHIPPED), SHIPPED, device="cuda:0", engine_cache=tmp_path,
                           max_batch_size=256, **kwargs)


def _same(got, want):
    np.testing.assert_allclose(got[0], want[0], atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(got[1], want[1], atol=2e-2, rtol=2e-3)


def test_the_gpu_plan_answers_as_onnxruntime_through_pinned_buffers_and_copies(trt, reference, tmp_path):
    import pycuda.driver as cuda

    from rfclassify.engine.tensorrt_engines import cached_engines

    with _backend(tmp_path, precision="int8") as b:
        assert b.plan.device == "gpu" and len(b.built) == 1
        assert all(all(v is not None for v in s.device.values()) for s in b._slots.values())   # discrete GPU
        for i, bucket in enumerate(b.buckets_samples):
            for n in (1, 37, 256):      # batches inside each profile, the largest at its max
                x = _bursts(n, bucket, seed=10 * i + n)
                _same(b.infer(x), reference.infer(x))
        assert {shape for _, _, shape in trt.executions} >= {(256, 2, 1, 4096), (1, 2, 1, 128)}
    (record,) = cached_engines(tmp_path)
    assert record["where"] == "gpu" and record["tensorrt"] == trt.__version__
    assert record["device"].startswith(cuda.Device(0).name())
    with _backend(tmp_path, precision="int8") as again:      # the cache's engine, nothing built
        assert again.built == []
        x = _bursts(5, 1024, seed=1)
        _same(again.infer(x), reference.infer(x))


def test_a_dla_plan_runs_fixed_batches_and_drops_the_padding(trt, reference, tmp_path):
    with _backend(tmp_path, precision="int8", dla_core=0, dla_batch=8) as b:
        assert b.plan.device == "dla" and len(b.built) == len(b.buckets_samples)
        x = _bursts(19, 1024, seed=2)            # pieces of 8, 8 and 3 padded to 8
        got = b.infer(x)
        assert got[0].shape == (19, len(b.meta.labels)) and got[1].shape == (19,)
        _same(got, reference.infer(x))
        _same(b.infer(x[:1]), reference.infer(x[:1]))
    assert [shape for tag, core, shape in trt.executions] == [(8, 2, 1, 1024)] * 4
    assert {core for _, core, _ in trt.executions} == {0}


def test_mapped_host_buffers_give_the_same_answers(trt, reference, tmp_path, monkeypatch):
    """What a Jetson's integrated GPU gets (zero-copy), run on a discrete GPU through the same
    mapped pinned memory."""
    from rfclassify.engine import tensorrt_backend

    monkeypatch.setattr(tensorrt_backend, "maps_host_memory", lambda cuda, dev: True)
    with _backend(tmp_path, precision="fp16") as b:
        assert all(all(v is None for v in s.device.values()) for s in b._slots.values())
        for bucket in (128, 1024):
            x = _bursts(33, bucket, seed=bucket)
            _same(b.infer(x), reference.infer(x))


def test_classifier_load_serves_bursts_of_any_length_on_it(trt, tmp_path):
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.classifier import Classifier

    rng = np.random.default_rng(4)
    lengths = (1, 63, 64, 300, 1024, 5000, 100000)
    bursts = [synthesize([label], n, rng, snr_db=np.array([15.0])).iq[0]
              for n, label in zip(lengths, ("QPSK", "QPSK", "8PSK", "16QAM", "GMSK", "BPSK", "FM"))]
    with Classifier.load(SHIPPED, backend="tensorrt", precision="int8", engine_cache=tmp_path, refiner=False) as clf, \
            Classifier.load(SHIPPED, backend="onnxruntime", precision="fp32", refiner=False) as ref:
        assert (clf.backend, clf.precision) == ("tensorrt", "int8")
        got, want = clf.classify(bursts, sample_rate=1e6), ref.classify(bursts, sample_rate=1e6)
    assert [r.reject_reason for r in got] == ["too_short", "too_short"] + [None] * 5
    assert [(r.label, r.bucket, r.windows) for r in got] == [(r.label, r.bucket, r.windows) for r in want]
    for g, w in zip(got[2:], want[2:]):
        np.testing.assert_allclose(g.probabilities, w.probabilities, atol=1e-3)
        assert g.snr_db == pytest.approx(w.snr_db, abs=0.05)


def test_the_engine_command_builds_inspects_and_selftests(trt, tmp_path, capsys):
    from rfclassify.cli import main

    cache = ["--cache-dir", str(tmp_path)]
    assert main(["engine", "build", *cache]) == 0
    out = capsys.readouterr().out
    assert "built: " in out and "none" not in out.split("built: ")[1]
    assert main(["engine", "build", *cache]) == 0
    assert "none (every engine was cached)" in capsys.readouterr().out
    (engine,) = tmp_path.glob("*.engine")
    assert main(["engine", "inspect", str(engine)]) == 0
    assert "stand-in: the network in torch" in capsys.readouterr().out
    assert main(["engine", "selftest", *cache]) == 0
    assert "PASS" in capsys.readouterr().out
