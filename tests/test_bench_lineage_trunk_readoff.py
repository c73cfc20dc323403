"""benchmarks/lineage_trunk_readoff.py: the train arguments it builds read a checkpoint's live
weights or its weight average off without a step, with the run's own recipe; it refuses an
average the checkpoint lacks; its entries name the weights and append once only."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from benchmark_modules import load_benchmark  # noqa: E402
from rfclassify._exceptions import ConfigError  # noqa: E402
from rfclassify.cli import main  # noqa: E402

ro = load_benchmark("lineage_trunk_readoff")

TINY = ["--workers", "0", "--batch-size", "4", "--buckets", "128", "--val-per-bucket", "4", "--device", "cpu",
        "--schedule", "wsd", "--warmup-steps", "0", "--lr", "0.01"]


def _weights(model_dir):
    return torch.load(model_dir / "model.pt", weights_only=True)


def _same(a, b):
    return all(torch.equal(a[k], b[k]) for k in b if b[k].is_floating_point())


def test_the_readoff_arguments_write_the_live_weights_or_the_average_untrained(tmp_path):
    trunk = tmp_path / "trunk"
    overrides = {"dc_offset_db_range": [-40, 6]}
    assert main(["train", "--out", str(trunk), "--steps", "4", "--ema-half-life-steps", "2",
                 "--channel-overrides", json.dumps(overrides), *TINY]) == 0
    path = trunk / "checkpoint.pt"
    ck = torch.load(path, weights_only=False)
    assert ck["step"] == 4 and ck["ema"]
    for average, expected in ((False, ck["model"]), (True, ck["ema"]["weights"])):
        args = ro.readoff_args(path, ck, tmp_path / f"readoff_{average}", average)
        assert args[args.index("--steps") + 1] == str(ck["step"])
        assert json.loads(args[args.index("--channel-overrides") + 1]) == overrides
        # the tiny run's buckets and validation (argparse keeps an option's last value)
        assert main([*args, "--workers", "0", "--buckets", "128", "--val-per-bucket", "4"]) == 0
        assert _same(_weights(tmp_path / f"readoff_{average}"), expected)
    assert not _same(ck["model"], ck["ema"]["weights"])  # the two read-offs are different weights


def test_an_average_the_checkpoint_lacks_or_a_step_0_checkpoint_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="keeps no weight average"):
        ro.readoff_args(tmp_path / "c.pt", {"step": 5, "config": {}, "ema": None}, tmp_path / "o", True)
    with pytest.raises(ConfigError, match="step 0"):
        ro.readoff_args(tmp_path / "c.pt", {"step": 0, "config": {}}, tmp_path / "o", False)


def test_entries_name_their_weights_and_append_once(tmp_path):
    ck = {"step": 88371, "ema": {"half_life_steps": 5000, "since_step": 88371}}
    averaged = {"model_id": "a",
                "extra": {"training": {"weight_average": {"half_life_steps": 5000, "since_step": 88371}}}}
    live = {"model_id": "l", "extra": {"training": {}}}
    paired = {"paired_vs_shipped_network": {"mean_over_snr": [-3.9, 0.1]}}
    e_avg = ro.readoff_entry(51, ck, averaged, {"mean_over_snr": 55.0}, paired)
    e_live = ro.readoff_entry(51, ck, live, {"mean_over_snr": 53.7}, paired)
    assert e_avg["weights"] == "average (half-life 5000 steps since step 88371)" and e_live["weights"] == "live"
    assert e_avg["step"] == 88371 and e_avg["paired_vs_shipped_network"] == paired["paired_vs_shipped_network"]
    log = tmp_path / "trunk_readoffs.json"
    log.write_text(json.dumps({"about": "x"}))
    ro.log_entries(None, [e_live], key="readoffs")  # no log given: nothing written
    assert "readoffs" not in json.loads(log.read_text())
    ro.log_entries(log, [e_live, e_avg], key="readoffs")
    assert [r["model_id"] for r in json.loads(log.read_text())["readoffs"]] == ["l", "a"]
    with pytest.raises(ConfigError, match="already"):
        ro.log_entries(log, [e_avg], key="readoffs")


def test_a_pairing_is_keyed_by_the_model_the_evaluation_measured(tmp_path):
    ev = tmp_path / "eval_branch_alone"
    ev.mkdir()
    assert ro.evaluated_model(ev) == "eval_branch_alone"  # no evaluation.json: the folder's name
    (ev / "evaluation.json").write_text(json.dumps({"run": {"model": "rfc-resnet-20261206-f15e2386"}}))
    assert ro.evaluated_model(ev) == "rfc-resnet-20261206-f15e2386"
