"""Classifier: bursts of any length -> results; aggregation; unknown thresholding; daemon hooks."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

import rfclassify
from rfclassify.dsp.windows import burst_to_windows, to_model_input
from rfclassify.engine.classifier import Classifier
from rfclassify.engine.results import log_softmax
from rfclassify.labels import UNKNOWN_LABEL
from rfclassify.model.meta import ModelMeta


@pytest.fixture(scope="module")
def clf(tiny_model_dir):
    with Classifier.load(tiny_model_dir, device="cpu", threads=1) as c:  # the same on GPU boxes
        yield c


def _burst(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.skipif(_has_gpu(), reason="auto picks torch on CUDA where there is a GPU")
def test_auto_selection_on_a_cpu_box_picks_onnxruntime_and_says_why(tiny_model_dir):
    with Classifier.load(tiny_model_dir) as clf:
        _check_cpu_choice(clf)
        assert "tensorrt on cuda:0 skipped" in clf.backend_reason
        assert "torch on cuda:0 skipped (torch sees no CUDA GPU)" in clf.backend_reason


def test_device_cpu_picks_onnxruntime_and_says_why(clf):
    _check_cpu_choice(clf)
    # the tiny model has no refiners: nothing of theirs to report, so status shows no skip line
    d = clf.describe()
    assert d["refiner"] is None and d["low_order_refiner"] is None
    assert (d["refiner_skip_above"], d["refiner_skip_min_samples"], d["refiner_skip_counts"]) == (None, None, None)


def _check_cpu_choice(clf):
    assert clf.backend == "onnxruntime" and clf.device == "cpu" and clf.precision == "fp32"
    assert "onnxruntime on cpu chosen" in clf.backend_reason
    assert "not calibrated" in clf.precision_reason
    assert clf.describe()["backend"] == "onnxruntime"


@pytest.mark.parametrize("threads", [-3, 2.5, 10 ** 30, True])
def test_a_thread_count_out_of_range_is_a_config_error(tiny_model_dir, threads):
    """As [model] threads (0..1024): 10 ** 30 once raised TypeError from ONNX Runtime and -3 was
    taken as it came."""
    with pytest.raises(rfclassify.ConfigError, match="threads must be an integer in 0..1024"):
        Classifier.load(tiny_model_dir, backend="onnxruntime", threads=threads)
    with Classifier.load(tiny_model_dir, backend="onnxruntime", threads=np.int64(1)) as one:
        assert one.backend == "onnxruntime"


@pytest.mark.parametrize("top_k", [0, -2, 2.7, True])
def test_a_top_k_below_one_or_not_an_integer_is_a_config_error(tiny_model_dir, top_k):
    """0 or a negative count once gave one label, silently, and 2.7 gave two."""
    with pytest.raises(rfclassify.ConfigError, match="top_k must be an integer >= 1"):
        Classifier.load(tiny_model_dir, backend="onnxruntime", top_k=top_k)
    with Classifier.load(tiny_model_dir, backend="onnxruntime", top_k=np.int64(2)) as two:
        assert len(two.classify([_burst(1024, seed=1)])[0].top) == 2


@pytest.mark.parametrize("damage,message", [
    ("other_arch", "does not hold the weights of the network model.json's arch describes"),
    ("garbage", "cannot read the weights"),
    ("long_name", "which cannot be read"),
    ("folder", "needs the file {model_dir}/model.pt, which is a directory"),
])
def test_weights_that_do_not_fit_or_cannot_be_read_are_a_model_error(tiny_model_dir, tmp_path, damage, message):
    """Each was a raw torch / OS exception: a RuntimeError listing every state-dict key, an
    UnpicklingError, ENAMETOOLONG from is_file; a folder named model.pt "did not exist"."""
    import json

    pytest.importorskip("torch")
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    data = json.loads((model_dir / "model.json").read_text())
    if damage == "other_arch":
        data["arch"] = {**data["arch"], "head_channels": 64}
    elif damage == "garbage":
        (model_dir / "model.pt").write_bytes(b"not a checkpoint" * 10)
    elif damage == "folder":
        (model_dir / "model.pt").unlink()
        (model_dir / "model.pt").mkdir()
    else:
        data["weights_file"] = "w" * 5000
    (model_dir / "model.json").write_text(json.dumps(data))
    with pytest.raises(rfclassify.ModelNotFoundError, match=re.escape(message.format(model_dir=model_dir))):
        Classifier.load(model_dir, backend="torch", device="cpu")



@pytest.mark.parametrize("damage", ["truncated", "empty", "unknown_op"])
def test_a_damaged_onnx_file_is_a_model_error(tiny_model_dir, tmp_path, damage):
    """onnxruntime's InvalidProtobuf / InvalidArgument / InvalidGraph read as an internal error (exit 1)."""
    onnx = pytest.importorskip("onnx")
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    path = model_dir / "model.onnx"
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:1000])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        graph = onnx.load(str(path))
        graph.graph.node[0].op_type = "NoSuchOp"
        onnx.save(graph, str(path))
    with pytest.raises(rfclassify.ModelNotFoundError, match="is damaged or not an ONNX graph of this model"):
        Classifier.load(model_dir, backend="onnxruntime", device="cpu")


@pytest.mark.parametrize("message, error", [
    # onnxruntime 1.23 and 1.30 (Python 3.10's and the GPU host's) on an empty model.onnx
    ("[ONNXRuntimeError] : 1 : FAIL : Load model from m/model.onnx failed: ModelProto does not have a graph.",
     rfclassify.ModelNotFoundError),
    ("[ONNXRuntimeError] : 1 : FAIL : some other failure inside onnxruntime", rfclassify.BackendError),
])
def test_onnxruntimes_plain_fail_is_the_files_only_when_loading_the_file_failed(tiny_model_dir, monkeypatch,
                                                                                  message, error):
    ort = pytest.importorskip("onnxruntime")
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail

    def fail(*args, **kwargs):
        raise Fail(message)

    monkeypatch.setattr(ort, "InferenceSession", fail)
    with pytest.raises(error):
        Classifier.load(tiny_model_dir, backend="onnxruntime", device="cpu")


def test_a_stop_asked_for_while_the_backend_loads_is_taken_before_the_workers_and_warm_up(tiny_model_dir,
                                                                                           monkeypatch):
    """The daemon's stop during its start: every backend, not only TensorRT's engine builds,
    stops before the refiner workers spawn and the warm-up runs (seconds each on a loaded box),
    and the backend it had loaded is closed again."""
    import threading

    from rfclassify._exceptions import Cancelled
    from rfclassify.engine.onnxruntime_backend import OnnxRuntimeBackend

    closed, warmed = [], []
    real_close = OnnxRuntimeBackend.close
    monkeypatch.setattr(OnnxRuntimeBackend, "close", lambda self: (closed.append(self), real_close(self)))
    monkeypatch.setattr(OnnxRuntimeBackend, "warmup", lambda self: warmed.append(self))
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled, match="stopped after loading the onnxruntime backend"):
        Classifier.load(tiny_model_dir, backend="onnxruntime", warmup=True, cancel=stop)
    assert len(closed) == 1 and warmed == []
    # not asked: it loads and warms up as before
    with Classifier.load(tiny_model_dir, backend="onnxruntime", warmup=True, cancel=threading.Event()):
        assert len(warmed) == 1


def test_int8_request_with_backend_auto_falls_back_to_fp32(tiny_model_dir):
    with Classifier.load(tiny_model_dir, precision="int8", device="cpu") as c:
        assert c.precision == "fp32"
        assert c.precision_reason.startswith("fell back from int8 to fp32")


def test_any_length_gives_a_result_or_a_reject_never_an_exception(clf):
    lengths = [1, 63, 64, 5000, 100000]
    results = clf.classify([_burst(n, seed=n) for n in lengths], sample_rate=1e6)
    assert [r.n_samples for r in results] == lengths
    assert [r.ok for r in results] == [False, False, True, True, True]
    assert results[0].reject_reason == "too_short" and results[0].label is None
    assert results[2].bucket == 128 and results[2].windows == 1
    assert results[3].bucket == 4096 and results[3].windows == 2
    assert results[4].bucket == 4096 and results[4].windows == clf.policy.max_windows
    for r in results[2:]:
        assert r.label in clf.labels and r.sample_rate_hz == 1e6
        for name, p in r.top:  # top is the probabilities, best first
            assert p == pytest.approx(float(r.probabilities[clf.labels.index(name)]), abs=1e-6)
        assert [p for _, p in r.top] == sorted((p for _, p in r.top), reverse=True)
        assert r.confidence == r.top[0][1]


@pytest.mark.parametrize(
    ("burst", "reason"),
    [
        (np.zeros(200, np.complex64), "zero_power"),
        (np.full(200, np.nan, np.complex64), "non_finite"),
        (np.ones((3, 3)), "bad_shape"),
        (np.array(["a", "b"]), "bad_dtype"),
        ([[1.0, 2.0], [3.0]], "bad_shape"),
    ],
)
def test_bad_bursts_are_rejected_with_a_reason(clf, burst, reason):
    good = _burst(300)
    results = clf.classify([good, burst, good])
    assert results[0].ok and results[2].ok
    assert not results[1].ok and results[1].reject_reason == reason and results[1].label is None
    assert results[1].to_dict()["reason"] == reason


def test_complex128_real_and_iq_pairs_are_accepted(clf):
    z = _burst(512, seed=4)
    iq = np.stack([z.real, z.imag], axis=1).astype(np.float32)
    a, b, c = clf.classify([z.astype(np.complex128), iq, z.real.copy()])
    assert a.ok and b.ok and c.ok
    np.testing.assert_allclose(a.probabilities, b.probabilities, atol=1e-5)


def test_one_exact_bucket_window_equals_infer_on_that_window(clf):
    z = _burst(1024, seed=5)
    (result,) = clf.classify([z])
    w = burst_to_windows(z, clf.policy)
    logits, snr = clf.backend_impl.infer(to_model_input(w.windows))
    expected = np.exp(log_softmax(logits[0], clf.meta.temperature))
    assert result.windows == 1
    np.testing.assert_allclose(result.probabilities, expected, atol=1e-5)
    assert result.snr_db == pytest.approx(float(snr[0]), abs=1e-3)


def test_windows_are_aggregated_by_mean_log_probability(clf):
    z = _burst(3000, seed=6)
    w = burst_to_windows(z, clf.policy)
    assert w.n_windows > 1
    logits, snr = clf.infer_windows(w.bucket_samples, w.windows)
    logp = np.log(np.exp(logits - logits.max(1, keepdims=True)) /
                  np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True))
    manual = np.exp(logp.mean(axis=0))
    manual /= manual.sum()
    (result,) = clf.classify([z])
    np.testing.assert_allclose(result.probabilities, manual, atol=1e-5)
    assert result.snr_db == pytest.approx(float(snr.mean()), abs=1e-3)
    assert result.label == clf.labels[int(np.argmax(manual))]


def test_results_do_not_depend_on_the_other_bursts_in_the_call(clf):
    bursts = [_burst(n, seed=n) for n in (700, 128, 9000, 700)]
    together = clf.classify(bursts)
    alone = [clf.classify([b])[0] for b in bursts]
    for t, a in zip(together, alone, strict=True):
        np.testing.assert_allclose(t.probabilities, a.probabilities, atol=1e-5)


def test_infer_windows_splits_batches_above_max_batch_size(tiny_model_dir):
    with Classifier.load(tiny_model_dir, device="cpu", max_batch_size=2) as small:
        z = _burst(2000, seed=7)
        w = burst_to_windows(z, small.policy)
        assert w.n_windows > 2
        logits, snr = small.infer_windows(w.bucket_samples, w.windows)
        assert logits.shape == (w.n_windows, len(small.labels)) and snr.shape == (w.n_windows,)
        (result,) = small.classify([z])
        direct = small.results_from_outputs(logits, snr, z.size, w.bucket_samples)
        np.testing.assert_allclose(result.probabilities, direct.probabilities, atol=1e-6)


def _model_copy(src, dst, **meta_changes):
    shutil.copytree(src, dst)
    ModelMeta.load(dst).with_updates(**meta_changes).save(dst)
    return dst


@pytest.mark.parametrize("n_labels", [0, 1])
def test_fewer_than_two_labels_is_a_config_error_before_any_backend_loads(tiny_model_dir, tmp_path, n_labels):
    meta = ModelMeta.load(tiny_model_dir)
    meta.with_updates(labels=meta.labels[:n_labels]).save(tmp_path)  # model.json only
    with pytest.raises(rfclassify.ConfigError, match=f"model.json lists {n_labels} labels"):
        Classifier.load(tmp_path, device="cpu")


@pytest.mark.parametrize("edit,message", [
    ({"temperature": float("nan")}, "temperature must be a finite number > 0, got NaN"),
    ({"temperature": "hot"}, 'temperature must be a finite number > 0, got "hot"'),
    ({"temperature": 10 ** 400}, "temperature must be a finite number > 0, got 1000"),  # once OverflowError
    ({"unknown_threshold": 2}, "unknown_threshold must be a finite number in [0, 1], got 2"),
    ({"refiner_skip_above": -0.5}, "refiner_skip_above must be a finite number in [0, 1], got -0.5"),
    ({"refiner_skip_temperature": 0}, "refiner_skip_temperature must be a finite number > 0, got 0"),
    ({"min_samples": 0}, "min_samples must be an integer >= 1, got 0"),
    ({"buckets_samples": [1024, 256]}, "buckets_samples must be increasing positive integers, got [1024, 256]"),
    ({"labels": [1, 2]}, "labels must be a list of strings"),
    ({"arch": [3]}, "arch must be a JSON object, got [3]"),
    # each once a TypeError or an overflow inside torch where the torch backend built the network
    ({"arch": {"stages": "x"}}, 'arch.stages must be a non-empty list of stages, got "x"'),
    ({"arch": {"pool": 10 ** 19}}, "arch.pool must be an integer in 1..4096, got 10000000000000000000"),
    ({"arch": {"snr_init_db": 1e308}}, "arch.snr_init_db must be a number in -1000..1000 (dB), got 1e+308"),
    ({"arch": {"stages": [{"channels": 8, "kernel": 3, "dilations": [0]}]}},
     "arch.stages[0].dilations[0] must be an integer in 1..4096, got 0"),
    ({"refiner": {"file": "refiner.npz", "light": 3}}, "refiner.light must be a JSON object, got 3"),
    ({"low_order_refiner": {"file": 7}}, "low_order_refiner.file must be a string, got 7"),
    # sixty-sixth session: evaluate's KeyError, and the TensorRT plan's and calibrate's tracebacks
    ({"labels": ["OOK", "FOO"]}, 'labels must be rfclassify\'s label names (rfclassify.labels.LABELS); not: ["FOO"]'),
    ({"labels": ["OOK", "QPSK", "OOK"]}, 'labels must not repeat, got ["OOK", "QPSK", "OOK"]'),
    ({"extra": {"export": [1]}}, "extra.export must be a JSON object, got [1]"),
    ({"extra": {"export": {"static_batch": "x"}}},
     'extra.export.static_batch must be an integer >= 1 or null, got "x"'),
    ({"extra": {"export": {"static_files": "abc"}}},
     'extra.export.static_files must map bucket names to strings, got "abc"'),
    ({"extra": {"tensorrt_int8": {"qdq_file": 5}}}, "extra.tensorrt_int8.qdq_file must be a string, got 5"),
    ({"extra": {"int8": []}}, "extra.int8 must be a JSON object, got []"),
])
def test_a_hand_edited_model_json_is_checked_field_by_field(tiny_model_dir, tmp_path, capsys, edit, message):
    """docs/model.md invites editing unknown_threshold in model.json: a value that would serve
    NaN probabilities or call every burst unknown, or a wrong type (once a traceback), is one
    line naming the field, exit 2."""
    import json

    from rfclassify.cli import main

    shutil.copytree(tiny_model_dir, tmp_path / "m")
    data = json.loads((tmp_path / "m" / "model.json").read_text())
    (tmp_path / "m" / "model.json").write_text(json.dumps({**data, **edit}))
    with pytest.raises(rfclassify.ModelNotFoundError, match=re.escape(message)):
        ModelMeta.load(tmp_path / "m")
    (tmp_path / "x.sigmf-data").write_bytes(_burst(512).astype(np.complex64).tobytes())
    (tmp_path / "x.sigmf-meta").write_text(json.dumps({"global": {"core:datatype": "cf32_le"}}))
    assert main(["classify", str(tmp_path / "x"), "--model-dir", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_a_model_json_that_is_not_an_object_or_too_deep_is_one_line(tmp_path):
    # nesting past the parser's depth raises RecursionError (Python 3.11); Python 3.12's parser
    # reads 5,000 levels (on the lent GPU host, fifty-eighth session) and finds a list: one line either way
    for text, message in (("[1, 2]", "expected a JSON object, got a JSON list"),
                          ("[" * 100_000 + "]" * 100_000, "cannot read|expected a JSON object")):
        (tmp_path / "model.json").write_text(text)
        with pytest.raises(rfclassify.ModelNotFoundError, match=message):
            ModelMeta.load(tmp_path)


def test_unknown_threshold_reports_unknown_with_the_best_guess_first(tiny_model_dir, tmp_path, clf):
    z = _burst(1024, seed=8)
    (plain,) = clf.classify([z])
    strict_dir = _model_copy(tiny_model_dir, tmp_path / "m", unknown_threshold=0.999)
    with Classifier.load(strict_dir, device="cpu") as strict:
        (r,) = strict.classify([z])
    assert r.ok and r.label == UNKNOWN_LABEL
    assert r.best_guess == plain.label and r.top[0][0] == plain.label
    assert r.to_dict()["label"] == UNKNOWN_LABEL


def test_temperature_flattens_the_probabilities(tiny_model_dir, tmp_path, clf):
    z = _burst(1024, seed=9)
    (plain,) = clf.classify([z])
    with Classifier.load(_model_copy(tiny_model_dir, tmp_path / "t", temperature=4.0), device="cpu") as hot:
        (r,) = hot.classify([z])
    assert r.top[0][0] == plain.top[0][0]
    assert r.confidence < plain.confidence


def test_to_dict_has_the_result_fields_of_the_contract(clf):
    (r,) = clf.classify([_burst(256)])
    d = r.to_dict()
    assert set(d) == {"label", "confidence", "top", "snr_db", "n_samples", "bucket", "windows"}
    assert d["top"][0] == {"label": r.top[0][0], "p": r.top[0][1]}
    assert len(d["top"]) == clf.top_k


def test_a_single_array_instead_of_a_list_is_a_clear_error(clf):
    with pytest.raises(rfclassify.InputError, match="sequence of bursts"):
        clf.classify(_burst(256))


def test_torch_cpu_backend_gives_the_same_results(tiny_model_dir, clf):
    bursts = [_burst(n, seed=n) for n in (100, 4096)]
    with Classifier.load(tiny_model_dir, backend="torch", device="cpu") as t:
        assert t.backend == "torch" and t.device == "cpu"
        for a, b in zip(t.classify(bursts), clf.classify(bursts), strict=True):
            np.testing.assert_allclose(a.probabilities, b.probabilities, atol=1e-4)


@pytest.mark.cuda
def test_auto_on_a_gpu_picks_torch_cuda_fp16_and_agrees_with_the_cpu(tiny_model_dir, clf):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    bursts = [_burst(n, seed=n) for n in (64, 1000, 5000, 100000)]
    with Classifier.load(tiny_model_dir, warmup=True, max_batch_size=64) as gpu:
        assert (gpu.backend, gpu.device, gpu.precision) == ("torch", "cuda:0", "fp16")
        assert "torch on cuda:0 chosen" in gpu.backend_reason
        for a, b in zip(gpu.classify(bursts), clf.classify(bursts), strict=True):
            np.testing.assert_allclose(a.probabilities, b.probabilities, atol=2e-2)
            assert a.snr_db == pytest.approx(b.snr_db, abs=0.2)


def test_warmup_on_the_cpu_runs_every_bucket_once(tiny_model_dir):
    with Classifier.load(tiny_model_dir, device="cpu", warmup=True, max_batch_size=8) as c:
        assert c.backend_impl.warmup_batch_sizes == (1,)
        assert c.classify([_burst(128)])[0].ok


def test_unknown_threshold_can_be_overridden_at_run_time(tiny_model_dir):
    with Classifier.load(tiny_model_dir, device="cpu") as c:
        assert c.unknown_threshold == c.meta.unknown_threshold == 0.0
        c.unknown_threshold = 1.0
        (r,) = c.classify([_burst(300)])
        assert r.label == UNKNOWN_LABEL and r.best_guess in c.labels
        with pytest.raises(rfclassify.ConfigError):
            c.unknown_threshold = 1.5


def test_bursts_of_any_dtype_and_scale_get_the_refined_answer_of_their_unit_scale():
    """Until the sixty-seventh session only complex128 was brought to unit peak for the DC pass
    and the refiners: a real float64 burst of 1e160 raised OverflowError in the leak-line test
    and lost its call, real and complex64 bursts far from unit scale got other answers, and a
    subnormal complex128 burst was a RuntimeWarning and a zero_power reject."""
    import warnings

    from rfclassify.dsp.synth import ChannelConfig, synthesize

    iq = synthesize(["128QAM", "256QAM"], 1024, np.random.default_rng(29), snr_db=np.full(2, 25.0),
                    channel=ChannelConfig(p_multipath=0.0)).iq
    real = np.random.default_rng(8).standard_normal(1024) + 0.25        # real, a -12 dB DC line
    ook = synthesize(["OOK"], 1024, np.random.default_rng(0), snr_db=np.array([15.0])).iq[0].real.astype(np.float64)
    with Classifier.load(backend="onnxruntime", precision="fp32") as clf, warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = clf.classify([iq[0], iq[1], real, ook])
        cases = {"complex64 1e-20": ([iq[0] * np.float32(1e-20), iq[1] * np.float32(1e-20)], plain[:2]),
                 "complex128 1e-310": ([iq[0].astype(np.complex128) * 1e-310], plain[:1]),
                 "float64 1e160": ([real * 1e160, ook * 1e160], plain[2:]),
                 "float64 1e-150": ([real * 1e-150, ook * 1e-150], plain[2:])}
        for name, (bursts, want) in cases.items():
            got = clf.classify(bursts)
            assert [r.ok for r in got] == [True] * len(bursts), name
            for g, w in zip(got, want, strict=True):
                assert g.label == w.label, name
                np.testing.assert_allclose(g.probabilities, w.probabilities, atol=1e-3, err_msg=name)


def test_a_small_offset_of_a_quiet_burst_has_a_level_in_db():
    """abs(offset) ** 2 fell to 0.0 under a power that did not: a math domain error from the
    daemon-facing API (results_from_outputs) before the sixty-seventh session."""
    from rfclassify.engine.dc_pass import offset_db

    x = np.random.default_rng(1).standard_normal(1024) * 1e-160
    assert offset_db(1e-165 + 0j, x) == pytest.approx(-100.0, abs=0.5)
    assert offset_db(0j, x) == -np.inf


@pytest.mark.parametrize("rate", [float("nan"), -5.0, 0, True, "1e6", 10**400])
def test_a_sample_rate_that_is_not_a_positive_number_is_refused(clf, rate):
    # nan, -5, 0, True and "1e6" were recorded as they came; 10**400 was an OverflowError
    with pytest.raises(rfclassify.InputError, match="sample_rate must be a positive number"):
        clf.classify([_burst(256, seed=1)], sample_rate=rate)
    assert clf.classify([_burst(256, seed=1)], sample_rate=np.float32(2e6))[0].sample_rate_hz == 2e6


def test_a_2d_array_is_a_batch_of_equal_length_bursts(clf):
    block = np.stack([_burst(512, seed=s) for s in range(3)])
    results = clf.classify(block)
    assert len(results) == 3 and all(r.ok and r.n_samples == 512 for r in results)


def test_bursts_of_any_double_precision_scale_get_the_same_refined_answer():
    """The shipped model with its DC pass and refiners: a high-order burst in complex128 scaled
    to 1e160 or 1e-200 (the network's normalization rescales such bursts from their peak) gets
    the answer the same burst gets at its own scale. The DC pass raised OverflowError on the
    loud one before the sixty-sixth session, and the whole call was lost."""
    from rfclassify.dsp.synth import ChannelConfig, synthesize

    iq = synthesize(["64QAM", "16APSK"], 1024, np.random.default_rng(29), snr_db=np.full(2, 25.0),
                    channel=ChannelConfig(p_multipath=0.0)).iq.astype(np.complex128)
    with Classifier.load(backend="onnxruntime", precision="fp32") as clf:
        assert clf.refiners        # the path under test
        plain = clf.classify(list(iq))
        for scale in (1e160, 1e-200):
            scaled = clf.classify([iq[0] * scale, iq[1], iq[1] * scale])
            assert [r.ok for r in scaled] == [True] * 3
            for got, want in zip(scaled, [plain[0], plain[1], plain[1]], strict=True):
                assert got.label == want.label and got.top[0][0] == want.top[0][0]
                np.testing.assert_allclose(got.probabilities, want.probabilities, atol=1e-4)
