"""The Python API's answer to a caller's mistakes and races: one-line errors, never a traceback
from deep inside (a close under a call in flight, unreadable model files, one burst passed bare,
options of the wrong type)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

import rfclassify
from rfclassify._digest import file_sha256
from rfclassify.engine.classifier import Classifier
from rfclassify.model.meta import ModelMeta

pytest.importorskip("onnxruntime")


def _burst(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)


@pytest.fixture(scope="module")
def clf(tiny_model_dir):
    with Classifier.load(tiny_model_dir, backend="onnxruntime", threads=1) as c:
        yield c


# -- a close() from another thread -------------------------------------------------------------
class _CloseBeforeTheLock:
    """A backend's lock whose next acquire, once armed, first lets another thread's close() of
    the backend run to its end: the moment between infer's "is it loaded?" and its taking of
    the lock, where a close once freed the session under the call (seventieth session)."""

    def __init__(self, backend: rfclassify.engine.base.Backend) -> None:
        self._lock = threading.Lock()
        self._backend = backend
        self.armed = False
        self.closed_in_between = False

    def __enter__(self) -> None:
        if self.armed:
            self.armed = False
            closer = threading.Thread(target=self._backend.close)
            closer.start()
            closer.join(timeout=60)
            self.closed_in_between = not closer.is_alive() and not self._backend.loaded
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def test_a_close_that_lands_before_a_call_takes_the_lock_is_a_close_before_the_call(tiny_model_dir):
    """Before the seventieth session infer checked `_loaded` outside the lock: a close landing
    after that check ran onnxruntime's session as None (AttributeError: 'NoneType' object has no
    attribute 'run'). A call after a close loads the backend again (docs/engine.md)."""
    burst = _burst(1024, seed=1)
    with Classifier.load(tiny_model_dir, backend="onnxruntime", threads=1, refiner=False) as c:
        expected = c.classify([burst])[0]
        gate = _CloseBeforeTheLock(c.backend_impl)
        c.backend_impl._lock = gate
        gate.armed = True
        (r,) = c.classify([burst])
        assert gate.closed_in_between   # the close did land there
        assert r.ok and r.label == expected.label
        np.testing.assert_allclose(r.probabilities, expected.probabilities, atol=1e-6)
        assert c.backend_impl.loaded


def test_a_close_waits_for_the_call_in_flight(tiny_model_dir):
    """A close() while a call runs returns after it, and the call gets its answer (the lock)."""
    from rfclassify.engine.onnxruntime_backend import OnnxRuntimeBackend

    running, release = threading.Event(), threading.Event()

    class Slow(OnnxRuntimeBackend):
        def _infer(self, x):
            running.set()
            assert release.wait(60)
            return super()._infer(x)

    backend = Slow(ModelMeta.load(tiny_model_dir), tiny_model_dir, threads=1).load()
    x = np.zeros((1, 2, 1, 1024), np.float32)
    out: list = []
    call = threading.Thread(target=lambda: out.append(backend.infer(x)))
    call.start()
    assert running.wait(60)
    closer = threading.Thread(target=backend.close)
    closer.start()
    closer.join(timeout=0.5)
    assert closer.is_alive()            # waits on the call in flight
    release.set()
    call.join(60)
    closer.join(60)
    assert not closer.is_alive() and not backend.loaded
    assert out and out[0][0].shape == (1, len(backend.meta.labels))


# -- model files that cannot be read -----------------------------------------------------------
def _with_int8_record(tiny_model_dir: Path, model_dir: Path) -> Path:
    """A copy of the tiny model whose model.json names an INT8 graph with its digests, as
    `rfclassify calibrate` writes them (the graph itself is never run here)."""
    shutil.copytree(tiny_model_dir, model_dir)
    (model_dir / "model_int8.onnx").write_bytes(b"not read")
    meta = ModelMeta.load(model_dir)
    record = {"file": "model_int8.onnx", "sha256": file_sha256(model_dir / "model_int8.onnx"),
              "source_onnx_sha256": file_sha256(model_dir / "model.onnx")}
    meta.with_updates(int8_onnx_file="model_int8.onnx", extra={**meta.extra, "int8": record}).save(model_dir)
    return model_dir


def _fails_to_read(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError:
        return True
    return False


def _unreadable(path: Path, how: str) -> None:
    """Make `path` a regular file that open() or read() refuses, whoever runs the test."""
    if how == "io_error":
        # /proc/self/mem is a regular file whose read at offset 0 fails (EIO) for root too
        if not Path("/proc/self/mem").is_file() or not _fails_to_read(Path("/proc/self/mem")):
            pytest.skip("needs Linux's /proc/self/mem (a regular file whose first read fails)")
        path.unlink()
        path.symlink_to("/proc/self/mem")
    else:
        path.chmod(0)
        if not _fails_to_read(path):
            pytest.skip("this user reads a file of mode 000 (root ignores file modes); io_error covers it")


@pytest.mark.parametrize("how", ["io_error", "mode_000"])
def test_an_unreadable_int8_graph_is_refused_with_the_reason(tiny_model_dir, tmp_path, how):
    """It was a PermissionError (or OSError) traceback from the sha256 check; 'auto' now falls
    back to fp32 with the reason, as for an INT8 graph that is not the one model.json records."""
    model_dir = _with_int8_record(tiny_model_dir, tmp_path / "m")
    _unreadable(model_dir / "model_int8.onnx", how)
    with pytest.raises(rfclassify.ModelNotFoundError, match=r"INT8 graph .*model_int8\.onnx cannot be read"):
        Classifier.load(model_dir, backend="onnxruntime", precision="int8", threads=1)
    with Classifier.load(model_dir, threads=1) as c:
        assert c.precision == "fp32" and "model_int8.onnx cannot be read" in c.precision_reason
        assert c.classify([_burst(300)])[0].ok


@pytest.mark.parametrize("how", ["io_error", "mode_000"])
def test_an_unreadable_model_onnx_is_a_one_line_model_error(tiny_model_dir, tmp_path, how):
    """The INT8 graph's check against model.onnx read it first: a traceback before the seventieth
    session. Now every precision names the file: model.onnx is read to check it is model.json's
    (rfclassify.model.provenance) before the INT8 graph is looked at."""
    model_dir = _with_int8_record(tiny_model_dir, tmp_path / "m")
    _unreadable(model_dir / "model.onnx", how)
    for precision in ("auto", "fp32"):
        with pytest.raises(rfclassify.ModelNotFoundError) as err:
            Classifier.load(model_dir, precision=precision, threads=1)
        assert "model.onnx cannot be read" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(rfclassify.ModelNotFoundError, match="model.onnx cannot be read"):
        Classifier.load(model_dir, backend="onnxruntime", precision="int8", threads=1)


# -- one burst passed bare ---------------------------------------------------------------------
@pytest.mark.parametrize("bare", ["iq_pairs", "complex_list", "numpy_scalar_tuple", "real_list"])
def test_one_burst_passed_bare_is_an_input_error_that_says_what_to_pass(clf, bare):
    """A bare (n, 2) I/Q array gave n `too_short` results and a list of samples n `bad_shape`
    ones, silently, before the seventieth session."""
    z = _burst(1024)
    burst = {"iq_pairs": np.stack([z.real, z.imag], axis=1),
             "complex_list": [complex(v) for v in z],
             "numpy_scalar_tuple": tuple(z),
             "real_list": [float(v) for v in z.real]}[bare]
    with pytest.raises(rfclassify.InputError, match=r"sequence of bursts.*classify\(\[iq\]\)"):
        clf.classify(burst)
    assert clf.classify([burst])[0].ok      # the same burst in a list


def test_the_documented_forms_of_several_bursts_still_work(clf):
    z = [_burst(512, seed=s) for s in range(3)]
    pairs = [np.stack([v.real, v.imag], axis=1) for v in z]
    for bursts in (np.stack(z), pairs, np.stack(pairs), (v for v in z), tuple(z)):
        results = clf.classify(bursts)
        assert len(results) == 3 and all(r.ok and r.n_samples == 512 for r in results)
    assert clf.classify([]) == []


@pytest.mark.parametrize("bursts", [None, np.array(3.0), 3.0, "abc", b"abc"])
def test_what_is_no_sequence_of_bursts_is_an_input_error(clf, bursts):
    """None and a 0-d array were TypeErrors; a string gave a bad_dtype result per character."""
    with pytest.raises(rfclassify.InputError, match="sequence of bursts"):
        clf.classify(bursts)


# -- options of the wrong type -----------------------------------------------------------------
@pytest.mark.parametrize("size", ["8", 1.5, True, 0, None])
def test_a_max_batch_size_that_is_not_an_integer_of_at_least_one_is_a_config_error(tiny_model_dir, size):
    """'8' was a TypeError from a comparison; 1.5 and True ran as 1, silently. As top_k's check."""
    from rfclassify.engine.onnxruntime_backend import OnnxRuntimeBackend

    with pytest.raises(rfclassify.ConfigError, match="max_batch_size must be an integer >= 1"):
        Classifier.load(tiny_model_dir, backend="onnxruntime", max_batch_size=size)
    with pytest.raises(rfclassify.ConfigError, match="max_batch_size must be an integer >= 1"):
        OnnxRuntimeBackend(ModelMeta.load(tiny_model_dir), tiny_model_dir, max_batch_size=size)
    with Classifier.load(tiny_model_dir, backend="onnxruntime", max_batch_size=np.int64(3), threads=1) as c:
        assert c.max_batch_size == 3 and type(c.max_batch_size) is int


@pytest.mark.parametrize("name", ["unknown_threshold", "refiner_skip_above"])
@pytest.mark.parametrize("value", [None, "0.5", True, float("nan"), 1.5])
def test_a_probability_that_is_not_a_number_in_0_to_1_is_a_config_error(tiny_model_dir, name, value):
    """None was a TypeError from float(), and '0.5' was taken; as sample_rate's check."""
    with Classifier.load(tiny_model_dir, backend="onnxruntime", threads=1) as c:
        before = c.meta
        with pytest.raises(rfclassify.ConfigError, match=rf"{name} must be in 0\.\.1.*, got "):
            setattr(c, name, value)
        assert c.meta is before
        setattr(c, name, np.float32(0.5))
        assert getattr(c, name) == 0.5
    if name == "refiner_skip_above" and value is not None:   # load's None: model.json's
        with pytest.raises(rfclassify.ConfigError, match=rf"{name} must be in 0\.\.1.*, got "):
            Classifier.load(tiny_model_dir, backend="onnxruntime", refiner_skip_above=value)


@pytest.mark.parametrize("stage", ["refiner_pool", "warmup"])
def test_a_load_that_fails_after_the_backend_loaded_closes_it(stage, monkeypatch):
    """A refiner pool whose worker died while starting, or a warm-up that failed, left the
    backend's session loaded behind the exception (the refiner-hang fix's leftover)."""
    from rfclassify._exceptions import InternalError
    from rfclassify.engine import refiner_pool
    from rfclassify.engine.onnxruntime_backend import OnnxRuntimeBackend

    shipped = Path(__file__).resolve().parents[1] / "models"
    loaded = []
    real_load = OnnxRuntimeBackend.load
    monkeypatch.setattr(OnnxRuntimeBackend, "load", lambda self: loaded.append(self) or real_load(self))

    def fail(*args, **kwargs):
        raise InternalError("a refiner worker died while starting (test)")
    monkeypatch.setattr(*((refiner_pool, "RefinerPool", fail) if stage == "refiner_pool"
                          else (OnnxRuntimeBackend, "warmup", fail)))
    with pytest.raises(InternalError, match="died while starting"):
        Classifier.load(shipped, backend="onnxruntime", precision="fp32", refiner_workers=1, threads=1, warmup=True)
    assert len(loaded) == 1 and not loaded[0].loaded
