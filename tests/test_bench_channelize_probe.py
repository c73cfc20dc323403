"""benchmarks/channelize_probe.py's captures: the whole capture holds the burst and another one
far apart; the cut one is the burst's band alone, at 0 Hz."""

from __future__ import annotations

import numpy as np

from benchmark_modules import load_benchmark

probe = load_benchmark("channelize_probe")


def _in_band_share(x: np.ndarray, half_band: float) -> float:
    """Share of x's power within +-half_band (cycles per sample) of 0 Hz."""
    spectrum = np.abs(np.fft.fft(x)) ** 2
    return float(spectrum[np.abs(np.fft.fftfreq(x.size)) <= half_band].sum() / spectrum.sum())


def test_the_cut_capture_is_the_bursts_band_alone():
    labels, synthesized, whole, cut = probe.captures(4, 8, 20.0, 20.0, seed=3)
    assert len(labels) == len(synthesized) == len(whole) == len(cut) == 4
    for x, w, c in zip(synthesized, whole, cut, strict=True):
        assert w.size == 8 * x.size and c.size <= w.size / 2 + 1  # decimated at least twofold
        assert _in_band_share(w, 0.05) < 0.5              # the whole capture: the burst is off centre
        assert _in_band_share(c, 0.25) > 0.95             # cut: its band fills at most a quarter of the rate
