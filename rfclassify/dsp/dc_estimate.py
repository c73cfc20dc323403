"""A receiver DC offset (LO leak) in one burst, estimated from its symbols' structure.

A zero-IF receiver adds a constant to a burst. Its mean is a poor estimate of that constant:
the mean also holds the signal's own 0 Hz content, about -10 log10(symbols) dB of its power,
so taking it out costs a dense constellation as much as leaving a -20 dB offset in
(benchmarks/dc_offset_robustness.md, ``--paired``). The symbols pin it far better. At the
burst's blind clock (symbol_clock.blind_clock: rate, timing and the band centroid's carrier
f0) a constant d in the raw burst reaches the matched filter's outputs as d times a known
tone (the filter's output for exp(-2 pi i f0 n)). So each candidate alphabet's class
equalizer (rfclassify.dsp.class_equalizer: its carrier fit, then least squares to its own
decisions) gets that tone as one more regressor beside its filter taps; the regressor's
coefficient, mapped back through the best-fitting alphabet's filter, is -d in the symbols'
units. Where 0 Hz also holds a line (symbol_clock.zero_hz_line_ratio) the mean is taken out
first, as remove_dc_line does, and the fit estimates what is left.

On 600 high-order bursts at 10..30 dB with an offset of -40..-10 dB (x86 CPU,
benchmarks/dc_estimate_probe.py) the estimate's median error is -40 dB of the signal's
power against -25 dB for the mean. It fails where the decisions do (dense alphabets, many
samples per symbol, fading). It is made for bursts of the high-order classes: it is only
meaningful for a linearly modulated burst whose alphabet is among `classes`. For any other
burst, leak_line_offset takes the mean out only where it is plainly a leak.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from rfclassify.dsp import class_equalizer as ce
from rfclassify.dsp import symbol_clock as sc
from rfclassify.dsp.windows import central

#: a 0 Hz line stronger than this, in dB of the burst's power, is a carrier, not a leak (OOK's
#: carrier is -3 dB of its power, 4ASK's -2)
LEAK_MAX_DB = -8.0
#: a fitted offset farther from the burst's mean than this many times the spread the signal's
#: own 0 Hz content gives the mean (symbol_clock.own_mean_variance) is a failed fit, not an
#: offset: the mean is the offset plus that content. (Where the fitted filter all but nulls the
#: offset's tone, its coefficient is noise over a tiny gain: on GNU Radio's bursts, which have
#: no offset, about one high-order burst in five at >= 10 dB got "offsets" of -26..+16 dB.)
MEAN_SPREADS = 10.0


def leak_line_offset(iq: np.ndarray) -> complex:
    """The mean of burst iq where its 0 Hz bin holds a leak line (more than
    symbol_clock.DC_LINE_RATIO times the bins beside it, and under LEAK_MAX_DB of the burst's
    power), else 0: the offset a burst of no particular alphabet can safely lose. On the
    non-high-order classes it wins back most of what a -40..-10 dB offset costs them, and
    nothing on the high-order ones, whose offsets below -10 dB seldom stand out that far
    (benchmarks/dc_offset_robustness.md)."""
    x = np.asarray(iq, np.complex128).reshape(-1)
    if x.size == 0 or not np.all(np.isfinite(x)):
        return 0j
    mean = complex(x.mean())
    # magnitudes, not squares: abs(mean) ** 2 of a burst past 1e154 raised OverflowError
    with np.errstate(over="ignore"):
        rms = math.sqrt(float(np.mean(np.abs(x) ** 2)))
    weak = abs(mean) < rms * 10 ** (LEAK_MAX_DB / 20)
    return mean if weak and sc.zero_hz_line_ratio(x) > sc.DC_LINE_RATIO else 0j


class OffsetEstimate(NamedTuple):
    """A burst's receiver DC offset, in its own units, and the standard error of its fit."""

    offset: complex
    stderr: float   # of the offset's least-squares coefficient from the fit's residual; 0 where it is a leak line


NO_OFFSET = OffsetEstimate(0j, 0.0)


def estimate_offset(iq: np.ndarray, classes: tuple[str, ...], likely: tuple[str, ...] | None = None) -> OffsetEstimate:
    """The receiver DC offset in raw burst iq, in its own units, fitted beside the class
    equalizers of the alphabets of `likely` (some of `classes`, class_equalizer.scorable
    labels; None: all of them). Fitting only the network's three likeliest classes wins as
    much as all twelve high-order ones at about a third of the cost
    (benchmarks/dc_offset_robustness.md, "The DC pass"). Where the
    burst has no clock or too few symbols, what remove_dc_line would take out (its mean where
    0 Hz holds a line, else 0), with a standard error of 0; so also where the fit is not
    consistent with the burst's mean (MEAN_SPREADS). NO_OFFSET for a silent, non-finite or too
    short burst. It never raises for a burst."""
    x = central(np.asarray(iq, np.complex128).reshape(-1), sc.MAX_CLOCK_SAMPLES)
    if x.size < sc.MIN_CLOCK_SAMPLES or not np.all(np.isfinite(x)) or not np.any(x):
        return NO_OFFSET
    with np.errstate(all="ignore"):
        line = sc.dc_line(x)
        rms = math.sqrt(float(np.mean(np.abs(x - line) ** 2)))
        try:
            fitted = _unit_offset((x - line) / rms, _bank(classes, likely))
        except (ValueError, IndexError, ZeroDivisionError, FloatingPointError, np.linalg.LinAlgError):
            fitted = None
        if fitted is None or not (math.isfinite(abs(fitted.offset)) and math.isfinite(fitted.stderr)):
            return OffsetEstimate(line, 0.0)
        offset = line + rms * fitted.offset
        if abs(offset - x.mean()) ** 2 > MEAN_SPREADS * sc.own_mean_variance(x):
            return OffsetEstimate(line, 0.0)
        return OffsetEstimate(offset, rms * fitted.stderr)


def _bank(classes: tuple[str, ...], likely: tuple[str, ...] | None) -> ce.AlphabetBank:
    """The alphabets of `likely` among the bank of `classes` (made once per process)."""
    bank = ce.alphabet_bank(tuple(classes))
    if likely is None:
        return bank
    chosen = np.flatnonzero(np.isin(np.asarray(classes), np.asarray(likely)))
    if chosen.size == 0:
        return bank
    bank.turn_series    # made once on the whole bank, then sliced  # noqa: B018
    return bank.subset(chosen)


def _unit_offset(u: np.ndarray, bank: ce.AlphabetBank) -> OffsetEstimate | None:
    """The offset left in unit-RMS burst u, in its units (None where it has no clock or no fit)."""
    clock = sc.blind_clock(u)
    if clock is None:
        return None
    sps, timing, f0 = clock
    found = sc.at_clock(u, sps, timing, f0)
    pulse = sc.rrc_lookup(sc.BLIND_ROLLOFF)
    tone = sc.symbols_at(np.exp(-2j * np.pi * f0 * np.arange(u.size)), sps, sc.BLIND_ROLLOFF, timing, pulse=pulse)
    n = min(found.symbols.size, tone.size)
    y, tone = central(found.symbols[:n], ce.MAX_SYMBOLS), central(tone[:n], ce.MAX_SYMBOLS)
    if y.size < ce.MIN_SYMBOLS or not (np.all(np.isfinite(y)) and np.all(np.isfinite(tone))):
        return None
    scale = math.sqrt(float(np.mean(np.abs(y) ** 2)))
    y = y / scale
    cols, solve, z = ce.start_filters(y, bank, extra=tone)        # the tone is the last column
    z, decided = ce.decision_directed(z, cols, solve, bank)
    w = np.einsum("atn,an->at", solve, decided)
    ll = ce.unit_power_logliks(z, decided, bank)[0]
    best = ce.best_alphabet(ll)
    if best is None:
        return None
    # the offset d reaches the filter's output as d * (the tone through the filter); the regressor cancels it
    tone_turned = np.ascontiguousarray(cols[best, :, -1])     # contiguous: the sums below in one fixed order
    through = ce.filter_inputs(tone_turned, ce.TAPS) @ w[best, :-1]
    power = float(np.vdot(through, through).real)
    if power <= 0:
        return None
    gain = -np.vdot(through, tone_turned) / power * scale
    # the coefficient's standard error: the residual's variance times its row of the pseudo-inverse, squared
    residual = cols[best] @ w[best] - decided[best]
    variance = float(np.sum(np.abs(residual) ** 2)) / max(y.size - ce.TAPS - 1, 1)
    stderr = abs(gain) * math.sqrt(variance) * float(np.linalg.norm(solve[best, -1]))
    return OffsetEstimate(complex(w[best, -1] * gain), stderr)
