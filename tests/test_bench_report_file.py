"""`bench` and `bench daemon --json FILE`: a FILE that cannot be written is refused as the
command line is read (it was found after the whole measurement), and the report replaces FILE
in one step, a failed write naming it (a full disk left a valid earlier report cut short, exit
1, naming no path)."""

from __future__ import annotations

import importlib
import json
import os
import resource
import stat
import sys
from pathlib import Path

import pytest

from rfclassify.cli import main

LINUX = sys.platform.startswith("linux")
REPORT = {"model": "m", "baseline": "b", "threads": 1, "rows": [],
          "skipped": [{"backend": "tensorrt", "precision": "*", "reason": "x" * 4000}]}   # past 1 KiB


def _no_measuring(monkeypatch):
    """Make measuring an AssertionError: the command must end before it."""
    from rfclassify.engine.classifier import Classifier

    def measured(*args, **kwargs):
        raise AssertionError("measured before refusing the --json file")
    monkeypatch.setattr("rfclassify.engine.bench.run_bench", measured)
    monkeypatch.setattr(Classifier, "load", measured)


@pytest.mark.skipif(not (LINUX and Path("/sys/kernel").is_dir()), reason="needs Linux's /sys")
@pytest.mark.parametrize("words", [["bench"], ["bench", "daemon"]])
def test_a_json_file_in_sys_is_refused_before_measuring(words, monkeypatch, capsys):
    """Root passes os.access there; the file system refuses to make the file."""
    _no_measuring(monkeypatch)
    with pytest.raises(SystemExit) as exc:
        main([*words, "--json", "/sys/rfclassify-bench-test.json"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1, err
    assert "--json: /sys/rfclassify-bench-test.json cannot be written: /sys: " in err


@pytest.mark.parametrize("words", [["bench"], ["bench", "daemon"]])
def test_a_folder_without_write_permission_is_refused_before_measuring(words, tmp_path, monkeypatch, capsys):
    """os.access's answer (a folder of another user; a read-only mount gives EROFS there too),
    through a new folder still to be made under it."""
    _no_measuring(monkeypatch)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == tmp_path else real(p, mode, **kw))
    with pytest.raises(SystemExit) as exc:
        main([*words, "--json", str(tmp_path / "new" / "r.json")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"cannot be written: {tmp_path}: permission denied" in err, err


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write a read-only file")
def test_a_read_only_file_is_refused_before_measuring(tmp_path, monkeypatch, capsys):
    _no_measuring(monkeypatch)
    ro = tmp_path / "r.json"
    ro.write_text("{}")
    ro.chmod(0o444)
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--json", str(ro)])
    assert exc.value.code == 2 and "the file is read-only" in capsys.readouterr().err


def test_output_file_still_takes_what_it_took():
    """The other commands' output files (dataset --png, fit-sequence --out, fit-refiner
    --save-examples) go through the same check."""
    from rfclassify._argtypes import output_file

    assert output_file("-") == Path("-") and output_file(os.devnull) == Path(os.devnull)


def _fake_bench_daemon(monkeypatch):
    bench_daemon = importlib.import_module("rfclassify.serve.bench_daemon")   # the module the command runs
    monkeypatch.setattr(bench_daemon, "_measure", lambda args: dict(REPORT))


@pytest.mark.parametrize("words", [["bench", "--backends", "onnxruntime"], ["bench", "daemon"]])
def test_a_write_that_fails_midway_leaves_the_earlier_report_whole_and_names_the_file(
        words, tmp_path, monkeypatch, capsys):
    """`ulimit -f 1` (a full disk's stand-in): the earlier report became 1,024 bytes of invalid
    JSON, "error: File too large", exit 1."""
    monkeypatch.setattr("rfclassify.engine.bench.run_bench", lambda model_dir, config: dict(REPORT))
    _fake_bench_daemon(monkeypatch)
    out = tmp_path / "r.json"
    earlier = json.dumps({"earlier": "report"})
    out.write_text(earlier)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, hard))     # Python ignores SIGXFSZ: EFBIG
    try:
        rc = main([*words, "--json", str(out)])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    err = capsys.readouterr().err
    assert rc == 2 and f"error: {out}: File too large" in err and err.count("\n") == 1, err
    assert out.read_text() == earlier
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]       # no temporary file left


@pytest.mark.parametrize("words", [["bench", "--backends", "onnxruntime"], ["bench", "daemon"]])
def test_the_report_replaces_the_file_whole(words, tmp_path, monkeypatch):
    monkeypatch.setattr("rfclassify.engine.bench.run_bench", lambda model_dir, config: dict(REPORT))
    _fake_bench_daemon(monkeypatch)
    out = tmp_path / "new" / "r.json"
    assert main([*words, "--json", str(out)]) == 0
    assert json.loads(out.read_text()) == REPORT
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.json"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_or_device_is_written_in_place_not_replaced(tmp_path):
    """A rename over /dev/null would put a regular file where the device was (as root); a FIFO
    named as --json is read by whoever listens on it. (A FIFO stands in for the device: the test
    must not risk /dev/null.)"""
    from rfclassify._atomic import write_atomic

    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)   # there, so that the writer's open goes through
    try:
        write_atomic(fifo, "{}\n")
        assert stat.S_ISFIFO(fifo.stat().st_mode)
        assert os.read(reader, 100) == b"{}\n"
    finally:
        os.close(reader)


def test_a_link_is_written_through_not_replaced(tmp_path):
    """The rename replaced the link itself: `--json /dev/stdout` (a link to the shell's redirect)
    turned /dev/stdout into a regular file as root, and the report never reached the redirect
    (the session's diff review)."""
    from rfclassify._atomic import write_atomic

    target = tmp_path / "target.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_atomic(link, "{}\n")
    assert link.is_symlink() and target.read_text() == "{}\n"


def test_an_existing_file_in_a_folder_that_takes_no_new_one_is_taken_and_written_in_place(
        tmp_path, monkeypatch):
    """A writable report in a folder of another user: the probe for a new file refused it, and
    the temporary file of a replacement could not be made there (the session's diff review)."""
    from rfclassify._argtypes import output_file
    from rfclassify._atomic import write_atomic

    report = tmp_path / "shared" / "report.json"
    report.parent.mkdir()
    report.write_text("old")
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == report.parent else real(p, mode, **kw))
    assert output_file(str(report)) == report
    inode = report.stat().st_ino
    write_atomic(report, "{}\n")
    assert report.read_text() == "{}\n" and report.stat().st_ino == inode
