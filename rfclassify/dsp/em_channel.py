"""Class scores of a burst from a channel estimate per alphabet, fitted by EM, and the MMSE receiver built on it.

Every blind filter the refiner had before this one (rfclassify.dsp.class_equalizer, the
class-blind filter of rfclassify.dsp.blind_equalizer) is an inverse filter fitted to its
own decisions: on faded dense constellations they lose 20-55 points where a receiver that
knows the channel keeps 98 % (benchmarks/multipath_bound.md). This module estimates the
channel instead (docs/model.md, thirty-seventh session; benchmarks/em_channel_probe.md).

For each alphabet, from unit-power start symbols:

1. M-step: the taps c (at sample delays) that least-squares fit the samples to the
   symbols' posterior means, their posterior variances counted (E[X^H X] = M^H M +
   sum(v) R_p, R_p the pulse's autocorrelation), beside any extra regressors (a DC
   offset's tone), and the noise per sample from the expected residual;
2. E-step: the linear MMSE filter built from the pulse through c and that noise
   (mmse_filter), its outputs unbiased, each symbol's posterior over the alphabet's
   class_equalizer.NEIGHBOURS nearest points at the larger of the filter's residual and a
   floor annealed through class_equalizer.SOFT_VARIANCE (passes[0] passes), then passes[1]
   at the residual alone.

Each class is scored by the log-mean-exp over its alphabets of their burst
log-likelihoods, at unit power (class_equalizer.unit_power_logliks, as the refiner's
equalizer scores) and by the final outputs' own mixture likelihood.

At a burst's blind clock (blind_class_scores; symbol_clock.blind_symbols found it): the
central samples that hold class_equalizer.MAX_SYMBOLS symbols are interpolated to two
samples a symbol at the clock (two_per_symbol); the pulse is the BLIND_ROLLOFF RRC; the
taps (blind_taps) take up the timing error and the roll-off's mismatch beside the channel;
each alphabet's residual carrier and phase come from class_equalizer.carrier_fit on the
matched-filter outputs and are taken out of the samples before its fit.

The refiner's form (scores_at_clock) fits only the classes it names (the network's top
FAST_CLASSES; the others score ABSENT_MARGIN under the worst fitted) with FAST_PASSES, in
windows of WINDOW_SAMPLES samples over which the channel and the carrier hold still, and
averages the windows' scores. A refiner can gate them (passes_gate, em_classes): only the
bursts with a dense QAM near the top of the network's ranking get them, where all their gain
was (thirty-ninth session).

The alphabets of a burst are fitted side by side (em_alphabets): each pass is one set of
array operations over all of them, not one per alphabet, for the same arithmetic.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
from scipy.signal import czt

from rfclassify.dsp import class_equalizer as ce
from rfclassify.dsp.channel import ChannelConfig
from rfclassify.dsp.linear import RRC_SPAN_SYMBOLS
from rfclassify.dsp.pulses import rrc
from rfclassify.dsp.sequence_fronts import blind_filtered
from rfclassify.dsp.symbol_clock import BLIND_ROLLOFF, BlindSymbols

EM_TAPS = ChannelConfig().max_taps   # taps at most: the synthesizer's longest channel, in samples
EQ_SYMBOLS = 12                      # the MMSE filter's window, in symbols (centred on the symbol it decides)
ANNEAL_PASSES = 16
FINAL_PASSES = 4
FAST_PASSES = (8, 2)                 # the refiner's: +2.1 against +2.2 points screened for the full (16, 4)
FAST_CLASSES = 3                     # the refiner fits the network's top this many of its classes
RIDGE = 1e-3
ABSENT_MARGIN = 0.1                  # per symbol: a class left out of the fit scores this under the worst fitted
BLIND_SLACK = 4                      # taps beyond the channel's reach at the blind clock (blind_taps)
CROP_MARGIN = 16                     # symbols kept beyond MAX_SYMBOLS on each side of a long burst's centre
#: the refiner fits a burst in windows of this many samples (the channel and the carrier are
#: frozen over each: Doppler and carrier drift), at most MAX_WINDOWS of them about its centre,
#: and averages their scores. On 4096-sample high-order bursts (thirty-eighth session, scratch,
#: the classes fitted being the true one and its two neighbours): 200 at 16..30 dB read 81.5 %
#: whole and 89.0 % from the central window; 160 at 10..30 dB 84.4 % from the central window,
#: 87.5 % from two and 90.6 % from four. The cost grows with the windows.
WINDOW_SAMPLES = 1024
MAX_WINDOWS = 4
#: which bursts the refiner fits EM scores for (passes_gate): its gain was all in the dense
#: QAMs (thirty-eighth session), so a gate on the network's ranking saves the others' cost
ALL_BURSTS = "all"
DENSE_QAM = ("32QAM", "64QAM", "128QAM", "256QAM")
_GATE = re.compile(r"(?P<set>dense5?)_top(?P<top>[1-9])(?:_snr(?P<snr>-?[0-9]+))?")
UNIT_POWER, OUTPUT_LIKELIHOOD, RESIDUAL = "EM, unit power", "EM, output likelihood", "EM, residual"
SCORES = (OUTPUT_LIKELIHOOD, UNIT_POWER, RESIDUAL)
#: where each alphabet's fit starts (blind_class_scores): the matched-filter outputs, the
#: class-blind filter's outputs, or both (the better fit kept). Multipath smears the
#: matched-filter outputs, and the carrier fit on them picks a wrong frequency for the true
#: alphabet on 40 % of faded bursts (the frozen chain at a known clock), 29 % on the filter's.
#: EM alone reads +3.6 points of big1024's high-order bursts from the filter's start; the
#: refiner served with it gains nothing (forty-second session, benchmarks/blind_front_probe.md),
#: so it serves the matched-filter start
START_MATCHED, START_FILTERED, START_BOTH = "matched", "filtered", "both"
EM_STARTS = (START_MATCHED, START_FILTERED, START_BOTH)


def unit_pulse(sps: int, rolloff: float) -> np.ndarray:
    """The product's RRC pulse, unit energy in samples, +-RRC_SPAN_SYMBOLS symbols."""
    u = np.arange(-RRC_SPAN_SYMBOLS * sps, RRC_SPAN_SYMBOLS * sps + 1) / sps
    return rrc(u, rolloff) / math.sqrt(sps)


class SampledBurst:
    """The samples a receiver sees and the symbol grid that explains them: symbol i (of the
    transmission) starts its response at sample i * sps - start of the burst."""

    def __init__(self, r: np.ndarray, sps: int, p: np.ndarray, start: int, first: int, last: int,
                 extra: np.ndarray | None = None, taps: int = EM_TAPS):
        self.r, self.sps, self.p, self.start, self.taps = r, sps, p, start, taps
        self.extra = np.zeros((r.size, 0), complex) if extra is None else extra   # (N, E) fitted beside the taps
        self.index = np.arange(first, last + 1)           # symbols whose response can touch the samples
        self.offsets = self.index * sps - start           # their response's first sample in the burst

    def turned(self, rotor: np.ndarray) -> SampledBurst:
        """The same burst with its samples multiplied by rotor (a residual carrier taken out)."""
        out = SampledBurst.__new__(SampledBurst)
        out.__dict__.update(self.__dict__)
        out.r = self.r * rotor
        out.extra = self.extra * rotor[:, None]
        return out

    def design(self, m: np.ndarray) -> np.ndarray:
        """(..., N, taps) E[X]: column j is the symbols' means m (..., symbols) through the
        pulse, delayed j samples."""
        n, taps = self.r.size, self.taps
        lead = -int(self.offsets[0])                      # the first symbol may start before the burst
        up = np.zeros(m.shape[:-1] + (self.index.size * self.sps,), complex)
        up[..., ::self.sps] = m
        full = _convolve_last(up, self.p)                # starts at the first symbol's response
        # sample t of the burst holds full[t + lead - j] for tap j: a window over full, padded
        extra = max(0, -lead)
        pad = [(0, 0)] * (m.ndim - 1)
        padded = np.pad(full, pad + [(taps - 1 + extra, n + taps + abs(lead))])
        windows = np.lib.stride_tricks.sliding_window_view(padded, taps, axis=-1)
        first = lead + extra
        return windows[..., first:first + n, ::-1]

    def filtered(self, w: np.ndarray, offset: int, r: np.ndarray | None = None) -> np.ndarray:
        """w^H r over each symbol's MMSE window (zeros outside the burst); r the burst's samples
        unless given."""
        r = self.r if r is None else r
        return self.filtered_many(w[None, :], np.array([offset]), r[None, :])[0]

    def filtered_many(self, w: np.ndarray, offset: np.ndarray, r: np.ndarray) -> np.ndarray:
        """(A, symbols) filtered for filters w (A, L), each with its window's offset[a] and
        samples r[a] (A, N)."""
        pad = w.shape[1] + int(np.abs(offset).max()) + self.p.size + self.taps
        rp = np.pad(r, [(0, 0), (pad, pad)])
        starts = self.offsets[None, :] + offset[:, None] + pad
        windows = np.lib.stride_tricks.sliding_window_view(rp, w.shape[1], axis=1)
        return np.einsum("asl,al->as", windows[np.arange(len(w))[:, None], starts], w.conj())


def _convolve_last(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The full convolution of each row of x (..., n) with p (np.convolve's, row by row: the
    rows are few, the pulse long)."""
    rows = x.reshape(-1, x.shape[-1])
    out = np.stack([np.convolve(row, p) for row in rows])
    return out.reshape(x.shape[:-1] + (out.shape[-1],))


def pulse_correlation(p: np.ndarray, taps: int = EM_TAPS) -> np.ndarray:
    """(taps, taps) R_p[j, k] = sum_t p[t - j] p[t - k] for the real pulse p: what one
    symbol of unit variance adds to E[X^H X] (its response delayed by each tap's lag)."""
    ac = np.correlate(p, p, mode="full")                 # lag l at index p.size - 1 + l
    lag = np.abs(np.arange(taps)[None, :] - np.arange(taps)[:, None])
    return ac[p.size - 1 + lag].astype(complex)


def mmse_filter(g: np.ndarray, sps: int, n0: float) -> tuple[np.ndarray, int, float]:
    """The linear MMSE estimate of a symbol from EQ_SYMBOLS * sps samples around it, for
    unit-energy i.i.d. symbols sent with response g in noise n0 per sample: (filter w,
    offset of the window's first sample from the symbol's first response sample, beta =
    w^H G e: the filter's gain on its symbol, so E|w^H r - beta s|^2 = beta (1 - beta))."""
    w, offset, beta = mmse_filters(g[None, :], sps, np.array([n0]))
    return w[0], int(offset[0]), float(beta[0])


def mmse_filters(g: np.ndarray, sps: int, n0: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """mmse_filter for A responses g (A, G) and noises n0 (A,) at once: (w (A, L), offset
    (A,), beta (A,))."""
    length = EQ_SYMBOLS * sps
    offset = np.argmax(np.abs(g), axis=1) - length // 2  # the window is centred on the response's peak
    # G[i, j]: sample offset + i of the window holds symbol (j - before)'s response at offset + i - (j - before) sps
    before = -(-(length + g.shape[1]) // sps)
    lag = (np.arange(length)[None, :, None] + offset[:, None, None]
           - (np.arange(2 * before + 1)[None, None, :] - before) * sps)
    inside = (lag >= 0) & (lag < g.shape[1])
    rows = np.arange(len(g))[:, None, None]
    gmat = np.where(inside, g[rows, np.clip(lag, 0, g.shape[1] - 1)], 0)
    cov = gmat @ gmat.conj().transpose(0, 2, 1) + n0[:, None, None] * np.eye(length)
    target = gmat[:, :, before]
    w = np.linalg.solve(cov, target[:, :, None])[:, :, 0]
    beta = np.real(np.einsum("al,al->a", w.conj(), target))
    return w, offset, beta


def posteriors(z: np.ndarray, bank: ce.AlphabetBank, which: np.ndarray, s2: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Each symbol's posterior mean and variance (A, n) over its alphabet's NEIGHBOURS
    nearest points, for symbols z (A, n) in alphabets `which` (A,) at variances s2 (A,)."""
    cand = bank.candidates(z, which)                                        # (A, n, K)
    d = z[:, :, None] - cand
    e = -(d.real ** 2 + d.imag ** 2) / s2[:, None, None]
    w = np.exp(e - e.max(axis=2, keepdims=True))
    w /= w.sum(axis=2, keepdims=True)
    m = (w * cand).sum(axis=2)
    v = np.maximum((w * (cand.real ** 2 + cand.imag ** 2)).sum(axis=2) - (m.real ** 2 + m.imag ** 2), 0.0)
    return m, v


def em_alphabet(burst: SampledBurst, z0: np.ndarray, bank: ce.AlphabetBank, a: int, rp: np.ndarray,
                passes: tuple[int, int] = (ANNEAL_PASSES, FINAL_PASSES)) -> tuple[np.ndarray, float, float]:
    """(outputs of the final E-step, its residual (1 - beta) / beta, the M-step's noise per
    sample) for alphabet a, from unit-power start symbols z0: em_alphabets for one."""
    z, s2, n0 = em_alphabets(burst, z0[None, :], bank, np.array([a]), rp, passes)
    return z[0], float(s2[0]), float(n0[0])


def em_alphabets(burst: SampledBurst, z0: np.ndarray, bank: ce.AlphabetBank, which: np.ndarray, rp: np.ndarray,
                 passes: tuple[int, int] = (ANNEAL_PASSES, FINAL_PASSES), rotors: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(outputs of the final E-step (A, symbols), its residual (1 - beta) / beta (A,), the
    M-step's noise per sample (A,)) of each alphabet which[a], fitted on its own, from
    unit-power start symbols z0[a], after passes[0] annealed passes and passes[1] at the
    filter's residual; the A fits run side by side as array operations (one fit's
    interpreter overhead, not A). rotors (A, N) turn the samples per alphabet first (its
    residual carrier), where given. The burst's extra regressors are fitted beside the taps
    and taken out before the MMSE filter. The channel is frozen over the burst (taps varying
    linearly over it, with an MMSE filter per third of the burst, read 52 against 58 % of 60
    faded bursts with a Doppler above 5e-5 cycles/sample: thirty-seventh session, scratch)."""
    count, n = len(which), burst.r.size
    r = np.broadcast_to(burst.r, (count, n)) if rotors is None else burst.r[None, :] * rotors
    extra = (np.broadcast_to(burst.extra, (count,) + burst.extra.shape) if rotors is None
             else burst.extra[None, :, :] * rotors[:, :, None])
    z, s2_filter = z0, np.ones(count)
    floors = list(np.geomspace(*ce.SOFT_VARIANCE, passes[0])) + [0.0] * passes[1]
    n0 = np.ones(count)
    taps = burst.taps
    eye = np.eye(taps + extra.shape[2])
    for floor in floors:
        m, v = posteriors(z, bank, which, np.maximum(np.maximum(s2_filter, floor), 1e-4))
        x = np.concatenate([burst.design(m), extra], axis=2)                  # (A, N, taps + E)
        xh = x.conj().transpose(0, 2, 1)
        gram = xh @ x
        gram[:, :taps, :taps] += v.sum(axis=1)[:, None, None] * rp
        ridge = RIDGE * np.trace(gram[:, :taps, :taps], axis1=1, axis2=2).real / taps
        gram += ridge[:, None, None] * eye
        fit = np.linalg.solve(gram, (xh @ r[:, :, None]))[:, :, 0]
        resid = r - (x @ fit[:, :, None])[:, :, 0]
        spread = v.sum(axis=1) * np.einsum("at,ts,as->a", fit[:, :taps].conj(), rp, fit[:, :taps]).real
        n0 = np.maximum(((resid.real ** 2 + resid.imag ** 2).sum(axis=1) + spread) / n, 1e-8)
        w, offset, beta = mmse_filters(_convolve_last(fit[:, :taps], burst.p), burst.sps, n0)
        beta = np.clip(beta, 1e-3, 1 - 1e-6)
        clean = r - (extra @ fit[:, taps:, None])[:, :, 0]
        z = burst.filtered_many(w, offset, clean) / beta[:, None]
        s2_filter = (1 - beta) / beta
    return z, s2_filter, n0


def em_totals(burst: SampledBurst, own: np.ndarray, bank: ce.AlphabetBank, starts: np.ndarray,
              rotors: np.ndarray | None = None, passes: tuple[int, int] = (ANNEAL_PASSES, FINAL_PASSES)
              ) -> dict[str, np.ndarray]:
    """{score: (A,) burst log-likelihood of each alphabet} after its EM fit (em_alphabet) from
    its start symbols starts[a] (every symbol of burst.index), scored on the `own` symbols.
    rotors (A, N) turn the samples per alphabet first (its residual carrier), where given."""
    rp = pulse_correlation(burst.p, burst.taps)
    which = np.arange(bank.sizes.size)
    z_all, s2, n0 = em_alphabets(burst, starts, bank, which, rp, passes, rotors)
    z_all = z_all[:, own]
    totals = {OUTPUT_LIKELIHOOD: z_all.shape[1] * bank.loglik(z_all, which, np.maximum(s2, ce.N0_FLOOR)[:, None])[:, 0],
              RESIDUAL: -burst.r.size * np.log(n0)}
    decided = bank.decide_exactly(z_all, which)
    ll, _ = ce.unit_power_logliks(z_all.copy(), decided, bank)
    totals[UNIT_POWER] = ll * z_all.shape[1]
    return totals


def class_totals(per_alphabet_total: np.ndarray, bank: ce.AlphabetBank, n_classes: int) -> np.ndarray:
    """(n_classes,) each class's log-mean-exp of its alphabets' burst log-likelihoods; -inf
    for a class the bank has no alphabet of (a subset)."""
    out = np.full(n_classes, -np.inf)
    for c in range(n_classes):
        t = per_alphabet_total[bank.owner == c]
        if t.size:
            out[c] = t.max() + math.log(np.mean(np.exp(t - t.max())))
    return out


def two_per_symbol(x: np.ndarray, sps: float, timing: float) -> tuple[np.ndarray, int]:
    """(x at instants timing + n sps / 2 for every n inside the burst, the first n): the burst
    band-limited to the new rate's Nyquist band (|f| < 1 / sps cycles/sample) and
    interpolated there by its Fourier series (evaluated by a chirp z-transform), so even n
    fall on the clock's symbol instants."""
    x = np.asarray(x, np.complex128)
    n = x.size
    n_min = int(math.ceil(-timing / (sps / 2)))
    n_max = int(math.floor((n - 1 - timing) / (sps / 2)))
    t0, step = timing + n_min * (sps / 2), sps / 2
    reach = int(math.ceil(min(0.5, 1.0 / sps) * n)) - 1  # bins k with |k / n| below the band edge
    k = np.arange(-reach, reach + 1)
    coef = np.fft.fft(x)[k % n] / n * np.exp(2j * np.pi * k * t0 / n)
    count = n_max - n_min + 1
    # sum_i coef_i e^(2 pi j (k_0 + i) m step / n) for m = 0..count-1
    out = czt(coef, count, w=np.exp(2j * np.pi * step / n), a=1.0)
    return out * np.exp(2j * np.pi * k[0] * step * np.arange(count) / n), n_min


def blind_taps(sps: float) -> tuple[int, int]:
    """(taps, of which before the clock's instant) at two samples a symbol for a burst of sps
    samples a symbol: the channel's longest reach (ChannelConfig.max_taps samples, 2 max_taps
    / sps at the new rate) plus BLIND_SLACK for the timing's error and the pulse's mismatch,
    at most EM_TAPS; a quarter of them before. Fewer symbols carry fewer taps: at 16 samples
    a symbol (64 symbols) 16 taps lost half the unfaded bursts that 8 read (thirty-seventh
    session, a scratch check on 33 of them)."""
    taps = int(min(EM_TAPS, BLIND_SLACK + math.ceil(2 * ChannelConfig().max_taps / sps)))
    return taps, max(2, taps // 4)


def _fitted_from(burst: SampledBurst, y: np.ndarray, own: np.ndarray, bank: ce.AlphabetBank, n_min: int, k0: int,
                 passes: tuple[int, int]) -> dict[str, np.ndarray]:
    """em_totals from start symbols y (unit power, every symbol of burst.index) at a blind
    clock: each alphabet's carrier_fit on the own symbols (time 0 at symbol k0) taken out of
    them and of the samples (x2's sample n is symbol time (n_min + n) / 2)."""
    freq, phase = ce.carrier_fit(y[own], bank)
    symbol_time = burst.index - k0
    starts = y[None, :] * np.exp(-1j * (2 * np.pi * freq[:, None] * symbol_time[None, :] + phase[:, None]))
    sample_time = (n_min + np.arange(burst.r.size)) / 2 - k0
    rotors = np.exp(-2j * np.pi * freq[:, None] * sample_time[None, :])
    return em_totals(burst, own, bank, starts, rotors, passes)


def _filtered_start(y: np.ndarray, own: np.ndarray) -> np.ndarray | None:
    """The start symbols y (unit power, every symbol of the fit) with the own ones replaced by
    the class-blind filter's outputs at unit power (sequence_fronts.blind_filtered), or None
    where the filter gives none."""
    filtered = blind_filtered(y[own])
    if filtered is None:
        return None
    out = y.copy()
    out[own] = filtered[0] / math.sqrt(max(float(np.mean(np.abs(filtered[0]) ** 2)), 1e-30))
    return out


def blind_class_scores(x: np.ndarray, sps: float, timing: float, labels: tuple[str, ...],
                       dc_carrier: float | None = None, classes: np.ndarray | None = None,
                       passes: tuple[int, int] = (ANNEAL_PASSES, FINAL_PASSES),
                       rolloff: float = BLIND_ROLLOFF, fit_start: str = START_MATCHED) -> dict[str, np.ndarray] | None:
    """{score: (len(labels),) class log-likelihoods per symbol less the best} of a burst at its
    blind clock (x the prepared, derotated burst, sps and timing as
    symbol_clock.blind_symbols found them), for classes `labels` (class_equalizer.scorable
    ones): the central samples of MAX_SYMBOLS symbols and CROP_MARGIN more on each side, at
    two samples a symbol (two_per_symbol), the BLIND_ROLLOFF pulse, blind_taps' taps; each
    alphabet's residual carrier and phase by class_equalizer.carrier_fit on the
    matched-filter outputs, then em_totals.

    dc_carrier (cycles/sample): x was derotated by it, so a receiver DC offset is the tone
    exp(-2 pi j dc_carrier t) in it, fitted beside the taps (None: no such regressor; it won
    back 18 of 40 unfaded bursts with an offset that the fit without it lost, and lost none
    of 40 it had right: thirty-seventh session, scratch). classes (indices into labels): fit
    only their alphabets; the others score ABSENT_MARGIN under the worst fitted. passes:
    em_alphabet's. rolloff: the pulse's (the receiver does not know it; a caller that does
    can say). fit_start (one of EM_STARTS): where each alphabet's fit starts, START_MATCHED the
    matched-filter outputs, START_FILTERED the class-blind filter's outputs
    (sequence_fronts.blind_filtered of them; the matched-filter outputs where it gives none),
    START_BOTH each of them, each alphabet keeping the fit that scores higher at unit power
    (twice the cost). Either way the carrier fit reads the same symbols the fit starts from.
    None for a burst of fewer than class_equalizer.MIN_SYMBOLS symbols."""
    if fit_start not in EM_STARTS:
        raise ValueError(f"unknown EM start {fit_start!r} (one of {', '.join(EM_STARTS)})")
    keep = int(math.ceil((ce.MAX_SYMBOLS + 2 * CROP_MARGIN) * sps))
    if x.size > keep:
        cut = (x.size - keep) // 2
        x, timing = x[cut:cut + keep], timing - cut
    x2, n_min = two_per_symbol(x, sps, timing)
    p = unit_pulse(2, rolloff)
    c = (p.size - 1) // 2
    taps, lead = blind_taps(sps)
    start = n_min + c + lead
    reach = p.size + taps - 1
    extra = None
    if dc_carrier is not None:
        extra = np.exp(-2j * np.pi * dc_carrier * (timing + (n_min + np.arange(x2.size)) * (sps / 2)))[:, None]
    burst = SampledBurst(x2, 2, p, start, -(-(start - reach + 1) // 2), (start + x2.size - 1) // 2, extra, taps)
    q = 2 * burst.index - n_min                               # each symbol's instant in x2
    own = (q >= 0) & (q < x2.size)
    if own.sum() < ce.MIN_SYMBOLS:
        return None
    matched = np.convolve(x2, p[::-1])
    at = q + c
    y = np.where((at >= 0) & (at < matched.size), matched[np.clip(at, 0, matched.size - 1)], 0)
    y = y / math.sqrt(max(float(np.mean(np.abs(y[own]) ** 2)), 1e-30))
    bank = ce.alphabet_bank(tuple(labels))
    bank.turn_series                                          # noqa: B018 - made once, sliced by subset
    if classes is not None:
        bank = bank.subset(np.asarray(classes))
    k0 = int(burst.index[own][0])                             # carrier_fit's time 0
    yb = _filtered_start(y, own) if fit_start != START_MATCHED else None
    if yb is None:                                            # the matched start, or the filter gave none
        totals = _fitted_from(burst, y, own, bank, n_min, k0, passes)
    elif fit_start == START_FILTERED:
        totals = _fitted_from(burst, yb, own, bank, n_min, k0, passes)
    else:                                                     # START_BOTH: each alphabet keeps the better fit
        matched = _fitted_from(burst, y, own, bank, n_min, k0, passes)
        filtered = _fitted_from(burst, yb, own, bank, n_min, k0, passes)
        better = filtered[UNIT_POWER] > matched[UNIT_POWER]
        totals = {k: np.where(better, filtered[k], matched[k]) for k in SCORES}
    out = {}
    for k in SCORES:
        t = class_totals(totals[k], bank, len(labels)) / own.sum()
        t -= t.max()
        out[k] = np.where(np.isfinite(t), t, t[np.isfinite(t)].min() - ABSENT_MARGIN)
    return out


def top_classes(probs: np.ndarray, count: int = FAST_CLASSES) -> np.ndarray:
    """The indices of the `count` largest of probs (one burst's probabilities over a
    refiner's classes), in increasing order: the classes scores_at_clock fits."""
    return np.sort(np.argsort(np.asarray(probs))[::-1][:count])


def em_classes(probs: np.ndarray, labels: Sequence[str], snr_db: float, gate: str = ALL_BURSTS,
               count: int = FAST_CLASSES) -> np.ndarray:
    """The classes scores_at_clock fits for one burst (indices into labels, increasing), from
    the network's probabilities over a refiner's classes `labels` and its SNR estimate: the
    top_classes (`count` of them), or none (an empty array: the refiner's EM scores are
    zeros) where `gate` holds the burst back (passes_gate, the classes ranked by probs)."""
    if gate != ALL_BURSTS:
        order = np.argsort(np.asarray(probs))[::-1]
        if not passes_gate(gate, [labels[i] for i in order], snr_db):
            return np.zeros(0, np.int64)
    return top_classes(probs, count)


def count_is_valid(count: object, n_classes: int) -> bool:
    """Whether `count` is a number of top classes the EM scores can be fitted for among a
    refiner's n_classes: an int (not a bool) in 1..n_classes. The fit's configuration, the
    served count and a stored refiner file are checked by this one rule."""
    return (not isinstance(count, bool) and isinstance(count, (int, np.integer))
            and 1 <= int(count) <= n_classes)


def gate_is_valid(gate: str) -> bool:
    """Whether `gate` names a gate passes_gate knows: ALL_BURSTS, or `dense_top<k>` /
    `dense5_top<k>`, optionally followed by `_snr<dB>`."""
    return gate == ALL_BURSTS or _GATE.fullmatch(gate) is not None


def gate_terms(gate: str) -> tuple[tuple[str, ...], int, float | None] | None:
    """(the QAMs it looks for, among how many of the top classes, the least SNR estimate in dB
    or None) of a `dense...` gate; None for ALL_BURSTS or a name gate_is_valid refuses."""
    m = _GATE.fullmatch(gate)
    if m is None:
        return None
    qams = DENSE_QAM if m["set"] == "dense" else ("16QAM",) + DENSE_QAM
    return qams, int(m["top"]), None if m["snr"] is None else float(m["snr"])


def passes_gate(gate: str, ranked: Sequence[str], snr_db: float) -> bool:
    """Whether a burst gets EM scores under `gate`, from the refiner's classes ranked by the
    network's probability (most probable first) and its SNR estimate: ALL_BURSTS every
    burst; `dense_top<k>[_snr<s>]` a burst with one of DENSE_QAM among its top k classes
    (`dense5`: DENSE_QAM and 16QAM) and, where named, an SNR estimate of at least s dB.
    ValueError for a gate gate_is_valid refuses."""
    if gate == ALL_BURSTS:
        return True
    terms = gate_terms(gate)
    if terms is None:
        raise ValueError(f"unknown EM gate {gate!r}")
    qams, top, least_snr = terms
    if least_snr is not None and snr_db < least_snr:
        return False
    return any(c in qams for c in ranked[:top])


def n_scores(labels: Sequence[str]) -> int:
    """How many values scores_at_clock gives for classes `labels`."""
    return 2 * len(labels)


def window_starts(n_samples: int, window: int = WINDOW_SAMPLES, max_windows: int = MAX_WINDOWS) -> list[int]:
    """Where the windows scores_at_clock fits begin in a burst of n_samples: as many whole
    windows as it holds (one, the whole burst, when it holds none), at most max_windows,
    side by side about its centre."""
    if n_samples <= window:
        return [0]
    count = min(max_windows, n_samples // window)
    first = (n_samples - count * window) // 2
    return [first + k * window for k in range(count)]


def scores_at_clock(found: BlindSymbols | None, labels: tuple[str, ...], classes: np.ndarray | None,
                    passes: tuple[int, int] = FAST_PASSES, window: int = WINDOW_SAMPLES,
                    max_windows: int = MAX_WINDOWS, fit_start: str = START_MATCHED) -> np.ndarray | None:
    """The refiner's input: (n_scores(labels),) float32, each class's score at unit power then
    by the outputs' own likelihood, less the best: blind_class_scores of each window of the
    burst (window_starts; the clock's timing moved with it, the DC tone fitted at the
    burst's clock carrier), fitting only `classes` (indices into labels; None: all) with
    `passes`, averaged over the windows that hold enough symbols. None where `classes` is
    empty (em_classes: a gate held the burst back), the clock found nothing or no window
    holds enough symbols, or a score is not finite."""
    if found is None or (classes is not None and len(classes) == 0):
        return None
    fitted = []
    for start in window_starts(found.baseband.size, window, max_windows):
        with np.errstate(all="ignore"):
            s = blind_class_scores(found.baseband[start:start + window], found.sps, found.timing_samples - start,
                                   labels, dc_carrier=found.carrier, classes=classes, passes=passes, fit_start=fit_start)
        if s is not None:
            fitted.append(np.concatenate([s[UNIT_POWER], s[OUTPUT_LIKELIHOOD]]))
    if not fitted:
        return None
    out = np.mean(fitted, axis=0)
    k = len(labels)
    out[:k] -= out[:k].max()
    out[k:] -= out[k:].max()
    out = out.astype(np.float32)
    return out if np.all(np.isfinite(out)) else None
