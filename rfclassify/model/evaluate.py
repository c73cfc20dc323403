"""Accuracy measurements: per SNR, per class, per length bucket, confusion matrices, SNR error.

`accuracy_summary` is the one place the numbers are defined (training validation and
`rfclassify evaluate` both use it). `evaluate_file` runs an HDF5 dataset through the real
serving path (`rfclassify.engine.classifier.Classifier`) and writes tables and figures.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from rfclassify.labels import LABELS, NOISE_LABEL

log = logging.getLogger(__name__)

#: Range over which the SNR estimate's mean absolute error is reported (the goal: <= 2 dB).
SNR_MAE_RANGE_DB = (0.0, 20.0)
HIGH_SNR_DB = 10.0
EVAL_FILE = "evaluation.json"


def snr_bin_centres(snr_db: np.ndarray, width_db: float = 2.0) -> np.ndarray:
    """SNR of each example rounded to its bin: the values themselves on a grid of <= 64 levels."""
    s = np.asarray(snr_db, np.float64)
    finite = s[np.isfinite(s)]
    if np.unique(finite).size <= 64:
        return s
    return np.round(s / width_db) * width_db


def accuracy_summary(labels: np.ndarray, pred: np.ndarray, snr_db: np.ndarray,
                     snr_est_db: np.ndarray | None = None) -> dict[str, Any]:
    """Accuracy overall, mean over SNR bins, at SNR >= 10 dB, per SNR bin, and SNR estimate MAE.

    The SNR MAE counts non-NOISE examples with true SNR in SNR_MAE_RANGE_DB."""
    y = np.asarray(labels)
    correct = np.asarray(pred) == y
    snr = np.asarray(snr_db, np.float64)
    bins = snr_bin_centres(snr)
    per_snr = []
    for c in np.unique(bins[np.isfinite(bins)]):
        m = bins == c
        per_snr.append({"snr_db": float(c), "n": int(m.sum()), "accuracy": float(correct[m].mean())})
    high = snr >= HIGH_SNR_DB
    out: dict[str, Any] = {
        "n": int(y.size),
        "accuracy": float(correct.mean()) if y.size else float("nan"),
        "mean_accuracy_over_snr": float(np.mean([r["accuracy"] for r in per_snr])) if per_snr else float("nan"),
        "accuracy_snr_ge_10db": float(correct[high].mean()) if high.any() else float("nan"),
        "per_snr": per_snr,
    }
    if snr_est_db is not None:
        lo, hi = SNR_MAE_RANGE_DB
        m = (y != LABELS.index(NOISE_LABEL)) & (snr >= lo) & (snr <= hi)
        err = np.abs(np.asarray(snr_est_db, np.float64) - snr)
        out["snr_mae_db_0_20"] = float(err[m].mean()) if m.any() else float("nan")
        out["snr_mae_n"] = int(m.sum())
    return out


def per_class_accuracy(labels: np.ndarray, pred: np.ndarray, names: tuple[str, ...] = LABELS,
                       mask: np.ndarray | None = None) -> dict[str, float]:
    """Accuracy of each true class (optionally within `mask`); classes absent from the data are left out."""
    y, p = np.asarray(labels), np.asarray(pred)
    if mask is not None:
        y, p = y[mask], p[mask]
    return {names[c]: float((p[y == c] == c).mean()) for c in range(len(names)) if (y == c).any()}


def confusion(labels: np.ndarray, pred: np.ndarray, n_classes: int = len(LABELS)) -> np.ndarray:
    """Counts (true, predicted)."""
    cm = np.zeros((n_classes, n_classes), np.int64)
    np.add.at(cm, (np.asarray(labels), np.asarray(pred)), 1)
    return cm
