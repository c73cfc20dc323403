"""Confidence calibration: temperature scaling, expected calibration error, the open-set threshold.

Temperature scaling (Guo et al. 2017) divides the logits by one scalar T fitted to minimize
the negative log-likelihood on held-out data; it changes confidences, never the argmax. The
open-set rule then reports ``unknown`` when the calibrated top-1 probability is below
``unknown_threshold`` (the best guess stays in ``top``).
"""

from __future__ import annotations

import numpy as np

# the serving path's temperature-scaled log-softmax: the fitted T is applied by the same code
from rfclassify.engine.results import log_softmax

#: Thresholds tabulated in the model card (accepted fraction vs accuracy).
THRESHOLDS: tuple[float, ...] = (0.0, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)

#: The default threshold is the smallest tabulated one whose accepted bursts reach this accuracy.
TARGET_ACCEPTED_ACCURACY = 0.90


def softmax(logits: np.ndarray) -> np.ndarray:
    return np.exp(log_softmax(logits))


def nll(logits: np.ndarray, labels: np.ndarray, temperature: float = 1.0) -> float:
    """Mean negative log-likelihood of `labels` under softmax(logits / temperature)."""
    lp = log_softmax(logits, temperature)
    return float(-lp[np.arange(len(labels)), np.asarray(labels)].mean())


def fit_temperature(logits: np.ndarray, labels: np.ndarray,
                    bounds: tuple[float, float] = (0.05, 20.0)) -> float:
    """The temperature T in `bounds` minimizing held-out NLL of softmax(logits / T)."""
    from scipy.optimize import minimize_scalar

    if len(labels) == 0:
        raise ValueError("cannot fit a temperature on no examples")
    res = minimize_scalar(lambda log_t: nll(logits, labels, float(np.exp(log_t))),
                          bounds=(np.log(bounds[0]), np.log(bounds[1])), method="bounded",
                          options={"xatol": 1e-4})
    return float(np.exp(res.x))


def expected_calibration_error(probs: np.ndarray, labels: np.ndarray, n_bins: int = 15) -> float:
    """ECE: |accuracy - confidence| of top-1 predictions, averaged over equal-width confidence bins."""
    p = np.asarray(probs)
    conf = p.max(axis=1)
    correct = p.argmax(axis=1) == np.asarray(labels)
    bins = np.minimum((conf * n_bins).astype(int), n_bins - 1)
    ece = 0.0
    for b in range(n_bins):
        m = bins == b
        if m.any():
            ece += m.mean() * abs(correct[m].mean() - conf[m].mean())
    return float(ece)


def threshold_table(probs: np.ndarray, labels: np.ndarray,
                    thresholds: tuple[float, ...] = THRESHOLDS) -> list[dict[str, float]]:
    """Per threshold: fraction of bursts accepted (not 'unknown') and the accuracy among them."""
    p = np.asarray(probs)
    conf = p.max(axis=1)
    correct = p.argmax(axis=1) == np.asarray(labels)
    rows = []
    for t in thresholds:
        acc_mask = conf >= t
        rows.append({
            "threshold": float(t),
            "accepted_fraction": float(acc_mask.mean()) if len(conf) else 0.0,
            "accepted_accuracy": float(correct[acc_mask].mean()) if acc_mask.any() else float("nan"),
        })
    return rows


def choose_threshold(table: list[dict[str, float]], target: float = TARGET_ACCEPTED_ACCURACY) -> float:
    """Smallest tabulated threshold whose accepted accuracy reaches `target` (else the largest)."""
    for row in sorted(table, key=lambda r: r["threshold"]):
        if row["accepted_accuracy"] >= target:
            return float(row["threshold"])
    return float(max(r["threshold"] for r in table))


def calibrate(logits: np.ndarray, labels: np.ndarray) -> dict[str, object]:
    """Fit T, measure ECE before/after, tabulate thresholds and pick the default one."""
    t = fit_temperature(logits, labels)
    before = softmax(logits)
    after = softmax(np.asarray(logits, np.float64) / t)
    table = threshold_table(after, labels)
    return {
        "temperature": t,
        "nll_before": nll(logits, labels),
        "nll_after": nll(logits, labels, t),
        "ece_before": expected_calibration_error(before, labels),
        "ece_after": expected_calibration_error(after, labels),
        "threshold_table": table,
        "unknown_threshold": choose_threshold(table),
        "n_examples": int(len(labels)),
    }
