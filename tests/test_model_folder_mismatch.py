"""A model folder whose files come from two models is an error naming both files, never a
silent switch: each file a backend loads, export reads or calibrate measures must be the one made
for the model.json beside it (rfclassify.model.provenance). Before the seventy-first session
another model's model.onnx in a copy of models/ was served under the shipped model's id
(precision auto refused the intact INT8 graph as "re-exported since" and fell back to it),
another model's model.json beside the shipped graphs served them under its id and temperature,
and `rfclassify export` stamped the shipped weights with another model's id, exit 0."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from rfclassify._digest import file_sha256  # noqa: E402
from rfclassify._exceptions import ModelNotFoundError  # noqa: E402
from rfclassify.cli import main  # noqa: E402
from rfclassify.engine import select  # noqa: E402
from rfclassify.engine import tensorrt_engines as te  # noqa: E402
from rfclassify.engine import tensorrt_plan as tp  # noqa: E402
from rfclassify.engine.classifier import Classifier  # noqa: E402
from rfclassify.engine.onnxruntime_backend import OnnxRuntimeBackend  # noqa: E402
from rfclassify.engine.tensorrt_backend import TensorRTBackend  # noqa: E402
from rfclassify.engine.torch_backend import TorchBackend  # noqa: E402
from rfclassify.model.meta import ModelMeta  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[1] / "models"
#: what a copy of models/ needs to classify (refiners included: the CLI loads them first)
SERVED = ("model.json", "model.onnx", "model_int8.onnx", "model.pt",
          "refiner.npz", "refiner_light.npz", "refiner_low_order.npz")


@pytest.fixture(scope="module")
def other_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second model of the shipped network, made as train and export make one: random weights,
    an id ending in their digest, exported (buckets 128 and 256 only, to be quick)."""
    from rfclassify.model import network
    from rfclassify.model.export import export_model_dir
    from rfclassify.model.train import weights_digest

    model_dir = tmp_path_factory.mktemp("other") / "model"
    model_dir.mkdir()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(71)
        state = network.build_network().eval().state_dict()
    torch.save(state, model_dir / "model.pt")
    ModelMeta(model_id=f"rfc-resnet-20261207-{weights_digest(state)[:8]}", arch=dict(network.DEFAULT_ARCH),
              buckets_samples=(128, 256)).save(model_dir)
    export_model_dir(model_dir, parity_lengths=(128,))
    return model_dir


def _folder(dst: Path, src: Path, names: tuple[str, ...], **swapped: Path) -> Path:
    """dst holding src's files `names`, each file named in `swapped` (model_json=..., model_onnx=...,
    dots as underscores) copied from that folder instead."""
    dst.mkdir(parents=True)
    for name in names:
        origin = swapped.get(name.replace(".", "_").replace("/", "_"), src)
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(origin / name, dst / name)
    return dst


def _names_both(message: str, folder: Path, name: str) -> None:
    assert str(folder / name) in message and str(folder / "model.json") in message, message
    assert "\n" not in message


def test_export_records_the_digests_of_the_graphs_it_writes(other_model):
    export = ModelMeta.load(other_model).extra["export"]
    assert export["onnx_sha256"] == file_sha256(other_model / "model.onnx")
    assert export["static_sha256"] == {b: file_sha256(other_model / f) for b, f in export["static_files"].items()}


def test_another_models_graph_in_a_copy_of_models_is_an_error_not_a_fallback(
        other_model, tiny_dataset, tmp_path, capsys):
    # the shipped model.json records its graph as the one its INT8 graph was calibrated from
    folder = _folder(tmp_path / "m", SHIPPED, SERVED, model_onnx=other_model)
    meta = ModelMeta.load(folder)
    for backend, precision in (("auto", "auto"), ("onnxruntime", "auto"), ("onnxruntime", "int8"),
                               ("onnxruntime", "fp32")):
        with pytest.raises(ModelNotFoundError) as err:
            select.select_backend(meta, folder, backend, precision, "cpu")
        _names_both(str(err.value), folder, "model.onnx")
    with pytest.raises(ModelNotFoundError):
        OnnxRuntimeBackend(meta, folder)
    assert main(["classify", "--model-dir", str(folder), str(tiny_dataset)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "model.onnx is not the file" in err and str(folder / "model.json") in err


def test_another_models_model_json_beside_the_shipped_files_is_an_error(other_model, tmp_path):
    folder = _folder(tmp_path / "m", SHIPPED, ("model.json", "model.onnx", "model_int8.onnx", "model.pt"),
                     model_json=other_model)
    for backend in ("onnxruntime", "torch"):
        with pytest.raises(ModelNotFoundError) as err:
            Classifier.load(folder, backend=backend, device="cpu", refiner=False, warmup=False, threads=1)
        _names_both(str(err.value), folder, "model.onnx" if backend == "onnxruntime" else "model.pt")


def test_a_graph_of_a_model_json_that_records_its_export_is_checked_too(other_model, tiny_model_dir, tmp_path):
    # not calibrated: export's own record ties the graph to model.json
    folder = _folder(tmp_path / "m", other_model, ("model.json", "model.onnx"), model_onnx=tiny_model_dir)
    with pytest.raises(ModelNotFoundError) as err:
        Classifier.load(folder, backend="auto", device="cpu", refiner=False, warmup=False, threads=1)
    _names_both(str(err.value), folder, "model.onnx")


def test_the_shipped_weights_are_not_exported_under_another_models_id(other_model, tmp_path, capsys):
    folder = _folder(tmp_path / "m", other_model, ("model.json", "model.pt"), model_pt=SHIPPED)
    assert main(["export", "--model-dir", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(folder / "model.pt") in err and str(folder / "model.json") in err
    assert not (folder / "model.onnx").exists()
    meta = ModelMeta.load(folder)
    with pytest.raises(ModelNotFoundError, match="holds the weights of another model"):
        TorchBackend(meta, folder).load()


def test_calibrate_refuses_another_models_graph_before_writing(other_model, tiny_model_dir, tmp_path):
    from rfclassify.quant.cpu_int8 import calibrate_model_dir

    folder = _folder(tmp_path / "m", other_model, ("model.json", "model.pt", "model.onnx", "static/model_L128.onnx",
                                                   "static/model_L256.onnx"), model_onnx=tiny_model_dir)
    before = (folder / "model.json").read_bytes()
    with pytest.raises(ModelNotFoundError) as err:
        calibrate_model_dir(folder, max_bursts=28)
    _names_both(str(err.value), folder, "model.onnx")
    assert (folder / "model.json").read_bytes() == before and not (folder / "model_int8.onnx").exists()


def test_the_daemon_does_not_start_on_a_folder_of_two_models(other_model, tiny_model_dir, tmp_path):
    from rfclassify.serve.daemon import Daemon
    from rfclassify.serve.demo import local_config

    folder = _folder(tmp_path / "m", other_model, ("model.json", "model.onnx"), model_onnx=tiny_model_dir)
    daemon = Daemon(local_config(tmp_path, model_dir=str(folder), backend="onnxruntime"))
    with pytest.raises(ModelNotFoundError) as err:
        daemon.start()
    _names_both(str(err.value), folder, "model.onnx")


def test_tensorrt_refuses_another_models_graph_and_keys_no_engine_by_it(
        shipped_tensorrt_files, other_model, monkeypatch):
    monkeypatch.setattr(select, "available", lambda name: name in {"tensorrt", "pycuda.driver"})
    model_dir = shipped_tensorrt_files
    meta = ModelMeta.load(model_dir)
    shutil.copy(other_model / "static" / "model_L256.onnx", model_dir / "static" / "model_L1024.onnx")
    # a DLA's engines are parsed from the static graphs: an error, where fp16 was the fallback
    with pytest.raises(ModelNotFoundError) as err:
        select.select_backend(meta, model_dir, backend="tensorrt", dla_core=0)
    _names_both(str(err.value), model_dir, "static/model_L1024.onnx")
    with pytest.raises(ModelNotFoundError):
        TensorRTBackend(meta, model_dir, precision="fp16", device="cuda:0", dla_core=0)
    assert select.select_backend(meta, model_dir, backend="tensorrt").precision == "int8"  # the GPU reads none
    dla = tp.plan_engines(meta, "fp16", "10.3.0.30", dla_core=0)
    with pytest.raises(ModelNotFoundError) as err:   # the engine cache key's digests
        te.digests(dla, model_dir, meta)
    _names_both(str(err.value), model_dir, "static/model_L1024.onnx")

    shutil.copy(other_model / "model.onnx", model_dir / "model.onnx")   # the GPU's fp16/fp32 graph
    for precision in ("auto", "fp16"):
        with pytest.raises(ModelNotFoundError) as err:
            select.select_backend(meta, model_dir, backend="tensorrt", precision=precision)
        _names_both(str(err.value), model_dir, "model.onnx")
    with pytest.raises(ModelNotFoundError):
        te.digests(tp.plan_engines(meta, "fp32", "10.3.0.30"), model_dir, meta)


def test_a_digest_model_json_records_must_be_a_string(other_model, tmp_path):
    folder = _folder(tmp_path / "m", other_model, ("model.json",))
    meta = ModelMeta.load(folder)
    meta.with_updates(extra={**meta.extra, "export": {**meta.extra["export"], "onnx_sha256": 5}}).save(folder)
    with pytest.raises(ModelNotFoundError, match="extra.export.onnx_sha256 must be a string or null, got 5"):
        ModelMeta.load(folder)


def test_the_shipped_model_is_one_model_and_loads_in_every_precision_here(monkeypatch):
    from rfclassify.model.provenance import file_problem, recorded_sha256, weights_problem

    meta = ModelMeta.load(SHIPPED)
    trt = meta.extra["tensorrt_int8"]
    graphs = [meta.onnx_file, meta.int8_onnx_file, trt["qdq_file"], trt["calibration_cache_file"],
              *meta.extra["export"]["static_files"].values()]
    for name in graphs:   # every file a backend reads is tied to model.json, and is the one it records
        assert recorded_sha256(meta, name) is not None, name
        assert file_problem(meta, SHIPPED, name) is None
    state = torch.load(SHIPPED / meta.weights_file, map_location="cpu", weights_only=True)
    assert weights_problem(meta, SHIPPED, state) is None
    x = np.random.default_rng(0).standard_normal((2, 2, 1, 1024)).astype(np.float32)
    for backend in (OnnxRuntimeBackend(meta, SHIPPED, precision="int8"), OnnxRuntimeBackend(meta, SHIPPED),
                    TorchBackend(meta, SHIPPED)):
        with backend:
            assert backend.infer(x)[0].shape == (2, len(meta.labels))
    assert select.select_backend(meta, SHIPPED, "onnxruntime").precision == "int8"
    monkeypatch.setattr(select, "available", lambda name: name in {"tensorrt", "pycuda.driver"})
    for dla_core in (None, 0):
        for precision in ("int8", "fp16"):
            assert TensorRTBackend.foreign_file(meta, SHIPPED, precision, dla_core=dla_core) is None
            plan = tp.plan_engines(meta, precision, "10.3.0.30", dla_core=dla_core)
            assert set(te.digests(plan, SHIPPED, meta)) == set(plan.files())
        assert select.select_backend(meta, SHIPPED, "tensorrt", dla_core=dla_core).precision == "int8"
