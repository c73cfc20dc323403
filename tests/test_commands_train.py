"""`rfclassify train` options: their defaults are TrainConfig's, so the two cannot drift apart."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from rfclassify._exceptions import ConfigError
from rfclassify.commands import train as train_command
from rfclassify.model.train import TrainConfig


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    train_command.add_arguments(parser)
    return parser


def test_every_option_default_is_the_train_config_default():
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    checked = set()
    for action in _parser()._actions:
        if action.dest == "help":
            continue
        field = fields[train_command.FIELD_OF_OPTION.get(action.dest, action.dest)]  # KeyError: no such field
        if field.default is dataclasses.MISSING:
            # --out is required (out_dir has no default); --arch is JSON text, None = TrainConfig's default
            assert action.required or action.default is None, action.dest
            continue
        default = tuple(action.default) if isinstance(field.default, tuple) else action.default
        assert default == field.default, (action.dest, action.default, field.default)
        checked.add(field.name)
    assert {"device", "batch_size", "lr", "workers", "seed", "buckets_samples", "val_per_bucket",
            "log_every", "checkpoint_every_s", "channels_last", "resume", "normalization"} <= checked


def test_options_not_given_build_the_default_train_config():
    cfg = train_command.config_from_args(_parser().parse_args(["--out", "run", "--steps", "5"]))
    assert dataclasses.replace(cfg, command="") == TrainConfig(out_dir="run", steps=5)


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
