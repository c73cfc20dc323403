"""`rfclassify bench`: runs on a tiny configuration and reports the right keys (no timing asserts)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from rfclassify.cli import main

TINY = ["--device", "cpu", "--seconds", "0.02", "--buckets", "128", "--batch-sizes", "1,2", "--threads", "1"]


def test_bench_writes_a_report_with_latency_throughput_and_ratios(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "bench.json"
    rc = main(["bench", "--model-dir", str(tiny_model_dir), *TINY, "--json", str(out)])
    assert rc == 0
    table = capsys.readouterr().out
    assert "x_lat" in table and "onnxruntime" in table
    report = json.loads(out.read_text())
    assert {"model", "machine", "baseline", "config", "rows", "skipped", "threads"} <= set(report)
    combos = {(r["backend"], r["precision"], r["device"], r["bucket"], r["batch"]) for r in report["rows"]}
    assert combos == {(b, "fp32", "cpu", 128, n) for b in ("onnxruntime", "torch") for n in (1, 2)}
    row = report["rows"][0]
    assert set(row["latency_ms"]) == {"median", "p90", "p99", "mean"}
    assert set(row["baseline"]) == {"calls", "latency_ms", "throughput_windows_per_s"}
    assert row["calls"] >= 5 and row["speedup_latency"] > 0 and row["speedup_throughput"] > 0
    assert [s["precision"] for s in report["skipped"] if s["backend"] == "onnxruntime"] == ["int8"]
    assert [s["backend"] for s in report["skipped"] if s["precision"] == "*"] == ["tensorrt"]   # no GPU here


def test_bench_model_word_and_json_to_stdout(tiny_model_dir, capsys):
    rc = main(["bench", "--model-dir", str(tiny_model_dir), "model", "--backends", "onnxruntime",
               "--precisions", "fp32", *TINY, "--json", "-"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and {r["backend"] for r in report["rows"]} == {"onnxruntime"}
    assert report["config"]["buckets_samples"] == [128]


def test_bench_bad_options_exit_2(tiny_model_dir, capsys):
    assert main(["bench", "--model-dir", str(tiny_model_dir), "--buckets", "100"]) == 2
    assert "not buckets of the model" in capsys.readouterr().err
    assert main(["bench", "--model-dir", str(tiny_model_dir), "--precisions", "fp8"]) == 2


def test_bench_refuses_auto_offering_only_the_backends_it_measures(tiny_model_dir, capsys):
    # was "unknown backend 'auto'; choose from auto, tensorrt, torch, onnxruntime"
    assert main(["bench", "--model-dir", str(tiny_model_dir), "--backends", "onnxruntime,auto", *TINY]) == 2
    assert capsys.readouterr().err.endswith("unknown backends ['auto']; choose from tensorrt, torch, onnxruntime\n")


def test_bench_gives_the_callers_torch_thread_count_back(tiny_model_dir, capsys):
    # torch's thread count is the process's; the baseline's --threads 1 stayed after the benchmark
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        assert main(["bench", "--model-dir", str(tiny_model_dir), "--backends", "onnxruntime", "--precisions", "fp32",
                     "--device", "cpu", "--seconds", "0.02", "--buckets", "128", "--batch-sizes", "1",
                     "--threads", "1", "--json", "-"]) == 0
        assert json.loads(capsys.readouterr().out)["threads"] == 1
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_the_machine_record_names_the_gpu_measured(monkeypatch):
    # it named GPU 0 whichever GPU was measured
    torch = pytest.importorskip("torch")
    from rfclassify.engine.bench import machine_info

    names = {0: "NVIDIA H100", 1: "NVIDIA L4"}
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: names[0 if i is None else i])
    assert machine_info({"cuda:1"})["gpu"] == "NVIDIA L4"
    assert machine_info({"cuda", "cpu"})["gpu"] == "NVIDIA H100"
    assert machine_info({"cuda:1", "cuda:0"})["gpu"] == "cuda:0: NVIDIA H100; cuda:1: NVIDIA L4"
    assert "gpu" not in machine_info({"cpu"})


def test_bench_daemon_without_its_module_is_a_clear_error(capsys, monkeypatch):
    import rfclassify.commands.bench as bench_command

    real = importlib.util.find_spec
    monkeypatch.setattr(bench_command.importlib.util, "find_spec",
                        lambda name, *a: None if name == bench_command.DAEMON_MODULE else real(name, *a))
    assert main(["bench", "daemon"]) == 2
    assert "rfclassify.serve.bench_daemon does not exist" in capsys.readouterr().err


def test_bench_daemon_without_pyzmq_says_so_not_unrecognized_arguments(capsys, monkeypatch):
    """A box without pyzmq (the lent GPU hosts until its wheel is carried) used to answer
    `bench daemon --seconds 6` with "unrecognized arguments": the module imported zmq first."""
    import sys

    import rfclassify.serve

    # the package's attribute too: a fresh import sets it, and left pointing at that module
    # it made a later `import rfclassify.serve.bench_daemon as m` see another module than
    # the one sys.modules (and the command) has
    monkeypatch.delattr(rfclassify.serve, "bench_daemon", raising=False)
    monkeypatch.delitem(sys.modules, "rfclassify.serve.bench_daemon", raising=False)
    monkeypatch.setitem(sys.modules, "zmq", None)      # import zmq fails; find_spec("zmq") is None
    assert main(["bench", "daemon", "--seconds", "6", "--refiner-workers", "0"]) == 2
    err = capsys.readouterr().err
    assert "the daemon benchmark needs pyzmq" in err and "unrecognized" not in err
