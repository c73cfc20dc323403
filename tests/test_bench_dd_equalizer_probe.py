"""benchmarks/dd_equalizer_probe.py measures the product's equalized scores
(rfclassify.dsp.class_equalizer, tested in test_dsp_class_equalizer.py): one burst's features
are the shipped sequence network's log-probabilities and the scores at each tap count, and its
softmax regression fuses them."""

from __future__ import annotations

import numpy as np

from rfclassify.dsp.channel import ChannelConfig
from rfclassify.dsp.synth import synthesize
from rfclassify.labels import HIGH_ORDER_LABELS

from benchmark_modules import load_benchmark

ddp = load_benchmark("dd_equalizer_probe")


def test_a_bursts_features_are_the_networks_log_probabilities_and_the_scores_per_tap_count() -> None:
    burst = synthesize(["16QAM"], 1024, np.random.default_rng(5), 30.0, ChannelConfig.clean()).iq[0]
    net, scores = ddp._burst_features((burst, 6))
    assert net.shape == (len(HIGH_ORDER_LABELS),) and abs(float(np.exp(net).sum()) - 1.0) < 1e-4
    assert len(scores) == len(ddp.TAPS)
    for s in scores:
        assert HIGH_ORDER_LABELS[int(np.argmax(s))] == "16QAM"
    assert ddp._burst_features((np.zeros(200, np.complex64), 6)) == (None, None)


def test_the_softmax_regression_separates_separable_classes() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 600)
    x = np.eye(3)[y] * 2.0 + 0.3 * rng.standard_normal((600, 3))
    w, b, mean, scale = ddp.softmax_regression(x, y, 3, steps=300)
    assert np.mean((((x - mean) / scale) @ w + b).argmax(1) == y) > 0.98
