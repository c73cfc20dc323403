"""Burst-for-burst comparison of two evaluations (rfclassify.model.paired, benchmarks/paired_compare.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmark_modules import load_benchmark
from rfclassify._exceptions import ConfigError
from rfclassify.model.evaluate import accuracy_summary
from rfclassify.model.paired import load_predictions, paired_difference, save_predictions

DATASET = {"file": "test.h5", "seed": 777, "n_bursts": 0}


def _outcomes(seed: int, n: int = 4000) -> tuple[dict, dict]:
    """Two evaluations of one made-up dataset: B is right on about 3 % more bursts at >= 10 dB."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 28, n)
    snr = rng.choice(np.arange(-20.0, 31.0, 2.0), n) + rng.uniform(-0.9, 0.9, n)
    bucket = rng.choice([256, 1024], n)
    right_a = rng.random(n) < np.clip(0.5 + snr / 60, 0.05, 0.95)
    right_b = right_a.copy()
    flip = (rng.random(n) < 0.06) & (snr >= 10)            # only one of them right, most often B
    right_b[flip] = rng.random(flip.sum()) < 0.75
    right_a[flip] = ~right_b[flip]
    pred_a = np.where(right_a, truth, (truth + 1) % 28)
    pred_b = np.where(right_b, truth, (truth + 2) % 28)
    pred_a[:5] = pred_b[5:8] = -1                           # rejected bursts
    key = "test.h5|seed=777|n=%d" % n
    a = {"truth": truth, "pred": pred_a, "snr_db": snr.astype(np.float32), "bucket": bucket, "dataset": key}
    return a, {**a, "pred": pred_b}


def test_the_difference_is_that_of_evaluate_s_own_numbers():
    a, b = _outcomes(1)
    diff = paired_difference(a, b)
    # evaluate leaves out bursts it rejected; both sides here lose the same ones
    ok = (a["pred"] >= 0) & (b["pred"] >= 0)
    snr = a["snr_db"][ok].astype(np.float64)
    sa = accuracy_summary(a["truth"][ok], a["pred"][ok], snr)
    sb = accuracy_summary(b["truth"][ok], b["pred"][ok], snr)
    assert diff["overall"]["n"] == ok.sum() == 4000 - 8
    overall = diff["overall"]
    assert overall["mean_over_snr"] == pytest.approx(sb["mean_accuracy_over_snr"] - sa["mean_accuracy_over_snr"])
    assert overall["snr_ge_10db"] == pytest.approx(sb["accuracy_snr_ge_10db"] - sa["accuracy_snr_ge_10db"])
    assert diff["overall"]["snr_ge_10db"] > 0
    for k in ("256", "1024"):
        m = ok & (a["bucket"] == int(k))
        ka = accuracy_summary(a["truth"][m], a["pred"][m], a["snr_db"][m].astype(np.float64))
        kb = accuracy_summary(b["truth"][m], b["pred"][m], a["snr_db"][m].astype(np.float64))
        expected = kb["accuracy_snr_ge_10db"] - ka["accuracy_snr_ge_10db"]
        assert diff["per_bucket"][k]["snr_ge_10db"] == pytest.approx(expected)
    right_a = a["pred"][ok] == a["truth"][ok]
    right_b = b["pred"][ok] == b["truth"][ok]
    assert diff["overall"]["b_only_right"] == np.sum(right_b & ~right_a)
    assert diff["overall"]["a_only_right"] == np.sum(right_a & ~right_b)


def test_the_standard_error_is_the_paired_one():
    a, b = _outcomes(2)
    diff = paired_difference(a, b)["overall"]
    ok = (a["pred"] >= 0) & (b["pred"] >= 0)
    d = (b["pred"] == b["truth"]).astype(float)[ok] - (a["pred"] == a["truth"])[ok]
    high = a["snr_db"][ok] >= 10
    assert diff["snr_ge_10db_se"] == pytest.approx(d[high].std(ddof=1) / math.sqrt(high.sum()))
    # far below the unpaired error of either accuracy, since few bursts flip
    p = np.mean((a["pred"] == a["truth"])[ok][high])
    assert diff["snr_ge_10db_se"] < 0.7 * math.sqrt(p * (1 - p) / high.sum())
    # below 10 dB nothing flips: those bins add no variance to the mean over SNR
    assert diff["mean_over_snr_se"] == pytest.approx(
        math.sqrt(sum(np.var(d[np.round(a["snr_db"][ok] / 2) * 2 == c], ddof=1) / np.sum(
            np.round(a["snr_db"][ok] / 2) * 2 == c) for c in np.arange(10.0, 31.0, 2.0))) / 26)


def test_identical_evaluations_differ_by_nothing():
    a, _ = _outcomes(3)
    s = paired_difference(a, a)["overall"]
    assert s["mean_over_snr"] == s["snr_ge_10db"] == s["mean_over_snr_se"] == s["snr_ge_10db_se"] == 0.0
    assert s["b_only_right"] == s["a_only_right"] == 0


def test_evaluations_of_different_datasets_are_refused():
    a, b = _outcomes(4)
    with pytest.raises(ConfigError, match="different datasets"):
        paired_difference(a, {**b, "dataset": "other.h5|seed=1|n=4000"})
    shuffled = {**b, "truth": np.roll(b["truth"], 1)}
    with pytest.raises(ConfigError, match="not the same dataset"):
        paired_difference(a, shuffled)


def test_predictions_round_trip_and_bad_files(tmp_path):
    a, _ = _outcomes(5, n=50)
    save_predictions(tmp_path / "predictions.npz", {**DATASET, "n_bursts": 50}, a["truth"], a["pred"],
                     a["snr_db"], a["bucket"])
    back = load_predictions(tmp_path)            # an evaluation directory reads its predictions.npz
    for k in ("truth", "pred", "snr_db", "bucket"):
        assert np.array_equal(back[k], a[k])
    assert back["dataset"] == "test.h5|seed=777|n=50"
    assert "probabilities" not in back and "snr_estimate_db" not in back   # an older file's fields only
    probs = np.random.default_rng(5).dirichlet(np.ones(28), size=50)
    save_predictions(tmp_path / "with.npz", {**DATASET, "n_bursts": 50}, a["truth"], a["pred"],
                     a["snr_db"], a["bucket"], probs, a["snr_db"] + 1.0)
    back = load_predictions(tmp_path / "with.npz")
    assert back["probabilities"].dtype == np.float16 and back["probabilities"].shape == (50, 28)
    assert np.allclose(back["probabilities"], probs, atol=1e-3)
    assert np.allclose(back["snr_estimate_db"], a["snr_db"] + 1.0)
    with pytest.raises(ConfigError, match="no such predictions file"):
        load_predictions(tmp_path / "nowhere")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="not a predictions file"):
        load_predictions(tmp_path / "junk.npz")
    np.savez(tmp_path / "other.npz", truth=a["truth"])
    with pytest.raises(ConfigError, match="not a predictions file"):
        load_predictions(tmp_path / "other.npz")


def test_evaluate_predictions_compare_across_backends(tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("matplotlib")
    from rfclassify.cli import main

    data = tmp_path / "tiny.h5"
    assert main(["dataset", "generate", "--out", str(data), "--snr=-10,20", "--per-cell", "2",
                 "--classes", "BPSK,QPSK,FM,NOISE", "--lengths", "256,1500", "--seed", "3"]) == 0
    for backend in ("onnxruntime", "torch"):
        assert main(["evaluate", str(data), "--model-dir", str(tiny_model_dir), "--backend", backend,
                     "--out", str(tmp_path / backend), "--predictions"]) == 0
    assert "predictions.npz" in capsys.readouterr().out
    compare = load_benchmark("paired_compare")
    # the two backends run the same network: not one burst differs
    assert compare.main([str(tmp_path / "onnxruntime"), str(tmp_path / "torch"), "--names", "ort", "torch",
                         "--json", str(tmp_path / "d.json")]) == 0
    out = capsys.readouterr().out
    assert "torch - ort on tiny.h5|seed=3|n=16" in out and "+0.00 +- 0.00" in out
    # another dataset's evaluation: a clear refusal, no traceback
    other = tmp_path / "other.h5"
    assert main(["dataset", "generate", "--out", str(other), "--snr=-10,20", "--per-cell", "2",
                 "--classes", "BPSK,QPSK,FM,NOISE", "--lengths", "256,1500", "--seed", "4"]) == 0
    assert main(["evaluate", str(other), "--model-dir", str(tiny_model_dir), "--backend", "onnxruntime",
                 "--out", str(tmp_path / "other"), "--predictions"]) == 0
    capsys.readouterr()
    assert compare.main([str(tmp_path / "onnxruntime"), str(tmp_path / "other")]) == 2
    assert "different datasets" in capsys.readouterr().err
