"""From the network's per-window outputs to one result per burst.

For a burst cut into W windows with logits z (W, C) and SNR estimates s (W,):

* temperature scaling: log p_w = log_softmax(z_w / T), T = ModelMeta.temperature;
* aggregation: the mean of the windows' log-probabilities, renormalized, i.e. p ∝ exp(mean_w
  log p_w): a normalized geometric mean (the same as the softmax of the mean scaled logits).
  Each window's evidence adds in log space, scaled by 1/W so a long burst is not made
  over-confident by its window count; W = 1 gives exactly that window's softmax;
* SNR estimate: the mean of s over the windows;
* open-set rejection: if the top probability is below ModelMeta.unknown_threshold the label
  is ``unknown``; the best guess stays first in ``top``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rfclassify.labels import UNKNOWN_LABEL


@dataclass(frozen=True)
class ClassificationResult:
    """The classification of one burst, or why it could not be classified (``ok`` False).

    A rejected burst has ``label`` None, ``reject_reason`` a short code (too_short,
    non_finite, zero_power, bad_shape, bad_dtype) and ``reject_detail`` a sentence.
    """

    ok: bool
    label: str | None
    confidence: float | None            # calibrated probability of top[0]
    top: tuple[tuple[str, float], ...]  # (label, p), best first; top[0] is the best guess
    snr_db: float | None                # the network's SNR estimate, mean over windows
    n_samples: int
    bucket: int | None                  # window length in samples
    windows: int                        # number of windows averaged
    sample_rate_hz: float | None = None  # recorded only: no resampling is done
    reject_reason: str | None = None
    reject_detail: str | None = None
    #: calibrated class probabilities (n_labels,), model label order; None when rejected
    probabilities: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def best_guess(self) -> str | None:
        """The most probable model label, even when ``label`` is ``unknown``."""
        return self.top[0][0] if self.top else None

    def to_dict(self) -> dict[str, Any]:
        """The classification fields of a `result` record (DESIGN.md), or of a `reject` record."""
        if not self.ok:
            return {"reason": self.reject_reason, "detail": self.reject_detail,
                    "n_samples": self.n_samples}
        return {
            "label": self.label,
            "confidence": self.confidence,
            "top": [{"label": name, "p": p} for name, p in self.top],
            "snr_db": self.snr_db,
            "n_samples": self.n_samples,
            "bucket": self.bucket,
            "windows": self.windows,
        }


def log_softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """log_softmax(logits / temperature) over the last axis, in float64 for stability."""
    z = np.asarray(logits, dtype=np.float64) / float(temperature)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def aggregate_windows(logits: np.ndarray, snr_db: np.ndarray, temperature: float = 1.0
                      ) -> tuple[np.ndarray, float]:
    """(probabilities (C,), snr_db) of one burst from its windows' (W, C) logits and (W,) SNRs."""
    lg = np.asarray(logits)
    if lg.ndim != 2 or lg.shape[0] < 1:
        raise ValueError(f"expected logits of shape (windows>=1, labels), got {lg.shape}")
    mean_logp = log_softmax(lg, temperature).mean(axis=0)
    probs = np.exp(mean_logp - mean_logp.max())
    probs /= probs.sum()
    return probs, float(np.mean(np.asarray(snr_db, dtype=np.float64)))


def make_result(probs: np.ndarray, snr_db: float, labels: tuple[str, ...], *, n_samples: int,
                bucket: int, windows: int, unknown_threshold: float = 0.0, top_k: int = 5,
                sample_rate_hz: float | None = None) -> ClassificationResult:
    """A ClassificationResult from a burst's aggregated probabilities."""
    order = np.argsort(-probs, kind="stable")[: max(1, top_k)]
    top = tuple((labels[i], round(float(probs[i]), 6)) for i in order)
    confidence = float(probs[order[0]])
    label = labels[order[0]] if confidence >= unknown_threshold else UNKNOWN_LABEL
    return ClassificationResult(
        ok=True, label=label, confidence=round(confidence, 6), top=top,
        snr_db=round(float(snr_db), 3), n_samples=int(n_samples), bucket=int(bucket),
        windows=int(windows), sample_rate_hz=sample_rate_hz,
        probabilities=np.asarray(probs, dtype=np.float32))


def reject_result(reason: str, detail: str, n_samples: int,
                  sample_rate_hz: float | None = None) -> ClassificationResult:
    """The result of a burst that could not be classified."""
    return ClassificationResult(
        ok=False, label=None, confidence=None, top=(), snr_db=None, n_samples=int(n_samples),
        bucket=None, windows=0, sample_rate_hz=sample_rate_hz, reject_reason=reason,
        reject_detail=detail)
