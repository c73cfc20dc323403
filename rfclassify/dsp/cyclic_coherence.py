"""A burst's symbol rate from its spectral coherence: the cycle frequency at which its spectrum
correlates with itself shifted, read in narrow frequency bands so multipath does not cancel it.

A linearly modulated burst is cyclostationary at its symbol rate 1/T: the spectrum at f
correlates with the spectrum at f + 1/T (in the roll-off band, where the pulse's copies
overlap). The |x|^2 line of symbol_clock.rate_lines is that correlation summed over the whole
band: Sum_k X(k + m) X*(k) is the |x|^2 spectrum at m. Under multipath the channel turns the
phase of X(k + m) X*(k) along k, so the sum cancels, and at a low roll-off the line is weak
beside the burst's continuous part: on the twelve high-order classes at >= 10 dB, 1024 samples,
the served clock's rate was more than 2 % off for 6.8 % of bursts, which held 27 % of their
errors (thirty-first session, docs/model.md). Here the correlation is summed coherently only
over SMOOTHING_CYCLES of frequency (narrower than a channel's coherence bandwidth) and its
power summed over the band:

    S(m) = Sum_k |Sum_{j<L} X(k+j+m) X*(k+j)|^2  /  Sum_k A_L(k+m) A_L(k),   A_L = Sum_{j<L} |X(k+j)|^2

(the spectral coherence, near 1 / L for noise), for every shift m at once: expanding the
square, the numerator is Sum_{|d|<L} (L - |d|) times the circular autocorrelation of
Q_d(k) = X(k) X*(k + d) at lag m, so it costs L transform pairs, not one per shift. The
strongest peak of S over the synthesizer's rates (relative to its local mean, so the slow
rise towards small shifts does not win) is the rate: within 2 % for 99.5 % of those bursts
against 93.2 % by the served rule, and more often at every length and at 0..8 dB except at
128 samples, where neither is often right.
"""

from __future__ import annotations

import math

import numpy as np

from rfclassify.dsp.synth import SPS_RANGE

#: the transform is PAD x the burst's length: finer shifts place the peak more exactly (unpadded,
#: at 4096 samples, the rate error's median was 3x, its 90th percentile 4x: thirty-first session)
PAD = 2
SMOOTHING_CYCLES = 1.0 / 64          # the band each correlation is summed over coherently (cycles/sample)
MIN_BINS, MAX_BINS = 8, 64           # ... as transform bins, at least and at most
RANGE_MARGIN = 1.1                   # rates searched: SPS_RANGE widened by this factor each way
LOCAL_MEAN_SHIFTS = 41               # a peak is scored against S's mean over this many shifts around it
MIN_SAMPLES = 16                     # shorter bursts have no rate here


def _circular_sum(v: np.ndarray, width: int) -> np.ndarray:
    """Sum_{j<width} v(k - j) for every k, v circular: a running sum ending at each bin (so
    centred (width - 1) / 2 bins before it)."""
    if width <= 1:
        return v
    return np.convolve(np.r_[v[v.size - width + 1:], v], np.ones(width), "valid")


def smoothing_bins(n_fft: int) -> int:
    """L: the transform bins of SMOOTHING_CYCLES in an n_fft-point transform, within MIN_BINS..MAX_BINS."""
    return int(min(max(round(SMOOTHING_CYCLES * n_fft), MIN_BINS), MAX_BINS))


def coherence(x: np.ndarray, bins: int | None = None) -> np.ndarray:
    """S(m) for every shift m = 0 .. n_fft - 1 (cycle frequency m / n_fft cycles/sample; the
    spectrum is circular) of burst x, its transform PAD x its length; bins: L (default
    smoothing_bins). Zero where the burst has no power."""
    x = np.asarray(x, np.complex128).reshape(-1)
    n_fft = PAD * x.size
    spec = np.fft.fft(x, n_fft)
    width = smoothing_bins(n_fft) if bins is None else int(bins)
    num = np.zeros(n_fft)
    for d in range(width):
        q = spec * np.conj(np.roll(spec, -d))               # Q_d(k) = X(k) X*(k + d)
        lag = np.fft.ifft(np.abs(np.fft.fft(q)) ** 2).real  # Sum_k Q_d(k + m) Q_d*(k), every m
        num += (width if d == 0 else 2 * (width - d)) * lag  # Q_-d is Q_d conjugated and moved: twice its real part
    power = np.abs(spec) ** 2
    banded = _circular_sum(power, width)
    den = np.fft.ifft(np.abs(np.fft.fft(banded)) ** 2).real
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    return out


def coherence_lines(x: np.ndarray, n_candidates: int = 1) -> list[tuple[float, float]]:
    """Up to n_candidates (samples per symbol, strength: the peak over S's local mean) of burst
    x, strongest first: the peaks of coherence(x) over the rates SPS_RANGE allows (widened by
    RANGE_MARGIN), each placed between shifts by a parabola through its log. Empty for a burst
    shorter than MIN_SAMPLES, without power or not finite."""
    from scipy.ndimage import uniform_filter1d
    from scipy.signal import find_peaks

    x = np.asarray(x).reshape(-1)
    if x.size < MIN_SAMPLES or not np.all(np.isfinite(x)) or not np.any(x):
        return []
    n_fft = PAD * x.size
    s = coherence(x)
    lo = max(int(math.floor(n_fft / (SPS_RANGE[1] * RANGE_MARGIN))), 2)
    hi = min(int(math.ceil(n_fft * RANGE_MARGIN / SPS_RANGE[0])), n_fft // 2)
    if hi - lo < 3:
        return []
    shifts = np.arange(lo, hi + 1)
    band = s[shifts]
    local = uniform_filter1d(band, LOCAL_MEAN_SHIFTS, mode="nearest")
    ratio = np.where(local > 0, band / np.where(local > 0, local, 1.0), 0.0)
    peaks, _ = find_peaks(ratio, distance=3)
    if peaks.size == 0:
        return []
    out = []
    for p in peaks[np.argsort(ratio[peaks], kind="stable")[::-1][:n_candidates]]:
        step = 0.0
        if 0 < p < band.size - 1 and np.all(band[p - 1:p + 2] > 0):
            a, b, c = np.log(band[p - 1:p + 2])
            curve = a - 2 * b + c
            step = 0.5 * (a - c) / curve if curve < 0 else 0.0
        out.append((float(n_fft / (shifts[p] + step)), float(ratio[p])))
    return out


#: cyclic_carrier's band (cycles/sample) over which X(k) X*(k + m) is summed before its power is
#: taken: 1/32 read the carrier of faded high-order bursts a little closer than 1/64 or 1/128
#: (forty-first session, benchmarks/blind_front_probe.md)
CARRIER_SMOOTHING_CYCLES = 1.0 / 32


def cyclic_carrier(x: np.ndarray, sps: float) -> float:
    """The carrier (cycles/sample) of a linearly modulated burst x at sps samples a symbol: the
    circular centroid of the power of its cyclic spectrum at the symbol rate.

    The spectrum correlates with itself shifted by the symbol rate only where the pulse's two
    copies overlap, in a band centred on the carrier (the roll-off's excess band, folded onto
    it), so the products X(k) X*(k + m), m the rate in bins, summed coherently over
    CARRIER_SMOOTHING_CYCLES and squared, are placed about the carrier whatever the channel
    does to the band's shape. The band's power centroid (symbol_clock.estimate_carrier_and_noise)
    moves with the channel's tilt: on faded high-order bursts at >= 10 dB and >= 0.3 symbols of
    delay spread its error's median was 0.094 cycles a symbol against 0.014 here (forty-first
    session). 0.0 for a burst without power."""
    x = np.asarray(x, np.complex128).reshape(-1)
    n_fft = PAD * x.size
    spec = np.fft.fft(x, n_fft)
    m = int(round(n_fft / float(sps)))
    q = spec * np.conj(np.roll(spec, -m))                # centred on bin k + m / 2
    width = max(3, int(round(CARRIER_SMOOTHING_CYCLES * n_fft)))
    weight = np.abs(_circular_sum(q, width)) ** 2
    if not np.any(weight > 0):
        return 0.0
    centre = (np.arange(n_fft) - (width - 1) / 2 + m / 2) / n_fft
    return float(np.angle(np.sum(weight * np.exp(2j * np.pi * centre))) / (2 * np.pi))
