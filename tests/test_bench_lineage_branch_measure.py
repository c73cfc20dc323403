"""benchmarks/lineage_branch_measure.py: a branch is served with the shipped model's refiners
(entries and files, the light one too) and refused when the labels differ or there is no
refiner to lend; an entry is built from the branch's record and appended once only, with
its trunk step and the two models' tables by SNR band and by class."""

from __future__ import annotations

import json

import pytest

from benchmark_modules import load_benchmark
from rfclassify._exceptions import ConfigError

lbm = load_benchmark("lineage_branch_measure")

LABELS = ["BPSK", "QPSK", "8PSK"]


def _model(path, refiner=None, labels=LABELS, **extra):
    path.mkdir()
    meta = {"model_id": path.name, "labels": labels, "temperature": 0.8, "refiner": refiner or {},
            "low_order_refiner": {}, "extra": extra}
    (path / "model.json").write_text(json.dumps(meta))
    (path / "model.pt").write_bytes(b"weights of " + path.name.encode())
    return path


def test_the_branch_serves_the_source_refiners_with_their_files(tmp_path):
    refiner = {"file": "refiner.npz", "classes": ["8PSK"], "light": {"file": "refiner_light.npz"}}
    src = _model(tmp_path / "shipped", refiner)
    (src / "refiner.npz").write_bytes(b"full")
    (src / "refiner_light.npz").write_bytes(b"light")
    branch = _model(tmp_path / "branch")
    out = lbm.serve_with_refiners(branch, src, tmp_path / "served")
    meta = json.loads((out / "model.json").read_text())
    assert meta["refiner"] == refiner and meta["model_id"] == "branch"
    assert (out / "refiner.npz").read_bytes() == b"full" and (out / "refiner_light.npz").read_bytes() == b"light"
    assert (out / "model.pt").read_bytes() == b"weights of branch"
    assert json.loads((branch / "model.json").read_text())["refiner"] == {}  # the branch itself untouched


def test_a_refiner_for_other_labels_or_none_is_refused(tmp_path):
    src = _model(tmp_path / "shipped", {"file": "refiner.npz"}, labels=LABELS[::-1])
    with pytest.raises(ConfigError, match="different labels"):
        lbm.serve_with_refiners(_model(tmp_path / "branch"), src, tmp_path / "served")
    with pytest.raises(ConfigError, match="no refiner"):
        lbm.serve_with_refiners(tmp_path / "branch", _model(tmp_path / "bare"), tmp_path / "served")


def test_an_entry_is_built_from_the_branch_record_and_appended_once(tmp_path):
    training = {"steps": 10, "train_s": 5.0, "device_name": "NVIDIA H100", "examples_fresh": 40,
                "examples_reused": 0,
                "commands": ["rfclassify train a", "rfclassify train --steps 10 --decay-steps 4 --seed 3"]}
    meta = json.loads(_model(tmp_path / "b1", training=training,
                             validation_accuracy={"1024": 0.5576}).joinpath("model.json").read_text())
    alone = {"big1024": {"mean_over_snr": 56.4, "snr_ge_10db": 83.8}, "paired": {"mean_over_snr": [-1.2, 0.1]}}
    served = {"big1024": {"mean_over_snr": 61.5, "snr_ge_10db": 93.8}, "paired": {"mean_over_snr": [-0.9, 0.1]}}
    tables = {"big1024_by_snr_band_pct_shipped_branch": {"0..9": [60.0, 61.0]}}
    entry = lbm.branch_entry(50, meta, alone, served, tables)
    assert entry["session"] == 50 and entry["model_id"] == "b1" and entry["steps"] == 10
    assert (entry["trunk_step"], entry["decay_steps"]) == (6, 4)
    assert entry["big1024_by_snr_band_pct_shipped_branch"] == {"0..9": [60.0, 61.0]}
    assert entry["commands"] == training["commands"] and entry["validation_accuracy_pct"] == {"1024": 55.8}
    assert entry["big1024_paired"] == alone["paired"]
    assert entry["served_big1024"]["shipped_refiners_unchanged"] == {**served["big1024"],
                                                                      "paired_vs_shipped_served": served["paired"]}
    log = tmp_path / "branches.json"
    log.write_text(json.dumps({"what": "x", "branches": []}))
    lbm.append_entry(log, entry)
    assert [b["model_id"] for b in json.loads(log.read_text())["branches"]] == ["b1"]
    with pytest.raises(ConfigError, match="already"):
        lbm.append_entry(log, entry)


def test_a_run_without_decay_steps_has_no_split():
    assert lbm.decay_split("rfclassify train --steps 10 --seed 3", 10) is None


def test_the_tables_average_each_band_and_pair_the_classes():
    def ev(accs, cls):
        return {"overall": {"per_snr": [{"snr_db": s, "n": 100, "accuracy": a} for s, a in accs.items()]},
                "per_class_snr_ge_10db": cls}
    shipped = ev({-20: 0.0, -12: 0.1, -10: 0.3, 0: 0.5, 8: 0.7, 10: 0.8, 20: 0.9, 30: 1.0},
                 {"BPSK": 0.99, "8PSK": 0.5})
    branch = ev({-20: 0.1, -12: 0.1, -10: 0.2, 0: 0.6, 8: 0.7, 10: 0.85, 20: 0.9, 30: 0.9},
                {"8PSK": 0.25, "BPSK": 1.0})
    t = lbm.shipped_and_branch_tables(shipped, branch)
    assert t["big1024_by_snr_band_pct_shipped_branch"] == {
        "-20..-11": [5.0, 10.0], "-10..-1": [30.0, 20.0], "0..9": [60.0, 65.0],
        "10..19": [80.0, 85.0], "20..30": [95.0, 90.0]}
    assert t["big1024_by_class_snr_ge_10db_pct_shipped_branch"] == {"BPSK": [99.0, 100.0], "8PSK": [50.0, 25.0]}
