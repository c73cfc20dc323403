"""Window aggregation and result records, on hand-made logits."""

from __future__ import annotations

import numpy as np
import pytest

from rfclassify.engine.results import aggregate_windows, log_softmax, make_result, reject_result
from rfclassify.labels import LABELS, UNKNOWN_LABEL


def test_log_softmax_is_stable_and_normalized():
    lp = log_softmax(np.array([[1000.0, 0.0, -1000.0]]))
    assert np.isfinite(lp).all() and np.exp(lp).sum() == pytest.approx(1.0)


def test_aggregation_is_the_normalized_geometric_mean_after_temperature():
    logits = np.array([[2.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
    probs, snr = aggregate_windows(logits, np.array([3.0, 5.0]), temperature=2.0)
    p = np.exp(logits / 2.0) / np.exp(logits / 2.0).sum(1, keepdims=True)
    geo = np.sqrt(p[0] * p[1])
    np.testing.assert_allclose(probs, geo / geo.sum(), rtol=1e-9)
    assert snr == pytest.approx(4.0)


def test_mean_log_probability_equals_softmax_of_the_mean_scaled_logits():
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 3.0, size=(5, len(LABELS)))
    probs, _ = aggregate_windows(logits, np.zeros(5), temperature=1.5)
    mean = logits.mean(0) / 1.5
    np.testing.assert_allclose(probs, np.exp(mean) / np.exp(mean).sum(), rtol=1e-9)


def test_make_result_thresholds_and_orders_top():
    probs = np.full(len(LABELS), 0.01)
    probs[LABELS.index("QPSK")] = 0.5
    probs[LABELS.index("BPSK")] = 0.23
    probs /= probs.sum()
    ok = make_result(probs, 7.0, LABELS, n_samples=1000, bucket=512, windows=3, top_k=3)
    assert ok.label == "QPSK" and [n for n, _ in ok.top] == ["QPSK", "BPSK", ok.top[2][0]]
    low = make_result(probs, 7.0, LABELS, n_samples=1000, bucket=512, windows=3,
                      unknown_threshold=0.9)
    assert low.label == UNKNOWN_LABEL and low.best_guess == "QPSK" and low.confidence == ok.confidence


def test_reject_result_is_unambiguous():
    r = reject_result("too_short", "10 samples", 10)
    assert not r.ok and r.label is None and r.top == () and r.windows == 0
    assert r.to_dict() == {"reason": "too_short", "detail": "10 samples", "n_samples": 10}
