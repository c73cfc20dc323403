"""Can a receiver estimate the multipath channel per class hypothesis well enough to read dense QAMs?

benchmarks/multipath_bound.md: at a known clock and carrier, a linear MMSE receiver that
knows the channel reads the faded high-order bursts at 98-100 %, while every blind filter
the product has tried (the class equalizer, hard or soft, a 9-tap inverse filter even when
trained on the true symbols) loses 20-55 points at 0.4 symbols of delay spread and more.
Those filters are inverse filters fitted to decisions. This probe tries the other form, a
channel estimate: for each alphabet the channel taps are fitted by expectation-maximization
(approximated linearly), and the known-channel MMSE receiver is then built from the estimate.

Per burst (multipath_bound's draw: one of the 12 high-order classes, integer samples per
symbol, RRC pulse, the product's frozen multipath, AWGN at 10..30 dB), the receiver sees
N_SAMPLES samples of the transmission and knows the pulse, sps, the carrier (none) and
where the channel's first path puts a symbol's response; it does not know the channel.
Per alphabet:

1. start: the pulse's matched filter at the instants where the response of the channel's
   strongest matched-filter tap peaks (what multipath_bound's "known clock" receivers see),
   turned by the phase under which the alphabet fits them best (a grid over its
   rotational period);
2. M-step: the taps c (EM_TAPS complex, at sample delays 0..EM_TAPS-1 from the first path)
   that least-squares fit the samples to the symbols' posterior means, their posterior
   variances counted (E[X^H X] = M^H M + sum(v) R_p, R_p the pulse's autocorrelation), and
   the noise from the expected residual;
3. E-step: the MMSE filter of multipath_bound built from the pulse through c and that
   noise, its outputs unbiased, each symbol's posterior over the alphabet's NEIGHBOURS
   nearest points at the larger of the filter's residual and an annealed floor
   (class_equalizer.SOFT_VARIANCE over ANNEAL_PASSES passes, then FINAL_PASSES at the
   residual alone).

Each alphabet is then scored three ways, and each class by the log-mean-exp over its
alphabets: ``EM, output likelihood`` (the mixture log-likelihood of the final outputs at the
filter's residual), ``EM, unit power`` (class_equalizer.unit_power_logliks, as the refiner's
equalizer scores) and ``EM, residual`` (-N log of the M-step's noise: a joint fit's
likelihood, which favours the densest alphabets). References on the same samples: ``MMSE,
known channel`` (the same receiver built from the true channel) and ``soft class eq., known
clock`` (the best blind filter so far, multipath_bound's).

At the blind clock (``blind_class_scores``, what benchmarks/feature_screen.py's ``em_channel``
candidate reads): the prepared burst symbol_clock.blind_symbols found is interpolated to two
samples a symbol at its clock (``two_per_symbol``); the pulse is the BLIND_ROLLOFF RRC and the
taps (``blind_taps``: the channel's reach at that rate and BLIND_SLACK more, a quarter of them
before the clock's instant) take up the timing error and the roll-off's mismatch beside the
channel; a receiver DC offset is fitted beside them; each alphabet's residual carrier and
phase come from class_equalizer.carrier_fit on the matched-filter outputs and are taken out
of the samples before its fit.

One start per alphabet: a fit can stop in a local optimum (tests/test_bench_em_channel_probe.py
names a draw that does). 330-350 ms a burst at the blind clock for the 21 alphabets on the
2-core x86: a probe, not a serving path. Results: benchmarks/em_channel_probe.md.

    python3 benchmarks/em_channel_probe.py [--quick] [--per-class N] [--workers N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import high_order_bound as hob  # noqa: E402 (after the path fix)
import multipath_bound as mpb  # noqa: E402
from rfclassify.dsp import class_equalizer as ce  # noqa: E402
from rfclassify.dsp.channel import ChannelConfig, log_uniform  # noqa: E402
from rfclassify.dsp.linear import RRC_SPAN_SYMBOLS  # noqa: E402
from rfclassify.dsp.pulses import rrc  # noqa: E402
from rfclassify.dsp.sequence_fronts import blind_filtered  # noqa: E402
from rfclassify.dsp.symbol_clock import BLIND_ROLLOFF  # noqa: E402
from rfclassify.dsp.synth import ROLLOFF_RANGE, SPS_RANGE  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402
from rfclassify.model.evaluate import clean_json  # noqa: E402

N_SAMPLES = mpb.N_SAMPLES
EM_TAPS = ChannelConfig().max_taps
ANNEAL_PASSES = 16
FINAL_PASSES = 4
START_PHASES = 32
RIDGE = 1e-3
ABSENT_MARGIN = 0.1           # per symbol: a class left out of the fit scores this under the worst fitted
BLIND_SLACK = 4              # taps beyond the channel's reach at the blind clock (blind_taps)
SCORES = ("EM, output likelihood", "EM, unit power", "EM, residual")
RECEIVERS = ("MMSE, known channel", "soft class eq., known clock", *SCORES)


def unit_pulse(sps: int, rolloff: float) -> np.ndarray:
    """The product's RRC pulse, unit energy in samples, +-RRC_SPAN_SYMBOLS symbols."""
    u = np.arange(-RRC_SPAN_SYMBOLS * sps, RRC_SPAN_SYMBOLS * sps + 1) / sps
    return rrc(u, rolloff) / math.sqrt(sps)


class Burst:
    """The samples a receiver sees and the symbol grid that explains them: symbol i (of the
    transmission) starts its response at sample i * sps - start of the burst."""

    def __init__(self, r: np.ndarray, sps: int, p: np.ndarray, start: int, first: int, last: int,
                 extra: np.ndarray | None = None, taps: int = EM_TAPS):
        self.r, self.sps, self.p, self.start, self.taps = r, sps, p, start, taps
        self.extra = np.zeros((r.size, 0), complex) if extra is None else extra   # (N, E) fitted beside the taps
        self.index = np.arange(first, last + 1)           # symbols whose response can touch the samples
        self.offsets = self.index * sps - start           # their response's first sample in the burst

    def turned(self, rotor: np.ndarray) -> "Burst":
        """The same burst with its samples multiplied by rotor (a residual carrier taken out)."""
        out = Burst.__new__(Burst)
        out.__dict__.update(self.__dict__)
        out.r = self.r * rotor
        out.extra = self.extra * rotor[:, None]
        return out

    def design(self, m: np.ndarray) -> np.ndarray:
        """(N, taps) E[X]: column j is the symbols' means m through the pulse, delayed j samples."""
        n = self.r.size
        lead = -int(self.offsets[0])                      # the first symbol may start before the burst
        up = np.zeros(self.index.size * self.sps, complex)
        up[::self.sps] = m
        full = np.convolve(up, self.p)                   # starts at the first symbol's response
        out = np.zeros((n, self.taps), complex)
        for j in range(self.taps):
            # sample t of the burst holds full[t + lead - j]
            src = np.arange(n) + lead - j
            ok = (src >= 0) & (src < full.size)
            out[ok, j] = full[src[ok]]
        return out

    def filtered(self, w: np.ndarray, offset: int, r: np.ndarray | None = None) -> np.ndarray:
        """w^H r over each symbol's MMSE window (zeros outside the burst); r the burst's samples
        unless given."""
        r = self.r if r is None else r
        pad = w.size + abs(offset) + self.p.size + self.taps
        rp = np.concatenate([np.zeros(pad, complex), r, np.zeros(pad, complex)])
        starts = self.offsets + offset + pad
        windows = np.lib.stride_tricks.sliding_window_view(rp, w.size)[starts]
        return windows @ w.conj()


def pulse_correlation(p: np.ndarray, taps: int = EM_TAPS) -> np.ndarray:
    """(taps, taps) R_p[j, k] = sum_t p[t - j] p[t - k] for the real pulse p: what one
    symbol of unit variance adds to E[X^H X] (its response delayed by each tap's lag)."""
    ac = np.correlate(p, p, mode="full")                 # lag l at index p.size - 1 + l
    lag = np.abs(np.arange(taps)[None, :] - np.arange(taps)[:, None])
    return ac[p.size - 1 + lag].astype(complex)


def posteriors(z: np.ndarray, bank: ce.AlphabetBank, a: int, s2: float) -> tuple[np.ndarray, np.ndarray]:
    """Each symbol's posterior mean and variance over alphabet a's NEIGHBOURS nearest points."""
    cand = bank.candidates(z[None, :], np.array([a]))[0]                   # (n, K)
    e = -np.abs(z[:, None] - cand) ** 2 / s2
    w = np.exp(e - e.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    m = (w * cand).sum(axis=1)
    v = np.maximum((w * np.abs(cand) ** 2).sum(axis=1) - np.abs(m) ** 2, 0.0)
    return m, v


def em_alphabet(burst: Burst, z0: np.ndarray, bank: ce.AlphabetBank, a: int, rp: np.ndarray,
                passes: tuple[int, int] = (ANNEAL_PASSES, FINAL_PASSES)) -> tuple[np.ndarray, float, float]:
    """(outputs of the final E-step, its residual (1 - beta) / beta, the M-step's noise per
    sample) for alphabet a, from unit-power start symbols z0, after passes[0] annealed passes
    and passes[1] at the filter's residual. The burst's extra regressors
    (a DC offset's tone) are fitted beside the taps and taken out before the MMSE filter.
    The channel is frozen over the burst (taps varying linearly over it, with an MMSE filter
    per third of the burst, read 52 against 58 % of 60 faded bursts with a Doppler above
    5e-5 cycles/sample: thirty-seventh session, scratch)."""
    z, s2_filter = z0, 1.0
    floors = list(np.geomspace(*ce.SOFT_VARIANCE, passes[0])) + [0.0] * passes[1]
    n0 = 1.0
    n_extra, L = burst.extra.shape[1], burst.taps
    spread = np.zeros((L + n_extra, L + n_extra), complex)
    for floor in floors:
        m, v = posteriors(z, bank, a, max(s2_filter, floor, 1e-4))
        x = np.hstack([burst.design(m), burst.extra])
        spread[:L, :L] = v.sum() * rp
        gram = x.conj().T @ x + spread
        gram += RIDGE * np.trace(gram[:L, :L]).real / L * np.eye(gram.shape[0])
        fit = np.linalg.solve(gram, x.conj().T @ burst.r)
        resid = burst.r - x @ fit
        n0 = max(float((np.vdot(resid, resid).real + np.vdot(fit, spread @ fit).real) / burst.r.size), 1e-8)
        w, offset, beta = mpb.mmse_filter(np.convolve(burst.p, fit[:L]), burst.sps, n0)
        beta = min(max(beta, 1e-3), 1 - 1e-6)
        z = burst.filtered(w, offset, burst.r - burst.extra @ fit[L:]) / beta
        s2_filter = (1 - beta) / beta
    return z, s2_filter, n0


def phase_start(y: np.ndarray, bank: ce.AlphabetBank) -> np.ndarray:
    """(A, n) unit-power y turned, per alphabet, by the phase (START_PHASES over its rotational
    period) under which its soft decisions fit best."""
    y = y / math.sqrt(max(float(np.mean(np.abs(y) ** 2)), 1e-30))
    out = np.empty((bank.sizes.size, y.size), complex)
    for a in range(bank.sizes.size):
        points = bank.points[a, :bank.sizes[a]]
        d = np.abs(points[:, None] - points[None, :])
        s2 = (ce.CARRIER_SPREAD * float(d[d > 1e-9].min())) ** 2
        turns = np.exp(-1j * np.arange(START_PHASES) * (2 * np.pi / bank.symmetry[a]) / START_PHASES)
        cand = y[None, :] * turns[:, None]
        ll = bank.loglik(cand, np.full(START_PHASES, a), np.full((START_PHASES, 1), s2))[:, 0]
        out[a] = cand[int(np.argmax(ll))]
    return out


def class_decision(per_alphabet_total: np.ndarray, bank: ce.AlphabetBank) -> int:
    """The class whose alphabets' burst log-likelihoods have the largest log-mean-exp."""
    return int(np.argmax(class_totals(per_alphabet_total, bank)))


def em_totals(burst: Burst, y: np.ndarray, own: np.ndarray, bank: ce.AlphabetBank, starts: np.ndarray,
              rotors: np.ndarray | None = None, passes: tuple[int, int] = (ANNEAL_PASSES, FINAL_PASSES)
              ) -> dict[str, np.ndarray]:
    """{score: (A,) burst log-likelihood of each alphabet} after its EM fit (em_alphabet) from
    its start symbols starts[a] (every symbol of burst.index), scored on the `own` symbols.
    rotors (A, N) turn the samples per alphabet first (its residual carrier), where given."""
    rp = pulse_correlation(burst.p, burst.taps)
    totals = {k: np.empty(bank.sizes.size) for k in SCORES}
    outputs = []
    for a in range(bank.sizes.size):
        b = burst if rotors is None else burst.turned(rotors[a])
        z, s2, n0 = em_alphabet(b, starts[a], bank, a, rp, passes)
        zo = z[own]
        totals["EM, output likelihood"][a] = zo.size * bank.loglik(zo[None, :], np.array([a]),
                                                                   np.array([[max(s2, ce.N0_FLOOR)]]))[0, 0]
        totals["EM, residual"][a] = -burst.r.size * math.log(n0)
        outputs.append(zo)
    z_all = np.stack(outputs)
    decided = bank.decide_exactly(z_all, np.arange(bank.sizes.size))
    ll, _ = ce.unit_power_logliks(z_all.copy(), decided, bank)
    totals["EM, unit power"] = ll * z_all.shape[1]
    return totals


def class_totals(per_alphabet_total: np.ndarray, bank: ce.AlphabetBank) -> np.ndarray:
    """(12,) each class's log-mean-exp of its alphabets' burst log-likelihoods; -inf for a
    class the bank has no alphabet of (a subset)."""
    out = np.full(len(HIGH_ORDER_LABELS), -np.inf)
    for c in range(out.size):
        t = per_alphabet_total[bank.owner == c]
        if t.size:
            out[c] = t.max() + math.log(np.mean(np.exp(t - t.max())))
    return out


def two_per_symbol(x: np.ndarray, sps: float, timing: float) -> tuple[np.ndarray, int]:
    """(x at instants timing + n sps / 2 for every n inside the burst, the first n): the burst
    band-limited to the new rate's Nyquist band (|f| < 1 / sps cycles/sample) and
    interpolated there by its Fourier series, so even n fall on the clock's symbol instants."""
    x = np.asarray(x, np.complex128)
    n_min = int(math.ceil(-timing / (sps / 2)))
    n_max = int(math.floor((x.size - 1 - timing) / (sps / 2)))
    t = timing + np.arange(n_min, n_max + 1) * (sps / 2)
    f = np.fft.fftfreq(x.size)
    keep = np.abs(f) < min(0.5, 1.0 / sps)
    spectrum = np.fft.fft(x)[keep] / x.size
    return np.exp(2j * np.pi * np.outer(t, f[keep])) @ spectrum, n_min


def blind_taps(sps: float) -> tuple[int, int]:
    """(taps, of which before the clock's instant) at two samples a symbol for a burst of sps
    samples a symbol: the channel's longest reach (ChannelConfig.max_taps samples, 2 max_taps
    / sps at the new rate) plus BLIND_SLACK for the timing's error and the pulse's mismatch,
    at most EM_TAPS; a quarter of them before. Fewer symbols carry fewer taps: at 16 samples
    a symbol (64 symbols) 16 taps lost half the unfaded bursts that 8 read (thirty-seventh
    session, a scratch check on 33 of them)."""
    taps = int(min(EM_TAPS, BLIND_SLACK + math.ceil(2 * ChannelConfig().max_taps / sps)))
    return taps, max(2, taps // 4)


def _fitted_from(burst: Burst, y: np.ndarray, own: np.ndarray, bank: ce.AlphabetBank, n_min: int, k0: int,
                 passes: tuple[int, int]) -> dict[str, np.ndarray]:
    """em_totals from start symbols y (unit power, every symbol of burst.index) at a blind
    clock: each alphabet's carrier_fit on the own symbols (time 0 at symbol k0) taken out of
    them and of the samples (x2's sample n is symbol time (n_min + n) / 2)."""
    freq, phase = ce.carrier_fit(y[own], bank)
    symbol_time = burst.index - k0
    starts = y[None, :] * np.exp(-1j * (2 * np.pi * freq[:, None] * symbol_time[None, :] + phase[:, None]))
    sample_time = (n_min + np.arange(burst.r.size)) / 2 - k0
    rotors = np.exp(-2j * np.pi * freq[:, None] * sample_time[None, :])
    return em_totals(burst, y, own, bank, starts, rotors, passes)


def blind_class_scores(x: np.ndarray, sps: float, timing: float, dc_carrier: float | None = None,
                       classes: np.ndarray | None = None,
                       passes: tuple[int, int] = (ANNEAL_PASSES, FINAL_PASSES),
                       rolloff: float = BLIND_ROLLOFF, blind_start: bool = False) -> dict[str, np.ndarray] | None:
    """{score: (12,) class log-likelihoods less the best} of a burst at its blind clock (x the
    prepared, derotated burst, sps and timing as symbol_clock.blind_symbols found them): the
    burst at two samples a symbol (two_per_symbol), the BLIND_ROLLOFF pulse, blind_taps'
    taps; each alphabet's residual carrier and phase by class_equalizer.carrier_fit on the
    matched-filter outputs, then em_totals. dc_carrier (cycles/sample): x was derotated by
    it, so a receiver DC offset is the tone exp(-2 pi j dc_carrier t) in it, fitted beside
    the taps (None: no such regressor; it won back 18 of 40 unfaded bursts with an offset
    that the fit without it lost, and lost none of 40 it had right: thirty-seventh session,
    scratch). classes (indices into HIGH_ORDER_LABELS): fit only their alphabets; the
    others score ABSENT_MARGIN under the worst fitted class. passes: em_alphabet's. rolloff:
    the pulse's (the receiver does not know it; a caller that does can say). blind_start: a
    second start per alphabet from the class-blind filter's output (sequence_fronts.blind_filtered
    of the matched-filter outputs, its own carrier fit), each alphabet keeping the start whose
    fit scores higher at unit power (less smeared symbols for a faded burst to start from;
    twice the cost). None for a burst of fewer than class_equalizer.MIN_SYMBOLS symbols."""
    x2, n_min = two_per_symbol(x, sps, timing)
    p = unit_pulse(2, rolloff)
    c = (p.size - 1) // 2
    taps, lead = blind_taps(sps)
    start = n_min + c + lead
    reach = p.size + taps - 1
    extra = None
    if dc_carrier is not None:
        extra = np.exp(-2j * np.pi * dc_carrier * (timing + (n_min + np.arange(x2.size)) * (sps / 2)))[:, None]
    burst = Burst(x2, 2, p, start, -(-(start - reach + 1) // 2), (start + x2.size - 1) // 2, extra, taps)
    q = 2 * burst.index - n_min                               # each symbol's instant in x2
    own = (q >= 0) & (q < x2.size)
    if own.sum() < ce.MIN_SYMBOLS:
        return None
    matched = np.convolve(x2, p[::-1])
    at = q + c
    y = np.where((at >= 0) & (at < matched.size), matched[np.clip(at, 0, matched.size - 1)], 0)
    y = y / math.sqrt(max(float(np.mean(np.abs(y[own]) ** 2)), 1e-30))
    bank = ce.alphabet_bank(HIGH_ORDER_LABELS)
    if classes is not None:
        bank = bank.subset(np.asarray(classes))
    k0 = int(burst.index[own][0])                             # carrier_fit's time 0
    totals = _fitted_from(burst, y, own, bank, n_min, k0, passes)
    if blind_start:
        filtered = blind_filtered(y[own])
        if filtered is not None:
            yb = y.copy()
            yb[own] = filtered[0] / math.sqrt(max(float(np.mean(np.abs(filtered[0]) ** 2)), 1e-30))
            other = _fitted_from(burst, yb, own, bank, n_min, k0, passes)
            better = other["EM, unit power"] > totals["EM, unit power"]
            totals = {k: np.where(better, other[k], totals[k]) for k in SCORES}
    out = {}
    for k in SCORES:
        t = class_totals(totals[k], bank) / own.sum()
        t -= t.max()
        out[k] = np.where(np.isfinite(t), t, t[np.isfinite(t)].min() - ABSENT_MARGIN)
    return out


def one_burst(job: tuple[int, int]) -> dict:
    """Draw burst `job` = (class, seed) and decide it by every receiver."""
    c, seed = job
    rng = np.random.default_rng(seed)
    hyp = hob.hypotheses()
    bank = ce.alphabet_bank(HIGH_ORDER_LABELS)
    sps = int(round(float(log_uniform(SPS_RANGE, 1, rng)[0])))
    rolloff = float(rng.uniform(*ROLLOFF_RANGE))
    snr = float(rng.uniform(*mpb.SNR_RANGE_DB))
    h, tau = mpb.draw_channel(ChannelConfig(), rng)
    margin = mpb.EQ_SYMBOLS + RRC_SPAN_SYMBOLS
    n_sym = -(-N_SAMPLES // sps)
    total = n_sym + 2 * margin
    s = hob.draw_symbols(np.array([c]), np.array([total]), hyp, rng)
    g_true = mpb.composite_pulse(sps, rolloff, h)
    r_full, n0_true = mpb.received(s, g_true, sps, snr, rng)
    p = unit_pulse(sps, rolloff)
    start = margin * sps + (p.size - 1) // 2                 # the burst's first sample
    r = r_full[start:start + N_SAMPLES]
    reach = p.size + EM_TAPS - 1                              # samples one symbol's response spans
    first = -(-(start - reach + 1) // sps)
    last = (start + N_SAMPLES - 1) // sps
    burst = Burst(r, sps, p, start, first, last)
    mf = np.convolve(g_true, p[::-1].conj())
    peak = int(np.argmax(np.abs(mf)))                         # the genie's clock: where the response peaks
    own_peak = burst.offsets + int(np.argmax(np.abs(g_true)))
    own = (own_peak >= 0) & (own_peak < N_SAMPLES)            # symbols whose response peaks inside the burst
    matched = np.convolve(r, p[::-1].conj())                  # index t + p.size - 1 is sample t's filter output
    at = burst.offsets + peak
    y = np.where((at >= 0) & (at < matched.size), matched[np.clip(at, 0, matched.size - 1)], 0)
    decide = {}
    # the same MMSE receiver from the true channel, on the same samples
    w, offset, beta = mpb.mmse_filter(g_true, sps, n0_true)
    zt = burst.filtered(w, offset)[own] / beta
    decide["MMSE, known channel"] = mpb._decide(zt, (1 - beta) / beta, hyp)
    turn = np.exp(2j * math.pi * rng.random())
    decide["soft class eq., known clock"] = mpb._soft_class_equalizer_decision(y[own] * turn)
    totals = em_totals(burst, y * turn, own, bank, phase_start(y * turn, bank))
    for k in SCORES:
        decide[k] = class_decision(totals[k], bank)
    return {"class": int(c), "sps": sps, "snr_db": snr, "spread_symbols": tau / sps, "taps": int(h.size),
            **{k: int(v) for k, v in decide.items()}}


def summarize(rows: list[dict]) -> dict:
    """Accuracy of each receiver by delay-spread bin and overall, with counts and a binomial SE."""
    spread = np.array([r["spread_symbols"] for r in rows])
    truth = np.array([r["class"] for r in rows])
    out = {}
    for lo, hi in (*mpb.SPREAD_BINS, (0.0, math.inf)):
        m = (spread >= lo) & (spread < hi)
        key = "all" if (lo, hi) == (0.0, math.inf) else f"{lo}-{hi}"
        out[key] = {"n": int(m.sum())}
        for rx in RECEIVERS:
            right = np.array([r[rx] for r in rows])[m] == truth[m]
            out[key][rx] = float(right.mean()) if m.any() else float("nan")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--per-class", type=int, default=40)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=20261204)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    per_class = 1 if args.quick else args.per_class
    seeds = np.random.SeedSequence(args.seed).generate_state(per_class * len(HIGH_ORDER_LABELS))
    jobs = [(c, int(seeds[i])) for i, c in enumerate(np.repeat(np.arange(len(HIGH_ORDER_LABELS)), per_class))]
    t0 = time.perf_counter()
    if args.workers > 1:
        with ProcessPoolExecutor(args.workers) as pool:
            rows = list(pool.map(one_burst, jobs, chunksize=4))
    else:
        rows = [one_burst(j) for j in jobs]
    table = summarize(rows)
    print(f"{len(rows)} faded high-order bursts of {N_SAMPLES} samples, {time.perf_counter() - t0:.0f} s")
    print(f"{'spread, symbols':>15} {'n':>5} " + " ".join(f"{rx[:22]:>22}" for rx in RECEIVERS))
    for key, s in table.items():
        print(f"{key:>15} {s['n']:5d} " + " ".join(f"{100 * s[rx]:21.1f}%" for rx in RECEIVERS))
    if args.json:
        Path(args.json).write_text(json.dumps(clean_json({"config": vars(args), "table": table, "rows": rows,
                                                          "elapsed_s": time.perf_counter() - t0}), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
