"""The shipped model's metadata file (`models/model.json`): what every backend needs to run it.

Written by training/export/evaluation, read by every backend. Keeping it in one frozen
dataclass means the pipeline, the backends and the model card agree on labels, buckets,
temperature and the open-set threshold.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rfclassify._exceptions import ModelNotFoundError
from rfclassify.dsp.rate import SymbolRateNormalizer
from rfclassify.dsp.windows import BucketPolicy
from rfclassify.labels import LABELS

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
        path = Path(model_dir) / META_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        data = asdict(self)  # json writes its tuples (labels, buckets) as lists
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, model_dir: str | os.PathLike[str]) -> ModelMeta:
        path = Path(model_dir) / META_FILE
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ModelNotFoundError(f"no model in {model_dir}: {META_FILE} is missing") from None
        except (OSError, ValueError) as exc:
            raise ModelNotFoundError(f"cannot read {path}: {exc}") from None
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def default_model_dir() -> Path:
    """$RFCLASSIFY_MODEL_DIR, else the `models/` folder shipped beside the package."""
    env = os.environ.get("RFCLASSIFY_MODEL_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "models"
