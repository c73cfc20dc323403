"""The length-bucket rule and per-burst normalization shared by training and serving."""

import numpy as np
import pytest

from rfclassify._exceptions import ConfigError, MessageError
from rfclassify.dsp.windows import (
    BucketPolicy,
    burst_to_windows,
    normalize_batch,
    normalize_burst,
    to_model_input,
)


def _tone(n, rng):
    return (np.exp(2j * np.pi * 0.01 * np.arange(n)) * 3 + 0.5 + rng.normal(size=n) * 0.1).astype(np.complex64)


def test_normalize_removes_dc_and_sets_unit_rms():
    rng = np.random.default_rng(0)
    x = normalize_burst(_tone(1000, rng))
    assert x.dtype == np.complex64
    assert abs(x.mean()) < 1e-5
    assert np.mean(np.abs(x) ** 2) == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize(
    ("iq", "reason"),
    [
        (np.zeros(256, np.complex64), "zero_power"),
        (np.full(256, 1 + 1j, np.complex64), "zero_power"),  # pure DC has nothing left
        (np.array([np.nan] + [1.0] * 255, np.complex64), "non_finite"),
        (np.ones((4, 64), np.complex64), "bad_shape"),
    ],
)
def test_normalize_rejects_bursts_it_cannot_normalize(iq, reason):
    with pytest.raises(MessageError) as err:
        normalize_burst(iq)
    assert err.value.reason == reason


def test_normalize_batch_matches_per_burst():
    rng = np.random.default_rng(1)
    batch = np.stack([_tone(512, rng) * (i + 1) for i in range(4)])
    expected = np.stack([normalize_burst(row) for row in batch])
    np.testing.assert_allclose(normalize_batch(batch), expected, atol=1e-5)


@pytest.mark.parametrize(
    ("n", "bucket", "n_windows"),
    [
        (64, 128, 1),      # shortest accepted: padded
        (127, 128, 1),
        (128, 128, 1),     # exact fit: nothing cropped or padded
        (1000, 512, 3),    # between buckets: the largest bucket that fits, overlapping windows
        (1024, 1024, 1),
        (1500, 1024, 2),
        (4096, 4096, 1),
        (6144, 4096, 2),
        (100_000, 4096, 16),  # capped at max_windows
    ],
)
def test_bucket_rule(n, bucket, n_windows):
    policy = BucketPolicy()
    assert policy.bucket_for(n) == bucket
    starts = policy.window_starts(n)
    assert len(starts) == n_windows
    if n >= bucket:
        assert starts[0] == 0 and starts[-1] == n - bucket  # windows span the whole burst
        assert np.all(np.diff(starts) > 0)
        if n_windows < policy.max_windows and n_windows > 1:
            assert np.all(np.diff(starts) <= bucket // 2)  # nominal half overlap or more


def test_too_short_is_rejected():
    with pytest.raises(MessageError) as err:
        BucketPolicy().bucket_for(63)
    assert err.value.reason == "too_short"


def test_windows_are_slices_of_the_normalized_burst():
    rng = np.random.default_rng(2)
    iq = _tone(1500, rng)
    w = burst_to_windows(iq, BucketPolicy())
    x = normalize_burst(iq)
    assert w.bucket_samples == 1024 and w.n_windows == 2 and w.n_samples == 1500
    np.testing.assert_array_equal(w.windows[0], x[:1024])
    np.testing.assert_array_equal(w.windows[1], x[-1024:])


def test_short_burst_is_zero_padded_at_the_end():
    rng = np.random.default_rng(3)
    iq = _tone(100, rng)
    w = burst_to_windows(iq, BucketPolicy())
    assert w.windows.shape == (1, 128)
    np.testing.assert_array_equal(w.windows[0, :100], normalize_burst(iq))
    assert not np.any(w.windows[0, 100:])


def test_model_input_layout():
    w = np.array([[1 + 2j, 3 + 4j]], np.complex64)
    x = to_model_input(w)
    assert x.shape == (1, 2, 1, 2) and x.dtype == np.float32
    assert x[0, 0, 0].tolist() == [1, 3] and x[0, 1, 0].tolist() == [2, 4]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"buckets_samples": ()},
        {"buckets_samples": (256, 128)},
        {"buckets_samples": (127,)},
        {"min_samples": 0},
        {"min_samples": 200},
        {"max_windows": 0},
    ],
)
def test_bad_policy_is_a_config_error(kwargs):
    with pytest.raises(ConfigError):
        BucketPolicy(**kwargs)
