"""`rfclassify train` options: their defaults are TrainConfig's, so the two cannot drift apart."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from rfclassify._exceptions import ConfigError
from rfclassify.commands import train as train_command
from rfclassify.model.resume import RESUME_MAY_CHANGE, RUN_SETTINGS
from rfclassify.model.train import TrainConfig


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    train_command.add_arguments(parser)
    return parser


def test_every_option_default_is_the_train_config_default():
    """An option's default is TrainConfig's, or None for those a --resume takes from the
    checkpoint when left out (config_from_args then applies TrainConfig's to a new run)."""
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    checked, left_out = set(), set()
    for action in _parser()._actions:
        if action.dest == "help":
            continue
        field = fields[train_command.FIELD_OF_OPTION.get(action.dest, action.dest)]  # KeyError: no such field
        if action.dest in train_command.LEFT_OUT_IS_NONE:
            assert action.default is None, action.dest
            left_out.add(field.name)
            continue
        if field.default is dataclasses.MISSING:
            # --out is required (out_dir has no default)
            assert action.required, action.dest
            continue
        default = tuple(action.default) if isinstance(field.default, tuple) else action.default
        assert default == field.default, (action.dest, action.default, field.default)
        checked.add(field.name)
    assert {"device", "workers", "seed", "val_per_bucket", "log_every", "checkpoint_every_s", "channels_last",
            "resume", "stop_after_s"} <= checked
    assert set(RUN_SETTINGS) | set(RESUME_MAY_CHANGE) | {"arch"} == left_out


def test_options_not_given_build_the_default_train_config():
    cfg = train_command.config_from_args(_parser().parse_args(["--out", "run", "--steps", "5"]))
    assert dataclasses.replace(cfg, command="") == TrainConfig(out_dir="run", steps=5)


def test_the_shipped_models_documented_commands_build_the_configuration_they_always_did():
    """The options a --resume takes from its checkpoint default to None on the command line; a
    new run must still get TrainConfig's defaults, field for field, as the shipped model's
    commands (docs/model.md) did."""
    first = train_command.config_from_args(_parser().parse_args(
        "--out o/train --device cuda --time-budget-s 1320 --workers 14 --batch-size 1024 --lr 4e-3 --seed 1 "
        "--val-per-bucket 2048 --log-every 200".split()))
    assert first == TrainConfig(out_dir="o/train", device="cuda", time_budget_s=1320.0, workers=14,
                                batch_size=1024, lr=4e-3, seed=1, val_per_bucket=2048, log_every=200)
    trunk = train_command.config_from_args(_parser().parse_args(
        "--out o/trunk --device cuda --schedule wsd --steps 2000000 --warmup-steps 2000 --lr 3e-3 --batch-size 1024 "
        "--workers 15 --cuda-graphs --seed 50 --stop-after-s 1000 --ema-half-life-steps 5000".split()))
    assert trunk == TrainConfig(out_dir="o/trunk", device="cuda", schedule="wsd", steps=2_000_000, warmup_steps=2000,
                                lr=3e-3, batch_size=1024, workers=15, cuda_graphs=True, seed=50, stop_after_s=1000.0,
                                ema_half_life_steps=5000)


def test_warmup_steps_is_refused_with_the_cosine_schedule():
    """--warmup-steps was silently ignored by the default cosine schedule (--decay-steps was refused)."""
    for value in ("0", "2000"):  # the default value too: given, it was meant for a schedule that is not on
        with pytest.raises(ConfigError, match="--warmup-steps works with --schedule wsd only"):
            train_command.config_from_args(_parser().parse_args(["--out", "run", "--steps", "100",
                                                                 "--warmup-steps", value]))
    with pytest.raises(ConfigError, match="--warmup-steps works with --schedule wsd only"):
        TrainConfig(out_dir="x", steps=100, warmup_steps=0)


def test_given_options_reach_the_config():
    args = _parser().parse_args(["--out", "run", "--time-budget-s", "60", "--lr", "0.01", "--buckets", "128", "256",
                                 "--arch", '{"head_channels": 64}', "--channels-last"])
    cfg = train_command.config_from_args(args)
    assert (cfg.time_budget_s, cfg.lr, cfg.buckets_samples, cfg.arch, cfg.channels_last) == (
        60.0, 0.01, (128, 256), {"head_channels": 64}, True)
    with pytest.raises(ConfigError, match="--arch must be a JSON object"):
        train_command.config_from_args(_parser().parse_args(["--out", "run", "--steps", "1", "--arch", "[1]"]))


def test_normalization_option_reaches_the_config_and_rejects_unknown_names(capsys):
    cfg = train_command.config_from_args(_parser().parse_args(["--out", "run", "--steps", "1",
                                                               "--normalization", "keep_dc"]))
    assert cfg.normalization == "keep_dc"
    # not given: train() takes the parent's or the checkpoint's, else remove_dc
    assert train_command.config_from_args(_parser().parse_args(["--out", "run", "--steps", "1"])
                                          ).normalization is None
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["--out", "run", "--steps", "1", "--normalization", "none"])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_channel_overrides_reach_the_recipe_and_mistakes_are_config_errors():
    cfg = train_command.config_from_args(_parser().parse_args(
        ["--out", "run", "--steps", "1", "--channel-overrides", '{"dc_offset_db_range": [-40, 6], "p_dc_offset": 0.5}']))
    assert cfg.channel_overrides == {"dc_offset_db_range": [-40, 6], "p_dc_offset": 0.5}
    for text, match in [("{", "not valid JSON"), ("[1]", "must be a JSON object"),
                        ('{"dc_offset_range": [1, 2]}', "unknown channel setting"),
                        ('{"dc_offset_db_range": [5, 2]}', "low <= high"),
                        ('{"p_pa": 2}', "probability")]:
        with pytest.raises(ConfigError, match=match):
            train_command.config_from_args(_parser().parse_args(
                ["--out", "run", "--steps", "1", "--channel-overrides", text]))
    with pytest.raises(ConfigError, match="synthesized data only"):
        train_command.config_from_args(_parser().parse_args(
            ["--out", "run", "--steps", "1", "--data", "x.h5", "--channel-overrides", '{"p_pa": 0.5}']))


def test_an_snr_focus_reaches_the_config_and_mistakes_are_config_errors():
    cfg = train_command.config_from_args(_parser().parse_args(
        ["--out", "run", "--steps", "1", "--snr-focus", "-8", "12", "0.6"]))
    assert cfg.snr_focus == (-8.0, 12.0, 0.6)
    assert train_command.config_from_args(_parser().parse_args(["--out", "run", "--steps", "1"])).snr_focus is None
    with pytest.raises(ConfigError, match="SNR focus"):
        train_command.config_from_args(_parser().parse_args(
            ["--out", "run", "--steps", "1", "--snr-focus", "12", "-8", "0.6"]))
    with pytest.raises(ConfigError, match="synthesized data only"):
        train_command.config_from_args(_parser().parse_args(
            ["--out", "run", "--steps", "1", "--data", "x.h5", "--snr-focus", "-8", "12", "0.6"]))
