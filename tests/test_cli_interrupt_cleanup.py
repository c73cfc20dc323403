"""What Ctrl-C and SIGTERM leave behind the file commands: nothing of theirs.

`calibrate` changes the model directory only once its new INT8 set is complete and checked
(stopped before, the directory is as it was, and it still serves INT8); SIGTERM takes Ctrl-C's
way out of every command that does not answer it itself (exit 143: temporary folders, the
partial output file and `dataset generate`'s worker processes gone), and a worker outlives
neither a SIGTERM nor a SIGKILL to its parent.

The commands run as real processes in a process group of their own (as a shell runs them),
their temporary folders under the test's own TMPDIR, and are signalled for real once their
files say the work is under way.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import h5py
import numpy as np
import pytest
from processes import LINUX, Command, cmdline, running, stat_fields

EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -signal.SIGKILL}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _stamps(folder: Path, part: str) -> dict[str, int]:
    """name -> mtime of the files in `folder` whose names hold `part` (one gone meanwhile: left out)."""
    stamps = {}
    for p in folder.iterdir():
        if part in p.name:
            try:
                stamps[p.name] = p.stat().st_mtime_ns
            except FileNotFoundError:
                continue
    return stamps


def _stopped_as_asked(rc: int, signum: int, out: str) -> None:
    assert rc == EXIT[signum], out
    assert "Traceback" not in out, out
    if signum == signal.SIGTERM:
        assert "stopped by SIGTERM" in out, out


# -- calibrate --------------------------------------------------------------------------------
@LINUX
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["Ctrl-C", "SIGTERM"])
def test_calibrate_stopped_leaves_the_model_directory_as_it_was(calibrated, tmp_path, signum):
    """Stopped once it has written TensorRT's Q/DQ graph (its second file): the directory
    byte for byte as it was (no temporary file in it), its INT8 artifacts still the ones
    model.json records (so auto still serves INT8), and no temporary folder left. The INT8
    files were replaced first and model.json last: stopped there, model.json recorded other
    files (serving fell back to fp32), and SIGTERM also left /tmp/rfclassify-calibrate-* and
    rfclassify-dla-scales-* folders."""
    from rfclassify.model.meta import ModelMeta
    from rfclassify.quant.cpu_int8 import int8_problem
    from rfclassify.quant.tensorrt_int8 import artifact_problem

    model_dir = tmp_path / "model"
    shutil.copytree(calibrated[0], model_dir)
    before = _snapshot(model_dir)
    stamps = _stamps(model_dir, "model_trt_int8.onnx")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # other bursts than the fixture's 84: other ranges, other bytes in every new file
    cmd = Command(["calibrate", "--model-dir", str(model_dir), "--bursts", "40"], tmp)
    try:
        # TensorRT's Q/DQ graph written (under its own name or a temporary one): the CPU's
        # INT8 graph is done, and the longer half of the work (three agreement checks) to come
        cmd.wait_for(lambda: _stamps(model_dir, "model_trt_int8.onnx") != stamps)
        rc = cmd.signal(signum)
        out = cmd.output()
        _stopped_as_asked(rc, signum, out)
        assert _snapshot(model_dir).keys() == before.keys(), out
        assert [name for name, data in _snapshot(model_dir).items() if data != before[name]] == [], out
        meta = ModelMeta.load(model_dir)
        assert int8_problem(meta, model_dir) is None
        assert artifact_problem(meta, model_dir, "qdq") is None
        assert artifact_problem(meta, model_dir, "calibration_cache") is None
        assert list(tmp.glob("rfclassify-*")) == [], out     # (a library's own .ses file may stay)
    finally:
        cmd.kill_all()


def test_calibrate_names_why_it_left_bursts_out(calibrated, tiny_dataset, tmp_path, capsys):
    """A burst with a NaN sample was counted as "rejected by the length rule"."""
    from rfclassify.cli import main
    from rfclassify.model.meta import ModelMeta

    model_dir = tmp_path / "model"
    shutil.copytree(calibrated[0], model_dir)
    data = tmp_path / "nan.h5"
    shutil.copy(tiny_dataset, data)
    with h5py.File(data, "r+") as f:
        start, n = int(f["offset"][3]), int(f["length"][3])
        burst = f["iq"][start:start + n]
        burst[5] = np.nan
        f["iq"][start:start + n] = burst
    assert main(["calibrate", "--model-dir", str(model_dir), "--data", str(data)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "1 left out as serving rejects them: 1 non_finite" in first, first
    assert "length rule" not in first
    calibration = ModelMeta.load(model_dir).extra["int8"]["calibration"]
    assert calibration["rejected"] == 1 and calibration["rejected_by_reason"] == {"non_finite": 1}


# -- dataset generate and import --------------------------------------------------------------
def _workers_started(cmd: Command, workers: int) -> bool:
    """The fork server and `workers` processes forked from it, all under the command."""
    under = cmd.note_processes()
    return sum("forkserver" in cmdline(pid) for pid in running(under)) >= 1 + workers


def _generate_with_two_workers(tmp_path: Path) -> tuple[Path, Command]:
    """`dataset generate --workers 2` of a file that takes a while, into tmp_path/out: (the file
    it writes, the command)."""
    out = tmp_path / "out" / "g.h5"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return out, Command(["dataset", "generate", "--out", str(out), "--per-cell", "400", "--length-max", "2048",
                         "--workers", "2", "--seed", "3"], tmp)


@LINUX
@pytest.mark.parametrize("signum, group", [
    (signal.SIGTERM, False), (signal.SIGTERM, True), (signal.SIGINT, True), (signal.SIGKILL, False),
], ids=["SIGTERM", "SIGTERM to the group", "Ctrl-C", "SIGKILL"])
def test_generate_stopped_ends_its_workers_and_removes_its_partial_file(tmp_path, signum, group):
    """`kill` (SIGTERM) to `dataset generate --workers 2` killed it at once: its workers ran on
    under PID 1 for good (~140 MB each) beside OUT.h5.partial. A SIGTERM to the whole group
    (`timeout`, systemd) killed the workers too, and left the partial file. SIGKILL cannot
    clean up, but the workers still end with their parent."""
    out, cmd = _generate_with_two_workers(tmp_path)
    try:
        cmd.wait_for(lambda: _workers_started(cmd, 2) and out.with_name("g.h5.partial").exists())
        rc = cmd.signal(signum, group=group)
        assert cmd.still_running() == [], {pid: cmdline(pid) for pid in running(cmd.started)}
        if signum == signal.SIGKILL:
            assert rc == EXIT[signum]
            return
        _stopped_as_asked(rc, signum, cmd.output())
        assert list(out.parent.iterdir()) == []
    finally:
        cmd.kill_all()


@LINUX
def test_generate_whose_worker_is_killed_says_so_in_one_line(tmp_path):
    """A worker killed (the OOM killer, say): BrokenProcessPool's traceback, exit 1, before."""
    out, cmd = _generate_with_two_workers(tmp_path)
    try:
        cmd.wait_for(lambda: _workers_started(cmd, 2))
        server = next(pid for pid in running(cmd.started)
                      if "forkserver" in cmdline(pid) and int(stat_fields(pid)[1]) == cmd.proc.pid)
        worker = next(pid for pid in running(cmd.started) if int(stat_fields(pid)[1]) == server)
        os.kill(worker, signal.SIGKILL)
        assert cmd.proc.wait(120) == 1
        out_text = cmd.output()
        assert "internal error: a worker process ended abruptly" in out_text and "Traceback" not in out_text, out_text
        assert cmd.still_running() == [], {pid: cmdline(pid) for pid in running(cmd.started)}
        assert list(out.parent.iterdir()) == []
    finally:
        cmd.kill_all()


@pytest.fixture(scope="module")
def bursts_h5(tmp_path_factory) -> Path:
    """A dataset of 2,184 bursts, named many times in one import that takes seconds."""
    from rfclassify.cli import main

    path = tmp_path_factory.mktemp("import") / "bursts.h5"
    assert main(["dataset", "generate", "--out", str(path), "--per-cell", "26", "--snr", "0,10,20",
                 "--length-max", "2048", "--seed", "2"]) == 0
    return path


@LINUX
def test_import_stopped_by_sigterm_removes_its_partial_file(bursts_h5, tmp_path):
    """SIGTERM to `dataset import` left OUT.h5.partial (hundreds of MB); Ctrl-C removed it."""
    out = tmp_path / "out" / "imported.h5"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cmd = Command(["dataset", "import", *[str(bursts_h5)] * 60, "--out", str(out)], tmp)
    try:
        cmd.wait_for(lambda: out.with_name("imported.h5.partial").exists())
        rc = cmd.signal(signal.SIGTERM)
        _stopped_as_asked(rc, signal.SIGTERM, cmd.output())
        assert list(out.parent.iterdir()) == []
    finally:
        cmd.kill_all()


# -- files replaced as a set ------------------------------------------------------------------
def test_a_set_of_files_is_replaced_only_whole_and_in_order(tmp_path, monkeypatch):
    """An error in the block: every file as it was and no temporary one; done: each replaced,
    the last named last."""
    from rfclassify._atomic import replacing_together

    paths = [tmp_path / name for name in ("a.onnx", "b.calib", "model.json")]
    for p in paths:
        p.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with replacing_together(paths) as temporaries:
            temporaries[0].write_text("new")
            raise KeyboardInterrupt
    assert [p.read_text() for p in paths] == ["old"] * 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)
    renamed = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: renamed.append(Path(b).name) or real_replace(a, b))
    with replacing_together(paths) as temporaries:
        for t in temporaries:
            t.write_text("new")
    assert renamed == ["a.onnx", "b.calib", "model.json"]
    assert [p.read_text() for p in paths] == ["new"] * 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)


def test_a_signal_during_the_renames_waits_for_the_last(tmp_path, monkeypatch):
    """Ctrl-C between two renames would leave half a set: it is held until the last is done."""
    from rfclassify._atomic import replacing_together

    paths = [tmp_path / "a", tmp_path / "b"]
    real_replace = os.replace

    def replace_then_interrupt(a, b):
        real_replace(a, b)
        if Path(b).name == "a":
            signal.raise_signal(signal.SIGINT)     # held: the handler runs after "b"

    monkeypatch.setattr(os, "replace", replace_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        with replacing_together(paths) as temporaries:
            for t in temporaries:
                t.write_text("new")
    assert [p.read_text() for p in paths] == ["new", "new"]
