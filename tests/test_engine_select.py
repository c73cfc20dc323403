"""Backend and precision selection rules (pure decisions; no GPU needed)."""

from __future__ import annotations

import pytest

from rfclassify._digest import file_sha256
from rfclassify._exceptions import ConfigError, MissingDependencyError, ModelNotFoundError
from rfclassify.engine import select
from rfclassify.engine.onnxruntime_backend import OnnxRuntimeBackend
from rfclassify.engine.select import Problem, ProblemKind
from rfclassify.engine.tensorrt_backend import TensorRTBackend
from rfclassify.engine.torch_backend import TorchBackend
from rfclassify.model.meta import ModelMeta


@pytest.fixture(scope="module")
def meta(tiny_model_dir):
    return ModelMeta.load(tiny_model_dir)


def _no(message, kind=ProblemKind.NO_DEVICE):
    return Problem(kind, message)


def test_tensorrt_needs_tensorrt_pycuda_and_a_cuda_device(monkeypatch):
    present = {"tensorrt", "pycuda.driver"}
    monkeypatch.setattr(select, "available", lambda name: name in present)
    assert select.unusable("tensorrt", "cuda:0") is None
    assert select.unusable("tensorrt", "cpu").kind is ProblemKind.NO_DEVICE
    present.discard("pycuda.driver")
    problem = select.unusable("tensorrt", "cuda:0")
    assert problem.kind is ProblemKind.NOT_INSTALLED and "rfclassify[jetson]" in problem.message
    present.discard("tensorrt")
    assert select.unusable("tensorrt", "cuda:0").kind is ProblemKind.DOES_NOT_IMPORT


def test_the_tensorrt_backend_class_loads_without_importing_tensorrt():
    import subprocess
    import sys

    assert select.backend_class("tensorrt").__name__ == "TensorRTBackend"
    code = ("import sys; from rfclassify.engine.select import backend_class; backend_class('tensorrt'); "
            "print(sorted(m for m in ('tensorrt', 'pycuda', 'torch', 'onnxruntime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_auto_on_this_box_picks_onnxruntime_cpu(meta, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(select, "unusable", lambda name, dev: _no("no GPU") if dev != "cpu" else None)
    sel = select.select_backend(meta, tiny_model_dir)
    assert (sel.backend, sel.device, sel.precision) == ("onnxruntime", "cpu", "fp32")
    assert sel.reason.startswith("auto: tensorrt on cuda:0 skipped (no GPU); torch on cuda:0 skipped")


def test_auto_takes_torch_cuda_fp16_when_a_gpu_is_there(meta, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(select, "unusable", lambda name, dev: _no("absent") if name == "tensorrt" else None)
    sel = select.select_backend(meta, tiny_model_dir)
    assert (sel.backend, sel.device, sel.precision) == ("torch", "cuda:0", "fp16")
    sel = select.select_backend(meta, tiny_model_dir, precision="int8")
    assert sel.precision == "fp16" and sel.precision_reason.startswith("fell back from int8 to fp16")


def test_auto_without_onnxruntime_falls_back_to_torch_cpu(meta, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(select, "unusable",
                        lambda name, dev: None if (name, dev) == ("torch", "cpu") else _no("absent"))
    sel = select.select_backend(meta, tiny_model_dir)
    assert (sel.backend, sel.device) == ("torch", "cpu")


def test_device_cpu_restricts_auto_to_cpu_backends(meta, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(select, "unusable", lambda name, dev: None)
    sel = select.select_backend(meta, tiny_model_dir, device="cpu")
    assert (sel.backend, sel.device) == ("onnxruntime", "cpu")


def test_explicit_backend_with_an_unavailable_precision_is_an_error(meta, tiny_model_dir):
    with pytest.raises(ModelNotFoundError, match="not calibrated yet"):
        select.select_backend(meta, tiny_model_dir, backend="onnxruntime", precision="int8")
    with pytest.raises(ConfigError, match="fp16"):
        select.select_backend(meta, tiny_model_dir, backend="onnxruntime", precision="fp16")


def test_an_uninstalled_library_of_an_explicit_backend_is_a_missing_dependency(meta, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(select, "available", lambda name: False)
    assert select.unusable("torch", "cpu").kind is ProblemKind.NOT_INSTALLED
    with pytest.raises(MissingDependencyError, match="backend torch: torch is not installed"):
        select.select_backend(meta, tiny_model_dir, backend="torch", device="cpu")


@pytest.mark.parametrize(("name", "extra"), [
    ("torch", "pip install 'rfclassify[train]'"), ("onnxruntime", "pip install 'rfclassify[cpu]'"),
    ("tensorrt", "apt-get install python3-libnvinfer")])
def test_a_missing_library_names_what_to_install(monkeypatch, name, extra):
    # torch's and onnxruntime's said "is not installed" and no more; tensorrt's "does not import"
    monkeypatch.setattr(select, "available", lambda module: False)
    assert select.unusable(name, "cpu" if name == "onnxruntime" else "cuda:0").message.endswith(extra)


@pytest.mark.parametrize(("backend", "kind"), [("torch", ProblemKind.NOT_INSTALLED),
                                               ("tensorrt", ProblemKind.DOES_NOT_IMPORT)])
def test_an_explicit_backend_whose_library_is_missing_on_every_device_is_a_missing_dependency(
        meta, tiny_model_dir, monkeypatch, backend, kind):
    # torch without a device tries cuda:0 and cpu: two skipped candidates made it "no backend can run here"
    monkeypatch.setattr(select, "available", lambda module: False)
    with pytest.raises(MissingDependencyError) as caught:
        select.select_backend(meta, tiny_model_dir, backend=backend)
    assert select.unusable(backend, "cuda:0").kind is kind
    message = str(caught.value)
    assert message.startswith(f"backend {backend}: ") and message.count(" not") == 1   # said once, not per device
    assert ("rfclassify[train]" if backend == "torch" else "python3-libnvinfer") in message


@pytest.mark.parametrize(("kind", "message", "error"), [
    # message matching would raise MissingDependencyError for the first, ConfigError for the second
    (ProblemKind.NO_DEVICE, "the GPU driver is not installed", ConfigError),
    (ProblemKind.NOT_INSTALLED, "onnxruntime is missing", MissingDependencyError),
    # ... and ModelNotFoundError for this one, which names a file that does exist
    (ProblemKind.DOES_NOT_IMPORT, "model.onnx does not exist in the wheel's data", MissingDependencyError),
    (ProblemKind.PRECISION_UNSUPPORTED, "torch is not installed", ConfigError),
])
def test_the_problem_kind_not_its_wording_picks_the_error(meta, tiny_model_dir, monkeypatch, kind, message, error):
    monkeypatch.setattr(select, "unusable", lambda name, dev: Problem(kind, message))
    with pytest.raises(error, match=message) as caught:
        select.select_backend(meta, tiny_model_dir, backend="onnxruntime", device="cpu")
    assert type(caught.value) is error  # not merely a UserError sibling


def test_missing_model_files_of_an_explicit_backend_are_model_not_found_whatever_the_wording(
        meta, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(OnnxRuntimeBackend, "artifact_problem",
                        classmethod(lambda cls, meta, model_dir, precision, **_: "model.onnx is unreadable"))
    with pytest.raises(ModelNotFoundError, match="precision fp32: fp32: model.onnx is unreadable"):
        select.select_backend(meta, tiny_model_dir, backend="onnxruntime", precision="fp32")


def test_unknown_names_are_config_errors(meta, tiny_model_dir, monkeypatch):
    with pytest.raises(ConfigError, match="unknown backend"):
        select.select_backend(meta, tiny_model_dir, backend="tflite")
    # 'auto' is a rule, not a backend class: its refusal offered 'auto' among the choices
    with pytest.raises(ConfigError, match="unknown backend 'auto'; choose from tensorrt, torch, onnxruntime$"):
        select.backend_class("auto")
    with pytest.raises(ConfigError, match="unknown precision"):
        select.select_backend(meta, tiny_model_dir, precision="fp8")
    monkeypatch.setitem(select._BACKENDS, "tensorrt", ("rfclassify.engine.no_such_backend", "X"))
    with pytest.raises(ConfigError, match="not part of this version"):
        select.backend_class("tensorrt")
    assert "no tensorrt backend module" in select.unusable("tensorrt", "cuda:0").message


def test_missing_model_files_skip_the_backend(meta, tmp_path, monkeypatch):
    meta.save(tmp_path)  # model.json only: no model.onnx, no model.pt
    monkeypatch.setattr(select, "unusable", lambda name, dev: None if dev == "cpu" else _no("no GPU"))
    with pytest.raises(ConfigError, match="model.onnx, which does not exist"):
        select.select_backend(meta, tmp_path)


def test_precision_order_for_torch_on_cuda(meta, tiny_model_dir):
    assert select._precision_for(TorchBackend, meta, tiny_model_dir, "cuda:0", "auto", False)[0] == "fp16"
    assert select._precision_for(TorchBackend, meta, tiny_model_dir, "cuda:0", "fp32", False)[0] == "fp32"
    assert select._precision_for(TorchBackend, meta, tiny_model_dir, "cuda:0", "int8", False)[0] is None
    assert select._precision_for(TorchBackend, meta, tiny_model_dir, "cpu", "fp16", True)[0] == "fp32"


@pytest.mark.parametrize("device", ["gpu", "cpu:0", "cuda:x", "cuda:",
                                    # str.isdigit took these; int() or torch then raised a traceback
                                    "cuda:00", "cuda:01", "cuda:\u0661", "cuda:\u00b2", "cuda:1 ", "CUDA"])
def test_bad_device_strings_are_config_errors(meta, tiny_model_dir, device):
    with pytest.raises(ConfigError, match="unknown device"):
        select.select_backend(meta, tiny_model_dir, device=device)


def test_device_index_reads_the_gpu_number_of_a_valid_name_only():
    from rfclassify.engine.devices import device_index

    assert [device_index(d) for d in ("cuda", "cuda:0", "cuda:3", "cuda:10")] == [0, 0, 3, 10]
    for bad in ("cuda:x", "cuda:\u00b2", "cuda:01"):
        with pytest.raises(ConfigError, match="unknown device"):
            device_index(bad)


@pytest.mark.parametrize("device", ["bogus", "gpu", "cpu:0", "cuda:x"])
def test_the_training_tools_refuse_a_device_name_torch_would_raise_on(device):
    # `train --device bogus` ended in torch's RuntimeError; fit-sequence's also for cuda:x
    with pytest.raises(ConfigError, match="unknown device"):
        select.torch_device(device)


def test_the_training_tools_resolve_auto_and_refuse_a_gpu_torch_does_not_see():
    torch = pytest.importorskip("torch")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert select.torch_device("auto") == ("cuda" if gpus else "cpu")
    assert select.torch_device("cpu") == "cpu"
    with pytest.raises(ConfigError, match=f"cuda:{gpus} asked for, but torch sees"):
        select.torch_device(f"cuda:{gpus}")


def test_tensorrt_int8_is_chosen_by_the_files_its_placement_builds_from(shipped_tensorrt_files, monkeypatch):
    # the GPU's INT8 engine is built from the Q/DQ graph, a DLA's from the calibration cache:
    # each placement falls back to fp16 for want of its own file only (the DLA's once went by
    # the Q/DQ graph, then refused to load when the cache was stale)
    monkeypatch.setattr(select, "available", lambda name: name in {"tensorrt", "pycuda.driver"})
    model_dir = shipped_tensorrt_files
    meta = ModelMeta.load(model_dir)

    def chosen(dla_core):
        sel = select.select_backend(meta, model_dir, backend="tensorrt", dla_core=dla_core)
        return sel.precision, sel.precision_reason

    assert chosen(None)[0] == chosen(0)[0] == "int8"
    graph = model_dir / "static" / "model_L1024.onnx"
    exported = graph.read_bytes()
    graph.write_bytes(exported + b"\0")          # re-exported since the calibration, as export records
    shipped = meta
    export = dict(meta.extra["export"])
    export["static_sha256"] = {b: file_sha256(model_dir / f) for b, f in export["static_files"].items()}
    meta = meta.with_updates(extra={**meta.extra, "export": export})
    assert chosen(None)[0] == "int8"
    precision, reason = chosen(0)
    assert precision == "fp16" and "calibrated for another model_L1024.onnx" in reason
    with pytest.raises(ModelNotFoundError, match="calibrated for another model_L1024.onnx"):
        TensorRTBackend(meta, model_dir, precision="int8", device="cuda:0", dla_core=0)
    TensorRTBackend(meta, model_dir, precision="int8", device="cuda:0")   # the GPU's file is fine

    graph.write_bytes(exported)
    meta = shipped
    (model_dir / "model_trt_int8.onnx").unlink()
    precision, reason = chosen(None)
    assert precision == "fp16" and "TensorRT Q/DQ graph" in reason and "does not exist" in reason
    assert chosen(0)[0] == "int8"
    TensorRTBackend(meta, model_dir, precision="int8", device="cuda:0", dla_core=1)
