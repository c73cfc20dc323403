"""Cutting one band out of a wideband capture: where it lands, what is kept out, at what rate."""

from __future__ import annotations

import numpy as np
import pytest

from rfclassify.dsp.channelize import MIN_SAMPLES, OVERSAMPLE, channelize, decimation


def _tone(n: int, cycles_per_sample: float, amplitude: float = 1.0) -> np.ndarray:
    return (amplitude * np.exp(2j * np.pi * cycles_per_sample * np.arange(n))).astype(np.complex64)


def test_decimation_keeps_at_least_oversample_times_the_band():
    assert decimation(10e6, 100e3) == 25                      # 10 MHz / (4 x 100 kHz)
    assert decimation(10e6, 99e3) == 25 and decimation(10e6, 101e3) == 24
    assert decimation(1e6, 400e3) == 1 and decimation(1e6, 2e6) == 1   # the band fills the capture
    for rate, band in ((20e6, 37e3), (2.4e6, 150e3), (1e6, 249e3)):
        assert rate / decimation(rate, band) >= OVERSAMPLE * band
    with pytest.raises(ValueError, match="positive"):
        decimation(1e6, 0.0)


def test_the_band_lands_at_zero_hz_and_what_lies_beyond_it_is_kept_out():
    fs, n = 8e6, 80_000
    band_centre, band = 1.5e6, 100e3
    # the wanted signal 10 kHz above the band's centre; an interferer 10x its amplitude 300 kHz
    # below, past the new rate's Nyquist (200 kHz): unfiltered, it would fold to +100 kHz
    x = _tone(n, (band_centre + 10e3) / fs) + _tone(n, (band_centre - 300e3) / fs, 10.0)
    y, rate = channelize(x, fs, band_centre, band)
    assert rate == fs / 20 and y.dtype == np.complex64 and abs(y.size - n / 20) <= 1
    spectrum = np.abs(np.fft.fft(y[200:-200] * np.hanning(y.size - 400))) ** 2
    freqs = np.fft.fftfreq(y.size - 400, 1 / rate)
    peak = freqs[np.argmax(spectrum)]
    assert abs(peak - 10e3) < 2 * rate / (y.size - 400)       # the wanted tone, mixed down by the band's centre
    kept = spectrum[np.abs(freqs - 10e3) < 5e3].sum()
    rest = spectrum[np.abs(freqs - 10e3) >= 5e3].sum()
    assert rest < 1e-3 * kept                                 # the 20 dB louder interferer is 50 dB down


def test_a_very_narrow_band_is_decimated_only_down_to_min_samples():
    # a 100 Hz band in 10 MHz would be decimated 25,000x: 8 samples of this burst, a too_short reject
    y, rate = channelize(_tone(200_000, 50.0 / 10e6), 10e6, 0.0, 100.0)
    assert rate == 10e6 / (200_000 // MIN_SAMPLES) and y.size >= MIN_SAMPLES


def test_a_band_as_wide_as_the_capture_is_only_mixed():
    x = _tone(4096, 0.1)
    y, rate = channelize(x, 1e6, 0.1e6, 0.5e6)
    assert rate == 1e6 and y.size == 4096
    np.testing.assert_allclose(y, np.ones(4096, np.complex64), atol=1e-3)
