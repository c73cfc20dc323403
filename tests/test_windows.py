"""The length-bucket rule and per-burst normalization shared by training and serving."""

import json
import math

import numpy as np
import pytest

from rfclassify._exceptions import ConfigError, MessageError
from rfclassify.dsp.windows import (
    DC_CAP,
    NORMALIZATIONS,
    BucketPolicy,
    burst_to_windows,
    central,
    check_normalization,
    normalize_batch,
    normalize_burst,
    to_model_input,
)
from rfclassify.model.meta import META_FILE, ModelMeta


def _tone(n, rng):
    return (np.exp(2j * np.pi * 0.01 * np.arange(n)) * 3 + 0.5 + rng.normal(size=n) * 0.1).astype(np.complex64)


def test_normalize_removes_dc_and_sets_unit_rms():
    rng = np.random.default_rng(0)
    x = normalize_burst(_tone(1000, rng))
    assert x.dtype == np.complex64
    assert abs(x.mean()) < 1e-5
    assert np.mean(np.abs(x) ** 2) == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize("scale", [1e-300, 1e-20, 1e160, 1e300])
@pytest.mark.parametrize("normalization", ["remove_dc", "keep_dc"])
def test_normalize_is_scale_free_even_where_float64_cannot_square_the_samples(scale, normalization):
    """A complex128 burst (the Python API takes any) of any finite magnitude normalizes as it
    does at unit scale, with no overflow warning (an error here); its power once overflowed or
    fell under the floor and the burst was called zero_power."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal(600) + 1j * rng.standard_normal(600) + 0.3
    np.testing.assert_allclose(normalize_burst(x * scale, normalization), normalize_burst(x, normalization),
                               rtol=1e-6, atol=1e-6)



@pytest.mark.parametrize(
    ("iq", "reason"),
    [
        (np.zeros(256, np.complex64), "zero_power"),
        (np.full(256, 1 + 1j, np.complex64), "zero_power"),  # pure DC has nothing left
        (np.array([np.nan] + [1.0] * 255, np.complex64), "non_finite"),
        # a signalling NaN (random payload bytes make them): rejected, not a warning (an error here)
        (np.frombuffer(bytes.fromhex("0100807f00000000") + np.ones(255, np.complex64).tobytes(), "<c8"),
         "non_finite"),
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
        {"normalization": "keepdc"},
        {"normalization": ""},
    ],
)
def test_bad_policy_is_a_config_error(kwargs):
    with pytest.raises(ConfigError):
        BucketPolicy(**kwargs)


def test_a_rate_normalizer_is_refused_with_keep_dc():
    from rfclassify.dsp.rate import SymbolRateNormalizer
    from rfclassify.model.training_data import DataRecipe

    BucketPolicy(rate=SymbolRateNormalizer(4.0))  # remove_dc: fine
    with pytest.raises(ConfigError, match="remove_dc normalization only"):
        BucketPolicy(rate=SymbolRateNormalizer(4.0), normalization="keep_dc")
    with pytest.raises(ConfigError, match="remove_dc normalization only"):
        DataRecipe(target_sps=4.0, normalization="keep_dc")


# -- keep_dc: the mean kept, relative to the rest ------------------------------------------


def _with_dc(n, dc, rng, amplitude=1.0):
    """A tone of `amplitude` plus small noise plus a DC offset `dc` (complex64)."""
    t = np.arange(n)
    x = amplitude * np.exp(2j * np.pi * 0.01 * t) + 0.1 * (rng.normal(size=n) + 1j * rng.normal(size=n)) + dc
    return x.astype(np.complex64)


def _scaled_mean(x):
    """The burst's mean in units of the RMS of its mean-free part (float64, independent of the code)."""
    x = x.astype(np.complex128)
    m = x.mean()
    return m / math.sqrt(np.mean(np.abs(x - m) ** 2))


def test_normalizations_are_the_two_documented_ones():
    assert NORMALIZATIONS == ("remove_dc", "keep_dc")
    assert BucketPolicy().normalization == "remove_dc"  # the default every older model means
    for name in NORMALIZATIONS:
        assert check_normalization(name) == name


def test_keep_dc_is_remove_dc_plus_the_mean_in_the_same_scale():
    rng = np.random.default_rng(10)
    x = _with_dc(1000, 2.0 - 1.0j, rng, amplitude=3.0) * 7  # the overall scale must not matter
    kept, removed = normalize_burst(x, "keep_dc"), normalize_burst(x, "remove_dc")
    expected_dc = _scaled_mean(x)
    assert 0.5 < abs(expected_dc) < DC_CAP  # below the cap: kept as is
    assert kept.dtype == np.complex64 and kept.shape == x.shape
    np.testing.assert_allclose(kept - removed, np.full(x.shape, expected_dc), atol=1e-5)
    assert complex(kept.astype(np.complex128).mean()) == pytest.approx(expected_dc, abs=1e-5)
    # the mean-free part has unit RMS (not the whole burst: its power is 1 + |dc|^2)
    free = kept.astype(np.complex128) - kept.astype(np.complex128).mean()
    assert np.mean(np.abs(free) ** 2) == pytest.approx(1.0, rel=1e-5)
    assert np.mean(np.abs(kept) ** 2) == pytest.approx(1.0 + abs(expected_dc) ** 2, rel=1e-4)


def test_keep_dc_of_a_dc_free_burst_is_remove_dc():
    rng = np.random.default_rng(11)
    x = _with_dc(1024, 0.0, rng)
    x = (x - x.mean()).astype(np.complex64)
    np.testing.assert_allclose(normalize_burst(x, "keep_dc"), normalize_burst(x), atol=1e-6)


@pytest.mark.parametrize("phase_rad", [0.0, 0.7, -2.5, math.pi / 2])
def test_keep_dc_caps_a_strong_mean_and_keeps_its_phase(phase_rad):
    rng = np.random.default_rng(12)
    dc = 50.0 * np.exp(1j * phase_rad)  # ~50x the RMS of the rest: far above DC_CAP
    x = _with_dc(2048, dc, rng)
    assert abs(_scaled_mean(x)) > 2 * DC_CAP
    kept = normalize_burst(x, "keep_dc").astype(np.complex128)
    m = kept.mean()
    assert abs(m) == pytest.approx(DC_CAP, rel=1e-5)
    # the burst's own mean direction (phase_rad, give or take the tone's and noise's mean)
    assert np.angle(m / _scaled_mean(x)) == pytest.approx(0.0, abs=1e-5)
    assert np.angle(m * np.exp(-1j * phase_rad)) == pytest.approx(0.0, abs=0.01)
    # the cap touches only the mean: the rest is still the remove_dc burst
    np.testing.assert_allclose(kept - m, normalize_burst(x), atol=1e-5)


def test_normalize_batch_matches_per_burst_for_keep_dc():
    rng = np.random.default_rng(13)
    dcs = [0.0, 0.3 + 0.4j, -2.0j, 30.0 * np.exp(1j * 2.0)]  # none, small, large, capped
    batch = np.stack([_with_dc(512, dc, rng) * (i + 1) for i, dc in enumerate(dcs)])
    got = normalize_batch(batch, "keep_dc")
    assert got.dtype == np.complex64
    expected = np.stack([normalize_burst(row, "keep_dc") for row in batch])
    np.testing.assert_allclose(got, expected, atol=1e-4)
    assert abs(got[3].mean()) == pytest.approx(DC_CAP, rel=1e-4)  # the capped row
    assert abs(got[2].mean()) > 1.0  # and the large one not removed
    np.testing.assert_allclose(normalize_batch(batch), np.stack([normalize_burst(r) for r in batch]), atol=1e-5)


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_normalize_batch_zero_power_rows_stay_zeros(normalization):
    rng = np.random.default_rng(14)
    batch = np.stack([_with_dc(256, 1.0, rng), np.zeros(256, np.complex64),
                      np.full(256, 1 + 1j, np.complex64)])  # all zeros; pure DC: nothing left after DC removal
    got = normalize_batch(batch, normalization)
    assert np.all(np.isfinite(got))
    assert not got[1].any() and not got[2].any()
    np.testing.assert_allclose(got[0], normalize_burst(batch[0], normalization), atol=1e-5)


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
@pytest.mark.parametrize("value", [0.1 + 0.3j, 12345.6 - 789.1j])  # the second at ci16 scale
def test_a_constant_burst_has_no_power_even_when_rounding_leaves_a_residue(normalization, value):
    # the mean of an inexact constant is not exact: the residue must not be scaled up to unit RMS
    row = np.full(1000, value, np.complex64)
    with pytest.raises(MessageError) as err:
        normalize_burst(row, normalization)
    assert err.value.reason == "zero_power"
    assert not normalize_batch(row[None, :], normalization).any()


@pytest.mark.parametrize(
    ("iq", "reason"),
    [
        (np.full(256, 3 - 4j, np.complex64), "zero_power"),  # a DC-only burst: nothing to scale the DC by
        (np.array([np.inf] + [1.0] * 255, np.complex64), "non_finite"),
    ],
)
def test_keep_dc_rejects_what_remove_dc_rejects(iq, reason):
    with pytest.raises(MessageError) as err:
        normalize_burst(iq, "keep_dc")
    assert err.value.reason == reason


def test_unknown_normalization_is_a_config_error():
    x = _with_dc(256, 1.0, np.random.default_rng(15))
    for call in (lambda: normalize_burst(x, "keep-dc"), lambda: normalize_batch(x[None, :], "none"),
                 lambda: check_normalization("KEEP_DC"), lambda: BucketPolicy(normalization="raw")):
        with pytest.raises(ConfigError, match="remove_dc, keep_dc"):
            call()


def test_keep_dc_policy_keeps_the_dc_in_every_window():
    rng = np.random.default_rng(16)
    iq = _with_dc(3000, 1.5 + 1.5j, rng)
    dc = _scaled_mean(iq)
    w = burst_to_windows(iq, BucketPolicy(normalization="keep_dc"))
    x = normalize_burst(iq, "keep_dc")
    assert w.bucket_samples == 2048 and w.n_windows == 2
    for start, win in zip(BucketPolicy().window_starts(3000), w.windows):
        np.testing.assert_array_equal(win, x[start:start + 2048])  # slices of the keep_dc burst
        assert abs(win.mean() - dc) < 0.05  # each window carries the burst's DC
    plain = burst_to_windows(iq, BucketPolicy())
    assert all(abs(win.mean()) < 0.05 for win in plain.windows)  # remove_dc: gone
    # a short burst: its keep_dc samples, then zero padding (not the DC) to the bucket
    short = burst_to_windows(iq[:100], BucketPolicy(normalization="keep_dc"))
    np.testing.assert_array_equal(short.windows[0, :100], normalize_burst(iq[:100], "keep_dc"))
    assert not short.windows[0, 100:].any()


def _old_normalize_burst(iq):
    """normalize_burst before keep_dc existed (git history), for the remove_dc regression check."""
    x = np.asarray(iq).astype(np.complex128, copy=False)
    x = x - x.mean()
    return (x / math.sqrt(float(np.mean(x.real**2 + x.imag**2)))).astype(np.complex64)


def _old_normalize_batch(iq):
    x = np.asarray(iq, dtype=np.complex64)
    x = x - x.mean(axis=1, keepdims=True)
    power = np.mean(x.real**2 + x.imag**2, axis=1, keepdims=True)
    scale = np.where(power > 1e-30, 1.0 / np.sqrt(np.maximum(power, 1e-30)), 0.0)
    return (x * scale).astype(np.complex64)


def test_remove_dc_is_unchanged_and_the_default():
    rng = np.random.default_rng(17)
    batch = np.stack([_with_dc(700, dc, rng) for dc in (0.0, 2.0, 40j)])
    for row in batch:
        np.testing.assert_allclose(normalize_burst(row), _old_normalize_burst(row), rtol=0, atol=1e-7)
        np.testing.assert_array_equal(normalize_burst(row), normalize_burst(row, "remove_dc"))
    np.testing.assert_array_equal(normalize_batch(batch), _old_normalize_batch(batch))
    np.testing.assert_array_equal(normalize_batch(batch, "remove_dc"), _old_normalize_batch(batch))
    a = burst_to_windows(batch[2], BucketPolicy())
    b = burst_to_windows(batch[2], BucketPolicy(normalization="remove_dc"))
    np.testing.assert_array_equal(a.windows, b.windows)
    np.testing.assert_allclose(a.windows[0], _old_normalize_burst(batch[2])[:512], rtol=0, atol=1e-7)


# -- model.json records the normalization --------------------------------------------------


def test_model_json_without_normalization_loads_as_remove_dc(tmp_path):
    ModelMeta(model_id="old").save(tmp_path)
    data = json.loads((tmp_path / META_FILE).read_text())
    del data["normalization"]  # as written before keep_dc existed
    (tmp_path / META_FILE).write_text(json.dumps(data))
    meta = ModelMeta.load(tmp_path)
    assert meta.normalization == "remove_dc"
    assert meta.bucket_policy.normalization == "remove_dc"


def test_keep_dc_model_json_round_trips_into_the_policy(tmp_path):
    ModelMeta(model_id="new", normalization="keep_dc").save(tmp_path)
    assert json.loads((tmp_path / META_FILE).read_text())["normalization"] == "keep_dc"
    meta = ModelMeta.load(tmp_path)
    assert meta.normalization == "keep_dc"
    assert meta.bucket_policy.normalization == "keep_dc"
    assert meta.with_updates(temperature=2.0).bucket_policy.normalization == "keep_dc"
    with pytest.raises(ConfigError, match="unknown normalization"):
        ModelMeta(model_id="bad", normalization="dc").bucket_policy


def test_central_keeps_the_middle_entries_and_leaves_short_arrays_whole():
    x = np.arange(10)
    np.testing.assert_array_equal(central(x, 4), [3, 4, 5, 6])
    np.testing.assert_array_equal(central(x, 3), [3, 4, 5])        # of two central choices, the earlier
    assert central(x, 10) is x and central(x, 50) is x
