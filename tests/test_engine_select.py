"""Backend and precision selection rules (pure decisions; no GPU needed)."""

from __future__ import annotations

import pytest

from rfclassify._exceptions import ConfigError, ModelNotFoundError
from rfclassify.engine import select
from rfclassify.engine.torch_backend import TorchBackend
from rfclassify.model.meta import ModelMeta


@pytest.fixture(scope="module")
def meta(tiny_model_dir):
    return ModelMeta.load(tiny_model_dir)


def test_tensorrt_is_skipped_without_its_backend_module_even_if_tensorrt_imports(monkeypatch):
    monkeypatch.setattr(select, "available", lambda name: True)
    assert "no tensorrt backend module" in select.why_unusable("tensorrt", "cuda:0")


def test_auto_on_this_box_picks_onnxruntime_cpu(meta, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(select, "why_unusable", lambda name, dev: "no GPU" if dev != "cpu" else None)
    sel = select.select_backend(meta, tiny_model_dir)
    assert (sel.backend, sel.device, sel.precision) == ("onnxruntime", "cpu", "fp32")
    assert sel.reason.startswith("auto: tensorrt on cuda:0 skipped (no GPU); torch on cuda:0 skipped")


def test_auto_takes_torch_cuda_fp16_when_a_gpu_is_there(meta, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(select, "why_unusable", lambda name, dev: "absent" if name == "tensorrt" else None)
    sel = select.select_backend(meta, tiny_model_dir)
    assert (sel.backend, sel.device, sel.precision) == ("torch", "cuda:0", "fp16")
    sel = select.select_backend(meta, tiny_model_dir, precision="int8")
    assert sel.precision == "fp16" and sel.precision_reason.startswith("fell back from int8 to fp16")


def test_auto_without_onnxruntime_falls_back_to_torch_cpu(meta, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(select, "why_unusable",
                        lambda name, dev: None if (name, dev) == ("torch", "cpu") else "absent")
    sel = select.select_backend(meta, tiny_model_dir)
    assert (sel.backend, sel.device) == ("torch", "cpu")


def test_device_cpu_restricts_auto_to_cpu_backends(meta, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(select, "why_unusable", lambda name, dev: None)
    sel = select.select_backend(meta, tiny_model_dir, device="cpu")
    assert (sel.backend, sel.device) == ("onnxruntime", "cpu")


def test_explicit_backend_with_an_unavailable_precision_is_an_error(meta, tiny_model_dir):
    with pytest.raises(ModelNotFoundError, match="not calibrated yet"):
        select.select_backend(meta, tiny_model_dir, backend="onnxruntime", precision="int8")
    with pytest.raises(ConfigError, match="fp16"):
        select.select_backend(meta, tiny_model_dir, backend="onnxruntime", precision="fp16")


def test_unknown_names_are_config_errors(meta, tiny_model_dir):
    with pytest.raises(ConfigError, match="unknown backend"):
        select.select_backend(meta, tiny_model_dir, backend="tflite")
    with pytest.raises(ConfigError, match="unknown precision"):
        select.select_backend(meta, tiny_model_dir, precision="fp8")
    with pytest.raises(ConfigError, match="not part of this version"):
        select.backend_class("tensorrt")


def test_missing_model_files_skip_the_backend(meta, tmp_path, monkeypatch):
    meta.save(tmp_path)  # model.json only: no model.onnx, no model.pt
    monkeypatch.setattr(select, "why_unusable", lambda name, dev: None if dev == "cpu" else "no GPU")
    with pytest.raises(ConfigError, match="model.onnx, which does not exist"):
        select.select_backend(meta, tmp_path)


def test_precision_order_for_torch_on_cuda(meta, tiny_model_dir):
    assert select._precision_for(TorchBackend, meta, tiny_model_dir, "cuda:0", "auto", False)[0] == "fp16"
    assert select._precision_for(TorchBackend, meta, tiny_model_dir, "cuda:0", "fp32", False)[0] == "fp32"
    assert select._precision_for(TorchBackend, meta, tiny_model_dir, "cuda:0", "int8", False)[0] is None
    assert select._precision_for(TorchBackend, meta, tiny_model_dir, "cpu", "fp16", True)[0] == "fp32"


@pytest.mark.parametrize("device", ["gpu", "cpu:0", "cuda:x", "cuda:"])
def test_bad_device_strings_are_config_errors(meta, tiny_model_dir, device):
    with pytest.raises(ConfigError, match="unknown device"):
        select.select_backend(meta, tiny_model_dir, device=device)
