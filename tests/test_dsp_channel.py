"""The impairment chain: each family applied with its recorded parameter, exact SNR,
determinism, argument checks. Impaired bursts are compared with the same seed's clean burst:
the modulators draw from their own stream, so the modulated signal is the same under any
channel. (Within the channel stream multipath and phase noise do move later families' draws:
tested below, and the reason no test here compares two impaired channels.)"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rfclassify._exceptions import ConfigError, InputError
from rfclassify.dsp import measure
from rfclassify.dsp.channel import FAMILIES
from rfclassify.dsp.constellations import constellation
from rfclassify.dsp.synth import PARAM_DTYPE, ChannelConfig, SynthBatch, benchmark, synthesize
from rfclassify.labels import LABELS

CLEAN = ChannelConfig.clean()
SIGNAL_LABELS = [lb for lb in LABELS if lb != "NOISE"]


def _pair(labels: list[str], cfg: ChannelConfig, n: int = 2048, seed: int = 0,
          snr_db: float | None = None) -> tuple[SynthBatch, SynthBatch]:
    clean = synthesize(labels, n, np.random.default_rng(seed), channel=CLEAN)
    impaired = synthesize(labels, n, np.random.default_rng(seed), snr_db=snr_db, channel=cfg)
    return clean, impaired


def test_every_label_shapes_dtypes_and_finite_output() -> None:
    for n in (128, 1024):
        batch = synthesize(list(LABELS), n, np.random.default_rng(0), snr_db=np.full(28, 5.0))
        assert batch.iq.shape == (28, n) and batch.iq.dtype == np.complex64
        assert batch.label_index.dtype == np.int16 and list(batch.label_index) == list(range(28))
        assert batch.snr_db.dtype == np.float32 and np.all(batch.snr_db == 5.0)
        assert batch.params.dtype == PARAM_DTYPE and batch.params.shape == (28,)
        assert np.all(np.isfinite(batch.iq)) and np.all(np.mean(np.abs(batch.iq) ** 2, axis=1) > 0)
    p = batch.params
    digital = np.isfinite(p["samples_per_symbol"])
    assert digital.sum() == 22 and np.all(np.isfinite(p["timing_offset_samples"][digital]))
    assert np.isfinite(p["message_bandwidth_cyc_per_sample"]).sum() == 5
    noise = p[LABELS.index("NOISE")]
    assert np.isnan(noise["samples_per_symbol"]) and noise["message_type"] == -1
    assert np.isnan(noise["signal_power_db"])


def test_noise_label_without_snr_is_unit_noise_and_nan_snr() -> None:
    batch = synthesize(["NOISE", "QPSK"], 4096, np.random.default_rng(1), channel=CLEAN)
    assert np.mean(np.abs(batch.iq[0]) ** 2) == pytest.approx(1.0, rel=1e-4)
    assert np.all(np.isnan(batch.snr_db))
    assert np.isnan(batch.params["noise_power_db"][1])


@pytest.mark.parametrize("snr_db", [-10.0, 0.0, 12.5, 30.0])
def test_realized_snr_is_exact_with_the_full_channel(snr_db: float) -> None:
    # Full chain except quantization (not additive): noise = noisy - (same burst, no noise),
    # signal = the same burst without the receiver's DC offset (not part of the signal).
    cfg = ChannelConfig().without("quantization")
    labels = SIGNAL_LABELS
    clean = synthesize(labels, 1024, np.random.default_rng(7), channel=cfg)
    signal = synthesize(labels, 1024, np.random.default_rng(7), channel=cfg.without("dc_offset"))
    noisy = synthesize(labels, 1024, np.random.default_rng(7), snr_db=snr_db, channel=cfg)
    noise = noisy.iq.astype(np.complex128) - clean.iq
    measured = 10 * np.log10(np.mean(np.abs(signal.iq) ** 2, axis=1) / np.mean(np.abs(noise) ** 2, axis=1))
    assert np.max(np.abs(measured - snr_db)) < 0.25
    assert np.all(noisy.snr_db == np.float32(snr_db))
    # Noise is white and circular: I and Q equal power, uncorrelated.
    ratio = np.mean(noise.real ** 2, axis=1) / np.mean(noise.imag ** 2, axis=1)
    assert np.mean(ratio) == pytest.approx(1.0, abs=0.05)
    # The channel really acted on these bursts.
    assert np.mean(clean.params["fading_type"] > 0) > 0.3
    assert np.mean(np.isfinite(clean.params["dc_offset_db"])) > 0.2


def test_noise_label_gets_requested_nominal_snr_and_only_noise() -> None:
    batch = synthesize(["NOISE"] * 3, 2048, np.random.default_rng(2), snr_db=[0.0, 10.0, 20.0], channel=CLEAN)
    assert list(batch.snr_db) == [0.0, 10.0, 20.0]
    assert np.allclose(np.mean(np.abs(batch.iq) ** 2, axis=1), 1.0, rtol=1e-4)


def test_cfo_drift_and_phase_offset_are_applied_as_recorded() -> None:
    clean, imp = _pair(["QPSK", "FM", "16QAM"], ChannelConfig.only("cfo", "phase"))
    n = np.arange(clean.iq.shape[1])
    for c, x, p in zip(clean.iq, imp.iq, imp.params, strict=True):
        phase = np.unwrap(np.angle(x * np.conj(c)))
        expected = (np.deg2rad(p["phase_offset_deg"]) + 2 * np.pi * (
            p["cfo_cyc_per_sample"] * n + 0.5 * p["cfo_drift_cyc_per_sample2"] * n * n))
        err = np.angle(np.exp(1j * (phase - expected)))
        assert np.max(np.abs(err)) < 2e-3
        assert abs(p["cfo_cyc_per_sample"]) > 0 and p["phase_offset_deg"] != 0


def test_cfo_is_measurable_from_the_signal_alone() -> None:
    # AM with carrier: the spectral line sits at the recorded offset.
    cfg = dataclasses.replace(ChannelConfig.only("cfo"), cfo_drift_cyc_per_sample2_max=0.0)
    batch = synthesize(["AM-DSB-WC"] * 4, 4096, np.random.default_rng(3), channel=cfg)
    for x, p in zip(batch.iq, batch.params, strict=True):
        spec = np.abs(np.fft.fft(x, 1 << 16))
        f_peak = np.fft.fftfreq(1 << 16)[np.argmax(spec)]
        assert f_peak == pytest.approx(float(p["cfo_cyc_per_sample"]), abs=3e-5)


def test_phase_noise_step_size_matches_level() -> None:
    clean, imp = _pair(["BPSK"] * 3, ChannelConfig.only("phase_noise"), n=8192)
    for c, x, p in zip(clean.iq, imp.iq, imp.params, strict=True):
        steps = np.diff(np.unwrap(np.angle(x * np.conj(c))))
        assert np.rad2deg(np.std(steps)) == pytest.approx(float(p["phase_noise_deg_per_sqrt_sample"]), rel=0.05)


def test_iq_imbalance_matches_recorded_gain_and_phase() -> None:
    cfg = dataclasses.replace(ChannelConfig.only("iq_imbalance"), iq_gain_imbalance_db_max=2.0,
                              iq_phase_imbalance_deg_max=10.0)
    clean, imp = _pair(["QPSK"] * 4, cfg, n=16384)
    for c, x, p in zip(clean.iq, imp.iq, imp.params, strict=True):
        i, q = x.real.astype(np.float64), x.imag.astype(np.float64)
        assert np.array_equal(i, c.real)  # I rail untouched
        # Q' = a I + b Q: gain sqrt(a^2 + b^2), LO phase error atan2(-a, b).
        (a, b), *_ = np.linalg.lstsq(np.stack([c.real, c.imag], axis=1).astype(np.float64), q, rcond=None)
        assert 20 * np.log10(np.hypot(a, b)) == pytest.approx(float(p["iq_gain_imbalance_db"]), abs=1e-3)
        assert np.rad2deg(np.arctan2(-a, b)) == pytest.approx(float(p["iq_phase_imbalance_deg"]), abs=1e-3)
        # And from the statistics alone (circular input): E[Q'^2] / E[I'^2] = g^2.
        g_db = 10 * np.log10(np.mean(q * q) / np.mean(i * i))
        assert g_db == pytest.approx(float(p["iq_gain_imbalance_db"]), abs=0.15)


def test_dc_offset_level_and_angle() -> None:
    clean, imp = _pair(["8PSK", "GMSK"], ChannelConfig.only("dc_offset"))
    for c, x, p in zip(clean.iq, imp.iq, imp.params, strict=True):
        d = x.astype(np.complex128) - c
        assert np.std(d) < 1e-6 * np.abs(d.mean())  # a constant
        rel_db = 10 * np.log10(np.abs(d.mean()) ** 2 / np.mean(np.abs(c) ** 2))
        assert rel_db == pytest.approx(float(p["dc_offset_db"]), abs=0.01)
        assert np.angle(d.mean(), deg=True) % 360 == pytest.approx(float(p["dc_offset_deg"]), abs=0.01)


def test_receiver_gain_scales_by_recorded_db() -> None:
    clean, imp = _pair(["FM", "QPSK"], ChannelConfig.only("gain"))
    for c, x, p in zip(clean.iq, imp.iq, imp.params, strict=True):
        ratio = np.abs(x) / np.maximum(np.abs(c), 1e-9)
        assert 20 * np.log10(np.median(ratio)) == pytest.approx(float(p["receiver_gain_db"]), abs=1e-3)


def test_quantization_lands_on_the_integer_grid_at_the_recorded_level() -> None:
    cfg = dataclasses.replace(ChannelConfig.only("quantization"), p_ci8=0.5)
    batch = synthesize(SIGNAL_LABELS, 2048, np.random.default_rng(5), snr_db=20.0, channel=cfg)
    codes = set(batch.params["quant_dtype_code"])
    assert codes == {1, 2}
    for x, p in zip(batch.iq, batch.params, strict=True):
        full = {1: 32767.0, 2: 127.0}[int(p["quant_dtype_code"])]
        k = np.concatenate([x.real, x.imag]).astype(np.float64) * full
        assert np.max(np.abs(k - np.rint(k))) < 1e-2 and np.max(np.abs(k)) <= full
        rms_dbfs = 10 * np.log10(np.mean(np.abs(x.astype(np.complex128)) ** 2))
        assert rms_dbfs == pytest.approx(float(p["quant_rms_dbfs"]), abs=1.0)


def test_fractional_timing_offset_is_where_recorded() -> None:
    clean, imp = _pair(["QPSK"] * 4, ChannelConfig.only("timing"))
    for x, p in zip(imp.iq, imp.params, strict=True):
        sps, beta, tau = (float(p[k]) for k in ("samples_per_symbol", "rolloff", "timing_offset_samples"))
        assert 0 <= tau < sps
        good = measure.evm_db(measure.matched_filter(x, sps, beta, tau), constellation("QPSK"))
        assert good < -35
        if 0.25 * sps < tau < 0.75 * sps:
            assert measure.evm_db(measure.matched_filter(x, sps, beta), constellation("QPSK")) > -15


def test_sample_rate_offset_is_applied_as_recorded() -> None:
    cfg = dataclasses.replace(ChannelConfig.only("sro"), sro_ppm_max=3000.0)
    batch = synthesize(["16QAM"] * 4, 4096, np.random.default_rng(6), channel=cfg)
    for x, p in zip(batch.iq, batch.params, strict=True):
        sps, beta, sro = float(p["samples_per_symbol"]), float(p["rolloff"]), float(p["sro_ppm"])
        assert measure.evm_db(measure.matched_filter(x, sps, beta, sro_ppm=sro), constellation("16QAM")) < -35
        if abs(sro) * 4096e-6 > 0.3 * sps:  # the clock slipped by a third of a symbol or more
            assert measure.evm_db(measure.matched_filter(x, sps, beta), constellation("16QAM")) > -20


def test_multipath_taps_follow_the_recorded_profile() -> None:
    # Nearly static fading, so a least-squares FIR fit recovers the tap delays.
    cfg = dataclasses.replace(ChannelConfig.only("multipath"), doppler_cyc_per_sample_range=(1e-7, 1e-7),
                              delay_spread_samples_range=(0.5, 2.0))
    clean, imp = _pair(["QPSK"] * 6, cfg, n=1024)
    kinds = set()
    for c, x, p in zip(clean.iq, imp.iq, imp.params, strict=True):
        kinds.add(int(p["fading_type"]))
        n_taps = int(p["n_taps"])
        assert n_taps == min(16, int(np.floor(5 * p["delay_spread_samples"])) + 1)
        lags = 20
        a = np.stack([np.roll(c, lag)[lags:] for lag in range(lags)], axis=1)
        h, *_ = np.linalg.lstsq(a, x[lags:], rcond=None)
        power = np.abs(h) ** 2
        assert power[n_taps:].sum() < 1e-3 * power.sum()
        assert power[n_taps - 1] > 1e-6 * power.sum()  # the last recorded tap is really there
    assert kinds == {1, 2}


def test_doppler_spectrum_is_bounded_by_recorded_max_doppler() -> None:
    cfg = dataclasses.replace(ChannelConfig.only("multipath"), p_rician=0.0,
                              doppler_cyc_per_sample_range=(2e-3, 4e-3),
                              delay_spread_samples_range=(0.01, 0.01))
    clean, imp = _pair(["FM"] * 4, cfg, n=8192)  # constant envelope: gain = ratio
    for c, x, p in zip(clean.iq, imp.iq, imp.params, strict=True):
        assert p["n_taps"] == 1 and p["fading_type"] == 1 and np.isnan(p["k_factor_db"])
        gain = x / c
        assert np.std(np.abs(gain)) > 0.05  # it fades
        spec = np.abs(np.fft.fft(gain * np.hanning(gain.size))) ** 2
        f = np.abs(np.fft.fftfreq(gain.size))
        assert spec[f > p["doppler_cyc_per_sample"] + 5e-4].sum() < 0.01 * spec.sum()


def test_rician_high_k_is_nearly_a_fixed_line_of_sight() -> None:
    cfg = dataclasses.replace(ChannelConfig.only("multipath"), p_rician=1.0, k_factor_db_range=(30.0, 30.0),
                              delay_spread_samples_range=(0.01, 0.01))
    clean, imp = _pair(["FM"] * 3, cfg, n=4096)
    for c, x, p in zip(clean.iq, imp.iq, imp.params, strict=True):
        assert p["fading_type"] == 2 and p["k_factor_db"] == 30.0
        assert np.std(np.abs(x / c)) < 0.1


def test_determinism() -> None:
    labels = list(LABELS) * 2
    a = synthesize(labels, 512, np.random.default_rng(42), snr_db=3.0)
    b = synthesize(labels, 512, np.random.default_rng(42), snr_db=3.0)
    c = synthesize(labels, 512, np.random.default_rng(43), snr_db=3.0)
    assert np.array_equal(a.iq, b.iq) and a.params.tobytes() == b.params.tobytes()
    assert not np.any(np.all(a.iq == c.iq, axis=1))
    rng = np.random.default_rng(42)
    first = synthesize(labels, 512, rng, snr_db=3.0)
    second = synthesize(labels, 512, rng, snr_db=3.0)
    assert np.array_equal(first.iq, a.iq) and not np.array_equal(first.iq, second.iq)


def test_large_mixed_batch_spans_chunks() -> None:
    labels = [LABELS[i % 28] for i in range(600)]
    batch = synthesize(labels, 64, np.random.default_rng(0), snr_db=np.linspace(-5, 20, 600))
    assert batch.iq.shape == (600, 64) and np.all(np.isfinite(batch.iq))
    assert np.array_equal(batch.label_index, [i % 28 for i in range(600)])


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"labels": ["QPSK", "WIFI"]}, "unknown label 'WIFI'"),
    ({"labels": []}, "empty"),
    ({"labels": "QPSK"}, "sequence"),
    ({"n_samples": 0}, "n_samples"),
    ({"n_samples": 10.5}, "n_samples"),
    ({"snr_db": np.array([])}, "snr_db is empty"),
    ({"snr_db": np.array([1.0, np.nan])}, "finite"),
    ({"snr_db": np.array([1.0, 2.0, 3.0])}, "3 values for 2 labels"),
    # numpy's ValueError; past about -385 dB, non-finite bursts (sixty-seventh session)
    ({"snr_db": "ten"}, 'snr_db must be numbers in dB, got "ten"'),
    ({"snr_db": np.array([1.0, -400.0])}, "snr_db must lie in -200..200 dB, got -400"),
    ({"snr_db": 1e39}, "snr_db must lie in -200..200 dB"),
    ({"kept_samples": np.array([64, 65])}, "kept_samples must be 2 integers in 1..64"),
    ({"kept_samples": np.array([10])}, "kept_samples must be 2 integers in 1..64"),
    ({"kept_samples": np.array([10.0, 20.0])}, "kept_samples must be 2 integers in 1..64"),
])
def test_bad_arguments_raise_input_error(kwargs: dict, fragment: str) -> None:
    args = {"labels": ["QPSK", "FM"], "n_samples": 64, "rng": np.random.default_rng(0)} | kwargs
    with pytest.raises(InputError, match=fragment) as err:
        synthesize(**args)
    assert "\n" not in str(err.value)


def test_channel_config_validation_and_family_selection() -> None:
    with pytest.raises(ConfigError, match="p_cfo"):
        ChannelConfig(p_cfo=1.5)
    with pytest.raises(ConfigError, match="k_factor_db_range"):
        ChannelConfig(k_factor_db_range=(10.0, 0.0))
    with pytest.raises(ConfigError, match="unknown impairment"):
        ChannelConfig.only("cfo", "lightning")
    with pytest.raises(ConfigError, match="max_taps"):
        ChannelConfig(max_taps=0)
    with pytest.raises(ConfigError, match="max_taps"):
        ChannelConfig(max_taps=2.5)
    assert ChannelConfig(p_cfo=np.float32(0.5)).p_cfo == 0.5
    only = ChannelConfig.only("multipath", "quantization")
    assert only.p_multipath == 1.0 and only.p_quantization == 1.0 and only.p_cfo == 0.0
    assert all(getattr(CLEAN, f"p_{f}") == 0.0 for f in FAMILIES)
    assert ChannelConfig().without("cfo").p_cfo == 0.0 and ChannelConfig().without("cfo").p_multipath > 0


def test_clean_channel_records_neutral_impairments() -> None:
    p = synthesize(["QPSK"], 256, np.random.default_rng(0), channel=CLEAN).params[0]
    assert p["cfo_cyc_per_sample"] == 0 and p["phase_offset_deg"] == 0 and p["timing_offset_samples"] == 0
    assert p["fading_type"] == 0 and p["n_taps"] == -1 and p["quant_dtype_code"] == 0
    assert p["receiver_gain_db"] == 0 and np.isnan(p["dc_offset_db"])


def test_benchmark_runs() -> None:
    assert benchmark(n_bursts=20, n_samples=128) > 0


def test_every_label_survives_the_shared_normalization() -> None:
    from rfclassify.dsp.windows import normalize_batch

    for snr in (None, 0.0):
        batch = synthesize(list(LABELS) * 2, 128, np.random.default_rng(12), snr_db=snr)
        x = normalize_batch(batch.iq)
        assert np.all(np.isfinite(x))
        assert np.allclose(np.mean(np.abs(x) ** 2, axis=1), 1.0, rtol=1e-3)


def test_power_amplifier_compresses_as_recorded() -> None:
    clean, imp = _pair(["16QAM", "64APSK", "AM-DSB-SC"], ChannelConfig.only("pa"), n=4096)
    for c, x, p in zip(clean.iq, imp.iq, imp.params, strict=True):
        a_in = np.abs(c).astype(np.float64)
        a_sat = np.sqrt(np.mean(a_in ** 2)) * 10 ** (p["pa_backoff_db"] / 20)
        r = a_in / a_sat
        p2 = 2 * float(p["pa_smoothness"])
        # AM/AM: Rapp curve, never above saturation; small amplitudes pass unchanged.
        np.testing.assert_allclose(np.abs(x), a_in * (1 + r ** p2) ** (-1 / p2), rtol=2e-3, atol=1e-5)
        assert np.max(np.abs(x)) < a_sat
        # AM/PM: the phase shift grows with amplitude to pa_am_pm_deg at saturation.
        big = r > 0.5
        dphi = np.angle(x[big] * np.conj(c[big]), deg=True)
        np.testing.assert_allclose(dphi, 2 * p["pa_am_pm_deg"] * r[big] ** 2 / (1 + r[big] ** 2), atol=0.05)


def test_power_amplifier_near_saturation_regrows_the_spectrum() -> None:
    cfg = dataclasses.replace(ChannelConfig.only("pa"), pa_backoff_db_range=(1.0, 3.0))
    clean, imp = _pair(["16QAM"] * 2, cfg, n=8192)
    for c, x, p in zip(clean.iq, imp.iq, imp.params, strict=True):
        edge = (1 + p["rolloff"]) / (2 * p["samples_per_symbol"]) + 0.01

        def out_of_band(z: np.ndarray) -> float:
            f, s = measure.power_spectrum(z)
            return float(s[np.abs(f) > edge].sum() / s.sum())

        assert out_of_band(x) > 10 * out_of_band(c)  # intermodulation spills past the RRC edge
        papr = lambda z: np.max(np.abs(z)) ** 2 / np.mean(np.abs(z) ** 2)  # noqa: E731
        assert papr(x) < papr(c)


@pytest.mark.parametrize("field,value", [
    ("sro_ppm_max", 1e300),                       # numpy's "maximum allowed dimension"
    ("pa_backoff_db_range", (-1e300, 0.0)),       # non-finite bursts from here down
    ("pa_smoothness_range", (-1e300, 0.0)),
    ("k_factor_db_range", (1e300, 1e301)),
    ("iq_phase_imbalance_deg_max", 1e300),
    ("dc_offset_db_range", (1e300, 1e301)),
    ("gain_db_range", (1e300, 1e301)),
    ("doppler_cyc_per_sample_range", (0.6, 0.7)),
    ("quant_rms_dbfs_range", (-1e300, -5.0)),
])
def test_settings_past_physical_bounds_are_config_errors(field, value):
    """--channel-overrides of absurd values trained on non-finite bursts or raised numpy's errors."""
    with pytest.raises(ConfigError, match=f"ChannelConfig.{field} must lie in"):
        ChannelConfig(**{field: value})
    ChannelConfig(dc_offset_db_range=(-40.0, 6.0))     # the shipped recipe's override stays valid


def test_snr_at_the_bound_gives_finite_bursts() -> None:
    for snr_db in (-200.0, 200.0):
        batch = synthesize(SIGNAL_LABELS, 256, np.random.default_rng(0), snr_db=snr_db)
        assert np.all(np.isfinite(batch.iq))
        gap = batch.params["signal_power_db"] - batch.params["noise_power_db"]
        assert np.allclose(gap, snr_db, atol=0.01)


@pytest.mark.parametrize("field,value", [
    ("gain_db_range", 5),                 # TypeError: object of type 'int' has no len()
    ("gain_db_range", ("a", "b")),        # TypeError from np.isfinite
    ("sro_ppm_max", "100"),               # TypeError from np.isfinite
    ("sro_ppm_max", [1, 2]),              # ValueError: truth value of an array
    ("max_taps", True),                   # accepted as one tap
    ("p_cfo", True),
    ("p_cfo", "0.5"),
])
def test_values_of_the_wrong_kind_are_config_errors(field, value):
    """Before the sixty-seventh session these raised numpy's TypeError / ValueError or were
    accepted as a number."""
    with pytest.raises(ConfigError, match=f"ChannelConfig.{field} must") as err:
        ChannelConfig(**{field: value})
    assert "\n" not in str(err.value)
    assert ChannelConfig(gain_db_range=[-10, np.float32(5)]).gain_db_range == (-10.0, 5.0)
    assert ChannelConfig(max_taps=np.int64(4), sro_ppm_max=np.float32(50)).max_taps == 4


def test_doppler_is_bounded_by_what_the_fading_grid_represents():
    """Fading is evaluated every 16 samples: past 1/32 cycles/sample it aliased (0.25 was read
    as about 0.04), and it keeps the Clarke correlation only up to about 1/64."""
    for bad in ((0.02, 0.03), (1e-3, 0.25)):
        with pytest.raises(ConfigError, match="doppler_cyc_per_sample_range must lie in 0..0.015625"):
            ChannelConfig(doppler_cyc_per_sample_range=bad)
    assert ChannelConfig().doppler_cyc_per_sample_range[1] < 1 / 64 / 10   # the default, far below
    ChannelConfig(doppler_cyc_per_sample_range=(1e-3, 1 / 64))


def test_kept_samples_make_the_snr_exact_over_the_kept_part() -> None:
    """rfclassify simulate crops a batch made at its longest length; the SNR held over the whole
    burst, so a burst whose power varies (AM-SSB-WC) was off by up to 7 dB in what was sent."""
    cfg = ChannelConfig().without("dc_offset", "quantization")
    labels = SIGNAL_LABELS * 2
    kept = np.random.default_rng(1).integers(257, 513, len(labels))
    clean = synthesize(labels, 512, np.random.default_rng(3), channel=cfg, kept_samples=kept)
    noisy = synthesize(labels, 512, np.random.default_rng(3), 10.0, cfg, kept_samples=kept)
    for c, x, k in zip(clean.iq, noisy.iq, kept, strict=True):
        c, x = c[:k].astype(np.complex128), x[:k].astype(np.complex128)
        realized = 10 * np.log10(np.mean(np.abs(c) ** 2) / np.mean(np.abs(x - c) ** 2))
        assert realized == pytest.approx(10.0, abs=0.01)
    gap = noisy.params["signal_power_db"] - noisy.params["noise_power_db"]
    assert np.allclose(gap, 10.0, atol=1e-3)
    # Kept at full length is the same as not given.
    a = synthesize(labels, 128, np.random.default_rng(4), 5.0, kept_samples=np.full(len(labels), 128))
    b = synthesize(labels, 128, np.random.default_rng(4), 5.0)
    assert np.allclose(a.iq, b.iq, rtol=1e-5, atol=1e-6)


def test_which_channel_draws_move_when_a_family_is_switched_on() -> None:
    """docs/synthesizer.md: the families share one channel generator, drawn in chain order;
    every family draws its parameters for every burst, applied or not, except the per-tap
    fading of multipath and the Wiener steps of phase noise, which move every later family."""
    base_families = ("cfo", "iq_imbalance", "dc_offset", "gain")

    def run(*extra: str) -> SynthBatch:
        return synthesize(["QPSK"] * 8, 256, np.random.default_rng(7), 10.0,
                          ChannelConfig.only(*base_families, *extra))

    base = run()
    same = lambda a, b, k: np.array_equal(a.params[k], b.params[k], equal_nan=True)  # noqa: E731
    later = ("iq_gain_imbalance_db", "dc_offset_db", "receiver_gain_db")
    for extra in ("pa", "timing", "sro", "phase"):    # (quantization records its AGC gain instead)
        other = run(extra)
        assert same(base, other, "cfo_cyc_per_sample") and all(same(base, other, k) for k in later), extra
    with_multipath = run("multipath")
    assert not same(base, with_multipath, "cfo_cyc_per_sample")
    assert not any(same(base, with_multipath, k) for k in later)
    with_phase_noise = run("phase_noise")
    assert same(base, with_phase_noise, "cfo_cyc_per_sample")
    assert not any(same(base, with_phase_noise, k) for k in later)
    # The modulation stream never moves: every family against the clean burst is a fair test.
    for other in (with_multipath, with_phase_noise):
        assert same(base, other, "samples_per_symbol") and same(base, other, "rolloff")


def test_rician_power_split_is_as_documented() -> None:
    """docs/synthesizer.md chain step 3: scattered taps carry p_l / (K+1), tap 0 adds a line
    of sight of power p_0 K / (K+1); the recorded K is tap 0's own K-factor."""
    from rfclassify.dsp import channel

    tau, k_db = 3.0, 10.0
    cfg = dataclasses.replace(ChannelConfig.only("multipath"), p_rician=1.0, k_factor_db_range=(k_db, k_db),
                              delay_spread_samples_range=(tau, tau), doppler_cyc_per_sample_range=(1e-7, 1e-7))
    pad, k_lin = cfg.max_taps - 1, 10 ** (k_db / 10)
    x = np.zeros((3000, pad + 32), np.complex64)
    x[:, pad] = 1                                       # an impulse: y[:, l] is tap l
    y, p = channel.multipath(x, pad, cfg, np.random.default_rng(0))
    assert np.all(p["n_taps"] == 16) and np.all(p["k_factor_db"] == k_db)
    pdp = np.exp(-np.arange(16) / tau)
    pdp /= pdp.sum()
    h = y[:, :16].astype(np.complex128)
    power = np.mean(np.abs(h) ** 2, axis=0)
    assert power[0] == pytest.approx(pdp[0], rel=0.05)                        # LOS + scattered
    assert power[1:] == pytest.approx(pdp[1:] / (k_lin + 1), rel=0.15)          # scattered only
    assert power.sum() == pytest.approx((pdp[0] * k_lin + 1) / (k_lin + 1), rel=0.05)
    # Tap 0 is a ray of power L plus scattering of mean power s: across bursts |h0|^2 varies
    # by about s^2 + 2 L s, which splits its mean power into L = K s.
    los_power = pdp[0] * k_lin / (k_lin + 1)
    scattered0 = pdp[0] / (k_lin + 1)
    var = np.var(np.abs(h[:, 0]) ** 2)
    assert var == pytest.approx(scattered0 ** 2 + 2 * los_power * scattered0, rel=0.15)
