"""A disk that fills up while `dataset generate`, `dataset import` or `train` writes: one line
naming the file, exit 1 (the machine's state, not the user's mistake), no partial file, and an
earlier model or checkpoint left whole.

Before the seventy-first session HDF5 segfaulted (exit 139, h5py tracebacks, OUT.h5.partial
left behind: a dataset whose chunks could not be flushed was left half closed and closing it
again crashed), and torch.save, given a path, raised RuntimeError "unexpected pos" (a
traceback) where its write had failed. `ulimit -f` (RLIMIT_FSIZE; Python ignores SIGXFSZ, so a
write past it fails with EFBIG) stands in for a full disk without a mount: HDF5 and torch meet
it where a full tmpfs gives them ENOSPC, in the same writes."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from rfclassify.cli import main

ROOT = Path(__file__).resolve().parents[1]

#: runs `python -m rfclassify ARGS...` (the package of the working directory, as -m does) with
#: files limited to LIMIT bytes: a crash of the old code ends the child, not the test session
_UNDER_A_LIMIT = ("import resource, runpy, sys\n"
                  "limit = int(sys.argv[1])\n"
                  "resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
                  "sys.argv = ['rfclassify', *sys.argv[2:]]\n"
                  "runpy.run_module('rfclassify', run_name='__main__', alter_sys=True)\n")


def _cli_with_files_limited_to(limit_bytes: int, *words: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _UNDER_A_LIMIT, str(limit_bytes), *words], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def _one_error_line(proc: subprocess.CompletedProcess, expected: str) -> None:
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1 and lines and lines[-1] == expected, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr


# 200 KB: the first append's chunks fail as HDF5 writes them; 1.5 MB: they fit, and the rest
# fails as the file is closed (the whole file is about 2.1 MB)
@pytest.mark.parametrize("limit_bytes", [200_000, 1_500_000])
def test_dataset_generate_on_a_full_disk_is_one_line_exit_1_and_leaves_no_file(tmp_path, limit_bytes):
    out = tmp_path / "x.h5"
    proc = _cli_with_files_limited_to(limit_bytes, "dataset", "generate", "--out", str(out), "--classes", "BPSK,QPSK",
                                      "--snr", "0,10", "--per-cell", "50", "--lengths", "1024")
    _one_error_line(proc, f"rfclassify dataset: error: {out}: File too large")
    assert list(tmp_path.iterdir()) == []       # no x.h5, no x.h5.partial


def test_dataset_import_on_a_full_disk_is_one_line_exit_1_and_leaves_no_file(tiny_dataset, tmp_path):
    out = tmp_path / "i.h5"
    proc = _cli_with_files_limited_to(200_000, "dataset", "import", "--out", str(out), str(tiny_dataset))
    _one_error_line(proc, f"rfclassify dataset: error: {out}: File too large")
    assert list(tmp_path.iterdir()) == []


_TINY = ["--steps", "1", "--workers", "0", "--batch-size", "4", "--buckets", "128", "--val-per-bucket", "4",
         "--device", "cpu"]


@pytest.mark.parametrize("name", ["checkpoint.pt", "model.pt"])
def test_train_whose_torch_save_fails_midway_is_one_line_exit_1_and_keeps_the_old_file(
        name, tmp_path, monkeypatch, capsys):
    """A real torch.save of `name` under `ulimit -f`: given a path, torch's writer reported the
    failed write as RuntimeError "unexpected pos" (a traceback, exit 1), which the "a failed
    write leaves the old model whole" path never saw."""
    torch = pytest.importorskip("torch")
    out = tmp_path / "run"
    out.mkdir()
    (out / name).write_bytes(b"the old file")
    real_save = torch.save

    def save_past_the_limit(obj, f, *args, **kwargs):
        if name not in str(getattr(f, "name", f)):
            return real_save(obj, f, *args, **kwargs)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))    # this save alone: the rest of the run writes
        try:
            return real_save(obj, f, *args, **kwargs)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    monkeypatch.setattr(torch, "save", save_past_the_limit)
    assert main(["train", "--out", str(out), *_TINY]) == 1
    err = capsys.readouterr().err
    assert err.endswith(f"rfclassify train: error: {out / name}: File too large\n"), err
    assert (out / name).read_bytes() == b"the old file"
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
