"""Temperature scaling and the open-set threshold table."""

from __future__ import annotations

import numpy as np

from rfclassify.model.calibration import (
    calibrate,
    choose_threshold,
    expected_calibration_error,
    fit_temperature,
    softmax,
    threshold_table,
)


def _overconfident(n=4000, classes=10, seed=0):
    """Labels drawn from softmax(z); the 'model' reports 4 z: right argmax, far too confident."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 1.5, (n, classes))
    p = softmax(z)
    labels = np.array([rng.choice(classes, p=row) for row in p])
    return 4.0 * z, labels


def test_temperature_scaling_lowers_ece_on_held_out_data():
    logits, labels = _overconfident()
    fit_l, fit_y, held_l, held_y = logits[:2000], labels[:2000], logits[2000:], labels[2000:]
    t = fit_temperature(fit_l, fit_y)
    assert 3.0 < t < 5.5  # the true answer is 4
    before = expected_calibration_error(softmax(held_l), held_y)
    after = expected_calibration_error(softmax(held_l / t), held_y)
    assert after < 0.5 * before
    assert (softmax(held_l / t).argmax(1) == held_l.argmax(1)).all()  # accuracy unchanged


def test_calibrate_reports_nll_drop_and_a_threshold():
    logits, labels = _overconfident(seed=1)
    cal = calibrate(logits, labels)
    assert cal["nll_after"] < cal["nll_before"]
    assert cal["ece_after"] < cal["ece_before"]
    assert cal["unknown_threshold"] in [r["threshold"] for r in cal["threshold_table"]]


def test_threshold_table_trades_coverage_for_accuracy():
    logits, labels = _overconfident(seed=2)
    table = threshold_table(softmax(logits / 4.0), labels)
    fractions = [r["accepted_fraction"] for r in table]
    assert fractions[0] == 1.0
    assert all(a >= b for a, b in zip(fractions, fractions[1:]))
    accs = [r["accepted_accuracy"] for r in table if r["accepted_fraction"] > 0.05]
    assert accs[-1] > accs[0]


def test_choose_threshold_takes_the_smallest_that_reaches_the_target():
    table = [{"threshold": 0.0, "accepted_fraction": 1.0, "accepted_accuracy": 0.6},
             {"threshold": 0.5, "accepted_fraction": 0.7, "accepted_accuracy": 0.91},
             {"threshold": 0.8, "accepted_fraction": 0.4, "accepted_accuracy": 0.97}]
    assert choose_threshold(table, target=0.9) == 0.5
    assert choose_threshold(table, target=0.95) == 0.8
    assert choose_threshold(table, target=0.99) == 0.8  # none reaches it: the strictest
