"""A burst's blind symbol clock and what it makes visible: carrier-invariant symbol statistics.

No recorded parameter is used. The symbol rate and timing come from the cyclostationary
line of |x|^2 at 1/T (``rate_lines``, ``estimate_symbol_rate``): by the rate rule
STRONGEST_LINE the strongest line, by ALPHABET_FIT the one of the few strongest whose
symbols a high-order alphabet fits best (``choose_rate``, ``alphabet_fit``: at roll-offs
below 0.3 the strongest line is often not the rate), by ALPHABET_FIT_3 the same with three
classes' alphabets judging (about as accurate, cheaper), by the LOW_SNR_RULES their
namesakes with the line searched near a band that noise has not widened (``coarse_sps``:
below about 8 dB the others miss the rate of most slow bursts), by COHERENCE the strongest
peak of the burst's spectral coherence (``cyclic_coherence``: the same correlation of the
spectrum with itself shifted that makes the |x|^2 line, summed coherently only over narrow
bands, so multipath does not cancel it); the carrier from the
centroid of the band that rate occupies (``estimate_carrier_and_noise``); the symbols from
an RRC matched filter with a fixed roll-off at those instants (``symbols_at``).
``clock_invariants`` turns the symbols into statistics that neither the carrier phase nor a
small residual carrier offset changes: amplitude moments and histogram, and per power k the
one-symbol lag product and the local-mean energy of the unit-magnitude k-th power (the lines
that separate 16PSK from 32PSK and the dense QAMs from each other, which no feature of every
sample carries).
``blind_symbols`` is the whole chain for one raw burst and ``burst_invariants`` its
statistics; neither raises on a bad burst.

The estimators were built and measured in benchmarks/high_order_sync_ladder.py (fifth
session: the rate within 0.5 % for 82-91 % of bursts); the invariants in
benchmarks/fusion_probe.py (eighth session); the alphabet-fit rule in
benchmarks/rate_candidates_probe.py (thirteenth and fourteenth sessions: the rate more than 2 %
off for 4-5 % of high-order 1024-sample bursts instead of 12-15 %). The serving refiner
(rfclassify.engine.refiner) uses ``burst_invariants`` and ``blind_symbols`` with the rule it
was fitted on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from rfclassify.dsp import class_equalizer, measure
from rfclassify.dsp.cyclic_coherence import coherence_lines, cyclic_carrier
from rfclassify.dsp.linear import RRC_SPAN_SYMBOLS
from rfclassify.dsp.pulses import rrc
from rfclassify.dsp.rate import SPS_CLIP, estimate_sps
from rfclassify.dsp.synth import SPS_RANGE
from rfclassify.dsp.windows import central
from rfclassify.labels import HIGH_ORDER_LABELS

BLIND_ROLLOFF = 0.3                  # the blind matched filter's roll-off (true: 0.15..0.5)
ROLLOFF_MAX = 0.5                    # the widest band a linear burst can occupy: (1 + 0.5) / sps
EDGE_SYMBOLS = 2                     # keep symbols centred >= 2 symbols inside the burst
RATE_NFFT = 1 << 16                  # |x|^2 line search transform (2x interpolated samples)
RATE_OVERSAMPLE = 8                  # burst_invariants: transform length over the interpolated burst's
DC_LINE_RATIO = 10.0                 # 0 Hz bin over its neighbours above which the mean is LO leakage
COARSE_TOLERANCE = 1.35              # the line is searched within this factor of estimate_sps
MAX_CLOCK_SAMPLES = 8192             # burst_invariants uses the central samples of longer bursts
MIN_CLOCK_SAMPLES = 32               # shorter bursts get the invalid (all-zero) vector
POWERS = (4, 8, 12, 16, 32)          # unit-magnitude powers whose invariants are formed
LOCAL_MEAN_SYMBOLS = 8               # local mean window of each power
HIST_BINS, HIST_MAX = 12, 2.4        # histogram of |y| / rms(y)
MIN_SYMBOLS = 3                      # fewer symbols than this: no invariants
STRONGEST_LINE, ALPHABET_FIT, ALPHABET_FIT_3 = "strongest_line", "alphabet_fit", "alphabet_fit_3"
#: the same rules with the line searched near a noise-corrected occupied band where noise has
#: widened the plain estimate (coarse_sps): below about 8 dB the plain one misses the rate of
#: nearly every burst of 8 or more samples per symbol (twenty-third session, docs/model.md)
STRONGEST_LINE_LOW_SNR, ALPHABET_FIT_3_LOW_SNR = "strongest_line_low_snr", "alphabet_fit_3_low_snr"
#: the rate from the strongest peak of the burst's spectral coherence (cyclic_coherence), the
#: timing from the |x|^2 line's phase at that rate: multipath and low roll-offs hide the |x|^2
#: line, not the coherence (thirty-first session, docs/model.md)
COHERENCE = "coherence"
#: COHERENCE's rate and timing, the carrier from the cyclic spectrum at that rate
#: (cyclic_coherence.cyclic_carrier) instead of the band's power centroid, which multipath's
#: tilt of the band moves: on faded high-order bursts at >= 10 dB the centroid was more than
#: 0.07 cycles a symbol off for 34-58 % of them, out of reach of the refiner's carrier fits
#: (forty-first session, benchmarks/blind_front_probe.md)
COHERENCE_CYCLIC = "coherence_cyclic"
#: how blind_clock picks the rate, and with COHERENCE_CYCLIC the carrier (a name keeps its
#: meaning: it is stored with refiners and sequence networks)
RATE_RULES = (STRONGEST_LINE, ALPHABET_FIT, ALPHABET_FIT_3, STRONGEST_LINE_LOW_SNR, ALPHABET_FIT_3_LOW_SNR, COHERENCE,
              COHERENCE_CYCLIC)
LOW_SNR_RULES = frozenset({STRONGEST_LINE_LOW_SNR, ALPHABET_FIT_3_LOW_SNR})
OCCUPIED_FRACTION = 0.94             # coarse_sps: the share of the signal's power its band holds
RATE_CANDIDATES = 4                  # ALPHABET_FIT(_3): the lines weighed, strongest first
CLEAR_LINE = 3.0                     # ALPHABET_FIT(_3): a strongest line this many times the next is taken as it is
#: ALPHABET_FIT_3's judges (one PSK, one APSK, one QAM): they choose the rate as well as all
#: twelve classes on 72,800 bursts of 1024 samples (-0.02 +- 0.01 points over SNR with the
#: shipped refiner) for 0.65x the refiner's statistics' time (benchmarks/rate_rule_paired.json)
THREE_FIT_LABELS = ("16PSK", "32APSK", "64QAM")
#: whose alphabets judge a line's symbols, by rule (a rule not here takes the strongest line)
RATE_FIT_LABELS: dict[str, tuple[str, ...]] = {ALPHABET_FIT: HIGH_ORDER_LABELS,
                                               ALPHABET_FIT_3: THREE_FIT_LABELS,
                                               ALPHABET_FIT_3_LOW_SNR: THREE_FIT_LABELS}
RATE_FIT_SYMBOLS = 128               # the central symbols judged
RATE_FIT_TAPS, RATE_FIT_PASSES = 1, 2
RATE_FIT_MARGIN = 0.05               # nats a symbol a weaker line's fit must beat the strongest's by


# Here, not in pulses.py: the synthesizer's modules are fingerprinted (data.generate's
# synth_source_digest) and this is receiver code.
RRC_LOOKUP_STEP = 1.0 / 1024         # rrc_lookup's grid (symbols): within 1e-5 of the closed form


@lru_cache(maxsize=8)
def _rrc_lookup_grid(rolloff: float, span: int) -> np.ndarray:
    """rrc on the uniform grid -span..span (step RRC_LOOKUP_STEP), two zeros appended."""
    u = np.arange(-span / RRC_LOOKUP_STEP, span / RRC_LOOKUP_STEP + 1) * RRC_LOOKUP_STEP
    return np.concatenate([rrc(u, np.float64(rolloff)), [0.0, 0.0]])


def rrc_lookup(rolloff: float, span: int = 8) -> Callable[[np.ndarray], np.ndarray]:
    """pulses.rrc(u, rolloff) by linear interpolation of a cached grid over |u| <= span
    symbols (0 outside): several times faster than the closed form, for a receiver that
    filters many bursts with one fixed roll-off."""
    values = _rrc_lookup_grid(float(rolloff), int(span))
    last = values.size - 3  # index of u = +span

    def pulse(u: np.ndarray) -> np.ndarray:
        # a uniform grid: the index is arithmetic (np.interp's binary search costs 5x more)
        x = (np.asarray(u, np.float64) + span) / RRC_LOOKUP_STEP
        outside = (x < 0) | (x > last)
        i = np.clip(x, 0, last).astype(np.intp)
        f = np.clip(x, 0, last) - i
        return np.where(outside, 0.0, values[i] * (1 - f) + values[i + 1] * f)
    return pulse


def symbols_at(x: np.ndarray, sps: float, rolloff: float, timing_samples: float, sro_ppm: float = 0.0,
               edge_symbols: float = EDGE_SYMBOLS, pulse: Callable[[np.ndarray], np.ndarray] | None = None
               ) -> np.ndarray:
    """RRC matched-filter outputs of a baseband burst at symbol instants k * sps + timing.

    measure.matched_filter keeps only symbols whose whole +-8-symbol pulse lies in the burst;
    zero padding lets it return every symbol centred at least edge_symbols inside (their filter
    is truncated at the burst edge, which costs little beyond ~2 symbols from it). pulse: as
    in measure.matched_filter (None: the closed-form RRC)."""
    scale = 1 + 1e-6 * sro_ppm
    pad = int(math.ceil(RRC_SPAN_SYMBOLS * sps)) + 2
    xp = np.concatenate([np.zeros(pad), np.asarray(x, np.complex128), np.zeros(pad)])
    # Symbol k of x is symbol k + 8 of the padded burst (matched_filter starts at its 8th).
    y = measure.matched_filter(xp, sps, rolloff, timing_samples + pad * scale - RRC_SPAN_SYMBOLS * sps, sro_ppm,
                               pulse=pulse)
    centre = (np.arange(y.size) * sps + timing_samples) / scale  # sample index in x
    keep = (centre >= edge_symbols * sps) & (centre <= x.size - 1 - edge_symbols * sps)
    return y[keep]


def estimate_symbol_rate(x: np.ndarray, coarse_sps: float | None = None, n_candidates: int = 1,
                         nfft: int = RATE_NFFT) -> list[tuple[float, float]]:
    """Blind candidates (samples per symbol, timing offset in samples in [0, sps)) of one
    burst, strongest line first (rate_lines without the lines' strengths)."""
    return [(sps, timing) for sps, timing, _ in rate_lines(x, coarse_sps, n_candidates, nfft)]


def rate_lines(x: np.ndarray, coarse_sps: float | None = None, n_candidates: int = 1,
               nfft: int = RATE_NFFT) -> list[tuple[float, float, float]]:
    """Blind candidates (samples per symbol, timing offset in samples in [0, sps), the line's
    strength: its power over the local mean and the band's) of one burst, strongest first.

    E|x(t)|^2 of an RRC burst is periodic in T with its maximum at the symbol instants, so
    |x|^2 carries a spectral line at 1/T whose phase is the timing. x is interpolated 2x first
    (its band is < 1 cycle/sample wide, so |x|^2 then does not alias) and the line is searched
    over the synthesizer's 2..16 samples per symbol, within a factor COARSE_TOLERANCE of
    coarse_sps when given (rfclassify.dsp.rate.estimate_sps: at low roll-off the line is weak
    and a bump of the continuous part far from it can win). nfft: the line-search transform
    (at least 8x the interpolated length keeps its estimates; burst_invariants uses that to
    save time on short bursts)."""
    from scipy.ndimage import uniform_filter1d
    from scipy.signal import find_peaks

    n = x.size
    w, t = _line_envelope(x)
    power = np.abs(np.fft.rfft(w, nfft)) ** 2
    # A line is a few bins wide; the continuous part of |x|^2's spectrum (the data, the noise)
    # is broad. So a line is a large ratio to the local mean around it, 4..32 native bins away.
    up = nfft // (2 * n)
    local = uniform_filter1d(power, 64 * up, mode="nearest") * 64 - uniform_filter1d(power, 8 * up, mode="nearest") * 8
    f = np.arange(power.size) * 2.0 / nfft  # cycles per original sample
    band = (f >= 1 / (SPS_RANGE[1] * 1.03)) & (f <= 1 / (SPS_RANGE[0] * 0.97))
    if coarse_sps is not None:  # the occupied-bandwidth estimate is within 25 % for ~97 %
        band &= (f >= 1 / (coarse_sps * COARSE_TOLERANCE)) & (f <= COARSE_TOLERANCE / coarse_sps)
    # The band's mean keeps near-empty stretches (nothing but window leakage) from scoring.
    ratio = np.where(band, power / (local / 56 + np.mean(power[band]) + 1e-300), 0.0)
    peaks, _ = find_peaks(ratio, distance=4 * up)
    if peaks.size == 0:
        peaks = np.array([int(np.argmax(ratio))])
    out = []
    for k in peaks[np.argsort(ratio[peaks])[::-1][:n_candidates]]:
        strength = float(ratio[k])
        lo = max(int(k) - 2 * up, 1)  # the line's own peak, kept off the transform's ends
        k = lo + int(np.argmax(power[lo:min(int(k) + 2 * up + 1, power.size - 1)]))
        a, b, c = np.log(power[k - 1:k + 2] + 1e-300)
        f_sym = (k + 0.5 * (a - c) / (a - 2 * b + c)) * 2.0 / nfft
        out.append((float(1.0 / f_sym), _line_timing(w, t, f_sym, n), strength))
    return out


def _line_envelope(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(w, t): |x|^2 of x interpolated 2x (its band is < 1 cycle/sample wide, so |x|^2 then
    does not alias), mean removed and Hann-windowed, and its times in samples from the
    burst centre: what the symbol-rate line is measured on."""
    n = x.size
    spec = np.fft.fft(x)
    half = n // 2
    wide = np.zeros(2 * n, np.complex128)
    wide[:half], wide[-(n - half):] = spec[:half], spec[half:]
    e = np.abs(np.fft.ifft(wide)) ** 2
    t = np.arange(2 * n) / 2.0 - (n - 1) / 2.0  # time in samples from the burst centre
    return np.hanning(2 * n) * (e - e.mean()), t


def _line_timing(w: np.ndarray, t: np.ndarray, f_sym: float, n: int) -> float:
    """The symbol instant nearest the centre of an n-sample burst, in samples mod 1/f_sym,
    from the phase of its envelope's (_line_envelope) line at f_sym cycles/sample."""
    line = np.sum(w * np.exp(-2j * np.pi * f_sym * t))
    # angle(line) = -2 pi f (tau - centre)
    return float(((n - 1) / 2.0 - np.angle(line) / (2 * np.pi * f_sym)) % (1.0 / f_sym))


def zero_hz_line_ratio(x: np.ndarray) -> float:
    """The 0 Hz periodogram bin of burst x over the mean of the bins 2..9 either side of it
    (inf for a line beside silence, 0 for no 0 Hz content)."""
    spec = np.abs(np.fft.fft(x)) ** 2
    beside = _beside_zero_hz(spec)
    if beside > 0:
        return float(spec[0]) / beside
    return math.inf if spec[0] > 0 else 0.0


def own_mean_variance(x: np.ndarray) -> float:
    """The variance the signal's own content near 0 Hz gives burst x's mean (without a line at
    0 Hz): the mean periodogram |FFT|^2 of the bins 2..9 either side of 0 Hz, over n^2."""
    return _beside_zero_hz(np.abs(np.fft.fft(x)) ** 2) / max(np.size(x), 1) ** 2


def _beside_zero_hz(spec: np.ndarray) -> float:
    return float(np.mean(np.concatenate([spec[2:10], spec[-9:-1]])))


def dc_line(x: np.ndarray) -> complex:
    """The mean of burst x where its 0 Hz bin holds a line (LO leakage): more than
    DC_LINE_RATIO times the periodogram just beside it; else 0."""
    return complex(np.mean(x)) if zero_hz_line_ratio(x) > DC_LINE_RATIO else 0j


def remove_dc_line(x: np.ndarray) -> np.ndarray:
    """Unit-RMS complex128 copy of a burst less its dc_line. Removing the mean always
    (normalize_burst) notches the signal's own 0 Hz content, which at zero carrier offset is a
    -20 dB error on the symbols."""
    x = np.asarray(x, np.complex128)
    x = x - dc_line(x)
    return x / math.sqrt(max(float(np.mean(np.abs(x) ** 2)), 1e-30))


def _periodogram(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(frequency cycles/sample in [-0.5, 0.5), Blackman periodogram scaled so white noise of
    variance s2 reads s2 in every bin)."""
    w = np.blackman(x.size)
    p = np.abs(np.fft.fft(x * w)) ** 2 / np.sum(w ** 2)
    return np.fft.fftfreq(x.size), p


def estimate_carrier_and_noise(x: np.ndarray, sps: float) -> tuple[float, float]:
    """Blind (carrier frequency cycles/sample, noise variance per sample) of a unit-RMS burst:
    the power centroid of the band the estimated rate occupies (twice, recentred), then the
    mean periodogram outside the widest such band ((1 + 0.5) / sps) as the noise floor."""
    f0, floor, _ = _band_and_floor(*_periodogram(x), sps)
    return f0, min(max(floor, 1e-6), 0.999)


def _band_and_floor(f: np.ndarray, p: np.ndarray, sps: float) -> tuple[float, float, np.ndarray]:
    """(centroid, noise floor, each bin's distance from the centroid) of periodogram p over
    frequencies f (_periodogram) for a rate of sps: estimate_carrier_and_noise's, unclipped."""
    half_band = 0.5 * (1 + ROLLOFF_MAX) / sps
    f0 = float(np.sum(f * p) / np.sum(p))
    for _ in range(3):
        d = (f - f0 + 0.5) % 1.0 - 0.5
        inside = np.abs(d) <= half_band
        f0 += float(np.sum(d[inside] * p[inside]) / np.sum(p[inside]))
    d = np.abs((f - f0 + 0.5) % 1.0 - 0.5)
    outside = d > half_band + 4.0 / f.size
    floor = float(np.mean(p[outside])) if outside.sum() >= 8 else float(np.percentile(p, 5))
    return f0, floor, d


def coarse_sps(x: np.ndarray, low_snr: bool = False,
               spectrum: tuple[np.ndarray, np.ndarray] | None = None) -> float:
    """The samples per symbol the |x|^2 line is searched near: the occupied-bandwidth estimate
    (rfclassify.dsp.rate.estimate_sps). With low_snr, where noise has widened it: that estimate
    counts every bin above a low percentile of the spectrum as signal, so at a low SNR the noise
    across the whole band takes it to half the true rate or less once the signal occupies a small
    part of the band (at 4 dB and 8-16 samples per symbol, a median 0.36 of it, outside the
    line search's COARSE_TOLERANCE for every burst). So the band is measured again: the noise floor
    outside the widest band that estimate allows (estimate_carrier_and_noise's), subtracted from
    every bin, and the narrowest band around the centroid that holds OCCUPIED_FRACTION of what
    is left, noise bins counted with their sign, so the noise adds nothing on average; where
    that is more than COARSE_TOLERANCE times the first estimate's rate, it is taken instead. At
    a high SNR the two agree and the first stands. spectrum: x's _periodogram where the caller
    has it (blind_clock, which takes the carrier from it too)."""
    plain = float(estimate_sps(x[None, :])[0])
    if not low_snr:
        return plain
    f, p = spectrum if spectrum is not None else _periodogram(x)
    _, floor, d = _band_and_floor(f, p, plain)
    order = np.argsort(d, kind="stable")
    held = np.cumsum((p - floor)[order])
    if not held[-1] > 0:
        return plain
    width = 2.0 * float(d[order][int(np.argmax(held >= OCCUPIED_FRACTION * held[-1]))])
    if not width > 0:
        return plain
    sps = min(max(1.0 / width, SPS_CLIP[0]), SPS_CLIP[1])
    return sps if sps > plain * COARSE_TOLERANCE else plain


def clock_invariants(y: np.ndarray) -> np.ndarray:
    """Carrier-invariant statistics of matched-filter symbols y (any scale), float32 of length
    N_INVARIANTS: [1 (valid), E r^4, E r^6 with r = |y| / rms(y), the histogram of r
    (HIST_BINS bins over 0..HIST_MAX, as fractions), then per k in POWERS, with u = y / |y|:
    |mean of u_n^k conj(u_{n-1}^k)| and the mean of |LOCAL_MEAN_SYMBOLS-symbol mean of u^k|^2;
    then |mean of y_n^4 conj(y_{n-1}^4)| / E|y|^4 (the amplitude-weighted QAM line) and
    log(symbol count)]. A carrier phase multiplies u^k by a constant of unit magnitude, and a
    residual offset turns it slowly, so none of these moves with either. Fewer than
    MIN_SYMBOLS finite, non-zero symbols give the all-zero (invalid) vector."""
    from scipy.ndimage import uniform_filter1d

    y = np.asarray(y, np.complex128)
    if y.size < MIN_SYMBOLS or not np.all(np.isfinite(y)) or np.count_nonzero(y) < MIN_SYMBOLS:
        return np.zeros(N_INVARIANTS, np.float32)
    r2 = np.abs(y) ** 2
    r2 = r2 / float(r2.mean())
    hist = np.histogram(np.sqrt(r2), HIST_BINS, (0.0, HIST_MAX))[0] / y.size
    u = y / np.maximum(np.abs(y), 1e-30)
    out = [1.0, np.mean(r2 ** 2), np.mean(r2 ** 3), *hist]
    for k in POWERS:
        z = u ** k
        out.append(abs(np.mean(z[1:] * np.conj(z[:-1]))))
        local = uniform_filter1d(z.real, LOCAL_MEAN_SYMBOLS) + 1j * uniform_filter1d(z.imag, LOCAL_MEAN_SYMBOLS)
        out.append(np.mean(np.abs(local) ** 2))
    y4 = (y / math.sqrt(float(np.mean(np.abs(y) ** 2)))) ** 4
    out.append(abs(np.mean(y4[1:] * np.conj(y4[:-1]))) / float(np.mean(np.abs(y4))))
    out.append(math.log(y.size))
    return np.asarray(out, np.float32)


N_INVARIANTS = 3 + HIST_BINS + 2 * len(POWERS) + 2


def line_search_nfft(n_samples: int) -> int:
    """The rate line-search transform burst_invariants uses for a burst of n_samples:
    RATE_OVERSAMPLE x the 2x-interpolated length rounded up to a power of two, at most RATE_NFFT."""
    return min(RATE_NFFT, RATE_OVERSAMPLE * (1 << int(math.ceil(math.log2(2 * max(n_samples, 1))))))


class BlindSymbols(NamedTuple):
    """A burst at its blind clock: what blind_symbols found."""

    baseband: np.ndarray    # unit-RMS burst (central MAX_CLOCK_SAMPLES) derotated by the band centroid
    symbols: np.ndarray     # RRC (BLIND_ROLLOFF) matched-filter outputs at the clock's instants
    sps: float              # samples per symbol
    timing_samples: float   # the first symbol instant, in samples
    carrier: float = 0.0    # cycles/sample the baseband was derotated by (by rule: the band centroid or cyclic carrier)


def timing_at_rate(x: np.ndarray, sps: float) -> float:
    """The timing offset in samples (in [0, sps)) of a burst whose rate is known: the phase
    of its |x|^2 line at that rate, as estimate_symbol_rate takes it at a rate it found."""
    w, t = _line_envelope(x)
    return _line_timing(w, t, 1.0 / sps, x.size)


def at_clock(x: np.ndarray, sps: float, timing: float, f0: float) -> BlindSymbols:
    """A prepared burst (remove_dc_line) at a clock: derotated by f0 cycles/sample, then the
    BLIND_ROLLOFF matched filter's outputs at the symbol instants."""
    xb = x * np.exp(-2j * np.pi * f0 * np.arange(x.size))
    return BlindSymbols(xb, symbols_at(xb, sps, BLIND_ROLLOFF, timing, pulse=rrc_lookup(BLIND_ROLLOFF)), sps, timing,
                        f0)


def blind_symbols(iq: np.ndarray, rate_rule: str = STRONGEST_LINE) -> BlindSymbols | None:
    """One raw burst at its blind clock: the central MAX_CLOCK_SAMPLES, the mean removed where
    0 Hz holds a line, the rate and timing of an |x|^2 line (searched near the
    occupied-bandwidth estimate; which line, by rate_rule: blind_clock), derotated by the
    band's centroid, RRC matched filter with BLIND_ROLLOFF (interpolated from a table,
    rrc_lookup). None for a burst the chain cannot clock (too short, silent, non-finite, a
    rate outside the synthesizer's range); it never raises for one."""
    x = np.asarray(iq).reshape(-1)
    x = central(x, MAX_CLOCK_SAMPLES)
    if x.size < MIN_CLOCK_SAMPLES or not np.all(np.isfinite(x)) or not np.any(x):
        return None
    try:
        with np.errstate(all="ignore"):
            x = remove_dc_line(x)
            clock = blind_clock(x, rate_rule)
            if clock is None:
                return None
            return at_clock(x, *clock)
    except (ValueError, IndexError, ZeroDivisionError, FloatingPointError):
        # an estimator that cannot make sense of a degenerate burst: it has no clock
        return None


def found_invariants(found: BlindSymbols | None) -> np.ndarray:
    """clock_invariants of what blind_symbols found; the invalid all-zero vector for None."""
    if found is None:
        return np.zeros(N_INVARIANTS, np.float32)
    with np.errstate(all="ignore"):
        return clock_invariants(found.symbols)


def burst_invariants(iq: np.ndarray, rate_rule: str = STRONGEST_LINE) -> np.ndarray:
    """clock_invariants of one raw burst's symbols at its blind clock (blind_symbols); a burst
    the chain cannot clock gets the invalid all-zero vector. It never raises for one."""
    return found_invariants(blind_symbols(iq, rate_rule))


def blind_clock(x: np.ndarray, rate_rule: str = STRONGEST_LINE) -> tuple[float, float, float] | None:
    """(samples per symbol, timing offset in samples, carrier cycles/sample) of a burst that
    remove_dc_line has prepared, or None where it has no usable clock (nothing left after
    the DC line, or a rate outside the synthesizer's range by more than 10 %): an |x|^2 line
    searched near the occupied-bandwidth estimate (a transform of RATE_OVERSAMPLE x the
    interpolated length, at most RATE_NFFT), then the band's centroid. The line, by
    rate_rule (RATE_RULES): STRONGEST_LINE the strongest; ALPHABET_FIT the one of the
    RATE_CANDIDATES strongest whose symbols an alphabet fits best (choose_rate), of the
    twelve high-order classes' alphabets; ALPHABET_FIT_3 the same judged by three classes'
    (RATE_FIT_LABELS); the LOW_SNR_RULES as their namesakes, the line searched near
    coarse_sps(low_snr=True); COHERENCE the strongest peak of the burst's spectral coherence
    over the whole range (cyclic_coherence.coherence_lines), its timing from the |x|^2 line's
    phase at that rate; COHERENCE_CYCLIC the same with the carrier from the cyclic spectrum at
    that rate (cyclic_coherence.cyclic_carrier). ValueError for an unknown rule."""
    if rate_rule not in RATE_RULES:
        raise ValueError(f"unknown rate rule {rate_rule!r} (one of {', '.join(RATE_RULES)})")
    if not np.any(np.abs(x) > 0):  # a pure DC burst has nothing left
        return None
    fit_by = RATE_FIT_LABELS.get(rate_rule)     # None: take the strongest line
    n = RATE_CANDIDATES if fit_by else 1
    spectrum = None if rate_rule == COHERENCE_CYCLIC else _periodogram(x)   # the low-SNR band's and the carrier's
    if rate_rule in (COHERENCE, COHERENCE_CYCLIC):
        found = [(sps, timing_at_rate(x, sps), strength) for sps, strength in coherence_lines(x)]
    else:
        found = rate_lines(x, coarse_sps(x, rate_rule in LOW_SNR_RULES, spectrum), n, nfft=line_search_nfft(x.size))
    lines = [(sps, timing, strength) for sps, timing, strength in found
             if math.isfinite(sps) and math.isfinite(timing) and SPS_RANGE[0] * 0.9 <= sps <= SPS_RANGE[1] * 1.1]
    if not lines:
        return None
    sps, timing, _ = lines[choose_rate(x, lines, fit_by) if fit_by and len(lines) > 1 else 0]
    if spectrum is None:
        return sps, timing, cyclic_carrier(x, sps)
    f0, _, _ = _band_and_floor(*spectrum, sps)     # estimate_carrier_and_noise's carrier
    return sps, timing, f0


def choose_rate(x: np.ndarray, lines: list[tuple[float, float, float]],
                labels: tuple[str, ...] = HIGH_ORDER_LABELS) -> int:
    """Which of a prepared burst's |x|^2 lines (rate_lines, strongest first) ALPHABET_FIT
    clocks it at: the strongest where it is CLEAR_LINE times the next, else the line whose
    symbols an alphabet of `labels` fits best (alphabet_fit) where that fit beats the
    strongest line's by RATE_FIT_MARGIN nats a symbol, else the strongest.

    At a roll-off below 0.3 the line at the true rate is weak and a spurious one often wins
    (the strongest line misses the rate by more than 2 % on 29 % of such high-order bursts);
    at a wrong rate the symbols smear into one another and no alphabet fits them
    (benchmarks/rate_candidates_probe.py)."""
    if len(lines) < 2 or lines[0][2] >= CLEAR_LINE * lines[1][2]:
        return 0
    fits = [alphabet_fit(x, sps, timing, labels) for sps, timing, _ in lines]
    best = int(np.argmax(fits))
    return best if fits[best] > fits[0] + RATE_FIT_MARGIN else 0


def alphabet_fit(x: np.ndarray, sps: float, timing: float, labels: tuple[str, ...] = HIGH_ORDER_LABELS) -> float:
    """Per-symbol log-likelihood of the best-fitting of the alphabets of `labels`' classes
    (class_equalizer.equalized_logliks with RATE_FIT_TAPS taps and RATE_FIT_PASSES passes, from
    the cheaper carrier-line start, START_LINES, the rule was measured with)
    for the central RATE_FIT_SYMBOLS symbols of a prepared burst clocked at (sps, timing)
    with the carrier of that rate's band; -inf for too few symbols or no finite fit."""
    f0, _ = estimate_carrier_and_noise(x, sps)
    keep = int(math.ceil((RATE_FIT_SYMBOLS + 2 * EDGE_SYMBOLS + 2) * sps))
    if x.size > keep:   # only the central symbols are judged: filter only the samples they need
        start = (x.size - keep) // 2
        x = x[start:start + keep] * np.exp(-2j * np.pi * f0 * start)
        timing = (timing - start) % sps
    y = central(at_clock(x, sps, timing, f0).symbols, RATE_FIT_SYMBOLS)
    power = float(np.mean(np.abs(y) ** 2)) if y.size else 0.0
    if y.size < class_equalizer.MIN_SYMBOLS or not power > 0:
        return -math.inf
    bank = class_equalizer.alphabet_bank(tuple(labels))
    ll = class_equalizer.equalized_logliks(y / math.sqrt(power), bank, RATE_FIT_TAPS, RATE_FIT_PASSES,
                                           class_equalizer.START_LINES)[0]
    ll = ll[np.isfinite(ll)]
    return float(ll.max()) if ll.size else -math.inf
