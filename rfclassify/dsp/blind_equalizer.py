"""A class-blind equalizer for clocked symbols: the short filter that makes them least Gaussian.

Multipath mixes neighbouring symbols, and a mixture of symbols is closer to Gaussian than the
symbols are: every alphabet here has a normalized fourth moment E|s|^4 / (E|s|^2)^2 below a
complex Gaussian's 2, and the channel raises it. The symbol-spaced FIR filter that lowers it
again, at unit output power, undoes the channel for any sub-Gaussian alphabet without knowing
which one (Shalvi and Weinstein's criterion; the constant-modulus algorithm is its cousin, but
drives every alphabet towards a circle and wrecked the APSK and QAM bursts in the
twenty-fifth session's probe). ``kurtosis_equalize`` fits it by a few preconditioned
gradient steps from the identity, with no more taps than the symbols can pin (one tap per
SYMBOLS_PER_TAP symbols, rounded up to odd, at most TAPS; below 3 and the symbols come back
as they are).

It does not know the alphabet, so it cannot turn a dense constellation back exactly: on
unfaded bursts the shipped sequence network reads its output worse than the raw symbols
(64QAM most), and on bursts with a delay spread of 0.2 symbols and more much better. The
refiner therefore takes the sequence network's reading of these symbols beside its reading of
the raw ones (``SequenceNet.blind_view``) and learns when to trust which; the moments before
and after the filter tell it how much there was to undo.
"""

from __future__ import annotations

import numpy as np

from rfclassify.dsp.class_equalizer import filter_inputs

TAPS = 5                  # the filter's longest length (symbol-spaced)
SYMBOLS_PER_TAP = 40      # symbols a tap needs
STEPS = 50                # gradient steps
STEP_SIZE = 0.1           # of each preconditioned step
RIDGE = 1e-3              # added to the input's correlation before it is inverted


def fourth_moment(y: np.ndarray) -> float:
    """E|y|^4 / (E|y|^2)^2: 1 for a constant modulus, 2 for complex Gaussian noise (nan for
    all-zero y)."""
    p = np.abs(np.asarray(y)) ** 2
    m2 = float(np.mean(p))
    return float(np.mean(p * p)) / (m2 * m2) if m2 > 0 else float("nan")


def kurtosis_equalize(y: np.ndarray, taps: int = TAPS) -> tuple[np.ndarray, float, float]:
    """(filtered symbols at unit power, fourth_moment before, after) of symbols y (any scale):
    the symbol-spaced filter of at most `taps` taps (centred, zero-padded at the ends, so the
    output has y's length and timing) that minimizes the normalized fourth moment. Symbols too
    few for a 3-tap filter come back at unit power, unfiltered."""
    y = np.asarray(y, np.complex128)
    n = y.size
    power = float(np.mean(np.abs(y) ** 2)) if n else 0.0
    if power <= 0 or not np.isfinite(power):
        return y, float("nan"), float("nan")
    y = y / np.sqrt(power)
    before = fourth_moment(y)
    length = min(taps, max(1, (n // SYMBOLS_PER_TAP) | 1))
    if length < 3:
        return y, before, before
    half = length // 2
    x = filter_inputs(y, length)                   # row i: y[i + half], ..., y[i - half]
    xh = np.ascontiguousarray(x.conj().T)
    r = xh @ x / n
    precondition = np.linalg.inv(r + RIDGE * np.eye(length))
    w = np.zeros(length, np.complex128)
    w[half] = 1.0
    for _ in range(STEPS):       # the gradient of E|z|^4 / (E|z|^2)^2 in conj(w), preconditioned by r^-1
        z = x @ w
        a = z.real * z.real + z.imag * z.imag
        p, m4 = a.mean(), (a * a).mean()
        grad = (2.0 / (n * p * p)) * (xh @ (a * z)) - (2.0 * m4 / p ** 3) * (r @ w)
        w = w - STEP_SIZE * (precondition @ grad)
        w = w / np.sqrt(max(float(np.real(w.conj() @ (r @ w))), 1e-30))
    z = x @ w
    z = z / np.sqrt(max(float(np.mean(np.abs(z) ** 2)), 1e-30))
    return z, before, fourth_moment(z)
