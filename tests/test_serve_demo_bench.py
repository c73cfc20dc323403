"""`rfclassify demo` and `rfclassify bench daemon` as an operator meets them: a SIGTERM takes
Ctrl-C's way out and a SIGKILL leaves no process behind, Ctrl-C exits 130, a deadline or an
empty phase says so, bad options are refused before the model loads, the demo's summary
counts what the drain answered; and the benchmarks' documented commands and leftovers.

The signal tests run the commands as processes in their own process group (the way a shell
runs them) and check, by pid and start time, that every process they started has ended.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from processes import LINUX, ROOT, Command, cmdline, running

pytest.importorskip("onnxruntime")
pytest.importorskip("zmq")

#: the cores a Command may use: the daemon then starts two refiner workers (auto_refiner_workers),
#: not one a core of a large host
COMMAND_CORES = 2


def _expected_workers() -> int:
    from rfclassify._cpus import auto_refiner_workers

    return auto_refiner_workers(min(len(os.sched_getaffinity(0)), COMMAND_CORES))


@pytest.fixture(scope="module")
def refiner_model_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny model with a refiner (one that re-decides nothing), so that the daemon starts
    its refiner worker processes (two by default on a machine of up to four cores)."""
    from rfclassify._digest import file_sha256
    from rfclassify.dsp.symbol_clock import N_INVARIANTS
    from rfclassify.engine.refiner import REFINER_FILE, Refiner
    from rfclassify.labels import LABELS
    from rfclassify.model.meta import ModelMeta

    model_dir = tmp_path_factory.mktemp("refined") / "model"
    shutil.copytree(tiny_model_dir, model_dir)
    features, k, hidden = len(LABELS) + 1 + N_INVARIANTS, len(LABELS), 4
    ref = Refiner(labels=LABELS, index=np.arange(k), mean=np.zeros(features, np.float32),
                  scale=np.ones(features, np.float32), w1=np.zeros((features, hidden), np.float32),
                  b1=np.ones(hidden, np.float32), w2=np.zeros((hidden, k), np.float32), b2=np.zeros(k, np.float32))
    path = ref.save(model_dir / REFINER_FILE)
    ModelMeta.load(model_dir).with_updates(refiner={"file": REFINER_FILE, "sha256": file_sha256(path),
                                                    "classes": list(LABELS)}).save(model_dir)
    return model_dir


@LINUX
@pytest.mark.parametrize("signum, expected_rc", [(signal.SIGTERM, 143), (signal.SIGKILL, -signal.SIGKILL)])
def test_a_signal_to_the_demo_ends_it_and_every_process_it_started(refiner_model_dir, tmp_path_factory,
                                                                   signum, expected_rc):
    """SIGTERM to the demo's process alone (`kill`, `timeout`): the summary and exit 143, as
    Ctrl-C gives 130; SIGKILL: the refiner workers and the resource tracker end by themselves.
    Both left the workers running under PID 1 (and SIGTERM the temporary folder)."""
    tmp = tmp_path_factory.mktemp("demo")     # short: the control socket's path must fit 107 bytes
    cmd = Command(["demo", "--model-dir", str(refiner_model_dir), "--backend", "onnxruntime", "--count", "400",
                   "--rate", "5", "--lines", "1"], tmp, cores=COMMAND_CORES)
    try:
        cmd.wait_for(lambda: "\n#" in cmd.output())      # the first result: the run is under way
        started = cmd.note_processes()
        workers = sum("spawn_main" in cmdline(pid) for pid in started)
        assert workers == _expected_workers(), {p: cmdline(p) for p in started}
        os.kill(cmd.proc.pid, signum)
        assert cmd.proc.wait(60) == expected_rc, cmd.output()
        assert cmd.still_running() == [], {p: cmdline(p) for p in running(started)}
        out = cmd.output()
        assert "Traceback" not in out, out
        if signum == signal.SIGTERM:
            assert "interrupted by SIGTERM" in out and "summary: sent" in out, out
            assert not list(tmp.glob("rfclassify-demo-*"))
    finally:
        cmd.kill_all()


@LINUX
@pytest.mark.parametrize("signum, expected_rc", [(signal.SIGTERM, 143), (signal.SIGKILL, -signal.SIGKILL)])
def test_a_signal_to_bench_daemon_ends_its_load_generator(tiny_model_dir, tmp_path_factory, signum, expected_rc):
    """The load generator is a process of its own: `kill` (SIGTERM) or SIGKILL to the bench
    left it sending for ever under PID 1."""
    tmp = tmp_path_factory.mktemp("bench")
    cmd = Command(["bench", "daemon", "--model-dir", str(tiny_model_dir), "--backend", "onnxruntime",
                   "--seconds", "6", "--rate", "20"], tmp, cores=COMMAND_CORES)
    try:
        # the tiny model has no refiner: the one spawned process is the load generator
        cmd.wait_for(lambda: any("spawn_main" in cmdline(pid) for pid in cmd.note_processes()))
        time.sleep(0.5)
        cmd.note_processes()
        os.kill(cmd.proc.pid, signum)
        assert cmd.proc.wait(60) == expected_rc, cmd.output()
        assert cmd.still_running() == [], {p: cmdline(p) for p in running(cmd.started)}
        out = cmd.output()
        assert "Traceback" not in out, out
        if signum == signal.SIGTERM:
            assert "stopped by SIGTERM" in out and not list(tmp.glob("rfclassify-bench-*")), out
    finally:
        cmd.kill_all()


# -- demo, in this process --------------------------------------------------------------------
def _demo(model_dir: Path, *more: str) -> list[str]:
    return ["demo", "--model-dir", str(model_dir), "--backend", "onnxruntime", *more]


def test_the_demo_past_its_deadline_says_so_counts_after_the_drain_and_exits_1(tiny_model_dir, monkeypatch,
                                                                               capsys):
    """It stopped silently, printed counters taken before the drain (fewer classified than
    results received) and exited 0."""
    import rfclassify.serve.demo as demo
    from rfclassify.cli import main
    from rfclassify.serve.pipeline import EngineAdapter

    real = EngineAdapter.infer_batch

    def slow(self, batch):
        time.sleep(0.3)                 # slower than the 100 bursts/s offered
        return real(self, batch)
    monkeypatch.setattr(EngineAdapter, "infer_batch", slow)
    monkeypatch.setattr(demo, "GRACE_S", 0.2, raising=False)
    assert main(_demo(tiny_model_dir, "--count", "8", "--rate", "100", "--lines", "0")) == 1
    captured = capsys.readouterr()
    late = re.search(r"timed out: (\d+) of 8 bursts were unanswered 0.2 s after the last was due", captured.out)
    assert late and int(late.group(1)) > 0, captured.out
    # the drain answered the rest, and the summary counts them
    assert "summary: sent 8, classified 8, rejected 0, dropped 0" in captured.out, captured.out
    assert "8 results reached the subscriber" in captured.out and "after the drain 0 had no answer" in captured.out
    assert "rfclassify demo: timed out with" in captured.err


def test_ctrl_c_during_the_demo_prints_its_summary_and_exits_130(tiny_model_dir, monkeypatch, capsys):
    """The demo swallowed the KeyboardInterrupt and exited 0, unlike every other command."""
    from rfclassify.cli import main
    from rfclassify.serve.demo import ResultCollector

    real, calls = ResultCollector.wait_for, []

    def interrupted_once(self, n, timeout_s):
        calls.append(n)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(self, n, timeout_s)
    monkeypatch.setattr(ResultCollector, "wait_for", interrupted_once)
    assert main(_demo(tiny_model_dir, "--count", "5", "--rate", "50", "--lines", "0")) == 130
    out = capsys.readouterr().out
    assert "interrupted" in out and "summary: sent" in out


@pytest.mark.parametrize("more, needle", [
    (["--rate", "0.0005", "--count", "1"], "at least 0.001 bursts/s"),      # after the load; daemon left up
    (["--seconds", "86400", "--rate", "1e5"], "at most 2147483647"),        # 8.64e9 bursts
    (["--seconds", "1e300", "--rate", "1e10"],
     "--seconds: must be more than 0 and at most 86400"),  # was an OverflowError after the load
])
def test_demo_options_the_simulator_cannot_take_are_refused_before_the_model_loads(
        more, needle, monkeypatch, capsys):
    from rfclassify.cli import main
    from rfclassify.engine.classifier import Classifier

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")
    monkeypatch.setattr(Classifier, "load", no_load)
    try:
        rc = main(["demo", "--backend", "onnxruntime", *more])
    except SystemExit as exc:        # argparse's own
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err, err


# -- bench daemon, in this process ------------------------------------------------------------
def _bench(model_dir: Path, *more: str) -> list[str]:
    return ["bench", "daemon", "--model-dir", str(model_dir), "--backend", "onnxruntime", *more]


def test_bench_daemon_writes_its_report_into_a_new_folder_and_says_what_its_percentiles_cover(
        tiny_model_dir, tmp_path, capsys):
    """--json under a folder still to be made was accepted, measured, and then failed to
    write; the percentiles were over the window's last 4,096 results, unsaid."""
    from rfclassify.cli import main

    out = tmp_path / "new" / "folder" / "bench.json"
    assert main(_bench(tiny_model_dir, "--seconds", "0.3", "--rate", "20", "--json", str(out))) == 0
    fixed = json.loads(out.read_text())["phases"]["fixed"]
    assert fixed["latency_results"] > 0 and fixed["latency_percentiles_over"] == fixed["latency_results"]
    assert f"ms ({fixed['latency_results']} results)" in capsys.readouterr().out


def test_bench_daemon_refuses_a_capture_label_before_the_model_loads(monkeypatch, capsys):
    """`--capture NOTALABEL` ran the whole bench keeping nothing: serve's check of
    capture.labels, before the load."""
    from rfclassify.cli import main
    from rfclassify.engine.classifier import Classifier

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")
    monkeypatch.setattr(Classifier, "load", no_load)
    assert main(["bench", "daemon", "--rate", "5", "--capture", "NOTALABEL"]) == 2
    err = capsys.readouterr().err
    assert "--capture: comma-separated result labels" in err and "'NOTALABEL'" in err


def test_bench_daemon_whose_max_phase_classified_nothing_says_so(tiny_model_dir, monkeypatch, capsys):
    """A window too short for one batch: the load generator of the half phase divided by zero
    (a traceback), the half phase waited 30 s for a first burst, and the bench exited 0."""
    bench_daemon = importlib.import_module("rfclassify.serve.bench_daemon")   # the module the command runs
    from rfclassify.cli import main

    phases = []

    def nothing_classified(engine, frames, rate, seconds, *args, **kwargs):
        phases.append(rate)
        return {"offered_rate": rate, "throughput_bursts_per_s": 0.0, "process_cpu_cores": 0.0,
                "process_cpu_ms_per_burst": None, "received": 0, "classified": 0, "dropped": 0,
                "latency_ms": {"total": {"p50": None, "p90": None, "p99": None}}, "latency_results": 0,
                "latency_percentiles_over": 0, "capture": None}
    monkeypatch.setattr(bench_daemon, "run_phase", nothing_classified)
    assert main(_bench(tiny_model_dir, "--seconds", "0.1")) == 2
    assert phases == [None]                 # the max phase only
    err = capsys.readouterr().err
    assert "the max phase classified no burst in its 0.1 s window: give a longer --seconds" in err


# -- benchmarks -------------------------------------------------------------------------------
def _documented_flags() -> list[tuple[str, str]]:
    """(script, flag) for each flag that a backticked command in benchmarks/README.md gives a
    benchmarks/*.py script."""
    text = (ROOT / "benchmarks" / "README.md").read_text()
    found = []
    for code in re.findall(r"`([^`]+)`", text):
        for name in re.findall(r"benchmarks/(\w+\.py)", code):
            args = re.split(r"[;|]|\band\b|, then", code.split(f"benchmarks/{name}", 1)[1])[0]
            found += [(name, flag) for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", args)]
    return found


def test_the_benchmark_commands_the_readme_gives_use_flags_their_scripts_have():
    """The rate_candidates_probe.py row gave `--evaluate test.h5 --out DIR`, options gone since
    commit 7c70c9f. A flag may come from a benchmarks module the script imports
    (refiner_cost's add_cost_arguments)."""
    def source(name: str) -> str:
        text = (ROOT / "benchmarks" / name).read_text()
        imported = re.findall(r"^from (\w+) import", text, re.M)
        return text + "".join((ROOT / "benchmarks" / f"{m}.py").read_text() for m in imported
                              if (ROOT / "benchmarks" / f"{m}.py").exists())
    flags = _documented_flags()
    assert ("soak_daemon.py", "--minutes") in flags          # the reading finds them
    missing = sorted({(name, flag) for name, flag in flags
                      if (ROOT / "benchmarks" / name).exists() and f'"{flag}"' not in source(name)})
    assert missing == []


@LINUX
def test_soak_daemon_removes_its_folder_after_a_run_that_passed_and_keeps_it_after_one_that_failed(
        tiny_model_dir, tmp_path_factory):
    """It left its mkdtemp folder (config, control socket, the daemon's log) after every run."""
    tmp = tmp_path_factory.mktemp("soak")
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    script = [sys.executable, str(ROOT / "benchmarks" / "soak_daemon.py"), "--every", "1", "--rate", "10"]
    good = subprocess.run([*script, "--minutes", "0.02", "--model-dir", str(tiny_model_dir)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "every message answered: True" in good.stdout and not list(tmp.glob("rfclassify-soak-*"))
    bad = subprocess.run([*script, "--minutes", "0.02", "--model-dir", str(tmp / "no-model")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    (kept,) = tmp.glob("rfclassify-soak-*")
    assert bad.returncode == 1 and f"the daemon's log is kept: {kept / 'serve.log'}" in bad.stderr
    assert (kept / "serve.log").read_text()
