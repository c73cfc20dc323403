"""Where is high-order accuracy lost between the genie bound and the CNN? A synchronization ladder.

Every rung decides among the 12 high-order classes with the Bayes likelihood of
benchmarks/high_order_bound.py (`symbol_loglik`, `class_loglik`: imported, not copied) on
matched-filter symbol samples of REAL synthesizer bursts (`rfclassify.dsp.synth.synthesize`,
1024 samples); only how the symbols are obtained and what the channel is change:

    R1  genie sync (recorded sps, SRO, timing, roll-off, DC, gain, CFO, drift, phase), clean channel + AWGN
    R2  the same genie on the full default chain (fading, phase noise, PA, IQ imbalance, quantization stay)
    R2c R2's genie clock, DC, gain and carrier, then the blind receiver's carrier step, full chain
    R3  blind receiver (nothing recorded is used), clean channel + AWGN
    R4  the same blind receiver on the full default chain (no equalizer, no phase tracking)

The blind receiver (`LadderDecider.decide_blind`): unit RMS, the mean removed only where 0 Hz
holds a line; symbol-rate candidates from the cyclostationary line of |x|^2 (2x FFT
interpolation first, so the line at 1/T never aliases; searched within 1.35x of the product's
occupied-bandwidth `estimate_sps`) and timing from that line's phase; carrier frequency from
the centroid of the band the rate says the signal occupies; the RRC matched filter with
roll-off 0.3 (the true one is 0.15..0.5); N0 from the spectrum outside that band. The residual
carrier (frequency and phase) is estimated per hypothesis group from the M-th power line of the
symbols (M = 8/16/32 for 8/16/32PSK, 4 for QAM (also 12 for 16QAM/16APSK), 16 or the inner
ring for the other APSK, the smallest M with a line; an M-fold
ambiguity is a symmetry of that hypothesis, so harmless); every class is scored on the symbols
derotated by its own group's estimate, N0 x (1, 4, 16), and the rate candidate (3) with the
best likelihood ratio per symbol against a Gaussian wins (a generalized likelihood test).

Options of the blind receiver (off by default): --equalizer cma, a 9-tap T/2 CMA equalizer on
the matched-filter output (--dd-passes N decision-directed least-squares refits per class);
--phase-search, QAM phase from the likelihood on a grid instead of the M-th power line.
With --blind-only only R3 and R4 run, stored under blind_variants[<variant>] of --json.

    python3 benchmarks/high_order_sync_ladder.py [--quick] [--json PATH] [--seed N] [--per-class N]
        [--blind-only] [--equalizer {none,cma}] [--dd-passes N] [--phase-search]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

# Runnable as `python3 benchmarks/high_order_sync_ladder.py` from a checkout without PYTHONPATH.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from high_order_bound import Hypotheses, class_loglik, hypotheses, symbol_loglik  # noqa: E402

from rfclassify.dsp import measure  # noqa: E402
from rfclassify.dsp.linear import RRC_SPAN_SYMBOLS  # noqa: E402
from rfclassify.dsp.rate import estimate_sps  # noqa: E402
# The blind clock and carrier centroid moved into the product (eighth session); imported
# here under their old names, which the other benchmarks and the tests use.
from rfclassify.dsp.symbol_clock import (  # noqa: E402,F401
    BLIND_ROLLOFF,
    EDGE_SYMBOLS,
    estimate_carrier_and_noise,
    estimate_symbol_rate,
    remove_dc_line,
    symbols_at,
)
from rfclassify.dsp.synth import ChannelConfig, synthesize  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402
from rfclassify.model.evaluate import HIGH_SNR_DB, clean_json  # noqa: E402

N_SAMPLES = 1024
SNRS_DB = (10.0, 14.0, 20.0, 30.0)
# the shipped model on the test split's 1024-sample bursts, SNR >= 10 dB (hybrid_refiner_eval.json)
CNN_HIGH_ORDER_GE10 = 0.619
CNN_NO_FADING_PN_PA_GE10 = 0.728     # the same, bursts without fading, phase noise and PA
CARRIER_ORDERS = (4, 8, 16, 32)      # M-th power carrier estimates
N0_GRID = (1.0, 4.0, 16.0)           # N0 factors tried per class (a generalized likelihood)
DD_ITERATIONS = 0                    # decision-directed phase passes per class (2 cost 7 points)
# Options of the blind receiver (off by default: the baseline of the .md). --equalizer cma:
EQ_TAPS = 9                          # fractionally spaced (T/2) blind equalizer taps: +-2 symbols
CMA_ITERATIONS = 150                 # full-batch CMA gradient steps on the burst's symbols
CMA_STEP = 0.3                       # step on unit-power T/2 input
# CMA's modulus only sets the output gain (the cost scales as R2^2 with taps x sqrt(R2)), which
# unit_energy removes; 16QAM's E|c|^4/E|c|^2 = 1.32 is the conventional middle value.
CMA_R2 = 1.32
# --phase-search: QAM phase from the likelihood on a grid over [0, pi/2) instead of the M-th power
PHASE_GRID = 32                      # coarse points, then PHASE_GRID // 4 around the best
PHASE_SEARCH_SYMBOLS = 128           # evenly spaced symbols the grid is scored on (cost)


def half_symbol_regressors(x: np.ndarray, sps: float, rolloff: float, timing_samples: float,
                           sro_ppm: float = 0.0, n_taps: int = EQ_TAPS) -> np.ndarray:
    """(symbols, n_taps) complex: the RRC matched-filter output at T/2 spacing around each symbol
    instant symbols_at keeps (row k: samples k*sps + timing + (j - n_taps//2) * sps/2), the input
    of a fractionally spaced equalizer whose centre tap alone gives symbols_at's symbols."""
    scale = 1 + 1e-6 * sro_ppm
    pad = int(math.ceil((RRC_SPAN_SYMBOLS + n_taps / 4 + 1) * sps)) + 2
    xp = np.concatenate([np.zeros(pad), np.asarray(x, np.complex128), np.zeros(pad)])
    t0 = timing_samples + pad * scale - RRC_SPAN_SYMBOLS * sps
    on = measure.matched_filter(xp, sps, rolloff, t0, sro_ppm)
    half = measure.matched_filter(xp, sps, rolloff, t0, sro_ppm, symbol_shift=0.5)
    s2 = np.empty(2 * on.size, np.complex128)
    s2[0::2], s2[1::2] = on, half  # s2[2k] = symbol k, s2[2k+1] half a symbol later
    centre = (np.arange(on.size) * sps + timing_samples) / scale
    keep = np.flatnonzero((centre >= EDGE_SYMBOLS * sps) & (centre <= x.size - 1 - EDGE_SYMBOLS * sps))
    lag = np.arange(n_taps) - n_taps // 2
    idx = 2 * keep[:, None] + lag[None, :]
    return np.where((idx >= 0) & (idx < s2.size), s2[np.clip(idx, 0, s2.size - 1)], 0.0)


def cma_taps(regressors: np.ndarray, iterations: int = CMA_ITERATIONS, step: float = CMA_STEP,
             r2: float = CMA_R2) -> np.ndarray:
    """Blind fractionally spaced equalizer taps by the constant-modulus algorithm: full-batch
    gradient descent on mean (|y|^2 - R2)^2 over the burst's symbols, y = regressors @ w, from
    a centre spike (vectorized; a burst is too short for a per-symbol LMS to converge anyway).
    Phase-blind, so it runs before the carrier step."""
    x = regressors / math.sqrt(max(float(np.mean(np.abs(regressors) ** 2)), 1e-30))
    w = np.zeros(x.shape[1], np.complex128)
    w[x.shape[1] // 2] = math.sqrt(r2)
    for _ in range(iterations):
        y = x @ w
        w = w - step * (x.conj().T @ ((np.abs(y) ** 2 - r2) * y)) / y.size
        if not np.all(np.isfinite(w)) or np.sum(np.abs(w) ** 2) > 1e3 * r2:  # diverged: no equalizer
            w = np.zeros(x.shape[1], np.complex128)
            w[x.shape[1] // 2] = 1.0
            break
    return w


def search_phase(y: np.ndarray, alphabet: np.ndarray, period: float = math.pi / 2,
                 n_grid: int = PHASE_GRID, n_symbols: int = PHASE_SEARCH_SYMBOLS) -> float:
    """The rotation in [0, period) that best fits unit-energy symbols y to alphabet: the sum of
    squared distances to the nearest point (the max-log likelihood) on an n_grid grid over
    n_symbols evenly spaced symbols, then n_grid // 4 points within one grid step of the best."""
    sub = y[np.linspace(0, y.size - 1, min(n_symbols, y.size)).astype(int)]

    def cost(phi: np.ndarray) -> np.ndarray:
        z = sub[None, :] * np.exp(-1j * phi)[:, None]
        return np.min(np.abs(z[:, :, None] - alphabet[None, None, :]) ** 2, axis=2).sum(axis=1)

    grid = np.arange(n_grid) * period / n_grid
    best = grid[int(np.argmin(cost(grid)))]
    fine = best + np.linspace(-1, 1, n_grid // 4 + 1) * period / n_grid
    return float(fine[int(np.argmin(cost(fine)))] % period)


def unit_energy(y: np.ndarray, n0: float) -> np.ndarray:
    """Scale symbols so mean |y|^2 = Es + N0 with Es = 1 (the hypotheses' unit-energy alphabets)."""
    return y * math.sqrt((1 + n0) / max(float(np.mean(np.abs(y) ** 2)), 1e-30))


def genie_baseband(x: np.ndarray, p: np.void) -> tuple[np.ndarray, float]:
    """(burst with the recorded DC offset, receiver gain and carrier undone, N0 per symbol at
    unit symbol energy from the recorded powers)."""
    # The recorded DC offset (after the recorded receiver gain) comes off exactly: removing the
    # burst mean instead would notch the signal's own 0 Hz content (-20 dB EVM at CFO 0).
    gain = 10 ** (float(p["receiver_gain_db"]) / 20)
    if math.isfinite(float(p["dc_offset_db"])):
        amp = math.sqrt(10 ** ((float(p["signal_power_db"]) + float(p["dc_offset_db"])) / 10))
        x = x - gain * amp * np.exp(1j * np.deg2rad(float(p["dc_offset_deg"])))
    x = np.asarray(x, np.complex128) / gain
    n = np.arange(x.size)
    phase = np.deg2rad(float(p["phase_offset_deg"])) + 2 * np.pi * (
        float(p["cfo_cyc_per_sample"]) * n + 0.5 * float(p["cfo_drift_cyc_per_sample2"]) * n * n)
    sps = float(p["samples_per_symbol"])
    # N0 from the recorded powers at the noise insertion point: Es/N0 = SNR * sps.
    snr_db = float(p["signal_power_db"]) - float(p["noise_power_db"])  # NaN: no noise was added
    n0 = 1.0 / (10 ** (snr_db / 10) * sps) if math.isfinite(snr_db) else 1e-6
    return x * np.exp(-1j * phase), n0


def genie_symbols(x: np.ndarray, p: np.void) -> tuple[np.ndarray, float]:
    """(symbols at unit energy, N0) from one burst and its recorded params: the recorded DC
    offset, gain and carrier (frequency, drift, phase) undone, the recorded clock and roll-off
    matched. What the params do not let one undo (the fading channel, the Wiener phase path,
    PA, IQ imbalance) stays in."""
    x, n0 = genie_baseband(x, p)
    y = symbols_at(x, float(p["samples_per_symbol"]), float(p["rolloff"]), float(p["timing_offset_samples"]),
                   float(p["sro_ppm"]))
    return unit_energy(y, n0), n0


def _vv(y: np.ndarray, m: int) -> np.ndarray:
    """Viterbi & Viterbi nonlinearity |y| e^{j M arg y}. The line's phase at zero carrier
    phase must be taken with the same weighting the estimator uses: for cross 32QAM, E c^4 and
    E |c| e^{j4 arg c} have opposite signs (a 45 degree error that makes it 32APSK)."""
    r = np.maximum(np.abs(y), 1e-12)
    return y ** m / r ** (m - 1)


def _carrier_features(alphabet: np.ndarray) -> tuple[tuple[float, ...], ...]:
    """Every carrier feature a class is scored with (the largest likelihood wins): the one of
    _carrier_feature, plus the 12th power where that line is strong (16QAM, 16APSK)."""
    first = _carrier_feature(alphabet)
    feats = [first]
    moment = np.mean(_vv(alphabet, 12))
    if first[0] == 4 and first[2] == 0 and abs(moment) > 0.3 * np.mean(np.abs(alphabet)):
        feats.append((12, float(np.angle(moment)), 0.0, 0.0))
    return tuple(tuple(round(v, 4) for v in f) for f in feats)


def _carrier_feature(alphabet: np.ndarray) -> tuple[int, float, float, float]:
    """(M, arg of the line at zero carrier phase, ring radius, kernel width) of the M-th power
    carrier estimate for one alphabet: the whole alphabet with the smallest M in
    CARRIER_ORDERS whose moment E c^M is clearly nonzero (PSK, QAM), else (APSK, whose rings
    are rotated so that all those moments cancel) the M of its ring with the fewest points,
    measured on the symbols near that ring only (radius 0 means the whole alphabet)."""
    for m in CARRIER_ORDERS:
        moment = np.mean(_vv(alphabet, m))
        if abs(moment) > 0.05 * np.mean(np.abs(alphabet)):
            return m, float(np.angle(moment)), 0.0, 0.0
    radii = np.unique(np.round(np.abs(alphabet), 6))
    counts = [int(np.sum(np.isclose(np.abs(alphabet), r, atol=1e-5))) for r in radii]
    i = int(np.argmin(counts))
    ring = alphabet[np.isclose(np.abs(alphabet), radii[i], atol=1e-5)]
    gap = np.min(np.abs(np.delete(radii, i) - radii[i]))
    return counts[i], float(np.angle(np.mean(ring ** counts[i]))), float(radii[i]), float(gap / 4)


def _sub_hypotheses(hyp: Hypotheses, variants: np.ndarray) -> Hypotheses:
    alphabets = tuple(hyp.alphabets[v] for v in variants)
    sizes = hyp.sizes[variants]
    return Hypotheses(points=np.concatenate(alphabets), offsets=np.concatenate([[0], np.cumsum(sizes)[:-1]]),
                      sizes=sizes, variant_class=hyp.variant_class[variants], alphabets=alphabets)


def variant_totals(y: np.ndarray, n0: float, hyp: Hypotheses) -> np.ndarray:
    """(len(N0_GRID), V): log-likelihood of the symbols under every alphabet of hyp (less
    log pi per symbol) at N0 = n0 x each grid factor. The grid lets distortion the model does
    not know (ISI of a mismatched filter, fading, PA) count as extra noise instead of making
    every symbol off the grid impossible at high SNR."""
    e = np.abs(y) ** 2
    out = np.empty((len(N0_GRID), hyp.sizes.size))
    for g, factor in enumerate(N0_GRID):
        n0g = n0 * factor
        ll = symbol_loglik(y, np.full(y.size, 1.0 / n0g), hyp)
        out[g] = ll.sum(axis=0) + np.sum(-e / n0g - np.log(n0g))  # the constant symbol_loglik drops
    return out


class LadderDecider:
    """Per-burst decisions of the rungs; caches the hypothesis groups of the blind carrier step."""

    def __init__(self, equalizer: str = "none", phase_search: bool = False, dd_passes: int = 0) -> None:
        """equalizer "cma": the blind receiver's symbols come from a T/2-spaced CMA equalizer
        (cma_taps, per rate candidate), followed by dd_passes decision-directed least-squares
        refits of its taps per class (on that class's alphabet); phase_search: QAM classes take
        their carrier phase from search_phase on their own alphabet instead of the M-th power."""
        if equalizer not in ("none", "cma"):
            raise ValueError(f"equalizer must be 'none' or 'cma', not {equalizer!r}")
        self.equalizer, self.phase_search, self.dd_passes = equalizer, phase_search, dd_passes
        self.hyp = hypotheses()
        first = [int(np.flatnonzero(self.hyp.variant_class == c)[0]) for c in range(len(HIGH_ORDER_LABELS))]
        self.feature = [_carrier_features(self.hyp.alphabets[v]) for v in first]
        self.groups = []  # per class: (carrier features, decision alphabet, variant indices, sub-hypotheses)
        for c, v in enumerate(first):
            variants = np.flatnonzero(self.hyp.variant_class == c)
            self.groups.append((self.feature[c], self.hyp.alphabets[v], variants, _sub_hypotheses(self.hyp, variants)))

    def decide_known(self, y: np.ndarray, n0: float) -> int:
        """The bound's likelihood decision on symbols already synchronized, N0 a nuisance over
        N0_GRID (the largest likelihood per class)."""
        t = variant_totals(y, n0, self.hyp)
        return int(class_loglik(t, np.ones(len(N0_GRID), int), self.hyp).max(axis=0).argmax())

    @staticmethod
    def _carrier(y: np.ndarray, feature: tuple) -> tuple[float, float]:
        """(M x residual cycles per symbol, the nearest alias to 0; line phase) of the M-th
        power line of symbols y."""
        m, _, radius, width = feature
        z = _vv(y, int(m))
        if radius > 0:  # APSK: the symbols near its sparsest ring
            z = z * np.exp(-0.5 * ((np.abs(y) - radius) / width) ** 2)
        spec = np.abs(np.fft.fft(z, max(4096, 8 * y.size)))
        j = float(np.argmax(spec))
        ji = int(j)
        if 0 < ji < spec.size - 1:
            a, b, c = np.log(spec[ji - 1:ji + 2] + 1e-300)
            j += 0.5 * (a - c) / (a - 2 * b + c)
        nu = (j / spec.size + 0.5) % 1.0 - 0.5
        k = np.arange(y.size) - (y.size - 1) / 2.0
        return nu, float(np.angle(np.sum(z * np.exp(-2j * np.pi * nu * k))))

    def _feature_symbols(self, x: np.ndarray, sps: float, timing: float, f0: float, n0: float, feature: tuple,
                         rolloff: float, sro_ppm: float, taps: np.ndarray | None = None
                         ) -> tuple[np.ndarray, float, np.ndarray | None]:
        """(derotated unit-energy symbols, carrier frequency, regressors) for one carrier
        feature: the M-th power line twice, the first pass refining the frequency the matched
        filter runs at, the second giving the frequency and phase the symbols are derotated by.
        taps: a T/2 equalizer (half_symbol_regressors) the matched-filter output goes through;
        then regressors are its input, scaled and derotated like the symbols (regressors @ taps
        is the symbols), for decision-directed passes; else None."""
        m, off = int(feature[0]), feature[1]
        n = np.arange(x.size)
        for final in (False, True):
            xb = x * np.exp(-2j * np.pi * f0 * n)
            if taps is None:
                y = unit_energy(symbols_at(xb, sps, rolloff, timing, sro_ppm), n0)
            else:
                reg = unit_energy(half_symbol_regressors(xb, sps, rolloff, timing, sro_ppm, taps.size), 0.0)
                y = unit_energy(reg @ taps, n0)
                reg = reg * math.sqrt((1 + n0) / max(float(np.mean(np.abs(reg @ taps) ** 2)), 1e-30))
            nu, angle = self._carrier(y, feature)
            if not final:
                f0 += nu / (m * sps)
        k = np.arange(y.size) - (y.size - 1) / 2.0
        rot = np.exp(-1j * ((angle - off) / m + 2 * np.pi * nu * k / m))
        return y * rot, f0 + nu / (m * sps), None if taps is None else reg * rot[:, None]

    def score_classes(self, x: np.ndarray, sps: float, timing: float, f0: float, n0: float,
                      rolloff: float = BLIND_ROLLOFF, sro_ppm: float = 0.0) -> tuple[np.ndarray, list[float]]:
        """(12,) log-likelihood ratio per symbol of each class against a Gaussian (N0 x N0_GRID),
        each class on the symbols derotated by its own carrier estimate (the best of its
        features); and each class's carrier frequency estimate (its first feature's)."""
        cache: dict[tuple, tuple[np.ndarray, float, np.ndarray | None]] = {}
        totals = np.empty((len(N0_GRID), self.hyp.sizes.size))
        f_est, count = [], 1
        taps = None
        if self.equalizer == "cma":  # once per rate candidate, at the centroid carrier
            xb = x * np.exp(-2j * np.pi * f0 * np.arange(x.size))
            taps = cma_taps(half_symbol_regressors(xb, sps, rolloff, timing, sro_ppm))
        for c, (feats, alphabet, variants, sub) in enumerate(self.groups):
            best = None
            for feat in feats:
                if feat not in cache:
                    cache[feat] = self._feature_symbols(x, sps, timing, f0, n0, feat, rolloff, sro_ppm, taps)
                y, _, reg = cache[feat]
                if self.phase_search and HIGH_ORDER_LABELS[c].endswith("QAM"):
                    rot = np.exp(-1j * search_phase(y, alphabet))
                    y, reg = y * rot, None if reg is None else reg * rot
                for _ in range(self.dd_passes if reg is not None else 0):
                    # refit the T/2 taps to this class's nearest points (least squares, a block
                    # decision-directed equalizer: it also takes out residual phase and gain)
                    d = alphabet[np.argmin(np.abs(y[:, None] - alphabet[None, :]), axis=1)]
                    y = unit_energy(reg @ np.linalg.lstsq(reg, d, rcond=None)[0], n0)
                for _ in range(DD_ITERATIONS):
                    s = y * np.conj(alphabet[np.argmin(np.abs(y[:, None] - alphabet[None, :]), axis=1)])
                    y = y * np.exp(-1j * np.angle(np.sum(s)))
                e = np.abs(y) ** 2
                t = variant_totals(y, n0, sub) + np.sum(e / (1 + n0) + np.log(1 + n0))  # minus log CN(y; 0, 1 + N0)
                best = t if best is None else np.maximum(best, t)
            totals[:, variants] = best
            f_est.append(cache[feats[0]][1])
            count = y.size
        return class_loglik(totals, np.ones(len(N0_GRID), int), self.hyp).max(axis=0) / count, f_est

    def decide_genie_clock(self, x: np.ndarray, p: np.void) -> int:
        """Recorded clock, roll-off, DC, gain and carrier, then the blind receiver's carrier
        step (per-group M-th power frequency and phase): what a known clock buys on its own."""
        xb, n0 = genie_baseband(x, p)
        cls, _ = self.score_classes(xb, float(p["samples_per_symbol"]), float(p["timing_offset_samples"]), 0.0,
                                    n0, float(p["rolloff"]), float(p["sro_ppm"]))
        return int(cls.argmax())

    def decide_blind(self, x: np.ndarray, n_candidates: int = 3) -> tuple[int, dict]:
        """Blind decision on one raw burst: score_classes for each symbol-rate candidate (the
        likelihood ratio per symbol makes candidates with different symbol counts comparable);
        the candidate and class with the largest ratio win. Returns (class, estimates)."""
        x = remove_dc_line(x)
        best = (-np.inf, 0, {})
        for sps, timing in estimate_symbol_rate(x, float(estimate_sps(x[None, :])[0]), n_candidates):
            f0, noise = estimate_carrier_and_noise(x, sps)
            snr = max((1.0 - noise) / noise, 1e-3)
            cls, f_est = self.score_classes(x, sps, timing, f0, 1.0 / (snr * sps))
            c = int(cls.argmax())
            if cls[c] > best[0]:
                best = (float(cls[c]), c, {"sps": sps, "timing_samples": timing, "cfo_cyc_per_sample": f0,
                                           "cfo_refined_cyc_per_sample": f_est[c],
                                           "snr_db": 10 * math.log10(snr)})
        return best[1], best[2]


def _acc(hit: np.ndarray) -> dict:
    n = int(hit.size)
    p = float(hit.mean()) if n else float("nan")
    return {"accuracy": p, "se": math.sqrt(p * (1 - p) / n) if n else float("nan"), "n": n}


def _mean(cells: list[dict]) -> dict:
    acc = np.array([c["accuracy"] for c in cells])
    se = np.array([c["se"] for c in cells])
    return {"accuracy": float(acc.mean()), "se": float(np.sqrt(np.sum(se ** 2)) / acc.size)}


def run(per_class: int, seed: int, snrs: tuple[float, ...] = SNRS_DB, equalizer: str = "none",
        phase_search: bool = False, blind_only: bool = False, dd_passes: int = 0) -> dict:
    """All rungs at every SNR (only the blind R3, R4 when blind_only: the same bursts, as the
    synthesizer draws them in the same order); returns the results dict written to JSON."""
    rng = np.random.default_rng(seed)
    dec = LadderDecider(equalizer, phase_search, dd_passes)
    n_class = len(HIGH_ORDER_LABELS)
    labels = [lb for lb in HIGH_ORDER_LABELS for _ in range(per_class)]
    truth = np.repeat(np.arange(n_class), per_class)
    rungs = {"R1": [], "R2": [], "R2c": [], "R3": [], "R4": []}
    cond_hits = {"R2": {}, "R2c": {}, "R4": {}}
    if blind_only:
        rungs, cond_hits = {"R3": [], "R4": []}, {"R4": {}}
    est = {"rate_rel_err": [], "rate_rel_err_occupied_bw": [], "cfo_err": [], "cfo_refined_err": [], "snr_err_db": [], "snr_db": []}
    confusion = {r: np.zeros((n_class, n_class), np.int64) for r in rungs}
    rate_ok, rate_hit = {"R3": [], "R4": []}, {"R3": [], "R4": []}
    for snr in snrs:
        clean = synthesize(labels, N_SAMPLES, rng, snr, ChannelConfig.clean())
        full = synthesize(labels, N_SAMPLES, rng, snr, ChannelConfig())
        coarse = estimate_sps(full.iq)
        pred = {r: np.empty(truth.size, int) for r in rungs}
        for i in range(truth.size):
            if not blind_only:
                for r, batch in (("R1", clean), ("R2", full)):
                    pred[r][i] = dec.decide_known(*genie_symbols(batch.iq[i], batch.params[i]))
                pred["R2c"][i] = dec.decide_genie_clock(full.iq[i], full.params[i])
            for r, batch in (("R3", clean), ("R4", full)):
                pred[r][i], e = dec.decide_blind(batch.iq[i])
                p = batch.params[i]
                true_sps = float(p["samples_per_symbol"]) / (1 + 1e-6 * float(p["sro_ppm"]))
                rate_ok[r].append(abs(e["sps"] / true_sps - 1) < 5e-3)
                rate_hit[r].append(pred[r][i] == truth[i])
                if r == "R4":
                    p = batch.params[i]
                    true_sps = float(p["samples_per_symbol"]) / (1 + 1e-6 * float(p["sro_ppm"]))
                    est["rate_rel_err"].append(e["sps"] / true_sps - 1)
                    est["rate_rel_err_occupied_bw"].append(float(coarse[i]) / true_sps - 1)
                    est["cfo_err"].append(e["cfo_cyc_per_sample"] - float(p["cfo_cyc_per_sample"]))
                    est["cfo_refined_err"].append(e["cfo_refined_cyc_per_sample"] - float(p["cfo_cyc_per_sample"]))
                    est["snr_err_db"].append(e["snr_db"] - snr)
                    est["snr_db"].append(snr)
        for r in rungs:
            hit = pred[r] == truth
            rungs[r].append({"snr_db": snr} | _acc(hit))
            np.add.at(confusion[r], (truth, pred[r]), 1)
        p = full.params
        conds = {"fading": p["fading_type"] > 0, "phase_noise": p["phase_noise_deg_per_sqrt_sample"] > 0,
                 "pa": np.isfinite(p["pa_backoff_db"])}
        conds["none_of_fading_pn_pa"] = ~(conds["fading"] | conds["phase_noise"] | conds["pa"])
        for r in cond_hits:
            hit = pred[r] == truth
            for name, mask in conds.items():
                for val, m in (("yes", mask), ("no", ~mask)):
                    key = name if name.startswith("none") else f"{name}_{val}"
                    if name.startswith("none") and val == "no":
                        continue
                    cond_hits[r].setdefault(key, []).append(hit[m])
    out = {"per_snr": rungs, "mean_snr_ge_10db": {r: _mean([c for c in cells if c["snr_db"] >= HIGH_SNR_DB])
                                                 for r, cells in rungs.items()}}
    out["by_condition_snr_ge_10db"] = {r: {k: _acc(np.concatenate(v)) for k, v in d.items()}
                                       for r, d in cond_hits.items()}
    out["blind_by_rate_estimate_snr_ge_10db"] = {
        r: {"rate_within_0p5pct": _acc(np.array(rate_hit[r])[np.array(rate_ok[r])]),
            "rate_off": _acc(np.array(rate_hit[r])[~np.array(rate_ok[r])])} for r in rate_ok}
    rel = np.abs(np.array(est["rate_rel_err"]))
    rel_bw = np.abs(np.array(est["rate_rel_err_occupied_bw"]))
    cfo = np.abs(np.array(est["cfo_err"]))
    snr_err = np.array(est["snr_err_db"])
    snr_of = np.array(est["snr_db"])
    out["blind_estimates_full_channel"] = {
        "rate_within_0p1pct": float(np.mean(rel < 1e-3)), "rate_within_0p5pct": float(np.mean(rel < 5e-3)),
        "rate_within_25pct": float(np.mean(rel < 0.25)),
        "occupied_bw_rate_within_0p5pct": float(np.mean(rel_bw < 5e-3)),
        "occupied_bw_rate_within_25pct": float(np.mean(rel_bw < 0.25)),
        "cfo_abs_err_median_cyc_per_sample": float(np.median(cfo)),
        "cfo_abs_err_p90_cyc_per_sample": float(np.percentile(cfo, 90)),
        "cfo_refined_abs_err_median_cyc_per_sample": float(np.median(np.abs(est["cfo_refined_err"]))),
        "snr_err_db_median_per_snr": {str(s): float(np.median(snr_err[snr_of == s])) for s in snrs},
    }
    out["confusion"] = {"labels": list(HIGH_ORDER_LABELS), **{r: m for r, m in confusion.items()}}
    return out


def _pct(c: dict) -> str:
    return f"{100 * c['accuracy']:5.1f} +- {100 * c['se']:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run (< 30 s)")
    ap.add_argument("--json", default=None, help="write the results to this path")
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--per-class", type=int, default=None, help="bursts per class per SNR (default 40, quick 2)")
    ap.add_argument("--equalizer", choices=("none", "cma"), default="none",
                    help="blind receiver: T/2-spaced CMA equalizer after the matched filter")
    ap.add_argument("--dd-passes", type=int, default=0,
                    help="with --equalizer: decision-directed least-squares tap refits per class")
    ap.add_argument("--phase-search", action="store_true",
                    help="blind receiver: QAM carrier phase by a likelihood grid search, not the M-th power")
    ap.add_argument("--blind-only", action="store_true",
                    help="only R3, R4; with --json, stored under blind_variants[<variant>] of that file")
    args = ap.parse_args(argv)
    per_class = args.per_class or (2 if args.quick else 40)
    snrs = (10.0, 30.0) if args.quick else SNRS_DB
    variant = "+".join([f"eq_{args.equalizer}"] * (args.equalizer != "none")
                       + [f"dd{args.dd_passes}"] * (args.equalizer != "none" and args.dd_passes > 0)
                       + ["phase_search"] * args.phase_search) or "baseline"
    t0 = time.perf_counter()
    res = run(per_class, args.seed, snrs, args.equalizer, args.phase_search, args.blind_only, args.dd_passes)
    elapsed = time.perf_counter() - t0
    print(f"blind receiver variant: {variant}")
    names = {"R1": "genie sync, clean+AWGN", "R2": "genie sync, full channel",
             "R2c": "genie clock+CFO, full ch.", "R3": "blind sync, clean+AWGN", "R4": "blind sync, full channel"}
    print(f"12 high-order classes, {N_SAMPLES} samples, {per_class} bursts/class/SNR; accuracy % +- se")
    print("rung                         | " + " | ".join(f"{s:>4.0f} dB     " for s in snrs) + " | >= 10 dB")
    for r, cells in res["per_snr"].items():
        print(f"{r} {names[r]:<26}| " + " | ".join(_pct(c) for c in cells) + f" | {_pct(res['mean_snr_ge_10db'][r])}")
    print(f"CNN (shipped): {100 * CNN_HIGH_ORDER_GE10:.1f} (>= 10 dB), {100 * CNN_NO_FADING_PN_PA_GE10:.1f} without fading/PN/PA")
    for r, d in res["by_condition_snr_ge_10db"].items():
        print(f"{r} by condition (>= 10 dB): " + ", ".join(f"{k} {_pct(v)} (n={v['n']})" for k, v in d.items()))
    for r, d in res["blind_by_rate_estimate_snr_ge_10db"].items():
        print(f"{r} by rate estimate (>= 10 dB): " + ", ".join(f"{k} {_pct(v)} (n={v['n']})" for k, v in d.items()))
    print("blind estimates (full channel): " + json.dumps(clean_json(res["blind_estimates_full_channel"])))
    print(f"{elapsed:.0f} s")
    res |= {"config": {"seed": args.seed, "quick": args.quick, "n_samples": N_SAMPLES, "snr_db": list(snrs),
                       "variant": variant, "equalizer": args.equalizer, "phase_search": args.phase_search,
                       "dd_passes": args.dd_passes,
                       "eq_taps": EQ_TAPS, "cma_iterations": CMA_ITERATIONS, "cma_step": CMA_STEP,
                       "phase_grid": PHASE_GRID, "phase_search_symbols": PHASE_SEARCH_SYMBOLS,
                       "bursts_per_class_per_snr": per_class, "classes": list(HIGH_ORDER_LABELS),
                       "blind_rolloff": BLIND_ROLLOFF, "edge_symbols": EDGE_SYMBOLS,
                       "carrier_orders": list(CARRIER_ORDERS),
                       "cnn_high_order_snr_ge_10db": CNN_HIGH_ORDER_GE10,
                       "cnn_no_fading_pn_pa_snr_ge_10db": CNN_NO_FADING_PN_PA_GE10},
            "elapsed_s": elapsed}
    if args.json and args.blind_only:  # a variant of the blind rungs goes beside the full run's keys
        path = Path(args.json)
        full = json.loads(path.read_text()) if path.exists() else {}
        res.pop("confusion", None)
        full.setdefault("blind_variants", {})[variant] = clean_json(res)
        res = full
    if args.json:
        with open(args.json, "w") as f:
            json.dump(clean_json(res), f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
