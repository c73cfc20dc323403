"""Symbol-rate normalization: the blind estimate, the resampling grid, and how serving uses it."""

from __future__ import annotations

import numpy as np
import pytest

from rfclassify._exceptions import ConfigError, MessageError
from rfclassify.dsp.rate import RESAMPLE_GRID, SymbolRateNormalizer, estimate_sps, snr_offset_db
from rfclassify.dsp.synth import synthesize
from rfclassify.dsp.windows import BucketPolicy, burst_to_windows, normalize_batch
from rfclassify.model.meta import ModelMeta

HIGH_ORDER = ["16QAM", "64QAM", "16PSK", "32APSK", "QPSK", "8PSK"]


def _bursts(n, length, snr_db, seed=0):
    sb = synthesize([HIGH_ORDER[i % len(HIGH_ORDER)] for i in range(n)], length,
                    np.random.default_rng(seed), snr_db=np.full(n, snr_db))
    return normalize_batch(sb.iq), sb.params["samples_per_symbol"]


def test_grid_spans_two_octaves_in_quarter_octaves():
    d = np.array([down / up for up, down in RESAMPLE_GRID])
    np.testing.assert_allclose(np.log2(d) * 4, np.arange(-4, 9), atol=0.065)  # each within 1.1 %


def test_estimate_is_within_25_percent_at_high_snr():
    x, sps = _bursts(240, 1024, 20.0)
    ratio = estimate_sps(x) / sps
    assert np.mean(np.abs(ratio - 1) < 0.25) >= 0.9


def test_normalizer_brings_the_rate_near_the_target():
    x, sps = _bursts(240, 1024, 20.0, seed=1)
    rate = SymbolRateNormalizer(4.0)
    k = rate.grid_index(x)
    d = np.array([RESAMPLE_GRID[i][1] / RESAMPLE_GRID[i][0] for i in k])
    after = sps / d
    assert np.ptp(np.log2(sps)) > 2.5  # the input spans 2..16 samples/symbol
    assert np.mean((after > 3.0) & (after < 5.3)) >= 0.9


def test_apply_decimates_a_slow_burst_and_reports_the_snr_gain():
    rng = np.random.default_rng(2)
    sb = synthesize(["QPSK"] * 40, 1024, rng, snr_db=np.full(40, 25.0))
    i = int(np.argmax(sb.params["samples_per_symbol"]))  # the slowest symbol rate drawn
    assert sb.params["samples_per_symbol"][i] > 10
    y, offset = SymbolRateNormalizer(4.0).apply(normalize_batch(sb.iq[i:i + 1])[0])
    assert y.dtype == np.complex64 and len(y) < 1024 / 2
    assert np.mean(np.abs(y) ** 2) == pytest.approx(1.0, rel=1e-4)
    assert offset == pytest.approx(10 * np.log10(1024 / len(y)), abs=0.1)


def test_snr_offset_is_zero_when_interpolating():
    assert snr_offset_db(0) == 0.0 and snr_offset_db(4) == 0.0  # 2x up, 1:1
    assert snr_offset_db(len(RESAMPLE_GRID) - 1) == pytest.approx(10 * np.log10(4))


def test_target_out_of_range_is_a_config_error():
    with pytest.raises(ConfigError, match="target_sps"):
        SymbolRateNormalizer(0.5)


def test_model_json_turns_it_on_and_older_models_keep_the_plain_pipeline(tmp_path):
    assert ModelMeta(model_id="old").bucket_policy.rate is None
    ModelMeta(model_id="new", symbol_rate={"target_sps": 4.0}).save(tmp_path)
    assert ModelMeta.load(tmp_path).bucket_policy.rate == SymbolRateNormalizer(4.0)
    for bad in ({"target_sps": "fast"}, {"sps": 4}, [4]):
        with pytest.raises(ConfigError, match="symbol_rate must look like"):
            ModelMeta(model_id="bad", symbol_rate=bad).bucket_policy


def test_windows_bucket_by_the_resampled_length_and_keep_the_received_one():
    x, sps = _bursts(60, 1024, 25.0, seed=3)
    policy = BucketPolicy(rate=SymbolRateNormalizer(4.0))
    slow = int(np.argmax(sps))
    fast = int(np.argmin(sps))
    w_slow = burst_to_windows(x[slow], policy)
    w_fast = burst_to_windows(x[fast], policy)
    assert w_slow.n_samples == w_fast.n_samples == 1024
    assert w_slow.bucket_samples <= 512 and w_slow.snr_offset_db > 3  # decimated
    # ~2 sps: interpolated, so longer than received: more than one window of its bucket
    assert w_fast.bucket_samples >= 1024 and w_fast.n_windows > 1 and w_fast.snr_offset_db == 0.0
    plain = burst_to_windows(x[slow], BucketPolicy())
    assert plain.bucket_samples == 1024 and plain.snr_offset_db == 0.0


def test_minimum_is_checked_before_resampling_and_short_results_are_padded():
    policy = BucketPolicy(rate=SymbolRateNormalizer(4.0))
    with pytest.raises(MessageError) as err:
        burst_to_windows(np.ones(63, np.complex64) + np.arange(63), policy)
    assert err.value.reason == "too_short"
    x, sps = _bursts(60, 64, 30.0, seed=4)
    w = burst_to_windows(x[int(np.argmax(sps))], policy)  # 64 samples decimated below the minimum
    assert w.bucket_samples == 128 and w.windows.shape == (1, 128)
    assert np.count_nonzero(w.windows[0]) < 64 and not np.any(w.windows[0, 64:])


def test_cached_antialias_taps_resample_exactly_as_scipy_default():
    from scipy.signal import resample_poly

    from rfclassify.dsp.rate import _antialias_taps

    x = (np.random.default_rng(5).standard_normal((2, 300)) + 1j).astype(np.complex64)
    for up, down in RESAMPLE_GRID:
        if up != down:
            ours = resample_poly(x, up, down, axis=1, window=_antialias_taps(up, down))
            np.testing.assert_array_equal(ours, resample_poly(x, up, down, axis=1))


def test_classifier_reports_the_full_band_snr(tiny_model_dir, tmp_path):
    import shutil

    from rfclassify.engine.classifier import Classifier

    model_dir = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model_dir)
    ModelMeta.load(model_dir).with_updates(symbol_rate={"target_sps": 4.0}).save(model_dir)
    x, sps = _bursts(30, 1024, 25.0, seed=6)
    slow = x[int(np.argmax(sps))]
    with Classifier.load(model_dir, backend="onnxruntime") as clf:
        cut = burst_to_windows(slow, clf.policy)
        assert cut.snr_offset_db > 3 and cut.bucket_samples < 1024  # the tiny set's evaluation relies on this
        _, net_snr = clf.infer_windows(cut.bucket_samples, cut.windows)
        (r,) = clf.classify([slow])
        # the daemon's batch path reports the same result
        from rfclassify.serve.batching import Batch, Pending
        from rfclassify.serve.bursts import Burst
        from rfclassify.serve.pipeline import EngineAdapter

        burst = Burst(iq=slow)
        (d,) = EngineAdapter(clf).classify_batch(
            Batch(cut.bucket_samples, [Pending(burst, burst_to_windows(burst.iq, clf.policy))]))
    assert r.bucket == cut.bucket_samples and r.n_samples == 1024
    assert r.snr_db == pytest.approx(float(net_snr.mean()) - cut.snr_offset_db, abs=2e-3)
    assert d.snr_db == r.snr_db and d.label == r.label
