"""Paths and options the CLI took as a traceback, a wrong file name or a silent success (the
seventy-first session's review): an output file whose name cannot even be looked at, a copy that
failed on a full disk, bytes of a path that are not UTF-8, `serve --check-config` passing what
`serve` refuses, and smaller ones (a folder's slash, `engine inspect` of no engine)."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from rfclassify.cli import main

ROOT = Path(__file__).resolve().parents[1]
LONG_NAME = "x" * 300      # past NAME_MAX (255): stat fails with ENAMETOOLONG


def _usage_error(argv: list[str], capsys) -> str:
    """The one line of an argparse refusal (exit 2), without a traceback."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    return err


# --- 1. output-file options whose path cannot be looked at ----------------------------------

@pytest.mark.parametrize("argv", [["bench", "--json"], ["bench", "daemon", "--json"],
                                  ["dataset", "inspect", "x.h5", "--png"], ["fit-sequence", "--out"],
                                  ["fit-refiner", "--save-examples"]])
def test_an_output_file_with_a_name_too_long_is_a_usage_error(argv, tmp_path, capsys):
    """`bench --json o/<300 x>.json` was OSError [Errno 36] from Path.is_dir() as a traceback
    out of the argument parser, exit 1."""
    path = f"{tmp_path}/{LONG_NAME}.json"
    err = _usage_error([*argv, path], capsys)
    assert f"{path} cannot be written: file name too long" in err


def test_an_output_file_in_a_folder_this_user_may_not_enter_is_a_usage_error(tmp_path, monkeypatch, capsys):
    """A user's --json under another user's private folder: stat() raises PermissionError (as
    root it cannot, so the refusal is stood in for)."""
    private = tmp_path / "secret"
    real_stat = pathlib.Path.stat

    def stat(self, *args, **kwargs):
        if str(self).startswith(str(private)):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_stat(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "stat", stat)
    err = _usage_error(["bench", "--json", str(private / "report.json")], capsys)
    assert f"{private / 'report.json'} cannot be written: permission denied" in err


def test_an_oserror_while_the_command_line_is_read_is_one_line_exit_2(monkeypatch, capsys):
    """cli.main read the command line outside its try: any option type that looks at a path
    and meets an OSError ended in a traceback."""
    import rfclassify.commands.bench as bench

    def failing(text: str) -> Path:
        raise OSError(errno.EIO, "Input/output error", text)

    monkeypatch.setattr(bench, "output_file", failing)
    assert main(["bench", "--json", "report.json"]) == 2
    err = capsys.readouterr().err
    assert err == "rfclassify: error: report.json: Input/output error\n"


def test_an_output_file_ending_in_a_slash_is_refused(tmp_path, capsys):
    """`bench --json o/newdir/` would write a file named newdir."""
    err = _usage_error(["bench", "--json", f"{tmp_path}/newdir/"], capsys)
    assert "names a folder" in err and not (tmp_path / "newdir").exists()


# --- 2. a copy onto a full disk ----------------------------------------------------------------

#: runs rfclassify with writes limited to LIMIT bytes a file (RLIMIT_FSIZE, SIGXFSZ ignored): a
#: write past it fails with EFBIG as a write onto a full disk fails with ENOSPC, named the same way
_LIMITED = ("import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "limit = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)); "
            "os.execv(sys.executable, [sys.executable, '-m', 'rfclassify', *sys.argv[2:]])")


@pytest.mark.skipif(not hasattr(os, "execv") or sys.platform != "linux", reason="RLIMIT_FSIZE (Linux)")
def test_export_onto_a_full_disk_names_the_file_written_and_leaves_no_part_of_it(tiny_model_dir, tmp_path):
    """With the disk full, `export --out full/e` said `error: MODEL/model.pt: No space left on
    device` (the source: shutil names it first, and the cli printed only that) and left a torn
    full/e/model.pt. A disk without room is the machine's state: exit 1 (_atomic.failed_write)."""
    out = tmp_path / "e"
    limit = (tiny_model_dir / "model.pt").stat().st_size // 2
    proc = subprocess.run([sys.executable, "-c", _LIMITED, str(limit), "export", "--model-dir", str(tiny_model_dir),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == f"rfclassify export: error: {out / 'model.pt'}: File too large\n"
    assert not (out / "model.pt").exists() and not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def test_a_copy_or_rename_that_fails_names_the_file_written_then_its_source(monkeypatch, capsys):
    """An OSError with two files (shutil's copies, os.rename) was printed naming the first, the
    source, as if that had failed."""
    import rfclassify.commands.export as export

    def run(args):
        raise OSError(errno.EXDEV, "Invalid cross-device link", "model/model.pt", None, "out/model.pt")

    monkeypatch.setattr(export, "run", run)
    assert main(["export"]) == 2
    assert capsys.readouterr().err == ("rfclassify export: error: out/model.pt: Invalid cross-device link "
                                       "(from model/model.pt)\n")


# --- 3. bytes of a path that are not UTF-8 -----------------------------------------------------

def test_dataset_generate_takes_an_out_path_that_is_not_utf8(tmp_path):
    """`--out $'o/out\\xff.h5'` was a UnicodeEncodeError traceback (h5py writing the command
    line). Run with stdout strict, as a UTF-8 locale other than C.UTF-8 makes it, where the
    closing "wrote PATH" failed the same way."""
    import h5py

    out = os.fsencode(tmp_path) + b"/out\xff.h5"
    proc = subprocess.run([sys.executable, "-m", "rfclassify", "dataset", "generate", "--out", out,
                           "--classes", "BPSK", "--snr", "0", "--per-cell", "1", "--lengths", "128"],
                          cwd=ROOT, capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"})
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert b"wrote " + out in proc.stdout          # the name printed back as given
    with h5py.File(out, "r") as f:
        command = f.attrs["command_line"]
    command = command.decode() if isinstance(command, bytes) else command
    assert "out\\xff.h5" in command


def test_evaluate_and_its_card_take_a_dataset_path_that_is_not_utf8(tiny_model_dir, tiny_dataset, tmp_path, capfd):
    """The figures' titles and MODEL_CARD.md name the dataset; with a byte 0xff in its name
    matplotlib's FreeType refused the title (a TypeError traceback) and the card's write was a
    UnicodeEncodeError one. (capfd: capsys's stdout is strict, so the command makes it print
    the byte as it came, which capsys cannot read back.)"""
    model_dir = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model_dir)
    data = Path(os.fsdecode(os.fsencode(tmp_path) + b"/data\xff.h5"))
    shutil.copy2(tiny_dataset, data)
    assert main(["evaluate", str(data), "--model-dir", str(model_dir), "--out", str(tmp_path / "ev"),
                 "--no-refiner", "--card", "--card-dir", str(tmp_path / "card")]) == 0
    capfd.readouterr()
    assert (tmp_path / "ev" / "accuracy_vs_snr.png").stat().st_size > 1000
    assert "data\\xff.h5" in (tmp_path / "card" / "MODEL_CARD.md").read_text(encoding="utf-8")


def test_dataset_inspect_draws_the_sheet_of_a_file_whose_name_is_not_utf8(tiny_dataset, tmp_path, capfd):
    """The sheet's title names the file: matplotlib refused its byte 0xff (a TypeError traceback)."""
    data = Path(os.fsdecode(os.fsencode(tmp_path) + b"/data\xff.h5"))
    shutil.copy2(tiny_dataset, data)
    assert main(["dataset", "inspect", str(data), "--png", str(tmp_path / "sheet.png")]) == 0
    capfd.readouterr()
    assert (tmp_path / "sheet.png").stat().st_size > 1000


# --- 4. serve --check-config finds what serve refuses ------------------------------------------

@pytest.mark.parametrize("options, why", [
    (["--metrics", "192.0.2.1:9108"], "metrics.listen 192.0.2.1:9108: Cannot assign requested address"),
    (["--backend", "onnxruntime", "--precision", "fp16"], "onnxruntime"),
    (["--device", "cuda:99"], "cuda:99"),
])
def test_check_config_refuses_what_the_start_refuses(options, why, tiny_model_dir, capsys):
    """Each passed `serve --check-config` (exit 0) and stopped `serve` (exit 2) after its start
    had begun: a metrics host that is no address here, a precision the backend cannot run, a
    GPU that is not there."""
    assert main(["serve", "--check-config", "--model-dir", str(tiny_model_dir), *options]) == 2
    err = capsys.readouterr().err
    assert why in err and "Traceback" not in err and err.count("\n") == 1


def test_check_config_says_which_backend_the_start_would_choose(tiny_model_dir, capsys):
    assert main(["serve", "--check-config", "--model-dir", str(tiny_model_dir), "--backend", "torch",
                 "--device", "cpu", "--metrics", "127.0.0.1:0"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["metrics"]["listen"] == "127.0.0.1:0"
    assert "backend: torch fp32 on cpu (requested: torch on cpu chosen)" in err


# --- 5. smaller ones ------------------------------------------------------------------------

def test_dataset_generate_refuses_an_out_that_ends_in_a_slash(tmp_path, capsys):
    """`dataset generate --out o/newdir/` wrote a file named newdir."""
    assert main(["dataset", "generate", "--out", f"{tmp_path}/newdir/", "--classes", "BPSK", "--snr", "0",
                 "--per-cell", "1", "--lengths", "128"]) == 2
    err = capsys.readouterr().err
    assert "newdir/ names a folder" in err and err.count("\n") == 1
    assert not (tmp_path / "newdir").exists()


def test_simulate_says_a_count_of_0_is_no_limit(capsys):
    """`simulate --count 0` runs until Ctrl-C: the default, now said in --help."""
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    assert "default 0: no limit" in " ".join(capsys.readouterr().out.split())


@pytest.mark.skipif(__import__("importlib").util.find_spec("tensorrt") is not None,
                    reason="tensorrt imports here: it reads the file itself")
def test_engine_inspect_of_a_file_that_is_no_engine_is_an_input_error(tmp_path, capsys):
    """`engine inspect c.npy` printed its size and an empty record, exit 0."""
    path = tmp_path / "c.npy"
    np.save(path, np.zeros(8, np.complex64))
    assert main(["engine", "inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not known as an engine: no build record c.json" in err and err.count("\n") == 1


def test_engine_inspect_of_a_file_tensorrt_cannot_load_is_an_input_error(tmp_path, monkeypatch, capsys):
    """Where TensorRT imports, a file it cannot deserialize (None, as TensorRT answers) was a
    BackendError: "internal error", exit 1. TensorRT is stood in for by a module that refuses
    every file (the real one runs nowhere here)."""
    trt = types.ModuleType("tensorrt")

    class Logger:
        WARNING = 2

        def __init__(self, severity: int) -> None:
            self.severity = severity

    class Runtime:
        def __init__(self, logger: Logger) -> None:
            self.DLA_core = -1

        def deserialize_cuda_engine(self, data: bytes) -> None:
            return None

    trt.Logger, trt.Runtime = Logger, Runtime
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    path = tmp_path / "c.npy"
    np.save(path, np.zeros(8, np.complex64))
    assert main(["engine", "inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert "TensorRT cannot load the engine" in err and "internal error" not in err
