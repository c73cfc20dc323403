"""Two evaluations of one dataset compared burst for burst: the accuracy difference and its standard error.

Model variants now differ by a few tenths of a point, less than the test split's own sampling
error (about 0.5 points at 1024 samples and >= 10 dB). Measured on the same bursts, most
bursts are right or wrong under both, and only the bursts that flip carry the difference; its
standard error is then far below either accuracy's. ``rfclassify evaluate --predictions``
writes each burst's outcome (``predictions.npz``); ``paired_difference`` compares two such
files made from the same dataset, for the summary numbers ``rfclassify evaluate`` reports
(mean accuracy over the SNR grid, accuracy at SNR >= 10 dB), per length bucket.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from rfclassify._exceptions import ConfigError
from rfclassify._npz import open_npz
from rfclassify.model.evaluate import HIGH_SNR_DB, snr_bin_centres

PREDICTIONS_FILE = "predictions.npz"
_FIELDS = ("truth", "pred", "snr_db", "bucket")
_OPTIONAL_FIELDS = ("probabilities", "snr_estimate_db")   # files written before the forty-third session lack them


def save_predictions(path: str | Path, dataset: dict[str, Any], truth: np.ndarray, pred: np.ndarray,
                     snr_db: np.ndarray, bucket: np.ndarray, probabilities: np.ndarray | None = None,
                     snr_estimate_db: np.ndarray | None = None) -> Path:
    """Write one evaluation's per-burst outcome: true and predicted label index (-1: not
    classified or not a model label), true SNR, the burst's bucket, and what identifies the
    dataset (file name, seed, burst count) so that only evaluations of the same one compare.
    Where given, also the served probabilities over the model's labels (float16; zeros for a
    burst not classified) and the model's SNR estimate, for decision-level studies that
    should not classify the bursts again."""
    path = Path(path)
    extra: dict[str, np.ndarray] = {}
    if probabilities is not None:
        extra["probabilities"] = np.asarray(probabilities, np.float16)
    if snr_estimate_db is not None:
        extra["snr_estimate_db"] = np.asarray(snr_estimate_db, np.float32)
    np.savez_compressed(path, truth=np.asarray(truth, np.int16), pred=np.asarray(pred, np.int16),
                        snr_db=np.asarray(snr_db, np.float32), bucket=np.asarray(bucket, np.int32),
                        dataset=np.array(f"{dataset['file']}|seed={dataset['seed']}|n={dataset['n_bursts']}"),
                        **extra)
    return path


def load_predictions(path: str | Path) -> dict[str, Any]:
    """A predictions.npz (or the evaluation directory holding one) as arrays and its dataset key,
    with the probabilities and SNR estimates where the file has them. ConfigError for a
    missing file or one that is not a predictions file."""
    path = Path(path)
    if path.is_dir():
        path = path / PREDICTIONS_FILE
    try:
        with open_npz(path) as z:
            out: dict[str, Any] = {k: z[k] for k in _FIELDS}
            out["dataset"] = str(z["dataset"])
            out.update({k: z[k] for k in _OPTIONAL_FIELDS if k in z.files})
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such predictions file (rfclassify evaluate --predictions writes one)") from None
    except (KeyError, ValueError, OSError) as e:
        raise ConfigError(f"{path}: not a predictions file from rfclassify evaluate ({e})") from None
    return out


def _mean_over_snr(d: np.ndarray, snr: np.ndarray) -> tuple[float, float]:
    """Mean over the SNR bins of the per-bin mean of d, and its standard error (the bins'
    sample variances over their counts, summed, over the number of bins squared)."""
    bins = snr_bin_centres(snr)
    means, variances = [], []
    for c in np.unique(bins[np.isfinite(bins)]):
        x = d[bins == c]
        means.append(x.mean())
        variances.append(x.var(ddof=1) / x.size if x.size > 1 else 0.0)
    if not means:
        return math.nan, math.nan
    return float(np.mean(means)), float(math.sqrt(sum(variances)) / len(means))


def _pooled(d: np.ndarray) -> tuple[float, float]:
    """The mean of d over all its bursts and its standard error."""
    if d.size == 0:
        return math.nan, math.nan
    return float(d.mean()), float(math.sqrt(d.var(ddof=1) / d.size)) if d.size > 1 else 0.0


def paired_difference(a: dict[str, Any], b: dict[str, Any], high_snr_db: float = HIGH_SNR_DB) -> dict[str, Any]:
    """B's accuracy minus A's on the same bursts, overall and per bucket: mean over the SNR
    grid and at SNR >= high_snr_db, each with its standard error, and how many bursts
    flipped each way. As `rfclassify evaluate` counts them, bursts either evaluation did
    not classify (rejected) and bursts of a label the model lacks are left out, so the
    difference is that of the two evaluations' own numbers where both rejected the same
    bursts. ConfigError where the two come from different datasets."""
    if a["dataset"] != b["dataset"]:
        raise ConfigError(f"the evaluations are of different datasets: {a['dataset']} and {b['dataset']}")
    if not (np.array_equal(a["truth"], b["truth"]) and np.array_equal(a["snr_db"], b["snr_db"])):
        raise ConfigError("the evaluations disagree on the bursts' truth or SNR: not the same dataset")
    keep = (a["truth"] >= 0) & (a["pred"] >= 0) & (b["pred"] >= 0)
    right_a = (a["pred"] == a["truth"])[keep]
    right_b = (b["pred"] == b["truth"])[keep]
    d = right_b.astype(np.float64) - right_a
    snr = a["snr_db"][keep].astype(np.float64)
    bucket = a["bucket"][keep]

    def summary(m: np.ndarray) -> dict[str, Any]:
        mean, mean_se = _mean_over_snr(d[m], snr[m])
        high, high_se = _pooled(d[m & (snr >= high_snr_db)])
        return {"n": int(m.sum()), "mean_over_snr": mean, "mean_over_snr_se": mean_se,
                "snr_ge_10db": high, "snr_ge_10db_se": high_se,
                "b_only_right": int(np.sum(d[m] > 0)), "a_only_right": int(np.sum(d[m] < 0))}

    every = np.ones(d.size, bool)
    return {"dataset": a["dataset"], "overall": summary(every),
            "per_bucket": {str(int(k)): summary(bucket == k) for k in np.unique(bucket)}}


def format_difference(diff: dict[str, Any], name_a: str = "A", name_b: str = "B") -> str:
    """The paired difference as a table, in points (B - A, +- one standard error)."""
    lines = [f"{name_b} - {name_a} on {diff['dataset']} (points, +- one standard error)",
             f"{'bucket':>8} {'bursts':>7} {'mean over SNR':>16} {'at >= 10 dB':>16} {'only B right':>13} "
             f"{'only A right':>13}"]
    rows = [*diff["per_bucket"].items(), ("all", diff["overall"])]
    for name, s in rows:
        lines.append(f"{name:>8} {s['n']:>7} {100 * s['mean_over_snr']:>+9.2f} +- {100 * s['mean_over_snr_se']:.2f}"
                     f" {100 * s['snr_ge_10db']:>+9.2f} +- {100 * s['snr_ge_10db_se']:.2f}"
                     f" {s['b_only_right']:>13} {s['a_only_right']:>13}")
    return "\n".join(lines)
