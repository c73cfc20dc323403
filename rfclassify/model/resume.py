"""What a resumed run takes from its checkpoint.

``rfclassify train --resume CKPT`` continues the run that wrote CKPT. The settings that define
that run (RUN_SETTINGS) are the checkpoint's when left out, and one given with another value
is refused: the optimizer's state and the schedule so far were made with them. The run's
length, a decay branch and the weight average (RESUME_MAY_CHANGE) are the checkpoint's when
left out and may be changed; the rest belong to the invocation. A checkpoint from before a
setting was recorded ran with TrainConfig's default for it. The network is the checkpoint's:
an --arch that changes it is refused, and the DLA check holds it to the run's buckets.

The file is read once (`Checkpoint`): the command takes the run's settings from it
(resume_settings) and hands it to train(), which checks its TrainConfig against it
(check_continuation) and continues it.
"""

from __future__ import annotations

import json
import os
from dataclasses import MISSING, asdict, fields
from typing import Any

from rfclassify._exceptions import ConfigError, first_line
from rfclassify._optional import require
from rfclassify.model.train import CHECKPOINT_FILE, WSD_WARMUP_STEPS, TrainConfig

#: settings that define a run. On --resume one left out is the checkpoint's, and one given with
#: another value is refused: the optimizer's state and the schedule so far were made with them
RUN_SETTINGS = ("data", "batch_size", "lr", "buckets_samples", "target_sps", "normalization", "channel_overrides",
                "snr_focus", "schedule", "warmup_steps")
#: settings a --resume may change; left out, they are the checkpoint's. --steps and
#: --time-budget-s are the run's length together: giving either replaces both
RESUME_MAY_CHANGE = ("steps", "time_budget_s", "decay_steps", "ema_half_life_steps")
#: TrainConfig field -> its option, where the names differ
_OPTION_OF_FIELD = {"buckets_samples": "--buckets", "out_dir": "--out"}
#: TrainConfig's plain defaults by field name (what a checkpoint from before a field was recorded ran with)
_FIELD_DEFAULTS = {f.name: f.default if f.default is not MISSING else f.default_factory()
                   for f in fields(TrainConfig) if f.default is not MISSING or f.default_factory is not MISSING}


class Checkpoint:
    """The checkpoint at `path`, read on first use and kept, tensors on the CPU: the command
    takes a --resume's settings from it and hands it to train(), so a large file is read once
    (it was read twice, once for each)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._contents: dict[str, Any] | None = None

    @property
    def contents(self) -> dict[str, Any]:
        """What the file holds (read_checkpoint; ConfigError for a file that is not a checkpoint)."""
        if self._contents is None:
            self._contents = read_checkpoint(self.path)
        return self._contents


def read_checkpoint(path: str) -> dict[str, Any]:
    """The checkpoint a --resume continues, tensors on the CPU; ConfigError for anything that is not one."""
    torch = require("torch", "training")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=False)
    except FileNotFoundError:
        raise ConfigError(f"no checkpoint at {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"{path} is a directory; --resume takes its {CHECKPOINT_FILE}") from None
    except Exception as exc:  # noqa: BLE001 - torch and pickle raise their own types for a file that is not one
        raise ConfigError(f"{path} is not a checkpoint of rfclassify train ({first_line(exc, 200)})") from None
    if not isinstance(ck, dict) or not {"model", "step"} <= set(ck):
        raise ConfigError(f"{path} is not a checkpoint of rfclassify train (no model weights and step)")
    return ck


def option_of(name: str) -> str:
    """The command-line option of TrainConfig field `name`."""
    return _OPTION_OF_FIELD.get(name, "--" + name.replace("_", "-"))


def recorded(ck: dict[str, Any], name: str) -> Any:
    """Setting `name` as the checkpoint's run had it; a checkpoint from before it was recorded
    ran with its default."""
    config = ck.get("config") or {}
    if name == "normalization":  # recorded as None when its run took the default
        return config.get("normalization") or "remove_dc"
    if name == "arch":  # the --arch its run was given (the network itself is ck["arch"])
        return config.get("arch") or {}
    if name == "warmup_steps" and config.get("schedule", _FIELD_DEFAULTS["schedule"]) != "wsd":
        return WSD_WARMUP_STEPS  # the cosine schedule ignored it (an older run may record another)
    value = config.get(name, _FIELD_DEFAULTS.get(name))
    return tuple(value) if isinstance(value, list) else value


def _same_setting(name: str, given: Any, was: Any) -> bool:
    if name == "data" and given and was and given != was:
        try:  # the same file by another path (relative, through a link) is the same data
            return os.path.samefile(given, was)
        except OSError:
            return False
    if isinstance(given, (list, tuple)) and isinstance(was, (list, tuple)):
        return list(given) == list(was)
    return bool(given == was)


def _shown(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return " ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    if isinstance(value, dict):
        return f"'{json.dumps(value)}'"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _run_setting_differences(values: dict[str, Any], ck: dict[str, Any], path: str) -> None:
    """ConfigError naming each setting that defines the run (RUN_SETTINGS) whose value in
    `values` is not the checkpoint's, with both values; None in `values`: left out, taken."""
    wrong = []
    for name in RUN_SETTINGS:
        given, was = values.get(name), recorded(ck, name)
        if name == "normalization" and given is None:
            continue  # left out: train() takes the checkpoint's
        if not _same_setting(name, given, was):
            then = f"with {option_of(name)} {_shown(was)}" if was is not None else f"without {option_of(name)}"
            now = "without it" if given is None else _shown(given)
            wrong.append(f"{then}, not {now}")
    if wrong:
        raise ConfigError(f"{path} was trained {'; '.join(wrong)}: a resumed run keeps the settings that define "
                          "it (leave the option out to take the checkpoint's)")


def resume_settings(given: dict[str, Any], ck: dict[str, Any], path: str) -> dict[str, Any]:
    """TrainConfig fields for a --resume of checkpoint `ck` (read from `path`): `given`, where
    None means the option was left out, with what was left out taken from the checkpoint's run.
    A setting that defines the run (RUN_SETTINGS) given with another value than the checkpoint's
    is a ConfigError naming the option and both values; RESUME_MAY_CHANGE may differ (--steps
    and --time-budget-s together: either given replaces both). The network is the checkpoint's
    (an --arch that disagrees with it is refused), so the DLA check sees the network trained."""
    out = dict(given)
    if given.get("steps") is None and given.get("time_budget_s") is None:
        out["steps"], out["time_budget_s"] = recorded(ck, "steps"), recorded(ck, "time_budget_s")
    for name in (*RUN_SETTINGS, "decay_steps", "ema_half_life_steps"):
        if given.get(name) is None:
            out[name] = recorded(ck, name)
    _run_setting_differences(out, ck, path)
    _check_arch(given.get("arch"), ck, path)
    if ck.get("arch"):
        out["arch"] = dict(ck["arch"])
    elif given.get("arch") is None:  # a checkpoint from before the network was recorded in it
        out["arch"] = recorded(ck, "arch")
    return out


def _check_arch(arch: dict[str, Any] | None, ck: dict[str, Any], path: str) -> None:
    """ConfigError where --arch (None or {}: left out) changes the network the checkpoint holds."""
    from rfclassify.model.network import arch_with_defaults

    if ck.get("arch") and arch and arch_with_defaults({**ck["arch"], **arch}) != ck["arch"]:
        raise ConfigError(f"--arch differs from the network {path} was trained with; leave it out "
                          "to continue that network")


def check_continuation(cfg: TrainConfig, ck: dict[str, Any]) -> None:
    """ConfigError unless cfg may continue checkpoint `ck` (read from cfg.resume): its network
    against --arch and the DLA at cfg's buckets, the settings that define its run against cfg's.

    The checkpoint records the whole network (since the fifth session), so a run trained with
    --arch, deepened or not, resumes without repeating it; an --arch that disagrees is refused."""
    from rfclassify.model.network import dla_arch_problems, io_problems

    _check_arch(cfg.arch, ck, cfg.resume)
    _run_setting_differences(asdict(cfg), ck, cfg.resume)
    if ck.get("arch"):  # TrainConfig checked --arch; the network trained is the checkpoint's
        problems = io_problems(ck["arch"])   # one an --arch with another n_classes trained before
        if problems:
            raise ConfigError(f"the network of {cfg.resume}: {'; '.join(problems)}")
        problems = dla_arch_problems(ck["arch"], tuple(cfg.buckets_samples))
        if problems:
            raise ConfigError(f"the network of {cfg.resume} and this bucket list would not run on the DLA: "
                              + "; ".join(problems))
