"""Training: data recipe, augmentation, schedule, the worker pool and a tiny end-to-end run."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shlex
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rfclassify.cli import main  # noqa: E402
from rfclassify.labels import LABELS  # noqa: E402
from rfclassify.model import training_data as td  # noqa: E402
from rfclassify.model.meta import ModelMeta  # noqa: E402
from rfclassify.model.network import count_parameters, load_trained  # noqa: E402
from rfclassify.model.train import TrainConfig, augment, lr_at, lr_for_step  # noqa: E402


def test_make_batch_is_normalized_and_pads_short_bursts():
    recipe = td.DataRecipe(buckets_samples=(128, 256), batch_size=16, short_fraction=0.5)
    b = td.make_batch(recipe, 128, 16, np.random.default_rng(0))
    assert b["x"].shape == (16, 2, 1, 128) and b["x"].dtype == np.float32
    assert b["label"].min() >= 0 and b["label"].max() < len(LABELS)
    power = (b["x"][:, :, 0, :] ** 2).sum(axis=1)  # (16, 128)
    full, short = power[:8], power[8:]
    np.testing.assert_allclose(full.mean(axis=1), 1.0, rtol=1e-3)
    n = int((short[0] > 0).sum())  # one short length per batch
    assert 64 <= n < 128 and np.all(short[:, n:] == 0)
    np.testing.assert_allclose(short[:, :n].mean(axis=1), 1.0, rtol=1e-3)


def test_bucket_probabilities_favour_1024_time():
    recipe = td.DataRecipe()
    p = recipe.bucket_probabilities()
    time_share = p * np.array(recipe.buckets_samples)
    time_share /= time_share.sum()
    assert time_share.argmax() == recipe.buckets_samples.index(1024)
    assert (p > 0).all() and math.isclose(p.sum(), 1.0)


def test_augment_is_a_unitary_phase_rotation_or_conjugation():
    x = torch.randn(64, 2, 1, 32)
    y = augment(x, torch.Generator().manual_seed(0))
    mag = lambda t: t[:, 0] ** 2 + t[:, 1] ** 2  # noqa: E731
    assert torch.allclose(mag(x), mag(y), atol=1e-5)
    assert not torch.allclose(x, y)


def test_lr_schedule_warms_up_and_anneals():
    cfg = TrainConfig(out_dir="x", steps=100, lr=1e-3)
    assert lr_at(0.0, cfg) < 1e-4
    assert lr_at(cfg.warmup_fraction, cfg) == pytest.approx(1e-3)
    assert lr_at(1.0, cfg) == pytest.approx(cfg.final_lr_fraction * 1e-3)
    assert lr_at(0.5, cfg) > lr_at(0.9, cfg)


def test_wsd_schedule_warms_up_holds_and_a_branch_decays_from_where_the_trunk_is():
    trunk = TrainConfig(out_dir="x", schedule="wsd", steps=10_000, lr=2e-3, warmup_steps=100)
    assert lr_for_step(0, trunk) == pytest.approx(2e-5)   # 1 % of the peak, as the cosine's warmup
    assert lr_for_step(50, trunk) == pytest.approx(1e-3)
    assert lr_for_step(100, trunk) == lr_for_step(9_999, trunk) == 2e-3  # no decay: the peak held
    # a branch from the trunk's step 4,000 decays over 1,000 steps, starting at the trunk's rate
    branch = TrainConfig(out_dir="x", schedule="wsd", steps=5_000, decay_steps=1_000, lr=2e-3, warmup_steps=100)
    assert lr_for_step(4_000, branch) == lr_for_step(4_000, trunk) == 2e-3
    assert lr_for_step(4_500, branch) == pytest.approx(2e-3 * (1 - 0.99 * 0.5))
    assert lr_for_step(5_000, branch) == pytest.approx(branch.final_lr_fraction * 2e-3)
    assert lr_for_step(4_200, branch) > lr_for_step(4_400, branch) > lr_for_step(4_600, branch)


@pytest.mark.parametrize("kwargs, message", [
    ({"schedule": "wsd", "time_budget_s": 60}, "counted in steps"),
    ({"schedule": "wsd", "steps": 10, "time_budget_s": 60}, "counted in steps"),
    ({"schedule": "wsd", "steps": 10, "decay_steps": 11}, "--decay-steps within"),
    ({"schedule": "wsd", "steps": 10, "warmup_steps": -1}, "--warmup-steps must be"),
    ({"steps": 10, "decay_steps": 5}, "--schedule wsd only"),
    ({"steps": 10, "schedule": "step"}, "--schedule must be one of"),
    ({"steps": 10, "stop_after_s": 0}, "--stop-after-s must be > 0"),
    ({"steps": 10, "checkpoint_every_s": -1}, "--checkpoint-every-s must be >= 0"),
    # a misspelt key was kept and the default network trained in its place
    ({"steps": 10, "arch": {"head_channel": 64}}, "--arch has no key 'head_channel'"),
    ({"steps": 10, "ema_half_life_steps": -1}, "--ema-half-life-steps must be >= 0"),
    # an IndexError and a ZeroDivisionError inside the run before the fifty-eighth session
    ({"steps": 10, "val_per_bucket": 0}, "--val-per-bucket and --log-every must be >= 1"),
    ({"steps": 10, "log_every": 0}, "--val-per-bucket and --log-every must be >= 1"),
    ({"steps": 10, "buckets_samples": (128, 10 ** 30)}, "length buckets must be even and 8..1048576"),
])
def test_schedule_settings_are_checked_before_any_training(kwargs, message):
    from rfclassify._exceptions import ConfigError

    with pytest.raises(ConfigError, match=message):
        TrainConfig(out_dir="x", **kwargs)


def test_stop_after_s_pauses_with_a_checkpoint_and_a_decay_branch_finishes_it(tmp_path, capsys):
    """--stop-after-s ends the invocation with checkpoint.pt, the log and no model; --resume
    with a decay branch then trains to its end on the wsd schedule and writes the model,
    recording every command of the chain."""
    out, branch = tmp_path / "trunk", tmp_path / "branch"
    tiny = ["--workers", "0", "--batch-size", "4", "--buckets", "128", "--val-per-bucket", "4", "--device", "cpu",
            "--log-every", "1", "--schedule", "wsd", "--warmup-steps", "0", "--lr", "0.002"]
    assert main(["train", "--out", str(out), "--steps", "1000", "--stop-after-s", "1e-9", *tiny]) == 0
    assert "paused: step 0, 0.0% of the schedule" in capsys.readouterr().out
    assert main(["train", "--out", str(out), "--steps", "1000", "--stop-after-s", "1e-9", "--seed", "1", *tiny,
                 "--resume", str(out / "checkpoint.pt")]) == 0
    assert "warning" not in capsys.readouterr().err   # a sitting with a seed of its own
    assert (out / "checkpoint.pt").is_file() and not (out / "model.json").exists()
    paused = json.loads((out / "train_log.json").read_text())
    assert paused["paused_at_step"] == 0 and len(paused["commands"]) == 2 and paused["history"] == []
    assert not (out / "training_curves.png").exists()  # no step trained, nothing to plot
    assert main(["train", "--out", str(branch), "--steps", "3", "--decay-steps", "2", "--seed", "1", *tiny,
                 "--resume", str(out / "checkpoint.pt")]) == 0
    assert "the data starts again" in capsys.readouterr().err  # the last sitting's seed again: said
    training = ModelMeta.load(branch).extra["training"]
    assert training["steps"] == 3 and len(training["commands"]) == 3  # two sittings of the trunk, the branch
    lrs = [h["lr"] for h in json.loads((branch / "train_log.json").read_text())["history"]]
    assert lrs == pytest.approx([2e-3, 2e-3, 2e-3 * (1 - 0.99 * 0.5)])


def test_a_resumed_runs_first_rate_counts_only_its_own_examples(tmp_path, monkeypatch):
    """The first logged examples/s after --resume covers the bursts since the resume, not the
    checkpoint's whole count (a real resume on the H100 printed 2.8 M ex/s against ~50 k).
    Checked on the count each log line's rate divides (comparing the rates themselves failed on
    a loaded CI machine: a later step took seconds)."""
    from rfclassify.model import train as train_module

    tiny = ["--workers", "0", "--batch-size", "4", "--buckets", "128", "--val-per-bucket", "4", "--device", "cpu",
            "--log-every", "1"]
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--steps", "30", *tiny]) == 0
    real, counted = train_module._log_line, []

    def log_line(step, elapsed, opt, sums, counts, examples, last_examples, *rest):
        counted.append(examples["fresh"] + examples["reused"] - last_examples)
        return real(step, elapsed, opt, sums, counts, examples, last_examples, *rest)

    monkeypatch.setattr(train_module, "_log_line", log_line)
    assert main(["train", "--out", str(out), "--steps", "33", "--seed", "1", *tiny,
                 "--resume", str(out / "checkpoint.pt")]) == 0
    assert counted == [4, 4, 4]   # a batch a line; the checkpoint's 120 bursts counted in the first before


def test_a_resume_at_the_checkpoints_own_step_writes_its_weights_untrained(tmp_path, capsys):
    """--resume with --steps at the checkpoint's step trains nothing and writes the checkpoint's
    weights as a model: how a lineage's trunk is read off on a CPU without a decay branch."""
    tiny = ["--workers", "0", "--batch-size", "4", "--buckets", "128", "--val-per-bucket", "4", "--device", "cpu",
            "--log-every", "1", "--schedule", "wsd", "--warmup-steps", "0", "--lr", "0.002"]
    trunk, readoff = tmp_path / "trunk", tmp_path / "readoff"
    assert main(["train", "--out", str(trunk), "--steps", "3", *tiny]) == 0
    ck = torch.load(trunk / "checkpoint.pt", weights_only=False)
    assert main(["train", "--out", str(readoff), "--steps", "3", "--seed", "1", *tiny,
                 "--resume", str(trunk / "checkpoint.pt")]) == 0
    assert "done: " in capsys.readouterr().out
    written = torch.load(readoff / "model.pt", weights_only=True)
    assert written.keys() == ck["model"].keys()
    assert all(torch.equal(written[k], ck["model"][k]) for k in written)
    assert ModelMeta.load(readoff).extra["training"]["steps"] == 3


def test_a_weight_average_is_kept_across_resumes_and_written_as_the_model(tmp_path, capsys):
    """--ema-half-life-steps: the checkpoint keeps the average (continued by --resume, its start
    step kept), the finished model is the average rather than the live weights, and a resume at
    the checkpoint's own step reads the average off; a checkpoint without one starts it there."""
    tiny = ["--workers", "0", "--batch-size", "4", "--buckets", "128", "--val-per-bucket", "4", "--device", "cpu",
            "--log-every", "1", "--schedule", "wsd", "--warmup-steps", "0", "--lr", "0.01"]
    run, readoff, plain = tmp_path / "run", tmp_path / "readoff", tmp_path / "plain"

    def weights(d):
        return torch.load(d / "model.pt", weights_only=True)

    def same(a, b):
        return all(torch.equal(a[k], b[k]) for k in b if b[k].is_floating_point())

    assert main(["train", "--out", str(run), "--steps", "4", "--ema-half-life-steps", "2", *tiny]) == 0
    assert "the weight average starts at step 0" in capsys.readouterr().out
    ck = torch.load(run / "checkpoint.pt", weights_only=False)
    assert ck["ema"]["half_life_steps"] == 2 and ck["ema"]["since_step"] == 0
    assert same(weights(run), ck["ema"]["weights"]) and not same(weights(run), ck["model"])
    training = ModelMeta.load(run).extra["training"]
    assert training["weight_average"] == {"half_life_steps": 2, "since_step": 0}
    from rfclassify.model.card import CARD_MD, build_card

    build_card(run, card_dir=tmp_path / "card")
    assert "moving average of the trained weights (half-life 2 steps, kept since step 0)" in (
        tmp_path / "card" / CARD_MD).read_text()

    assert main(["train", "--out", str(readoff), "--steps", "4", "--ema-half-life-steps", "2", "--seed", "1",
                 *tiny, "--resume", str(run / "checkpoint.pt")]) == 0
    assert "starts at step" not in capsys.readouterr().out  # continued, not restarted
    assert same(weights(readoff), ck["ema"]["weights"])

    assert main(["train", "--out", str(run), "--steps", "6", "--ema-half-life-steps", "2", "--seed", "2",
                 *tiny, "--resume", str(run / "checkpoint.pt")]) == 0
    later = torch.load(run / "checkpoint.pt", weights_only=False)
    assert later["step"] == 6 and later["ema"]["since_step"] == 0
    assert not same(later["ema"]["weights"], ck["ema"]["weights"])

    assert main(["train", "--out", str(plain), "--steps", "2", *tiny]) == 0
    assert torch.load(plain / "checkpoint.pt", weights_only=False)["ema"] is None
    build_card(plain, card_dir=tmp_path / "plain_card")
    assert "moving average" not in (tmp_path / "plain_card" / CARD_MD).read_text()
    capsys.readouterr()
    assert main(["train", "--out", str(readoff), "--steps", "2", "--ema-half-life-steps", "2", "--seed", "1",
                 *tiny, "--resume", str(plain / "checkpoint.pt")]) == 0
    assert "the weight average starts at step 2" in capsys.readouterr().out
    assert same(weights(readoff), weights(plain))  # an average begun at the live weights


def test_train_needs_steps_or_budget():
    from rfclassify._exceptions import ConfigError

    with pytest.raises(ConfigError):
        TrainConfig(out_dir="x")


def test_worker_pool_delivers_batches_and_validation():
    recipe = td.DataRecipe(buckets_samples=(128, 256), batch_size=4)
    with td.SynthPool(recipe, seed=3, n_workers=1, val_per_bucket=4) as pool:
        batch = pool.get(timeout=60)
        val = pool.validation(timeout=60)
    assert batch is not None and batch["x"].shape[0] == 4 and batch["x"].shape[3] in (128, 256)
    assert sorted(val) == [128, 256] and val[256]["x"].shape == (4, 2, 1, 256)
    # validation comes from its own seed stream: the same whatever the worker count
    again = td.validation_set(recipe, 4, td.seed_streams(3, 5)[0])
    np.testing.assert_array_equal(again[128]["x"], val[128]["x"])


def test_tiny_training_run_writes_a_loadable_model(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train", "--out", str(out), "--steps", "4", "--workers", "0", "--batch-size", "8",
               "--buckets", "128", "256", "--val-per-bucket", "8", "--log-every", "2", "--device", "cpu"])
    assert rc == 0
    for name in ("model.pt", "model.json", "train_log.json", "training_curves.png", "checkpoint.pt"):
        assert (out / name).is_file(), name
    meta = ModelMeta.load(out)
    assert re.fullmatch(r"rfc-resnet-\d{8}-[0-9a-f]{8}", meta.model_id)
    assert meta.temperature > 0 and 0 <= meta.unknown_threshold < 1
    assert meta.buckets_samples == (128, 256)
    assert meta.extra["training"]["steps"] == 4
    log = json.loads((out / "train_log.json").read_text())
    assert len(log["history"]) == 2 and all(math.isfinite(h["loss"]) for h in log["history"])
    model, _ = load_trained(out)
    with torch.no_grad():
        logits, snr = model(torch.zeros(1, 2, 1, 128))
    assert logits.shape == (1, len(LABELS))
    assert "step      4" in capsys.readouterr().out
    # resume continues the step count
    rc = main(["train", "--out", str(out), "--steps", "6", "--workers", "0", "--batch-size", "8",
               "--buckets", "128", "256", "--val-per-bucket", "8", "--log-every", "2", "--device", "cpu",
               "--resume", str(out / "checkpoint.pt")])
    assert rc == 0 and ModelMeta.load(out).extra["training"]["steps"] == 6
    assert ModelMeta.load(out).extra["training"]["examples_fresh"] == 6 * 8  # counts carried over


def test_same_command_reproduces_the_weights(tmp_path):
    args = ["--steps", "2", "--workers", "0", "--batch-size", "4", "--buckets", "128",
            "--val-per-bucket", "4", "--device", "cpu", "--seed", "7"]
    ids = []
    for run in ("a", "b"):
        assert main(["train", "--out", str(tmp_path / run), *args]) == 0
        ids.append(ModelMeta.load(tmp_path / run).model_id)
    assert ids[0] == ids[1]


def test_init_from_starts_at_the_parent_weights_and_adds_up_the_lineage(tmp_path, capsys):
    from rfclassify._exceptions import ConfigError
    from rfclassify.model.card import render_markdown

    tiny = ["--workers", "0", "--batch-size", "4", "--buckets", "128", "--val-per-bucket", "4", "--device", "cpu"]
    assert main(["train", "--out", str(tmp_path / "a"), "--steps", "3", "--seed", "1", *tiny]) == 0
    parent, parent_meta = load_trained(tmp_path / "a")
    # a learning rate of ~0 keeps the weights where they started: the parent's, not a new draw
    assert main(["train", "--out", str(tmp_path / "b"), "--steps", "2", "--seed", "2", "--lr", "1e-20",
                 "--init-from", str(tmp_path / "a"), *tiny]) == 0
    child, child_meta = load_trained(tmp_path / "b")
    for name, w in parent.state_dict().items():
        if name.endswith("weight"):
            assert torch.allclose(w, child.state_dict()[name], atol=1e-6), name
    t = child_meta.extra["training"]
    assert t["init_from"] == parent_meta.model_id
    assert t["lineage"]["steps"] == 5 and t["lineage"]["examples"] == 5 * 4
    # a grandchild counts every run behind it, and the card says so
    assert main(["train", "--out", str(tmp_path / "c"), "--steps", "1", "--seed", "2",
                 "--init-from", str(tmp_path / "b"), *tiny]) == 0
    err = capsys.readouterr().err
    assert "--seed 2 is the parent model's seed" in err
    t = ModelMeta.load(tmp_path / "c").extra["training"]
    assert t["lineage"]["steps"] == 6 and t["lineage"]["examples"] == 6 * 4
    assert f"Warm-started from `{child_meta.model_id}`" in render_markdown({
        "model_id": "m", "labels": ["a"], "buckets_samples": [128], "min_samples": 64, "max_windows": 4,
        "unknown_threshold": 0.5, "temperature": 1.0, "parameters": 1, "flops_per_bucket": {}, "training": t})
    assert main(["train", "--out", str(tmp_path / "d"), "--steps", "1", "--init-from", str(tmp_path / "none"),
                 *tiny]) == 2
    assert "no model in" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="not both"):
        TrainConfig(out_dir="x", steps=1, init_from="a", resume="a/checkpoint.pt")
    # --arch with --init-from deepens the parent: its weights, added units at identity
    deeper = {"stages": [{**s, "dilations": [*s["dilations"], 1]} for s in parent.arch["stages"]]}
    assert main(["train", "--out", str(tmp_path / "g"), "--steps", "1", "--seed", "3", "--lr", "1e-20",
                 "--init-from", str(tmp_path / "a"), "--arch", json.dumps(deeper), *tiny]) == 0
    grown, grown_meta = load_trained(tmp_path / "g")
    assert [len(s["dilations"]) for s in grown_meta.arch["stages"]] == [len(s["dilations"]) + 1
                                                                         for s in parent.arch["stages"]]
    assert grown_meta.extra["training"]["grown_from_parameters"] == count_parameters(parent)
    assert f"deepened from its {count_parameters(parent):,} parameters" in render_markdown({
        "model_id": "m", "labels": ["a"], "buckets_samples": [128], "min_samples": 64, "max_windows": 4,
        "unknown_threshold": 0.5, "temperature": 1.0, "parameters": 1, "flops_per_bucket": {},
        "training": grown_meta.extra["training"]})
    state = grown.state_dict()
    for name, w in parent.state_dict().items():  # (BN running statistics move with any step)
        if name.endswith("weight"):
            assert torch.allclose(w, state[name], atol=1e-6), name
    added = [n for n in state if n not in parent.state_dict() and n.endswith("b.bn.weight")]
    assert len(added) == len(parent.arch["stages"])
    assert all(state[n].abs().max() < 1e-12 for n in added)  # each added unit still the identity
    wider = {"stages": [{**parent.arch["stages"][0], "channels": 40}, *parent.arch["stages"][1:]]}
    assert main(["train", "--out", str(tmp_path / "h"), "--steps", "1", "--seed", "3",
                 "--init-from", str(tmp_path / "a"), "--arch", json.dumps(wider), *tiny]) == 2
    assert "stage 0 channels: 32 -> 40" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="would not run on the DLA"):  # checked before the parent loads
        TrainConfig(out_dir="x", steps=1, init_from="a", arch={"stem_kernel": 40})


def test_the_dla_pre_check_of_a_warm_start_holds_the_parents_network_to_the_new_buckets(tmp_path):
    """--init-from trains the parent's network (with --arch on top), not the default one: a parent
    with a seventh stage (downsampling 64) cannot take a 96-sample bucket the default network can."""
    from rfclassify._exceptions import ConfigError
    from rfclassify.model.network import DEFAULT_ARCH

    seven = {**DEFAULT_ARCH, "stages": [*DEFAULT_ARCH["stages"], DEFAULT_ARCH["stages"][-1]]}
    ModelMeta(model_id="parent-7", arch=seven).save(tmp_path / "seven")
    ModelMeta(model_id="parent-6", arch=dict(DEFAULT_ARCH)).save(tmp_path / "six")
    for arch in ({}, {"product_stem": {"order2": 4, "order4": 0, "kernel": 15, "merge": "add"}}):
        with pytest.raises(ConfigError, match=r"bucket 96 is not a multiple of the backbone's downsampling \(64\)"):
            TrainConfig(out_dir="x", steps=1, init_from=str(tmp_path / "seven"), arch=arch, buckets_samples=(96,))
        TrainConfig(out_dir="x", steps=1, init_from=str(tmp_path / "six"), arch=arch, buckets_samples=(96,))
    TrainConfig(out_dir="x", steps=1, init_from=str(tmp_path / "seven"), buckets_samples=(128,))
    # an unreadable parent is train()'s to report (exit 2, "no model in"), not the pre-check's
    TrainConfig(out_dir="x", steps=1, init_from=str(tmp_path / "none"), buckets_samples=(96,))


def test_a_resumed_run_records_every_command_of_its_chain(tmp_path, monkeypatch):
    """A run continued by --resume (twice here) records its own command and, in order, the
    commands of the runs it continued, also from a checkpoint written before the chain was
    kept (its config names the run that wrote it); the card names them. A single run has no
    chain."""
    from rfclassify.model.card import _resumed

    out = tmp_path / "run"
    ck = str(out / "checkpoint.pt")
    tiny = ["--workers", "0", "--batch-size", "4", "--buckets", "128", "--val-per-bucket", "4", "--device", "cpu"]
    runs = [["train", "--out", str(out), "--steps", str(n), *tiny, *(["--resume", ck] if n > 1 else [])]
            for n in (1, 2, 3)]
    commands = ["rfclassify " + shlex.join(argv) for argv in runs]
    for n, argv in enumerate(runs):
        monkeypatch.setattr(sys, "argv", ["rfclassify", *argv])
        assert main(argv) == 0
        if n == 0:
            assert "commands" not in ModelMeta.load(out).extra["training"]
            old = torch.load(ck, weights_only=False)
            del old["commands"]                 # as a checkpoint of an earlier version
            torch.save(old, ck)
    training = ModelMeta.load(out).extra["training"]
    assert training["command"] == commands[2] and training["commands"] == commands
    assert _resumed(training["commands"]) == f"; it resumed `{commands[0]}`, then `{commands[1]}`"
    assert _resumed([commands[0]]) == _resumed(None) == ""
    assert _resumed(["", commands[1]]) == "; it resumed a run that recorded no command"


def test_resume_continues_the_network_the_checkpoint_holds(tmp_path, capsys):
    tiny = ["--workers", "0", "--batch-size", "4", "--buckets", "128", "--val-per-bucket", "4", "--device", "cpu"]
    deeper = {"stages": [{"channels": 32, "kernel": 3, "dilations": [1, 1]}, {"channels": 48, "kernel": 3,
                                                                            "dilations": [1]}]}
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--steps", "1", "--arch", json.dumps(deeper), *tiny]) == 0
    ck = str(out / "checkpoint.pt")
    # without --arch: the checkpoint's network, not the default one
    assert main(["train", "--out", str(out), "--steps", "2", "--resume", ck, *tiny]) == 0
    assert ModelMeta.load(out).arch["stages"] == deeper["stages"]
    assert ModelMeta.load(out).extra["training"]["steps"] == 2
    assert main(["train", "--out", str(out), "--steps", "3", "--resume", ck, "--arch", json.dumps(deeper), *tiny]) == 0
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--steps", "4", "--resume", ck, "--arch", '{"head_channels": 64}',
                 *tiny]) == 2
    assert "--arch differs from the network" in capsys.readouterr().err
    # a checkpoint written before the network was recorded in it: left out, --arch is the one its
    # run was given (the default network before); another one does not fit its weights
    old = torch.load(ck, weights_only=False)
    del old["arch"]
    torch.save(old, tmp_path / "old.pt")
    assert main(["train", "--out", str(out), "--steps", "4", "--resume", str(tmp_path / "old.pt"), *tiny]) == 0
    assert ModelMeta.load(out).arch["stages"] == deeper["stages"]
    assert main(["train", "--out", str(out), "--steps", "4", "--resume", str(tmp_path / "old.pt"),
                 "--arch", '{"head_channels": 64}', *tiny]) == 2
    assert "holds another network" in capsys.readouterr().err
    assert main(["train", "--out", str(out), "--steps", "4", "--resume", str(tmp_path / "none.pt"), *tiny]) == 2
    assert "no checkpoint at" in capsys.readouterr().err


def test_keep_dc_training_is_recorded_served_and_kept_on_resume(tmp_path, capsys):
    import dataclasses

    from rfclassify._exceptions import ConfigError
    from rfclassify.dsp.windows import normalize_batch
    from rfclassify.engine.classifier import Classifier
    from rfclassify.model.card import render_markdown

    tiny = ["--workers", "0", "--batch-size", "4", "--buckets", "128", "--val-per-bucket", "4", "--device", "cpu"]
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--steps", "1", "--normalization", "keep_dc", *tiny]) == 0
    meta = ModelMeta.load(out)
    assert meta.normalization == "keep_dc" and meta.bucket_policy.normalization == "keep_dc"
    assert json.loads((out / "model.json").read_text())["normalization"] == "keep_dc"
    log = json.loads((out / "train_log.json").read_text())
    assert log["training"]["recipe"]["normalization"] == "keep_dc"
    assert log["training"]["config"]["normalization"] == "keep_dc"
    clf = Classifier.load(out, backend="torch")
    assert clf.policy.normalization == "keep_dc"  # serving normalizes as the model was trained
    # a keep_dc recipe's batches are the keep_dc normalization of what a remove_dc recipe draws
    plain = td.DataRecipe(buckets_samples=(128,), batch_size=4, short_fraction=0.0)
    keep = dataclasses.replace(plain, normalization="keep_dc")
    a, b = td.make_batch(keep, 128, 4, np.random.default_rng(0)), td.make_batch(plain, 128, 4, np.random.default_rng(0))
    np.testing.assert_array_equal(a["label"], b["label"])
    iq_b = b["x"][:, 0, 0] + 1j * b["x"][:, 1, 0]
    mean_free = lambda x: x - x.mean(axis=-1, keepdims=True)  # noqa: E731
    iq_a = a["x"][:, 0, 0] + 1j * a["x"][:, 1, 0]
    np.testing.assert_allclose(mean_free(iq_a), mean_free(iq_b), atol=1e-4)  # same bursts, same scale
    assert np.abs(iq_b.mean(axis=1)).max() < 1e-4 and np.abs(iq_a.mean(axis=1)).max() > 0.1  # DC kept
    np.testing.assert_allclose(normalize_batch(iq_a, "keep_dc"), iq_a, atol=1e-4)  # already keep_dc-normalized
    with pytest.raises(ConfigError, match="unknown normalization"):
        td.DataRecipe(normalization="dc")
    assert "`keep_dc`" in render_markdown({
        "model_id": "m", "labels": ["a"], "buckets_samples": [128], "min_samples": 64, "max_windows": 4,
        "unknown_threshold": 0.5, "temperature": 1.0, "parameters": 1, "flops_per_bucket": {},
        "normalization": "keep_dc"})
    capsys.readouterr()
    # resuming with another normalization would train the network on inputs it never saw
    ck = str(out / "checkpoint.pt")
    assert main(["train", "--out", str(out), "--steps", "2", "--resume", ck, "--normalization", "remove_dc",
                 *tiny]) == 2
    err = capsys.readouterr().err
    assert "--normalization keep_dc" in err and len(err.strip().splitlines()) == 1
    # a checkpoint from before the option existed was trained with remove_dc
    old = torch.load(ck, weights_only=False)
    del old["config"]["normalization"]
    torch.save(old, tmp_path / "old.pt")
    assert main(["train", "--out", str(out), "--steps", "2", "--resume", str(tmp_path / "old.pt"),
                 "--normalization", "keep_dc", *tiny]) == 2
    assert "--normalization remove_dc" in capsys.readouterr().err
    assert ModelMeta.load(out).extra["training"]["steps"] == 1  # neither refused resume touched the model
    # left out, the normalization is the checkpoint's on --resume and the parent's on --init-from
    assert main(["train", "--out", str(out), "--steps", "2", "--resume", ck, *tiny]) == 0
    assert ModelMeta.load(out).normalization == "keep_dc"
    assert ModelMeta.load(out).extra["training"]["steps"] == 2
    child = tmp_path / "child"
    assert main(["train", "--out", str(child), "--steps", "1", "--init-from", str(out), "--seed", "3", *tiny]) == 0
    assert ModelMeta.load(child).normalization == "keep_dc"
    assert main(["train", "--out", str(tmp_path / "back"), "--steps", "1", "--init-from", str(out), "--seed", "3",
                 "--normalization", "remove_dc", *tiny]) == 0  # asked for: the fine-tune switches
    assert ModelMeta.load(tmp_path / "back").normalization == "remove_dc"


def test_channel_overrides_change_the_bursts_training_draws():
    from rfclassify.model.card import render_markdown

    # every burst gets a receiver DC offset 6 dB above its signal: with keep_dc its mean shows it
    strong = td.DataRecipe(buckets_samples=(256,), normalization="keep_dc", short_fraction=0.0,
                           channel_overrides={"p_dc_offset": 1.0, "dc_offset_db_range": [6, 6]})
    plain = td.DataRecipe(buckets_samples=(256,), normalization="keep_dc", short_fraction=0.0)
    assert strong.channel_config().dc_offset_db_range == (6.0, 6.0) and plain.channel_config().p_dc_offset == 0.4
    mean_dc = {}
    for name, recipe in (("strong", strong), ("plain", plain)):
        b = td.make_batch(recipe, 256, 64, np.random.default_rng(0))
        mean_dc[name] = float(np.median(np.abs(b["x"][:, 0, 0].mean(axis=1) + 1j * b["x"][:, 1, 0].mean(axis=1))))
    assert mean_dc["strong"] > 1.0 > 0.2 > mean_dc["plain"]
    assert "(changed: dc_offset_db_range [6, 6], p_dc_offset 1.0)" in render_markdown({
        "model_id": "m", "labels": ["a"], "buckets_samples": [256], "min_samples": 64, "max_windows": 4,
        "unknown_threshold": 0.5, "temperature": 1.0, "parameters": 1, "flops_per_bucket": {},
        "training": {"recipe": strong.to_dict()}})


def test_an_snr_focus_draws_its_share_in_its_band_and_leaves_validation_alone():
    from rfclassify._exceptions import ConfigError
    from rfclassify.model.card import render_markdown

    focus = td.DataRecipe(buckets_samples=(256,), short_fraction=0.0, snr_focus=(-8.0, 12.0, 0.6))
    plain = td.DataRecipe(buckets_samples=(256,), short_fraction=0.0)
    in_band = {}
    for name, recipe in (("focus", focus), ("plain", plain)):
        snr = td.make_batch(recipe, 256, 1000, np.random.default_rng(1))["snr_db"]
        assert snr.min() < -12.0 and snr.max() > 20.0  # the rest still spans the whole range
        in_band[name] = float(np.mean((snr >= -8.0) & (snr <= 12.0)))
    # uniform over -20..30: 20 of 50 dB in the band; focused: 0.6 + 0.4 * 0.4
    assert abs(in_band["plain"] - 0.40) < 0.05 and abs(in_band["focus"] - 0.76) < 0.05
    seed = td.seed_streams(5, 1)[0]
    v_focus, v_plain = td.validation_set(focus, 32, seed), td.validation_set(plain, 32, seed)
    for key in ("x", "label", "snr_db"):
        np.testing.assert_array_equal(v_focus[256][key], v_plain[256][key])
    assert "(60.0% of them drawn from -8..12 dB instead)" in render_markdown({
        "model_id": "m", "labels": ["a"], "buckets_samples": [256], "min_samples": 64, "max_windows": 4,
        "unknown_threshold": 0.5, "temperature": 1.0, "parameters": 1, "flops_per_bucket": {},
        "training": {"recipe": focus.to_dict()}})
    for bad in [(12.0, -8.0, 0.5), (-30.0, 0.0, 0.5), (-8.0, 12.0, 0.0), (-8.0, 12.0, 1.5)]:
        with pytest.raises(ConfigError, match="SNR focus"):
            td.DataRecipe(snr_focus=bad)


class _SlowPool:
    """Stands in for SynthPool: hands out `n` numbered batches, then has nothing for a while."""

    def __init__(self, n):
        self.left = n
        self.made = 0

    def get(self, timeout=None):
        if self.left == 0:
            import time

            time.sleep(min(timeout or 0, 0.05))
            return None
        self.left -= 1
        self.made += 1
        x = np.full((2, 2, 1, 8), self.made, np.float32)
        return {"x": x, "label": np.zeros(2, np.int64), "snr_db": np.zeros(2, np.float32)}

    def qsize(self):
        return 0

    def close(self):
        pass


def test_lagging_data_is_replaced_by_reuse_up_to_max_uses():
    import time

    from rfclassify.model.train import _Source

    cfg = TrainConfig(out_dir="x", steps=10, workers=1, max_uses=3, replay_batches=4)
    pool = _SlowPool(2)
    src = _Source(cfg, td.DataRecipe(), pin=False, pool=pool)
    try:
        deadline = time.monotonic() + 30
        while src.ready.qsize() < 2 and time.monotonic() < deadline:  # receiver thread takes both
            time.sleep(0.01)
        seen = []
        for _ in range(6):  # 2 fresh + each reused twice more (max_uses=3)
            (x, _, _), fresh = src.next(lambda b: b)
            seen.append((int(x[0, 0, 0, 0]), fresh))
        assert sorted(v for v, f in seen if f) == [1, 2]
        assert sorted(v for v, f in seen if not f) == [1, 1, 2, 2]
        # every batch is used up and nothing new arrives: the next call must wait, not reuse
        src._wait = lambda timeout_s: (_ for _ in ()).throw(TimeoutError("waited"))
        with pytest.raises(TimeoutError):
            src.next(lambda b: b)
    finally:
        src.close()


def test_training_from_an_hdf5_dataset(tmp_path):
    data = tmp_path / "d.h5"
    assert main(["dataset", "generate", "--out", str(data), "--snr=0,20", "--per-cell", "1",
                 "--classes", "BPSK,FM", "--lengths", "100,300", "--seed", "2"]) == 0
    batches = td.hdf5_batches(str(data), td.DataRecipe(buckets_samples=(128, 256), batch_size=2), seed=0)
    for _ in range(4):
        b = next(batches)
        assert b["x"].shape[3] in (128, 256) and set(b["label"]) <= {LABELS.index("BPSK"), LABELS.index("FM")}
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--data", str(data), "--steps", "2", "--batch-size", "2",
                 "--buckets", "128", "256", "--val-per-bucket", "4", "--device", "cpu"]) == 0
    assert (out / "model.pt").is_file()



def test_hdf5_batches_never_hold_one_burst(tmp_path):
    # batch norm refuses a batch of one: a bucket of three bursts in batches of two ended each
    # epoch with one (torch's ValueError out of `train --data`), and a single burst is no bucket
    from rfclassify._exceptions import ConfigError

    data = tmp_path / "d.h5"
    assert main(["dataset", "generate", "--out", str(data), "--snr=10", "--per-cell", "1",
                 "--classes", "BPSK,QPSK,FM", "--lengths", "256", "--seed", "2"]) == 0
    batches = td.hdf5_batches(str(data), td.DataRecipe(buckets_samples=(256,), batch_size=2), seed=0)
    assert {len(next(batches)["label"]) for _ in range(12)} == {2}
    one = tmp_path / "one.h5"
    assert main(["dataset", "generate", "--out", str(one), "--snr=10", "--per-cell", "1",
                 "--classes", "BPSK", "--lengths", "256"]) == 0
    with pytest.raises(ConfigError, match="no bucket has two bursts long enough for it"):
        next(td.hdf5_batches(str(one), td.DataRecipe(buckets_samples=(256,), batch_size=2), seed=0))


def test_rate_batches_land_in_the_bucket_serving_would_pick():
    from rfclassify.dsp.rate import snr_offset_db

    recipe = td.DataRecipe(buckets_samples=(128, 256, 512, 1024), batch_size=64, target_sps=4.0)
    rows = td.make_rate_rows(recipe, 512, 64, np.random.default_rng(0))
    assert sum(len(b["label"]) for b in rows.values()) == 64
    assert len(rows) >= 2  # 512 received samples at 2..16 sps land in several buckets
    for bucket, b in rows.items():
        assert b["x"].shape[1:] == (2, 1, bucket)
    # decimated rows train on the SNR the network sees: full-band SNR + the offset
    snr = np.concatenate([b["snr_db"] for b in rows.values()])
    assert snr.max() > recipe.snr_range_db[1] and snr.max() <= recipe.snr_range_db[1] + snr_offset_db(12) + 1e-4

    batches = td.synthesized_batches(recipe, np.random.default_rng(1))
    for _ in range(3):
        b = next(batches)
        assert len(b["label"]) == 64 and b["x"].shape[0] == 64
        # windows of unit-RMS bursts: a window of a longer burst varies about 1, a padded one is
        # its burst's samples (unit power over them) followed by zeros
        p = (b["x"][:, :, 0, :] ** 2).sum(axis=1)
        occupied = np.array([np.flatnonzero(r).max() + 1 for r in p])
        p_occ = np.array([r[:n].mean() for r, n in zip(p, occupied)])
        assert np.all(np.isfinite(b["x"])) and 0.5 < np.median(p_occ) < 1.5 and p_occ.max() < 5


def test_rate_validation_set_fills_every_bucket():
    recipe = td.DataRecipe(buckets_samples=(128, 256, 512), batch_size=32, target_sps=4.0)
    val = td.validation_set(recipe, 40, np.random.SeedSequence(3))
    assert sorted(val) == [128, 256, 512]
    assert all(len(v["label"]) == 40 and v["x"].shape[-1] == b for b, v in val.items())


def test_target_sps_is_recorded_and_must_match_the_parent(tmp_path, capsys):
    from rfclassify._exceptions import ConfigError

    tiny = ["--workers", "0", "--batch-size", "8", "--buckets", "128", "256", "--val-per-bucket", "8",
            "--device", "cpu", "--steps", "2"]
    assert main(["train", "--out", str(tmp_path / "r"), "--target-sps", "4", *tiny]) == 0
    meta = ModelMeta.load(tmp_path / "r")
    assert meta.symbol_rate == {"target_sps": 4.0} and meta.bucket_policy.rate is not None
    assert main(["train", "--out", str(tmp_path / "p"), "--init-from", str(tmp_path / "r"), "--seed", "3",
                 *tiny]) == 2
    assert "differs from the parent model's 4.0" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="synthesized data only"):
        TrainConfig(out_dir="x", steps=1, data="d.h5", target_sps=4.0)


@pytest.mark.parametrize("device", ["bogus", "cuda:x"])
def test_train_refuses_a_device_name_in_one_line_and_writes_nothing(tmp_path, capsys, device):
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--steps", "1", "--workers", "0", "--device", device]) == 2
    err = capsys.readouterr().err
    assert err == f"rfclassify train: error: unknown device {device!r}; use cpu, cuda or cuda:N\n"
    assert not out.exists()


def test_resume_from_something_that_is_not_a_checkpoint_is_one_line(tmp_path, capsys):
    # torch.load's UnpicklingError / EOFError, or an AttributeError on what it unpickled, were tracebacks
    not_pickle = tmp_path / "data.h5"
    not_pickle.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    a_list = tmp_path / "list.pt"
    torch.save([1, 2], a_list)
    cases = [(not_pickle, "is not a checkpoint of rfclassify train (invalid load key"),
             (empty, "is not a checkpoint of rfclassify train"),
             (a_list, "is not a checkpoint of rfclassify train (no model weights and step)"),
             (tmp_path, "is a directory; --resume takes its checkpoint.pt")]
    for path, message in cases:
        assert main(["train", "--out", str(tmp_path / "run"), "--steps", "1", "--workers", "0",
                     "--device", "cpu", "--resume", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rfclassify train: error: {path} ") and message in err and err.count("\n") == 1, err


def test_a_new_network_in_a_folder_of_an_exported_one_leaves_no_old_graph_to_serve(tmp_path, capsys):
    """train into a folder where an earlier network was exported: its model.onnx (which every
    model.json names) served the old network under the new id before the sixty-sixth session."""
    out = tmp_path / "run"
    args = ["train", "--out", str(out), "--steps", "2", "--workers", "0", "--batch-size", "4", "--buckets", "128",
            "--val-per-bucket", "4", "--device", "cpu"]
    assert main([*args, "--seed", "1"]) == 0
    assert main(["export", "--model-dir", str(out), "--out", str(out)]) == 0
    assert (out / "model.onnx").is_file() and (out / "static").is_dir()
    capsys.readouterr()
    assert main([*args, "--seed", "2"]) == 0
    assert "removed the earlier network's model.onnx, export_report.json, static/" in capsys.readouterr().out
    assert not (out / "model.onnx").exists() and not (out / "static").exists()
    assert main(["export", "--model-dir", str(out), "--out", str(out)]) == 0
    from rfclassify.engine.classifier import Classifier

    burst = np.exp(2j * np.pi * np.random.default_rng(0).random(256)).astype(np.complex64)
    with Classifier.load(out, backend="onnxruntime", precision="fp32") as ort, \
            Classifier.load(out, backend="torch", device="cpu") as eager:
        np.testing.assert_allclose(ort.classify([burst])[0].probabilities,
                                   eager.classify([burst])[0].probabilities, atol=1e-4)


def test_the_recorded_command_is_the_one_given_with_the_global_options(tmp_path, monkeypatch):
    """`rfclassify -v train ...` recorded no command (only argv starting with train counted)."""
    out = tmp_path / "run"
    argv = ["-v", "train", "--out", str(out), "--steps", "1", "--workers", "0", "--batch-size", "4",
            "--buckets", "128", "--val-per-bucket", "4", "--device", "cpu"]
    monkeypatch.setattr(sys, "argv", ["rfclassify", *argv])
    assert main(argv) == 0
    assert ModelMeta.load(out).extra["training"]["command"] == "rfclassify " + shlex.join(argv)


# -- review findings: resume settings, bad data, atomic outputs, stopping -------------------------

_TINY = ["--workers", "0", "--batch-size", "4", "--buckets", "128", "--val-per-bucket", "4", "--device", "cpu"]
#: what an invocation gives for itself (not its run's settings)
_CONTROL = ["--workers", "0", "--val-per-bucket", "4", "--device", "cpu"]


def _worker_then_sleep() -> None:
    td._worker_setup()
    time.sleep(30)


def test_data_workers_ignore_a_sigterm_to_the_group_and_a_stop_is_not_a_failure():
    """`timeout` and systemd signal the whole process group: the data workers died of it, and a
    trainer waiting for data read the dead workers as a failed pipeline (exit 1, no
    checkpoint) before it read its own stop."""
    import multiprocessing
    import queue
    import signal
    import threading

    from rfclassify.model import train as train_module

    worker = multiprocessing.get_context("fork").Process(target=_worker_then_sleep, daemon=True)
    worker.start()
    try:
        time.sleep(0.5)
        os.kill(worker.pid, signal.SIGTERM)
        worker.join(1.0)
        assert worker.is_alive()
    finally:
        worker.kill()
        worker.join(5)
    src = object.__new__(train_module._Source)      # the wait alone: workers gone, a stop asked
    src.stop_asked, src.error = threading.Event(), RuntimeError("worker died")
    src.ready, src.waited = queue.Queue(), 0.0
    src.stop_asked.set()
    assert src._wait(5.0) is None


def test_older_checkpoints_resume_with_what_their_runs_ran_with():
    """A checkpoint from before channel_overrides was recorded read as None against the
    config's {} and could not be resumed at all; a cosine run that recorded a --warmup-steps it
    ignored was refused whether the flag was left out, given as recorded or as the default."""
    from rfclassify.model.resume import _run_setting_differences, resume_settings

    left_out = {name: None for name in ("data", "steps", "time_budget_s", "batch_size", "lr", "buckets_samples",
                                        "target_sps", "normalization", "channel_overrides", "snr_focus",
                                        "schedule", "warmup_steps", "decay_steps", "ema_half_life_steps", "arch")}
    old = {"config": {"schedule": "cosine", "warmup_steps": 500, "steps": 10}, "model": {}, "step": 3}
    run = resume_settings(left_out, old, "old.pt")
    assert run["channel_overrides"] == {} and run["warmup_steps"] == 2000
    cfg = TrainConfig(out_dir="x", resume="old.pt", **{k: v for k, v in run.items() if v is not None})
    _run_setting_differences(dataclasses.asdict(cfg), old, "old.pt")       # what train() checks again


def test_a_resume_continues_its_runs_settings_and_refuses_others(tmp_path, capsys):
    """--resume with only the options of the invocation (as the pause message says) continues
    the checkpoint's schedule, rate, batch, buckets and weight average: they fell back to the
    defaults (cosine, 3e-3, 256, every bucket, no average). A setting of the run given otherwise
    is refused in one line naming it and both values; --steps may grow."""
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--steps", "4", "--schedule", "wsd", "--warmup-steps", "0", "--lr",
                 "0.002", "--ema-half-life-steps", "2", "--stop-after-s", "1e-9", *_TINY]) == 0  # paused at step 0
    ck = str(out / "checkpoint.pt")
    assert main(["train", "--out", str(out), "--resume", ck, "--seed", "1", "--log-every", "1", *_CONTROL]) == 0
    log = json.loads((out / "train_log.json").read_text())
    assert [h["lr"] for h in log["history"]] == pytest.approx([0.002] * 4)  # wsd at its peak: no warmup, no decay
    t = log["training"]
    assert (t["steps"], t["examples_fresh"], t["weight_average"]["half_life_steps"]) == (4, 4 * 4, 2)
    assert ModelMeta.load(out).buckets_samples == (128,) and t["config"]["schedule"] == "wsd"
    for option, value, said in [("--lr", "0.003", "--lr 0.002, not 0.003"),
                                ("--batch-size", "8", "--batch-size 4, not 8"),
                                ("--buckets", "128 256", "--buckets 128, not 128 256"),
                                ("--schedule", "cosine", "--schedule wsd, not cosine"),
                                ("--warmup-steps", "10", "--warmup-steps 0, not 10")]:
        capsys.readouterr()
        assert main(["train", "--out", str(tmp_path / "other"), "--resume", ck, "--steps", "5", option,
                     *value.split(), *_CONTROL]) == 2, option
        err = capsys.readouterr().err
        assert f"{ck} was trained with {said}" in err and err.count("\n") == 1, err
    assert not (tmp_path / "other").exists()


def test_a_resume_keeps_the_target_sps_of_its_checkpoint(tmp_path, capsys):
    """--resume without --target-sps trained the rate-normalized network on bursts as received
    (--init-from refused that); another value is refused too."""
    from rfclassify._exceptions import ConfigError
    from rfclassify.model.train import train

    out = tmp_path / "run"
    tiny = ["--batch-size", "8", "--buckets", "128", "256", *_CONTROL]
    assert main(["train", "--out", str(out), "--steps", "2", "--target-sps", "4", "--stop-after-s", "1e-9", *tiny]) == 0
    ck = str(out / "checkpoint.pt")
    assert main(["train", "--out", str(out), "--resume", ck, "--seed", "1", "--stop-after-s", "1e-9", *_CONTROL]) == 0
    assert torch.load(ck, weights_only=False)["config"]["target_sps"] == 4.0
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--resume", ck, "--target-sps", "8", "--seed", "1", *_CONTROL]) == 2
    assert "was trained with --target-sps 4, not 8" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="was trained with --target-sps 4, not without it"):  # TrainConfig by hand
        train(TrainConfig(out_dir=str(out), steps=2, batch_size=8, buckets_samples=(128, 256), workers=0,
                          device="cpu", resume=ck))


def test_a_resume_holds_the_checkpoints_network_to_the_dla_at_its_buckets(tmp_path, capsys):
    """The DLA check of the bucket list looked at --arch alone on --resume, not the network the
    checkpoint holds: a shallow network with a pool of 4 (downsampling 64) resumed at 96 samples."""
    from rfclassify._exceptions import ConfigError
    from rfclassify.model.train import train

    small = {"stem_channels": 8, "pool": 4, "stages": [{"channels": 8, "kernel": 3, "dilations": [1]}] * 4,
             "head_channels": 8, "snr_head_channels": 8}
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--steps", "2", "--arch", json.dumps(small), "--stop-after-s", "1e-9",
                 *_TINY]) == 0
    ck = out / "checkpoint.pt"
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--resume", str(ck), "--buckets", "96", "--seed", "1", *_CONTROL]) == 2
    assert "was trained with --buckets 128, not 96" in capsys.readouterr().err
    # a checkpoint whose run trained at 96 (from before the check): its own buckets are checked
    old = torch.load(ck, weights_only=False)
    old["config"]["buckets_samples"] = (96,)
    torch.save(old, tmp_path / "old.pt")
    assert main(["train", "--out", str(out), "--resume", str(tmp_path / "old.pt"), "--steps", "2", "--seed", "1",
                 "--stop-after-s", "1e-9", *_CONTROL]) == 2
    err = capsys.readouterr().err
    assert "would not run on the DLA" in err and "bucket 96" in err and err.count("\n") == 1
    with pytest.raises(ConfigError, match="bucket 96"):  # a TrainConfig by hand, --arch left out
        train(TrainConfig(out_dir=str(out), steps=2, batch_size=4, buckets_samples=(96,), workers=0, device="cpu",
                          resume=str(tmp_path / "old.pt"), stop_after_s=1e-9))


def test_a_resume_reads_its_checkpoint_once(tmp_path, capsys, monkeypatch):
    """`train --resume` read the whole checkpoint twice: once for the run's settings, once to
    continue it. train() from Python still reads cfg.resume itself."""
    from rfclassify.model.resume import Checkpoint
    from rfclassify.model.train import train

    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--steps", "2", "--stop-after-s", "1e-9", *_TINY]) == 0  # at step 0
    ck = str(out / "checkpoint.pt")
    real, reads = torch.load, []

    def counted(f, *args, **kwargs):
        reads.append(str(f))
        return real(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counted)
    assert main(["train", "--out", str(out), "--resume", ck, "--seed", "1", *_CONTROL]) == 0
    assert reads.count(ck) == 1 and ModelMeta.load(out).extra["training"]["steps"] == 2
    reads.clear()
    assert main(["train", "--out", str(tmp_path / "more"), "--resume", ck, "--steps", "3", "--seed", "1",
                 *_CONTROL]) == 0
    assert reads.count(ck) == 1
    with pytest.raises(ValueError, match="the checkpoint given is"):  # another file's, by mistake
        train(TrainConfig(out_dir=str(out), steps=2, batch_size=4, buckets_samples=(128,), workers=0, device="cpu",
                          resume=ck), Checkpoint(str(tmp_path / "other.pt")))


def test_wsd_refuses_a_warmup_and_decay_longer_than_a_new_run():
    """--schedule wsd --steps 1000 --decay-steps 500 with the default 2,000 warmup steps never
    reached the peak and never decayed; a resumed branch starts past its warmup and may."""
    from rfclassify._exceptions import ConfigError

    with pytest.raises(ConfigError, match="add up to more than --steps 1000: the rate would start its decay"):
        TrainConfig(out_dir="x", schedule="wsd", steps=1000, decay_steps=500)
    with pytest.raises(ConfigError, match="never reach --lr"):
        TrainConfig(out_dir="x", schedule="wsd", steps=1000)
    TrainConfig(out_dir="x", schedule="wsd", steps=1000, decay_steps=500, warmup_steps=500)
    TrainConfig(out_dir="x", schedule="wsd", steps=1000, decay_steps=500, resume="trunk/checkpoint.pt")


def _nan_dataset(tmp_path):
    import h5py

    data = tmp_path / "d.h5"
    assert main(["dataset", "generate", "--out", str(data), "--snr=0,20", "--per-cell", "4", "--classes",
                 "BPSK,QPSK", "--lengths", "256", "--seed", "2"]) == 0
    with h5py.File(data, "r+") as f:  # one NaN sample in burst 3
        off, n = int(f["offset"][3]), int(f["length"][3])
        burst = f["iq"][off:off + n]
        burst[10] = np.nan
        f["iq"][off:off + n] = burst
    return data


def test_bursts_with_nan_samples_are_left_out_of_training_and_counted(tmp_path, capsys):
    """One NaN sample in a --data file made every weight NaN and the run exited 0."""
    data = _nan_dataset(tmp_path)
    batches = td.hdf5_batches(str(data), td.DataRecipe(buckets_samples=(256,), batch_size=4), seed=0)
    assert all(np.isfinite(next(batches)["x"]).all() for _ in range(12)) and batches.non_finite == {3}
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--data", str(data), "--steps", "6", "--batch-size", "4",
                 "--buckets", "256", "--val-per-bucket", "8", "--device", "cpu", "--log-every", "1"]) == 0
    assert "left out 1 burst(s) of" in capsys.readouterr().err
    weights = torch.load(out / "model.pt", weights_only=True)
    assert all(torch.isfinite(w.float()).all() for w in weights.values())
    assert ModelMeta.load(out).extra["training"]["non_finite_bursts_left_out"] == 1


def _poison(path, indices):
    """Make one sample of each burst at `indices` of the HDF5 file at `path` a NaN."""
    import h5py

    with h5py.File(path, "r+") as f:
        for i in indices:
            off, n = int(f["offset"][i]), int(f["length"][i])
            burst = f["iq"][off:off + n]
            burst[10] = np.nan
            f["iq"][off:off + n] = burst


def test_a_bucket_with_two_finite_bursts_keeps_giving_batches(tmp_path, capsys):
    """Bucket 256 of eight bursts, six with a NaN, in batches of four: where its two finite
    bursts fell into different batches, its epoch gave no batch of two and the bucket was
    dropped for good (for seed 0 from the first epoch). A bucket with one finite burst is left
    out, said once."""
    data = tmp_path / "d.h5"
    assert main(["dataset", "generate", "--out", str(data), "--snr=0,20", "--per-cell", "4", "--classes",
                 "BPSK,QPSK", "--lengths", "256,1024", "--seed", "2"]) == 0
    from rfclassify.data.reader import DatasetReader

    with DatasetReader(str(data)) as reader:
        short = np.flatnonzero(reader.lengths == 256)
    assert short.size == 8
    _poison(data, short[2:])
    recipe = td.DataRecipe(buckets_samples=(256, 1024), batch_size=4)
    for seed in range(3):
        batches = td.hdf5_batches(str(data), recipe, seed=seed)
        drawn = [next(batches) for _ in range(100)]
        short_batches = [b for b in drawn if b["x"].shape[3] == 256]
        assert len(short_batches) > 30, seed  # about 2 in 3 by the bucket probabilities
        assert all(len(b["label"]) == 2 and np.isfinite(b["x"]).all() for b in short_batches)
    assert "warning" not in capsys.readouterr().err
    del batches  # closes the file
    _poison(data, short[1:2])  # one finite burst left: no batch can be made of bucket 256
    batches = td.hdf5_batches(str(data), recipe, seed=0)
    assert {next(batches)["x"].shape[3] for _ in range(60)} == {1024}
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"warning: {data}: bucket 256 has 1 burst(s) without NaN or infinite samples" \
        in err, err
    with pytest.raises(ValueError, match="two bursts or more"):
        td.hdf5_batches(str(data), td.DataRecipe(buckets_samples=(256, 1024), batch_size=1), seed=0)


@pytest.mark.parametrize("when", [["--log-every", "1"], ["--log-every", "100", "--checkpoint-every-s", "0"]])
def test_a_non_finite_loss_stops_the_run_before_it_writes_the_network(tmp_path, capsys, monkeypatch, when):
    """A NaN loss (here from the third batch on) is one line and exit 2 at the next log line or
    checkpoint; the model and checkpoint already there stay as they were."""
    from rfclassify.model import train as train_module

    out = tmp_path / "run"
    out.mkdir()
    (out / "model.pt").write_bytes(b"the good model")
    real, calls = train_module.augment, []

    def poisoned(x, gen):
        calls.append(1)
        return real(x, gen) * (float("nan") if len(calls) >= 3 else 1.0)

    monkeypatch.setattr(train_module, "augment", poisoned)
    assert main(["train", "--out", str(out), "--steps", "6", *_TINY, *when]) == 2
    err = capsys.readouterr().err
    assert "the training loss is not finite (NaN or infinite) at step 3" in err and err.count("\n") == 1
    # --data bursts with NaN samples are left out (above): the rate is what the user can change
    assert "most likely at too high a learning rate (--lr 0.003)" in err and err.endswith("; give a lower --lr\n")
    assert "data with NaN" not in err
    assert (out / "model.pt").read_bytes() == b"the good model" and not (out / "model.json").exists()
    if (out / "checkpoint.pt").exists():  # one per step before the NaN one
        ck = torch.load(out / "checkpoint.pt", weights_only=False)
        assert ck["step"] == 2 and all(torch.isfinite(w.float()).all() for w in ck["model"].values())


def test_a_diverged_resume_is_told_a_way_on_that_it_accepts(tmp_path, capsys, monkeypatch):
    """The message said "too high a --lr" to a --resume, which refuses another --lr: it names
    what a resumed run may change (its data, by --seed) and a new run with a lower rate."""
    from rfclassify.model import train as train_module

    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--steps", "6", "--stop-after-s", "1e-9", *_TINY]) == 0
    monkeypatch.setattr(train_module, "augment", lambda x, gen: x * float("nan"))
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--resume", str(out / "checkpoint.pt"), "--seed", "1", "--log-every",
                 "1", *_CONTROL]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not finite (NaN or infinite) at step 1: the run diverged" in err, err
    assert err.endswith("a resumed run keeps its --lr: --resume the checkpoint again with another --seed, or "
                        "start anew with a lower --lr\n"), err
    assert main(["train", "--out", str(out), "--resume", str(out / "checkpoint.pt"), "--lr", "1e-3",
                 *_CONTROL]) == 2
    assert "was trained with --lr 0.003, not 0.001" in capsys.readouterr().err  # as the message says


def test_model_pt_and_the_curves_are_replaced_whole_or_not_at_all(tmp_path, capsys, monkeypatch):
    """A failed write (a full disk) left a torn model.pt beside the old model.json."""
    import errno
    import os

    from rfclassify.model import plots

    out = tmp_path / "run"
    out.mkdir()
    (out / "model.pt").write_bytes(b"the old model")
    (out / "training_curves.png").write_bytes(b"the old curves")
    real_save = torch.save

    def full_disk(target, *lines):
        with open(target, "wb") as f:
            f.write(b"PK\x03\x04partial")
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    def failing_save(obj, f, *a, **k):
        if "model.pt" in str(f):    # a handle since the seventy-first session (torch.save's own path writer
            full_disk(f if isinstance(f, (str, os.PathLike)) else f.name)   # hid the OSError)
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", failing_save)
    # a write that fails midway is the machine's state, not the user's mistake: exit 1, naming model.pt
    assert main(["train", "--out", str(out), "--steps", "1", *_TINY]) == 1
    assert f"error: {out / 'model.pt'}: No space left on device" in capsys.readouterr().err
    assert (out / "model.pt").read_bytes() == b"the old model"
    monkeypatch.setattr(torch, "save", real_save)
    monkeypatch.setattr(plots, "training_curves",  # given a handle since the temporary name ends in .tmp
                        lambda history, f: full_disk(f if isinstance(f, (str, os.PathLike)) else f.name))
    assert main(["train", "--out", str(out), "--steps", "1", "--log-every", "1", *_TINY]) == 2
    assert (out / "training_curves.png").read_bytes() == b"the old curves"
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    assert "No space left on device" in capsys.readouterr().err


def test_a_run_that_trains_no_step_is_refused_and_writes_nothing(tmp_path, capsys):
    """A --time-budget-s spent before the first step wrote random weights as model.pt, exit 0."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "model.pt").write_bytes(b"the old model")
    assert main(["train", "--out", str(out), "--time-budget-s", "0.001", *_TINY]) == 2
    err = capsys.readouterr().err
    assert "no training step ran: the --time-budget-s of 0.001 s was spent" in err and err.count("\n") == 1
    assert (out / "model.pt").read_bytes() == b"the old model"
    assert sorted(p.name for p in out.iterdir()) == ["model.pt"]


def test_default_time_shares_follow_the_bucket_lengths():
    """The default shares were applied by position: six other buckets (256..8192) gave 2048 the
    40 % of training time meant for 1024."""
    assert td.DataRecipe().time_share == (0.08, 0.08, 0.14, 0.40, 0.15, 0.15)  # the default list: as it was
    assert td.DataRecipe(buckets_samples=(256, 512, 1024, 2048, 4096, 8192)).time_share == (1, 1, 2, 1, 1, 1)
    assert td.DataRecipe(buckets_samples=(256, 512, 1024, 2048)).time_share == (1, 1, 2, 1)
    assert td.DataRecipe(buckets_samples=(128, 256)).time_share == (1, 1)


def test_data_pipeline_failures_are_one_line_internal_errors(tmp_path, capsys, monkeypatch):
    """A dead worker or a data stall raised a bare RuntimeError: a traceback, exit 1."""
    from rfclassify._exceptions import InternalError
    from rfclassify.model.train import _Source

    class DeadPool(_SlowPool):
        def get(self, timeout=None):
            raise InternalError("data worker(s) died: rfc-synth-0 (exit code -9)")

        def validation(self, timeout=None):
            return None

    cfg = TrainConfig(out_dir="x", steps=10, workers=1)
    src = _Source(cfg, td.DataRecipe(), pin=False, pool=_SlowPool(0))
    try:
        with pytest.raises(InternalError, match="no training batch from the 1 data worker"):
            src._wait(0.6)
    finally:
        src.close()
    monkeypatch.setattr(td, "SynthPool", lambda *args: DeadPool(0))
    threads = torch.get_num_threads()  # train() gives the cores to its workers
    try:
        assert main(["train", "--out", str(tmp_path / "run"), "--steps", "2", "--workers", "1", "--batch-size", "4",
                     "--buckets", "128", "--device", "cpu"]) == 1
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert err == ("rfclassify train: internal error: the data pipeline failed: data worker(s) died: rfc-synth-0 "
                   "(exit code -9)\n")


def _gone(pid, within_s):
    import time

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":  # exited, not yet reaped
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def _children(pid):
    import os

    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(entry))
            except (FileNotFoundError, ProcessLookupError):
                continue
    return kids


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_data_workers_end_with_the_process_that_started_them(tmp_path):
    """Workers of a trainer killed where close() cannot run (SIGKILL) synthesized on for good;
    one that died is named by the pool as an InternalError."""
    import os
    import signal
    import subprocess

    from rfclassify._exceptions import InternalError

    script = ("from rfclassify.model import training_data as td; import time\n"
              "pool = td.SynthPool(td.DataRecipe(buckets_samples=(128,), batch_size=2), 0, 1, val_per_bucket=2)\n"
              "assert pool.get(timeout=120) is not None\n"
              "print(' '.join(str(p.pid) for p in pool._procs), flush=True)\n"
              "time.sleep(120)\n")
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True) as parent:
        try:
            pids = [int(p) for p in parent.stdout.readline().split()]
            assert len(pids) == 2
        finally:
            parent.kill()
    assert all(_gone(pid, 15) for pid in pids)

    with td.SynthPool(td.DataRecipe(buckets_samples=(128,), batch_size=2), 0, 1) as pool:
        assert pool.get(timeout=120) is not None
        os.kill(pool._procs[0].pid, signal.SIGKILL)
        pool._procs[0].join(10)
        with pytest.raises(InternalError, match=r"data worker\(s\) died: rfc-synth-0 \(exit code -9\)"):
            while True:
                pool.get(timeout=0.2)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("to_group", [False, True])
def test_sigterm_stops_training_with_a_checkpoint_and_its_workers(tmp_path, to_group):
    """SIGTERM ended the trainer where it stood and left its workers running; now the loop stops
    as --stop-after-s does (a checkpoint to --resume), the workers end, and the exit is 143.
    To the whole process group (`timeout`, systemd) it killed the workers first, and the trainer
    stopped with "data pipeline failed", exit 1, no checkpoint: the workers ignore it now."""
    import signal
    import subprocess

    out = tmp_path / "run"
    with subprocess.Popen([sys.executable, "-m", "rfclassify", "train", "--out", str(out), "--steps", "100000",
                           "--workers", "1", "--batch-size", "4", "--buckets", "128", "--val-per-bucket", "4",
                           "--device", "cpu", "--log-every", "1"], stdout=subprocess.PIPE, text=True,
                          start_new_session=to_group) as proc:
        try:
            for line in proc.stdout:
                if line.startswith("step"):
                    break
            kids = _children(proc.pid)
            assert kids  # the synthesis and validation workers (and multiprocessing's resource tracker)
            if to_group:
                os.killpg(proc.pid, signal.SIGTERM)
            else:
                proc.send_signal(signal.SIGTERM)
            rest, _ = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM: step" in rest and f"--resume {out / 'checkpoint.pt'}" in rest
    assert torch.load(out / "checkpoint.pt", weights_only=False)["step"] >= 1 and not (out / "model.pt").exists()
    assert all(_gone(pid, 15) for pid in kids)
