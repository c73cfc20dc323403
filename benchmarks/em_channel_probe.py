"""Can a receiver estimate the multipath channel per class hypothesis well enough to read dense QAMs?

benchmarks/multipath_bound.md: at a known clock and carrier, a linear MMSE receiver that
knows the channel reads the faded high-order bursts at 98-100 %, while every blind filter
the product has tried (the class equalizer, hard or soft, a 9-tap inverse filter even when
trained on the true symbols) loses 20-55 points at 0.4 symbols of delay spread and more.
Those filters are inverse filters fitted to decisions. This probe tries the other form, a
channel estimate: for each alphabet the channel taps are fitted by expectation-maximization
(approximated linearly), and the known-channel MMSE receiver is then built from the estimate.

The receiver is rfclassify.dsp.em_channel (this probe's since the thirty-eighth session,
when it became a refiner input; its docstring has the steps). Here it runs at a known
clock. Per burst (multipath_bound's draw: one of the 12 high-order classes, integer samples
per symbol, RRC pulse, the product's frozen multipath, AWGN at 10..30 dB), the receiver
sees N_SAMPLES samples of the transmission and knows the pulse, sps, the carrier (none) and
where the channel's first path puts a symbol's response; it does not know the channel.
Each alphabet starts from the pulse's matched filter at the instants where the response of
the channel's strongest matched-filter tap peaks (what multipath_bound's "known clock"
receivers see), turned by the phase under which the alphabet fits them best (a grid over
its rotational period), then em_channel.em_totals fits it.

Each alphabet is then scored three ways, and each class by the log-mean-exp over its
alphabets: ``EM, output likelihood`` (the mixture log-likelihood of the final outputs at the
filter's residual), ``EM, unit power`` (class_equalizer.unit_power_logliks, as the refiner's
equalizer scores) and ``EM, residual`` (-N log of the M-step's noise: a joint fit's
likelihood, which favours the densest alphabets). References on the same samples: ``MMSE,
known channel`` (the same receiver built from the true channel) and ``soft class eq., known
clock`` (the best blind filter so far, multipath_bound's).

The blind-clock form (em_channel.blind_class_scores) is what benchmarks/feature_screen.py's
``em_channel`` candidates and the refiner read. One start per alphabet: a fit can stop in a
local optimum (tests/test_dsp_em_channel.py names a draw that does). Results:
benchmarks/em_channel_probe.md.

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
from rfclassify.dsp.em_channel import EM_TAPS, SCORES, SampledBurst, class_totals, em_totals, unit_pulse  # noqa: E402
from rfclassify.dsp.linear import RRC_SPAN_SYMBOLS  # noqa: E402
from rfclassify.dsp.synth import ROLLOFF_RANGE, SPS_RANGE  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402
from rfclassify.model.evaluate import clean_json  # noqa: E402

N_SAMPLES = mpb.N_SAMPLES
START_PHASES = 32
RECEIVERS = ("MMSE, known channel", "soft class eq., known clock", *SCORES)


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
    return int(np.argmax(class_totals(per_alphabet_total, bank, len(HIGH_ORDER_LABELS))))


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
    burst = SampledBurst(r, sps, p, start, first, last)
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
    totals = em_totals(burst, own, bank, phase_start(y * turn, bank))
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
