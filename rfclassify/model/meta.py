"""The shipped model's metadata file (`models/model.json`): what every backend needs to run it.

Written by training/export/evaluation, read by every backend. Keeping it in one frozen
dataclass means the pipeline, the backends and the model card agree on labels, buckets,
temperature and the open-set threshold.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rfclassify._atomic import write_atomic
from rfclassify._exceptions import ModelNotFoundError, quoted
from rfclassify._numbers import as_finite_float
from rfclassify.dsp.rate import SymbolRateNormalizer
from rfclassify.dsp.windows import BucketPolicy
from rfclassify.labels import LABELS
from rfclassify.model.network import arch_problems

META_FILE = "model.json"
INPUT_NAME = "iq"                      # float32 (batch, 2, 1, length)
OUTPUT_NAMES = ("logits", "snr_db")    # (batch, n_labels), (batch,)


@dataclass(frozen=True)
class ModelMeta:
    """Everything needed to run a trained model, as stored in model.json."""

    model_id: str
    labels: tuple[str, ...] = LABELS
    buckets_samples: tuple[int, ...] = BucketPolicy().buckets_samples
    min_samples: int = BucketPolicy().min_samples
    max_windows: int = BucketPolicy().max_windows
    temperature: float = 1.0            # logits are divided by this before softmax
    unknown_threshold: float = 0.0      # calibrated top-1 probability below this -> "unknown"
    arch: dict[str, Any] = field(default_factory=dict)  # network constructor kwargs
    weights_file: str = "model.pt"      # torch state_dict
    onnx_file: str = "model.onnx"       # fp32, dynamic batch and length
    int8_onnx_file: str = ""            # Q/DQ ONNX, once calibrated
    #: SymbolRateNormalizer.to_dict() when the model was trained on rate-normalized bursts;
    #: empty (older models too) = bursts go to the network at their own rate
    symbol_rate: dict[str, Any] = field(default_factory=dict)
    #: per-burst normalization the model was trained with (rfclassify.dsp.windows.NORMALIZATIONS);
    #: older model.json files lack it and mean the only one they had, remove_dc
    normalization: str = "remove_dc"
    #: the constellation refiner fitted on this model (rfclassify.engine.refiner): file, sha256,
    #: classes, fit report, and optionally serve_rate_rule, the rate rule its bursts are clocked
    #: by when served unless the caller names one (absent: the rule it was fitted on; a refit
    #: drops it); empty (older models too) = the network decides alone
    refiner: dict[str, Any] = field(default_factory=dict)
    #: the low-order refiner (the same kind, over labels.LOW_ORDER_LABELS, from the invariants
    #: alone): file, sha256, classes, fit report; empty (older models too) = none
    low_order_refiner: dict[str, Any] = field(default_factory=dict)
    #: a burst of at least refiner_skip_min_samples whose network top probability is above
    #: refiner_skip_above keeps the network's answer: no DC pass and no refiner for it (their
    #: CPU saved where they would not change it); 1.0 (older models too): every burst goes
    #: through them
    refiner_skip_above: float = 1.0
    refiner_skip_min_samples: int = 0
    #: the probabilities of a burst that skips are sharpened by this temperature (p ** (1 / T),
    #: renormalized; the decision unchanged), fitted on held-out skipped bursts: the network's
    #: confidence alone sits below their accuracy; 1.0: as the network gave them
    refiner_skip_temperature: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", tuple(self.labels))
        object.__setattr__(self, "buckets_samples", tuple(int(b) for b in self.buckets_samples))

    @property
    def bucket_policy(self) -> BucketPolicy:
        return BucketPolicy(self.buckets_samples, self.min_samples, self.max_windows,
                            SymbolRateNormalizer.from_dict(self.symbol_rate), self.normalization)

    @property
    def training_recipe(self) -> dict[str, Any]:
        """The data recipe the network was trained with, as model.json records it ({} where it
        records none)."""
        return dict(self.extra.get("training", {}).get("recipe", {}))

    @property
    def channel_overrides(self) -> dict[str, Any]:
        """The training recipe's changes to the impairment chain (DataRecipe.channel_overrides):
        what bursts drawn "from the model's recipe" are synthesized with."""
        return dict(self.training_recipe.get("channel_overrides", {}))

    def with_updates(self, **changes: Any) -> ModelMeta:
        return replace(self, **changes)

    def save(self, model_dir: str | os.PathLike[str]) -> Path:
        data = asdict(self)  # json writes its tuples (labels, buckets) as lists
        return write_atomic(Path(model_dir) / META_FILE, json.dumps(data, indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, model_dir: str | os.PathLike[str]) -> ModelMeta:
        path = Path(model_dir) / META_FILE
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ModelNotFoundError(f"no model in {model_dir}: {META_FILE} is missing") from None
        except (OSError, ValueError, RecursionError) as exc:
            raise ModelNotFoundError(f"cannot read {path}: {exc}") from None
        if not isinstance(data, dict):
            raise ModelNotFoundError(f"{path}: expected a JSON object, got a JSON {type(data).__name__}")
        known = set(cls.__dataclass_fields__)
        fields_ = {k: v for k, v in data.items() if k in known}
        problems = [f"{path}: {problem}" for problem in _problems(fields_)]
        if problems:
            raise ModelNotFoundError("\n".join(problems))
        return cls(**fields_)


def _problems(data: dict[str, Any]) -> list[str]:
    """What is wrong with model.json's fields (those present), one line each: a file edited by
    hand (docs/model.md: unknown_threshold may be) must not serve NaN probabilities or call
    every burst unknown, nor end in a traceback."""
    out: list[str] = []

    def number(key: str, lo: float, hi: float, lo_open: bool = False) -> None:
        if key not in data:
            return
        v = as_finite_float(data[key])
        if v is None or not ((lo < v if lo_open else lo <= v) and v <= hi):
            where = f"> {lo:g}" if hi == math.inf else f"in {'(' if lo_open else '['}{lo:g}, {hi:g}]"
            out.append(f"{key} must be a finite number {where}, got {quoted(data[key])}")

    def integer(key: str, lo: int) -> None:
        if key in data and (isinstance(data[key], bool) or not isinstance(data[key], int) or data[key] < lo):
            out.append(f"{key} must be an integer >= {lo}, got {quoted(data[key])}")

    def kind(key: str, types: tuple[type, ...], what: str) -> None:
        if key in data and not isinstance(data[key], types):
            out.append(f"{key} must be {what}, got {quoted(data[key])}")

    number("temperature", 0.0, math.inf, lo_open=True)
    number("unknown_threshold", 0.0, 1.0)
    number("refiner_skip_above", 0.0, 1.0)
    number("refiner_skip_temperature", 0.0, math.inf, lo_open=True)
    integer("min_samples", 1)
    integer("max_windows", 1)
    integer("refiner_skip_min_samples", 0)
    # the one field without a default (older files rely on the others'): missing, it was once a
    # TypeError from the constructor, a traceback in every command that loads a model
    if "model_id" not in data:
        out.append("model_id is missing (a non-empty string naming the model, as train writes it)")
    elif not isinstance(data["model_id"], str) or not data["model_id"].strip():
        out.append(f"model_id must be a non-empty string, got {quoted(data['model_id'])}")
    for key in ("weights_file", "onnx_file", "int8_onnx_file", "normalization"):
        kind(key, (str,), "a string")
    for key in ("arch", "symbol_rate", "refiner", "low_order_refiner", "extra"):
        kind(key, (dict,), "a JSON object")
    if isinstance(data.get("arch"), dict):
        out += [f"arch.{problem}" for problem in arch_problems(data["arch"])]

    def refiner_files(key: str, info: Any) -> None:
        # the file a refiner is read from and its recorded digest (null: not checked)
        if not isinstance(info, dict):
            return
        if "file" in info and not isinstance(info["file"], str):
            out.append(f"{key}.file must be a string, got {quoted(info['file'])}")
        if info.get("sha256") is not None and not isinstance(info["sha256"], str):
            out.append(f"{key}.sha256 must be a string or null, got {quoted(info['sha256'])}")
        if key == "refiner" and "light" in info:
            if isinstance(info["light"], dict):
                refiner_files("refiner.light", info["light"])
            else:
                out.append(f"refiner.light must be a JSON object, got {quoted(info['light'])}")

    refiner_files("refiner", data.get("refiner"))
    refiner_files("low_order_refiner", data.get("low_order_refiner"))
    labels = data.get("labels", LABELS)
    if not isinstance(labels, list | tuple) or not all(isinstance(x, str) for x in labels):
        out.append(f"labels must be a list of strings, got {quoted(labels)}")
    else:   # results, evaluation and the refiners index LABELS by name (evaluate's KeyError before the 66th session)
        unknown = [x for x in labels if x not in LABELS]
        if unknown:
            out.append(f"labels must be rfclassify's label names (rfclassify.labels.LABELS); not: {quoted(unknown)}")
        if len(set(labels)) != len(labels):
            out.append(f"labels must not repeat, got {quoted(labels)}")
    extra = data.get("extra")
    if isinstance(extra, dict):
        out += _extra_problems(extra)
    buckets = data.get("buckets_samples", [1])
    if not isinstance(buckets, list | tuple) or not buckets or not all(
            isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in buckets) \
            or list(buckets) != sorted(set(buckets)):
        out.append(f"buckets_samples must be increasing positive integers, got {quoted(buckets)}")
    return out


def _extra_problems(extra: dict[str, Any]) -> list[str]:
    """The types of the records export and calibrate keep in extra, which the TensorRT plan and
    calibrate read (a damaged one was an AttributeError, ValueError or TypeError there before the
    sixty-sixth session)."""
    out: list[str] = []
    for key in ("export", "int8", "tensorrt_int8"):
        record = extra.get(key)
        if record is None:
            continue
        if not isinstance(record, dict):
            out.append(f"extra.{key} must be a JSON object, got {quoted(record)}")
            continue
        for name, value in record.items():
            if name.endswith("_file") and not isinstance(value, str):
                out.append(f"extra.{key}.{name} must be a string, got {quoted(value)}")
            # the digests that tie the files to this model.json (rfclassify.model.provenance)
            if (name == "sha256" or name.endswith("_sha256")) and name != "static_sha256" \
                    and value is not None and not isinstance(value, str):
                out.append(f"extra.{key}.{name} must be a string or null, got {quoted(value)}")
        for name in ("static_files", "static_sha256"):
            value = record.get(name)
            if value is not None and not (isinstance(value, dict) and all(
                    isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
                out.append(f"extra.{key}.{name} must map bucket names to strings, got {quoted(value)}")
        batch = record.get("static_batch")
        if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
            out.append(f"extra.{key}.static_batch must be an integer >= 1 or null, got {quoted(batch)}")
    return out


def default_model_dir() -> Path:
    """$RFCLASSIFY_MODEL_DIR, else the `models/` folder shipped beside the package."""
    env = os.environ.get("RFCLASSIFY_MODEL_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "models"
