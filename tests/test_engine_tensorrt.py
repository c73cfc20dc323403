"""The TensorRT backend: its plan (every decision, tested everywhere), the engine cache's keys and
records, `rfclassify engine`, and - where tensorrt imports - the TensorRT calls themselves."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from rfclassify._exceptions import ConfigError
from rfclassify.cli import main
from rfclassify.engine import tensorrt_plan as tp
from rfclassify.engine.tensorrt_engines import cached_engines
from rfclassify.model.meta import ModelMeta

SHIPPED = Path(__file__).resolve().parents[1] / "models"


@pytest.fixture(scope="module")
def meta() -> ModelMeta:
    return ModelMeta.load(SHIPPED)


# --- the plan -------------------------------------------------------------------------------

def test_gpu_int8_is_one_engine_of_the_qdq_graph_with_a_profile_per_bucket(meta):
    plan = tp.plan_engines(meta, "int8", "10.3.0")
    assert (plan.device, plan.quantization, plan.strongly_typed) == ("gpu", "qdq", False)
    assert plan.flags == ("INT8", "FP16") and plan.calibration_cache is None
    (part,) = plan.engines
    assert part.onnx_file == meta.extra["tensorrt_int8"]["qdq_file"]
    assert part.buckets == tuple(meta.buckets_samples)
    assert all((p.min_batch, p.opt_batch, p.max_batch) == (1, 64, 1024) for p in part.profiles)
    assert part.profiles[0].shapes() == ((1, 2, 1, 128), (64, 2, 1, 128), (1024, 2, 1, 128))
    assert tp.plan_engines(meta, "int8", "10.3.0", max_batch=16).engines[0].profiles[0].opt_batch == 16


def test_fp32_and_fp16_parse_the_fp32_graph_and_tensorrt_11_is_strongly_typed(meta):
    fp16 = tp.plan_engines(meta, "fp16", "8.6.2")
    assert fp16.engines[0].onnx_file == meta.onnx_file and fp16.flags == ("FP16",)
    assert tp.plan_engines(meta, "fp32", "10.3.0").flags == ()
    t11 = tp.plan_engines(meta, "int8", "11.1.0")
    assert t11.strongly_typed and t11.flags == () and t11.quantization == "qdq"
    with pytest.raises(ConfigError, match="strongly typed"):
        tp.plan_engines(meta, "fp16", "11.1.0")


def test_dla_int8_is_one_static_engine_per_bucket_reading_the_calibration_cache(meta):
    plan = tp.plan_engines(meta, "int8", "10.3.0", dla_core=1, dla_batch=4)
    assert (plan.device, plan.dla_core, plan.quantization) == ("dla", 1, "calibration cache")
    assert plan.calibration_cache == meta.extra["tensorrt_int8"]["calibration_cache_file"]
    assert set(plan.flags) == {"INT8", "FP16", "GPU_FALLBACK", "PREFER_PRECISION_CONSTRAINTS"}
    assert plan.fp16_layer_prefixes == ("/head/", "/snr_head/")
    static = meta.extra["export"]["static_files"]
    assert [p.onnx_file for p in plan.engines] == [static[str(b)] for b in meta.buckets_samples]
    for part in plan.engines:    # DLA: no dynamic shapes
        (profile,) = part.profiles
        assert profile.min_batch == profile.opt_batch == profile.max_batch == 4
        assert part.tag == f"L{profile.bucket}"
    assert any("deprecated" in n for n in plan.notes)
    assert not tp.plan_engines(meta, "int8", "8.6.2", dla_core=0).notes
    fp16 = tp.plan_engines(meta, "fp16", "8.5.2", dla_core=0)
    assert fp16.quantization == "none" and fp16.flags == ("FP16", "GPU_FALLBACK")


@pytest.mark.parametrize("precision, version, core, match", [
    ("fp32", "10.3.0", 0, "fp16 and int8 only"),
    ("int8", "11.2.0", 0, "has no DLA"),
    ("int8", "11.4.1", 0, "TensorRT 8.5-10.x"),
    ("int8", "8.4.3", None, "older than 8.5"),
    ("int8", "10.3.0", -1, "must be >= 0"),
    ("int4", "10.3.0", None, "unknown precision"),
    ("int8", "ten", None, "not a TensorRT version"),
])
def test_what_cannot_be_built_says_why(meta, precision, version, core, match):
    with pytest.raises(ConfigError, match=match):
        tp.plan_engines(meta, precision, version, dla_core=core)


def test_plans_need_the_files_model_json_names(meta, tmp_path):
    bare = meta.with_updates(extra={})
    with pytest.raises(ConfigError, match="rfclassify calibrate"):
        tp.plan_engines(bare, "int8", "10.3.0")
    with pytest.raises(ConfigError, match="static graphs"):
        tp.plan_engines(bare, "fp16", "10.3.0", dla_core=0)
    many = meta.with_updates(buckets_samples=[64 * (i + 1) for i in range(17)])
    with pytest.raises(ConfigError, match="a DLA core holds 16"):
        tp.plan_engines(many, "fp16", "10.3.0", dla_core=0)
    plan = tp.plan_engines(meta, "int8", "10.3.0", dla_core=0)
    assert tp.missing_inputs(plan, SHIPPED) == []
    assert tp.missing_inputs(plan, tmp_path) == plan.files()


def test_static_graphs_of_a_fixed_batch_fix_the_dla_batch(meta):
    assert tp.plan_engines(meta, "fp16", "10.3.0", dla_core=0).engines[0].profiles[0].max_batch == 8
    fixed = meta.with_updates(extra={**meta.extra, "export": {**meta.extra["export"], "static_batch": 4}})
    (profile,) = tp.plan_engines(fixed, "fp16", "10.3.0", dla_core=0).engines[0].profiles
    assert profile.min_batch == profile.opt_batch == profile.max_batch == 4
    assert tp.plan_engines(fixed, "fp16", "10.3.0", dla_core=0, dla_batch=4).engines[0].profiles == (profile,)
    with pytest.raises(ConfigError, match="exported for batch 4"):
        tp.plan_engines(fixed, "fp16", "10.3.0", dla_core=0, dla_batch=8)


def test_a_dla_batch_above_4096_or_a_bucket_above_8192_is_refused_naming_the_limit(meta):
    """The DLA's general limits (batch 4096, other dimensions 8192): a batch of 8192 was planned."""
    assert tp.plan_engines(meta, "fp16", "10.3.0", dla_core=0, dla_batch=4096).engines[0].profiles[0].max_batch == 4096
    with pytest.raises(ConfigError, match="DLA batch 8192 is above the DLA's limit of 4096"):
        tp.plan_engines(meta, "int8", "10.3.0", dla_core=0, dla_batch=8192)
    fixed = meta.with_updates(extra={**meta.extra, "export": {**meta.extra["export"], "static_batch": 5000}})
    with pytest.raises(ConfigError, match="limit of 4096"):     # graphs exported for too large a batch
        tp.plan_engines(fixed, "fp16", "10.3.0", dla_core=0)
    export = meta.extra["export"]
    long = meta.with_updates(buckets_samples=(*meta.buckets_samples, 16384), extra={**meta.extra, "export": {
        **export, "static_files": {**export["static_files"], "16384": "static/model_L16384.onnx"}}})
    with pytest.raises(ConfigError, match=r"buckets \[16384\] .* limit of 8192"):
        tp.plan_engines(long, "fp16", "10.3.0", dla_core=0)
    assert tp.plan_engines(long, "fp16", "10.3.0", dla_batch=8192).device == "gpu"   # the GPU has neither limit


def test_a_dla_core_is_checked_against_the_cores_tensorrt_reports():
    tp.check_dla_core(None, 0)
    tp.check_dla_core(1, 2)
    with pytest.raises(ConfigError, match=r"DLA core 1 does not exist: TensorRT sees 1 DLA core \(0..0\) on this"):
        tp.check_dla_core(1, 1)
    with pytest.raises(ConfigError, match="DLA core 0 does not exist: TensorRT sees no DLA core"):
        tp.check_dla_core(0, 0)


def test_the_backend_refuses_a_dla_core_the_device_lacks_in_one_line(meta, monkeypatch):
    """A core past what this device has (an AGX Orin: 0 and 1; another Jetson fewer) went on to
    TensorRT's builder; now the count TensorRT reports is asked first (a ConfigError, exit 2)."""
    import sys

    pytest.importorskip("torch")
    import tensorrt_standin

    from rfclassify.engine.tensorrt_backend import TensorRTBackend

    monkeypatch.setitem(sys.modules, "tensorrt", tensorrt_standin.module(None, len(meta.labels), dla_cores=1))
    backend = TensorRTBackend(meta, SHIPPED, precision="int8", device="cuda:0", dla_core=1)
    with pytest.raises(ConfigError, match="DLA core 1 does not exist: TensorRT sees 1 DLA core"):
        backend.load()


def test_batches_are_cut_into_dla_sized_pieces():
    assert tp.batch_pieces(19, 8) == [(0, 8), (8, 16), (16, 19)]
    assert tp.batch_pieces(8, 8) == [(0, 8)]
    assert tp.batch_pieces(1, 64) == [(0, 1)]
    with pytest.raises(ConfigError):
        tp.batch_pieces(4, 0)


# --- the engine cache -----------------------------------------------------------------------

def test_the_engine_key_changes_with_every_input_and_only_with_them(meta):
    plan = tp.plan_engines(meta, "int8", "10.3.0", dla_core=0)
    part = plan.engines[3]
    digests = {f: f"sha-{f}" for f in plan.files()}
    key = tp.engine_key(plan, part, digests, "Orin sm_87 DLA0")
    assert key == tp.engine_key(plan, part, dict(digests), "Orin sm_87 DLA0")
    other_files = dict(digests, **{plan.calibration_cache: "recalibrated"})
    unrelated = dict(digests, **{plan.engines[0].onnx_file: "another bucket's graph"})
    changed = [tp.engine_key(plan, part, other_files, "Orin sm_87 DLA0"),
               tp.engine_key(plan, part, digests, "Orin sm_87 DLA1"),
               tp.engine_key(tp.plan_engines(meta, "int8", "10.3.1", dla_core=0), part, digests, "Orin sm_87 DLA0"),
               tp.engine_key(tp.plan_engines(meta, "int8", "10.3.0", dla_core=0, dla_batch=16),
                             tp.plan_engines(meta, "int8", "10.3.0", dla_core=0, dla_batch=16).engines[3],
                             digests, "Orin sm_87 DLA0"),
               tp.engine_key(plan, plan.engines[2], digests, "Orin sm_87 DLA0")]
    assert len({key, *changed}) == 6
    assert tp.engine_key(plan, part, unrelated, "Orin sm_87 DLA0") == key   # another engine's file
    with pytest.raises(ConfigError, match="no digest"):
        tp.engine_key(plan, part, {}, "x")
    name = tp.engine_file_name("rfc resnet/1", plan, part, key)
    assert name == f"rfc_resnet_1-dla0-int8-L1024-{key[:16]}.engine"


def test_the_cache_lives_where_the_service_and_users_expect():
    assert tp.engine_cache_dir({"RFCLASSIFY_ENGINE_CACHE": "/x", "STATE_DIRECTORY": "/y"}) == Path("/x")
    assert tp.engine_cache_dir({"STATE_DIRECTORY": "/var/lib/rfclassify:/var/lib/other"}) == \
        Path("/var/lib/rfclassify/engines")
    assert tp.engine_cache_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/rfclassify/engines")
    assert tp.engine_cache_dir({}) == Path.home() / ".cache" / "rfclassify" / "engines"
    assert tp.timing_cache_name("10.3.0.30", "Orin sm_87") != tp.timing_cache_name("10.3.0.30", "Orin sm_87 DLA0")
    assert tp.timing_cache_name("10.3.0.30", "x").startswith("timing-10.3.0-")


def test_inspect_lists_the_cache_without_tensorrt(tmp_path, capsys):
    (tmp_path / "m-gpu-int8-all-0123.engine").write_bytes(b"\0" * 2_000_000)
    (tmp_path / "m-gpu-int8-all-0123.json").write_text(json.dumps(
        {"precision": "int8", "where": "gpu", "tensorrt": "10.3.0", "device": "Orin sm_87",
         "built_at": "2026-12-07T00:00:00Z", "build_seconds": 95.0}))
    (tmp_path / "orphan.json").write_text("{}")            # a record without its engine is not listed
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "broken.engine").write_bytes(b"")
    assert [e["file"] for e in cached_engines(tmp_path)] == ["m-gpu-int8-all-0123.engine"]
    assert main(["engine", "inspect", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1 engine(s)" in out and "int8 on gpu, TensorRT 10.3.0, Orin sm_87, 2.0 MB" in out
    assert main(["engine", "inspect", str(tmp_path / "m-gpu-int8-all-0123.engine"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["record"]["device"] == "Orin sm_87" and shown["bytes"] == 2_000_000


# --- `rfclassify engine` without TensorRT ------------------------------------------------------

def test_build_plan_prints_what_would_be_built_on_any_machine(capsys, tmp_path):
    assert main(["engine", "build", "--plan", "--dla-core", "1", "--tensorrt-version", "8.6.2",
                 "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "TensorRT 8.6.2, int8 on DLA core 1 (GPU fallback)" in out
    assert "engine L4096: static/model_L4096.onnx; profiles (min/opt/max) L4096 batch 8/8/8" in out
    assert f"engine cache: {tmp_path}" in out and "MISSING" not in out
    assert main(["engine", "build", "--plan", "--precision", "fp32", "--dla-core", "0"]) == 2
    assert "fp16 and int8 only" in capsys.readouterr().err


@pytest.mark.parametrize("option, value, why", [("--dla-batch", "8192", "must be in 1..4096, got 8192"),
                                                ("--dla-core", "2", "must be in 0..1, got 2")])
def test_build_plan_refuses_a_dla_batch_or_core_past_the_limits_in_one_line(option, value, why, capsys):
    """`--dla-batch 8192` planned (exit 0) a batch the DLA does not take; `--dla-core 7` a core an
    AGX Orin does not have."""
    with pytest.raises(SystemExit) as exit_:
        main(["engine", "build", "--plan", "--dla-core", "0", option, value])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and why in err and "Traceback" not in err


def test_build_plan_names_the_files_that_are_missing(tmp_path, capsys):
    import shutil

    model_dir = tmp_path / "m"
    model_dir.mkdir()
    shutil.copy2(SHIPPED / "model.json", model_dir / "model.json")     # the record, none of the files
    assert main(["engine", "build", "--plan", "--model-dir", str(model_dir), "--dla-core", "0"]) == 2
    captured = capsys.readouterr()
    assert "static/model_L128.onnx (MISSING)" in captured.out and "model_trt_int8.calib (MISSING)" in captured.out
    assert captured.err.count("\n") == 1 and "rfclassify calibrate" in captured.err


def test_inspect_shows_an_engine_whose_record_is_damaged(tmp_path, capsys):
    (tmp_path / "e.engine").write_bytes(b"\0" * 10)
    (tmp_path / "e.json").write_text("{not json")
    assert main(["engine", "inspect", str(tmp_path / "e.engine"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["bytes"] == 10 and "e.json" in shown["record"]["unreadable"]


@pytest.mark.skipif(__import__("importlib").util.find_spec("tensorrt") is not None,
                    reason="tensorrt imports here: the TensorRT tests below run instead")
@pytest.mark.parametrize("action", ["build", "selftest"])
def test_without_tensorrt_building_says_where_it_comes_from_in_one_line(action, capsys):
    assert main(["engine", action]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "python3-libnvinfer" in err


@pytest.mark.skipif(__import__("importlib").util.find_spec("tensorrt") is not None,
                    reason="tensorrt imports here: evaluate would run it")
def test_evaluate_takes_the_tensorrt_backend_and_says_why_it_cannot_run_here(tiny_dataset, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    assert main(["evaluate", str(tiny_dataset), "--backend", "tensorrt", "--no-plots",
                 "--out", str(tmp_path / "ev")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tensorrt does not import" in err


# --- the TensorRT calls (a Jetson, or any machine where tensorrt and pycuda import) -------------

trt_only = pytest.mark.tensorrt


@trt_only
@pytest.mark.parametrize("precision, dla_core", [("int8", None), ("fp16", None), ("int8", 0)])
def test_engines_build_cache_and_agree_with_onnxruntime(precision, dla_core, tmp_path):
    pytest.importorskip("tensorrt", reason="TensorRT comes with JetPack and cannot be installed here")
    pytest.importorskip("pycuda.driver", reason="pycuda: pip install 'rfclassify[jetson]'")
    from rfclassify.engine.onnxruntime_backend import OnnxRuntimeBackend
    from rfclassify.engine.tensorrt_backend import TensorRTBackend
    from rfclassify.quant.cpu_int8 import agreement_of

    meta = ModelMeta.load(SHIPPED)
    if dla_core is not None:
        import pycuda.driver as cuda
        import tensorrt as trt

        cuda.init()
        if trt.Builder(trt.Logger()).num_DLA_cores < 1:
            pytest.skip("this GPU has no DLA")
    kwargs = dict(precision=precision, device="cuda:0", dla_core=dla_core, engine_cache=tmp_path, max_batch_size=256)
    with TensorRTBackend(meta, SHIPPED, **kwargs) as b, OnnxRuntimeBackend(meta, SHIPPED) as ref:
        assert len(b.built) == len(b.plan.engines)
        report = agreement_of(ref.infer, b.infer, meta)
        x = np.random.default_rng(0).standard_normal((19, 2, 1, 1024)).astype(np.float32)
        logits, snr = b.infer(x)                      # more than a DLA piece, not a multiple of it
        assert logits.shape == (19, len(meta.labels)) and snr.shape == (19,)
    least = {"int8": 0.75, "fp16": 0.97}[precision]
    assert min(a["top1_agreement"] for a in report.values()) >= least
    assert len(cached_engines(tmp_path)) == len(b.plan.engines)
    with TensorRTBackend(meta, SHIPPED, **kwargs) as again:      # the second load builds nothing
        assert again.built == []


# --- reaching the backend: the daemon's config and Classifier.load ----------------------------

def test_the_daemon_config_takes_a_dla_core_and_an_engine_cache(tmp_path):
    from rfclassify.serve.config import load_config

    path = tmp_path / "c.toml"
    path.write_text('[model]\ndla_core = 1\nengine_cache = "/srv/engines"\n')
    model = load_config(path).model
    assert (model.dla_core, model.engine_cache) == (1, "/srv/engines")
    for core in (9, 2):     # an AGX Orin has cores 0 and 1 (2 to 7 passed before the sixty-seventh session)
        path.write_text(f"[model]\ndla_core = {core}\n")
        with pytest.raises(ConfigError, match=r"dla_core: must be in -1..1"):
            load_config(path)
    assert load_config(None).model.dla_core == -1


def test_other_backends_ignore_a_dla_core_with_a_warning(tiny_model_dir, caplog):
    pytest.importorskip("onnxruntime")
    from rfclassify.engine.classifier import Classifier

    with caplog.at_level("WARNING"), Classifier.load(tiny_model_dir, backend="onnxruntime", dla_core=0) as clf:
        assert clf.backend == "onnxruntime"
    assert "dla_core 0 ignored: the onnxruntime backend runs" in caplog.text


# --- pruning the engine cache (no TensorRT: engines and records as ensure_engine writes them) ---

def _cache_of(model_dir: Path, cache: Path, monkeypatch, version: str = "10.3.0.30") -> dict[str, list[Path]]:
    """Engines for the GPU at fp32 and int8 and for DLA core 0 at int8, made by ensure_engine
    with the builder stood in for (its bytes are not an engine; nothing here loads them)."""
    from rfclassify.engine import tensorrt_engines as te

    monkeypatch.setattr(te, "build_engine", lambda trt, logger, plan, part, md, timing: f"{part.tag}".encode())
    meta = ModelMeta.load(model_dir)
    made: dict[str, list[Path]] = {}
    for name, precision, dla in (("gpu_fp32", "fp32", None), ("gpu_int8", "int8", None), ("dla_int8", "int8", 0)):
        plan = tp.plan_engines(meta, precision, version, dla_core=dla)
        files = te.digests(plan, model_dir)
        made[name] = [te.ensure_engine(None, None, meta, model_dir, plan, part, "Orin sm_87", files, cache)[0]
                      for part in plan.engines]
    return made


def test_a_set_cancel_event_stops_the_next_engine_build_not_a_cached_load(tiny_model_dir, tmp_path, monkeypatch):
    """The daemon's stop during its start waited for every engine build (minutes each on a
    first start) before the sixty-seventh session; now for the one under way at most."""
    import threading

    from rfclassify._exceptions import Cancelled
    from rfclassify.engine import tensorrt_engines as te

    builds = []
    monkeypatch.setattr(te, "build_engine", lambda trt, logger, plan, part, md, timing: builds.append(part) or b"x")
    meta = ModelMeta.load(tiny_model_dir)
    fp16, fp32 = (tp.plan_engines(meta, p, "10.3.0.30") for p in ("fp16", "fp32"))
    files = te.digests(fp16, tiny_model_dir)
    cancel = threading.Event()
    path, built = te.ensure_engine(None, None, meta, tiny_model_dir, fp16, fp16.engines[0], "Orin", files, tmp_path,
                                   cancel=cancel)
    assert built and path.is_file()
    cancel.set()
    assert te.ensure_engine(None, None, meta, tiny_model_dir, fp16, fp16.engines[0], "Orin", files, tmp_path,
                            cancel=cancel) == (path, False)           # cached: loaded, nothing to stop
    with pytest.raises(Cancelled, match="stopped before building"):
        te.ensure_engine(None, None, meta, tiny_model_dir, fp32, fp32.engines[0], "Orin", files, tmp_path,
                         cancel=cancel)
    assert builds == [fp16.engines[0]] and len(list(tmp_path.glob("*.engine"))) == 1


def test_prune_keeps_every_engine_of_the_models_files_and_removes_what_nothing_reads(
        shipped_tensorrt_files, tmp_path, monkeypatch):
    import subprocess
    import sys

    from rfclassify.engine.tensorrt_engines import stale_files

    model_dir, cache = shipped_tensorrt_files, tmp_path / "cache"
    made = _cache_of(model_dir, cache, monkeypatch)
    meta = ModelMeta.load(model_dir)
    assert len(made["dla_int8"]) == 6 and len(cached_engines(cache)) == 8
    (cache / "timing-10.3.0-0123456789abcdef.cache").write_bytes(b"t")
    (cache / "timing-8.6.2-0123456789abcdef.cache").write_bytes(b"t")
    (cache / "rfc-old-gpu-fp32-all-0123456789abcdef.json").write_text("{}")          # its engine is gone
    (cache / "rfc-old-gpu-int8-all-0123456789abcdef.engine").write_bytes(b"e")        # no record, old model
    for name, digests in (("listed", ["model.onnx"]), ("text", "model.onnx")):   # damaged records
        (cache / f"{name}.engine").write_bytes(b"e")
        (cache / f"{name}.json").write_text(json.dumps({"digests": digests}))
    mine = cache / f"{tp.engine_name_prefix(meta.model_id)}gpu-fp16-all-0123456789abcdef.engine"
    mine.write_bytes(b"e")                  # no record (a build cut before it), this model's name: kept
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    (cache / f".x.engine.{gone}.tmp").write_bytes(b"half")
    (cache / f".y.engine.{os.getpid()}.tmp").write_bytes(b"building")      # a live build's: kept

    def names(stale):
        return {p.name: why for p, why in stale}

    stale = names(stale_files(cache, model_dir, meta.model_id))
    assert set(stale) == {"rfc-old-gpu-fp32-all-0123456789abcdef.json", "rfc-old-gpu-int8-all-0123456789abcdef.engine",
                          f".x.engine.{gone}.tmp", "listed.engine", "listed.json", "text.engine", "text.json"}, stale
    assert "engine is gone" in stale["rfc-old-gpu-fp32-all-0123456789abcdef.json"]
    assert f"process {gone} is gone" in stale[f".x.engine.{gone}.tmp"]

    # calibrated again: the DLA's engines were built from the old cache, the GPU's from other files
    with open(model_dir / "model_trt_int8.calib", "a") as f:
        f.write("extra: 3f800000\n")
    stale = names(stale_files(cache, model_dir, meta.model_id))
    dla = {p.name for p in made["dla_int8"]}
    assert dla <= set(stale) and {p.with_suffix(".json").name for p in made["dla_int8"]} <= set(stale)
    assert all("model_trt_int8.calib" in stale[n] for n in dla)
    assert not {p.name for p in made["gpu_int8"] + made["gpu_fp32"]} & set(stale)

    # another TensorRT (a JetPack upgrade): every engine and the other version's timing cache
    stale = names(stale_files(cache, model_dir, meta.model_id, "10.4.0.26"))
    assert {p.name for ps in made.values() for p in ps} <= set(stale)
    assert "built by TensorRT 10.3.0.30; this is 10.4.0.26" in stale[made["gpu_fp32"][0].name]
    assert {"timing-10.3.0-0123456789abcdef.cache", "timing-8.6.2-0123456789abcdef.cache"} <= set(stale)
    assert mine.name not in stale

    # the command: a dry run removes nothing; then only what stale_files named goes
    before = sorted(p.name for p in cache.iterdir())
    args = ["engine", "prune", "--model-dir", str(model_dir), "--cache-dir", str(cache)]
    assert main([*args, "--dry-run"]) == 0
    assert sorted(p.name for p in cache.iterdir()) == before
    assert main(args) == 0
    kept = {p.name for p in cache.iterdir()}
    assert {p.name for p in made["gpu_int8"] + made["gpu_fp32"]} <= kept and mine.name in kept
    assert not dla & kept and f".x.engine.{gone}.tmp" not in kept and "timing-8.6.2-0123456789abcdef.cache" in kept
    assert [e["file"] for e in cached_engines(cache)] == sorted(p.name for p in made["gpu_fp32"] + made["gpu_int8"])


def test_prune_refuses_to_judge_engines_by_a_model_file_it_cannot_read(tmp_path, capsys):
    """An unreadable model file was an OSError traceback from its digest; taken as changed, it
    would have made `engine prune` delete engines that minutes of builds made."""
    from rfclassify._exceptions import ModelNotFoundError
    from rfclassify.engine.tensorrt_engines import stale_files

    if not Path("/proc/self/mem").is_file():
        pytest.skip("needs Linux's /proc/self/mem (a regular file whose first read fails, for root too)")
    model_dir, cache = tmp_path / "m", tmp_path / "cache"
    model_dir.mkdir()
    cache.mkdir()
    (model_dir / "model.onnx").symlink_to("/proc/self/mem")
    (cache / "rfc-x-gpu-fp32-all-0123456789abcdef.engine").write_bytes(b"e")
    (cache / "rfc-x-gpu-fp32-all-0123456789abcdef.json").write_text(json.dumps({"digests": {"model.onnx": "0" * 64}}))
    with pytest.raises(ModelNotFoundError, match=f"{model_dir / 'model.onnx'} cannot be read"):
        stale_files(cache, model_dir, "x")
    assert len(list(cache.iterdir())) == 2


def test_prune_says_which_file_it_could_not_remove(shipped_tensorrt_files, tmp_path, monkeypatch, capsys):
    model_dir, cache = shipped_tensorrt_files, tmp_path / "cache"
    cache.mkdir()
    (cache / "rfc-old-gpu-fp32-all-0123456789abcdef.json").write_text("{}")
    real_unlink = Path.unlink

    def refuse(self, missing_ok=False):
        if self.parent == cache:
            raise PermissionError(13, "Permission denied")
        return real_unlink(self, missing_ok=missing_ok)
    monkeypatch.setattr(Path, "unlink", refuse)
    assert main(["engine", "prune", "--model-dir", str(model_dir), "--cache-dir", str(cache)]) == 1
    err = capsys.readouterr().err
    assert "cannot remove" in err and "Permission denied" in err and "Traceback" not in err


def test_inspect_says_a_folder_is_not_an_engine(tmp_path, capsys):
    """`engine inspect DIR` said the folder does not exist (sixty-sixth session)."""
    assert main(["engine", "inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is not a file" in err and "does not exist" not in err
    assert main(["engine", "inspect", str(tmp_path / "none.engine")]) == 2
    assert "does not exist" in capsys.readouterr().err
