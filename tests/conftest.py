"""Fixtures shared by several test files. Keep it small: only what more than one area needs."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path


def _a_share_of_the_cores_per_xdist_worker() -> None:
    """Under pytest-xdist on a machine of at least two cores per worker, each worker process
    keeps its own slice of the cores (its affinity mask, which the processes it starts inherit),
    before numpy's BLAS or torch start their threads. Each sizes itself to the whole machine
    otherwise: `train` asks torch for as many threads as the process has cores, so four workers
    on the 16-core GPU host ran 64 spinning threads, and four training and refiner-fit tests
    took 39-69 s each against 5-16 s with a share each (sixty-sixth session; 1.3-7.3 s alone on
    a 2-core CPU; such tests ran past the per-test limit there in the sixty-fifth). Smaller
    machines are left as they are."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not worker.startswith("gw") or not count.isdigit() or not hasattr(os, "sched_setaffinity"):
        return
    cores, workers, index = sorted(os.sched_getaffinity(0)), int(count), int(worker[2:])
    share = len(cores) // max(workers, 1)
    if share >= 2 and index < workers:
        os.sched_setaffinity(0, cores[index * share:(index + 1) * share])


_a_share_of_the_cores_per_xdist_worker()

import numpy as np  # noqa: E402 - after the worker's cores are set: BLAS sizes its threads on import
import pytest  # noqa: E402

from rfclassify.model.meta import ModelMeta  # noqa: E402

TINY_MODEL_SEED = 20261130


def randomize_batchnorm(net):
    """`net` with random BatchNorm affine parameters and statistics (from torch's global generator).

    Fresh BatchNorms are identities and some are zero-initialized, which makes a random
    network's outputs nearly input-independent; random BN statistics make them vary, so
    backend-agreement, export-parity and aggregation tests compare something."""
    import torch

    for mod in net.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            with torch.no_grad():
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.normal_(0.0, 0.2)
                mod.running_mean.normal_(0.0, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
    return net


@pytest.fixture(autouse=True)
def _auto_refiner_workers_as_on_one_core(monkeypatch):
    """Every test sees one core where the daemon's default refiner_workers (-1,
    _cpus.auto_refiner_workers) picks its count, so that count is 0 and a daemon a test starts
    runs its refiners in its inference thread on any machine, without starting processes (a
    test that wants workers names them, or patches this back). Only auto_refiner_workers reads
    usable_cpu_count through the module; the backends' threads are left alone."""
    import rfclassify._cpus as cpus

    monkeypatch.setattr(cpus, "usable_cpu_count", lambda: 1)


@contextlib.contextmanager
def serving(config):
    """A Daemon started on `config` (serve.demo.local_config), a PUSH socket connected to its
    input and a ResultCollector started on its output: yields (daemon, push, collector); the
    socket closed and the daemon stopped with a drain (which must succeed) after."""
    import zmq

    from rfclassify.serve.daemon import Daemon
    from rfclassify.serve.demo import ResultCollector

    d = Daemon(config)
    d.start()
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    try:
        collector = ResultCollector(d.pipeline.output_endpoint, ctx).start()
        push.connect(d.pipeline.input_endpoint)
        yield d, push, collector
    finally:
        push.close(0)
        assert d.stop(drain=True)
        ctx.term()


@pytest.fixture
def shipped_tensorrt_files(tmp_path: Path) -> Path:
    """A model directory of the files TensorRT's engines are built from (model.json, model.onnx,
    the static graphs and both INT8 artifacts), copied from the shipped model, to change."""
    shipped = Path(__file__).resolve().parents[1] / "models"
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    for name in ("model.json", "model.onnx", "model_trt_int8.onnx", "model_trt_int8.calib"):
        shutil.copy(shipped / name, model_dir / name)
    shutil.copytree(shipped / "static", model_dir / "static")
    return model_dir


@pytest.fixture(name="serving")
def serving_fixture():
    """serving, for tests (conftest is not imported by name)."""
    return serving


@pytest.fixture(name="randomize_batchnorm")
def randomize_batchnorm_fixture():
    """randomize_batchnorm, for tests (conftest is not imported by name)."""
    return randomize_batchnorm


def random_sequence_net(labels: tuple[str, ...], seed: int = 0, width: int = 8, blocks: int = 1, kernel: int = 3,
                        gates: bool = False, front: str = "clocked", rate_rule: str = "strongest_line",
                        carrier: str = "lines"):
    """A numpy sequence network (rfclassify.engine.sequence_net) with random weights, no torch
    (gates: with a squeeze-and-excitation gate per block), reading `front`'s channels of bursts
    clocked by `rate_rule`, their second carrier pass `carrier`."""
    from rfclassify.dsp.sequence_fronts import front_channels
    from rfclassify.engine.sequence_net import SequenceNet

    rng = np.random.default_rng(seed)

    def a(*shape: int) -> np.ndarray:
        return (0.3 * rng.standard_normal(shape)).astype(np.float32)
    embed = ((a(16, front_channels(front), 1), a(16)), (a(width, 16, 1), a(width)))
    block = tuple((a(width, width, kernel), a(width), a(width, width, kernel), a(width)) for _ in range(blocks))
    head = ((a(10, 2 * width + 1), a(10)), (a(len(labels), 10), a(len(labels))))
    gate = tuple((a(4, width), a(4), a(width, 4), a(width)) for _ in range(blocks if gates else 0))
    return SequenceNet(embed, block, head, labels, {"made_by": "test"}, gate, front, rate_rule, carrier)


@pytest.fixture(name="random_sequence_net")
def random_sequence_net_fixture():
    """random_sequence_net, for tests."""
    return random_sequence_net


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory (model.pt, model.onnx, model.json) of a randomly initialized
    build_network() with a fixed torch seed: real shapes and files, meaningless predictions.

    Session-scoped and shared: copy it before changing model.json."""
    torch = pytest.importorskip("torch")
    network = pytest.importorskip("rfclassify.model.network")
    export = pytest.importorskip("rfclassify.model.export")
    model_dir = tmp_path_factory.mktemp("tiny_model")
    with torch.random.fork_rng(devices=[]):  # do not disturb the global generator
        torch.manual_seed(TINY_MODEL_SEED)
        net = randomize_batchnorm(network.build_network().eval())
    torch.save(net.state_dict(), model_dir / "model.pt")
    export.export_onnx(net, model_dir / "model.onnx")
    ModelMeta(model_id="tiny-random", arch=dict(network.DEFAULT_ARCH)).save(model_dir)
    return model_dir


@pytest.fixture(scope="session")
def calibrated(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> tuple[Path, dict]:
    """A copy of tiny_model_dir calibrated on 84 bursts of the shipped calibration set (its CPU
    INT8 graph and TensorRT's INT8 artifacts), and extra.int8 as calibrate returned it.
    Session-scoped and shared: copy it before changing it."""
    pytest.importorskip("onnxruntime")
    from rfclassify.quant import cpu_int8

    model_dir = tmp_path_factory.mktemp("int8") / "model"
    shutil.copytree(tiny_model_dir, model_dir)
    return model_dir, cpu_int8.calibrate_model_dir(model_dir, max_bursts=84)


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An HDF5 dataset of 8 bursts (BPSK, QPSK, FM, NOISE at -10 and 20 dB; 100, 256 and 1,500
    samples, so three buckets), for evaluations that must run in seconds."""
    from rfclassify.cli import main

    path = tmp_path_factory.mktemp("ds") / "tiny.h5"
    assert main(["dataset", "generate", "--out", str(path), "--snr=-10,20", "--per-cell", "1",
                 "--classes", "BPSK,QPSK,FM,NOISE", "--lengths", "100,256,1500", "--seed", "1"]) == 0
    return path
