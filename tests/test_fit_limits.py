"""calibrate, fit-refiner, fit-sequence and keys at the edges of what a user hands them
(sixty-sixth session's review): each was a traceback, a half-written model or a silent risk."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

from rfclassify.cli import main

SHIPPED = Path(__file__).resolve().parents[1] / "models"


def test_calibrate_refuses_a_damaged_graph_before_replacing_any_int8_file(tmp_path, capsys):
    """A damaged static graph failed after both INT8 graphs were rewritten and before model.json
    was, which then refused them: a model that served INT8 no longer could."""
    pytest.importorskip("onnxruntime")
    from rfclassify._digest import file_sha256

    model = tmp_path / "m"
    shutil.copytree(SHIPPED, model, ignore=shutil.ignore_patterns("eval", "*.png"))
    graph = model / "static" / "model_L128.onnx"
    graph.write_bytes(graph.read_bytes()[:1000])
    kept = {n: file_sha256(model / n) for n in ("model_int8.onnx", "model_trt_int8.onnx", "model.json")}
    assert main(["calibrate", "--model-dir", str(model), "--bursts", "8"]) == 2
    err = capsys.readouterr().err
    # since the seventy-first session the graph's digest, which model.json records, refuses it
    # first (rfclassify.model.provenance); before, its read did ("not a readable ONNX graph")
    assert "static/model_L128.onnx is not the file" in err and "model.json records" in err, err
    assert "Traceback" not in err
    assert kept == {n: file_sha256(model / n) for n in kept}


def test_an_array_where_an_archive_belongs_is_one_line(tmp_path, capsys):
    pytest.importorskip("torch")
    np.save(tmp_path / "arr.npy", np.arange(5))
    for option in ("--examples", "--sequence-net"):
        assert main(["fit-refiner", "--model-dir", str(SHIPPED), option, str(tmp_path / "arr.npy")]) == 2
        err = capsys.readouterr().err
        assert "an array, not an .npz archive of arrays" in err and "Traceback" not in err, option


def test_an_evaluation_set_past_the_machines_memory_is_refused_before_it_is_made(tmp_path, capsys):
    pytest.importorskip("torch")
    assert main(["fit-sequence", "--model-dir", str(SHIPPED), "--out", str(tmp_path / "s.npz"), "--bursts", "24",
                 "--workers", "0", "--eval-per-length", "2147483647"]) == 1
    assert "ask for a smaller --eval-per-length" in capsys.readouterr().err


def test_keys_force_leaves_the_secret_key_private(tmp_path, capsys):
    """A replaced secret key kept its old mode (umask only shapes new files) though the command
    said 0600."""
    assert main(["keys", "--dir", str(tmp_path)]) == 0
    secret = next(tmp_path.glob("*.key_secret"))
    secret.chmod(0o644)
    assert main(["keys", "--dir", str(tmp_path), "--force"]) == 0
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
