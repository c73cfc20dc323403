"""How much of the multipath loss could a receiver that knows the channel win back? A genie.

The shipped model's high-order errors at >= 10 dB sit in multipath bursts (docs/model.md,
sixteenth session): right 91 % of the time without fading, 36 % at an rms delay spread of
0.4 symbols or more. This asks whether the class is still in such a burst for a receiver
that knows everything but the class and the symbols, the channel included, and undoes the
intersymbol interference with the best linear filter. If it is, a blind receiver has room;
if not, the 95 % goal at >= 10 dB is out of reach for any linear receiver on our channel.

Per burst: a class of HIGH_ORDER_LABELS, its symbols (high_order_bound.draw_symbols: the
product's alphabets, APSK ring ratios drawn per burst), an integer samples per symbol
(log-uniform over synth.SPS_RANGE, rounded: a fixed filter per burst), an RRC pulse
(roll-off uniform over synth.ROLLOFF_RANGE, +-RRC_SPAN_SYMBOLS symbols), then the product's
multipath draw (ChannelConfig defaults, always on: Rayleigh or Rician by p_rician, the
exponential power delay profile, taps at integer sample delays) frozen over the burst (its
Doppler left out: at most 5e-4 cycles/sample, most bursts far less), AWGN at the burst's
SNR (signal power after the channel over the noise power of the whole sampled band, as the
synthesizer sets it), N_SAMPLES samples. Receivers, all knowing timing, carrier, gain, sps
and pulse:

- ``no equalizer``: the pulse's matched filter at the symbol instants, the channel's
  strongest-tap delay and phase taken out; the residual interference counted as noise
  (its power measured from the known channel);
- ``MMSE``: the linear minimum-mean-square-error filter over a window of EQ_SYMBOLS
  symbols of samples, computed from the known pulse and channel; its output scaled to
  unbiased symbols, the residual interference and noise counted as Gaussian noise of the
  power the MMSE filter leaves (beta (1 - beta) before scaling);
- ``no channel``: the same bursts' symbols through AWGN only at the same Es/N0
  (high_order_bound's genie): what the channel costs at all.

Each decides among the 12 classes by the Gaussian-mixture likelihood of its outputs
(high_order_bound.symbol_loglik / class_loglik). Treating residual interference as
Gaussian is an approximation, not a bound: a receiver that models it (maximum-likelihood
sequence estimation) can do better than ``MMSE`` here.

Then the refiner's own per-class equalizer (rfclassify.dsp.class_equalizer.class_scores:
each alphabet's fitted carrier, a TAPS-tap symbol-spaced filter fitted to its own
decisions, the mixture likelihood; the largest score decides), which knows neither the
channel nor the carrier phase, on:

- ``class eq., no channel``: the AWGN symbols above;
- ``class eq., known clock``: the pulse's matched filter at the symbol instants where the
  known channel's response peaks (the timing a genie gives it; the channel itself unknown);
- ``line start, no channel`` and ``line start, known clock``: the same two with the
  equalizer started from each alphabet's strongest k-th power line instead of its fitted
  carrier (class_equalizer.START_LINES, its start until the seventeenth session);
- ``class eq. after MMSE``: the MMSE outputs (its filter then has little left to do);
- ``class eq., trained``: the known-clock symbols through a TRAINED_TAPS-tap symbol-spaced
  filter fitted by least squares to the burst's own true symbols (what a decision-directed
  fit would reach if its decisions were right), then the class equalizer;
- ``soft class eq., known clock``: the known-clock symbols scored like the class equalizer
  but with its filter fitted to soft decisions (each symbol's mean over the alphabet's
  nearest points, weighted by exp(-|z - a|^2 / s2)), s2 annealed through
  class_equalizer.SOFT_VARIANCE over SOFT_PASSES passes, then 3 hard passes
  (class_equalizer.FIT_SOFT): a fit that does not commit to decisions while the eye is
  still closed.

The class equalizer decides from its own likelihoods with the carrier phase unknown (the
outputs above are turned by a random phase first).

    python3 benchmarks/multipath_bound.py [--quick] [--json PATH] [--per-class N] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

# Runnable as `python3 benchmarks/multipath_bound.py` from a checkout without PYTHONPATH.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import high_order_bound as hob  # noqa: E402 (after the path fix)
from rfclassify.dsp.channel import ChannelConfig, log_uniform  # noqa: E402
from rfclassify.dsp import class_equalizer as ce  # noqa: E402
from rfclassify.dsp.class_equalizer import class_scores  # noqa: E402
from rfclassify.dsp.em_channel import EQ_SYMBOLS, mmse_filter  # noqa: E402 (the MMSE receiver, shared)
from rfclassify.dsp.linear import RRC_SPAN_SYMBOLS  # noqa: E402
from rfclassify.dsp.pulses import rrc  # noqa: E402
from rfclassify.dsp.synth import ROLLOFF_RANGE, SPS_RANGE  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402
from rfclassify.model.evaluate import clean_json  # noqa: E402

N_SAMPLES = 1024
SNR_RANGE_DB = (10.0, 30.0)
SPREAD_BINS = ((0.0, 0.03), (0.03, 0.1), (0.1, 0.2), (0.2, 0.4), (0.4, math.inf))   # rms delay spread, symbols
RECEIVERS = ("no channel", "no equalizer", "MMSE", "class eq., no channel", "class eq., known clock",
             "line start, no channel", "line start, known clock", "class eq. after MMSE", "class eq., trained",
             "soft class eq., known clock")
TRAINED_TAPS = 9
SOFT_PASSES = 40


def draw_channel(cfg: ChannelConfig, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """One frozen multipath channel of the product's distribution, faded: (taps at integer
    sample delays, complex, unit mean power over the draw; rms delay spread in samples)."""
    tau = float(log_uniform(cfg.delay_spread_samples_range, 1, rng)[0])
    n_taps = int(min(max(math.floor(5 * tau) + 1, 1), cfg.max_taps))
    pdp = np.exp(-np.arange(n_taps) / tau)
    pdp /= pdp.sum()
    k = 10 ** (rng.uniform(*cfg.k_factor_db_range) / 10) if rng.random() < cfg.p_rician else 0.0
    h = (rng.standard_normal(n_taps) + 1j * rng.standard_normal(n_taps)) * np.sqrt(pdp / 2)
    h *= math.sqrt(1 / (k + 1))
    h[0] += math.sqrt(k / (k + 1) * pdp[0]) * np.exp(2j * math.pi * rng.random())
    return h, tau


def composite_pulse(sps: int, rolloff: float, h: np.ndarray) -> np.ndarray:
    """The RRC pulse (unit energy, +-RRC_SPAN_SYMBOLS symbols, sampled sps a symbol) through
    the channel taps: the response one symbol leaves in the samples, from its first sample."""
    u = np.arange(-RRC_SPAN_SYMBOLS * sps, RRC_SPAN_SYMBOLS * sps + 1) / sps
    p = rrc(u, rolloff) / math.sqrt(sps)   # unit energy in samples
    return np.convolve(p, h)


def received(symbols: np.ndarray, g: np.ndarray, sps: int, snr_db: float, rng: np.random.Generator
             ) -> tuple[np.ndarray, float]:
    """The burst's samples (every symbol's response g, sps apart, plus AWGN at snr_db of the
    signal's power) and the noise power per sample."""
    up = np.zeros(symbols.size * sps, np.complex128)
    up[::sps] = symbols
    x = np.convolve(up, g)
    p_signal = float(np.mean(np.abs(x) ** 2))
    n0 = p_signal / 10 ** (snr_db / 10)
    noise = rng.standard_normal((2, x.size)) * math.sqrt(n0 / 2)
    return x + noise[0] + 1j * noise[1], n0


def equalized(r: np.ndarray, n_symbols: int, w: np.ndarray, offset: int, sps: int) -> np.ndarray:
    """w^H r over the window of every symbol whose window lies inside the samples."""
    out = []
    for k in range(n_symbols):
        start = k * sps + offset
        if start >= 0 and start + w.size <= r.size:
            out.append(np.vdot(w, r[start:start + w.size]))
    return np.array(out)


def unequalized(r: np.ndarray, n_symbols: int, g: np.ndarray, sps: int, rolloff: float, n0: float
                ) -> tuple[np.ndarray, float]:
    """The pulse's matched filter at the symbol instants of the channel's strongest tap,
    scaled by that tap (its delay and phase taken out), and the noise-plus-interference power
    of those outputs (from the known response)."""
    u = np.arange(-RRC_SPAN_SYMBOLS * sps, RRC_SPAN_SYMBOLS * sps + 1) / sps
    p = rrc(u, rolloff) / math.sqrt(sps)
    mf = np.convolve(g, p[::-1])                 # the response after the matched filter
    peak = int(np.argmax(np.abs(mf)))
    gain = mf[peak]
    y = np.convolve(r, p[::-1])[peak + sps * np.arange(n_symbols)] / gain
    taps = mf[peak % sps::sps]
    isi = float(np.sum(np.abs(taps) ** 2) - abs(gain) ** 2) / abs(gain) ** 2
    return y, isi + n0 / abs(gain) ** 2           # the matched filter's noise gain is 1 (unit-energy p)


def run(per_class: int, rng: np.random.Generator, hyp: hob.Hypotheses) -> list[dict]:
    """One row per burst: class, sps, spread in symbols, SNR and each receiver's decision."""
    cfg = ChannelConfig()
    rows = []
    n_class = len(HIGH_ORDER_LABELS)
    for c in np.repeat(np.arange(n_class), per_class):
        sps = int(round(float(log_uniform(SPS_RANGE, 1, rng)[0])))
        rolloff = float(rng.uniform(*ROLLOFF_RANGE))
        snr = float(rng.uniform(*SNR_RANGE_DB))
        h, tau = draw_channel(cfg, rng)
        n_sym = -(-N_SAMPLES // sps)
        total = n_sym + 2 * (EQ_SYMBOLS + RRC_SPAN_SYMBOLS)   # symbols around the window feed its edges
        s = hob.draw_symbols(np.array([c]), np.array([total]), hyp, rng)
        g = composite_pulse(sps, rolloff, h)
        r, n0 = received(s, g, sps, snr, rng)
        keep = slice(EQ_SYMBOLS + RRC_SPAN_SYMBOLS, EQ_SYMBOLS + RRC_SPAN_SYMBOLS + n_sym)  # the burst's own
        decide = {}
        # no channel: the same symbols at the Es/N0 the burst's SNR gives a flat channel
        es_n0 = 10 ** (hob.es_n0_db(snr, sps) / 10)
        awgn = s[keep] + (rng.standard_normal(n_sym) + 1j * rng.standard_normal(n_sym)) * math.sqrt(0.5 / es_n0)
        decide["no channel"] = _decide(awgn, 1 / es_n0, hyp)
        y, noise = unequalized(r, total, g, sps, rolloff, n0)
        decide["no equalizer"] = _decide(y[keep], noise, hyp)
        w, offset, beta = mmse_filter(g, sps, n0)
        z = equalized(r, total, w, offset, sps)
        first = (EQ_SYMBOLS + RRC_SPAN_SYMBOLS) - sum(1 for k in range(EQ_SYMBOLS + RRC_SPAN_SYMBOLS)
                                                      if k * sps + offset < 0)
        z = z[first:first + n_sym] / beta
        decide["MMSE"] = _decide(z, (1 - beta) / beta, hyp)
        decide["class eq., no channel"] = _class_equalizer_decision(awgn)
        known = y[keep] * np.exp(2j * math.pi * rng.random())
        decide["class eq., known clock"] = _class_equalizer_decision(known)
        decide["line start, no channel"] = _class_equalizer_decision(awgn, ce.START_LINES)
        decide["line start, known clock"] = _class_equalizer_decision(known, ce.START_LINES)
        decide["class eq. after MMSE"] = _class_equalizer_decision(z * np.exp(2j * math.pi * rng.random()))
        turn = np.exp(2j * math.pi * rng.random())
        decide["class eq., trained"] = _class_equalizer_decision(trained(y[keep], s[keep], TRAINED_TAPS) * turn)
        decide["soft class eq., known clock"] = _soft_class_equalizer_decision(y[keep] * turn)
        rows.append({"class": int(c), "sps": sps, "snr_db": snr, "spread_symbols": tau / sps,
                     "mmse_beta": beta, **{k: int(v) for k, v in decide.items()}})
    return rows


def trained(y: np.ndarray, symbols: np.ndarray, taps: int) -> np.ndarray:
    """y through the taps-tap symbol-spaced filter that least squares fits to the true symbols."""
    cols = ce.filter_inputs(y, taps)
    w, *_ = np.linalg.lstsq(cols, symbols, rcond=None)
    return cols @ w


def _soft_class_equalizer_decision(y: np.ndarray) -> int:
    """class_scores' decision with the soft fit over SOFT_PASSES passes."""
    scores = class_scores(y, HIGH_ORDER_LABELS, passes=SOFT_PASSES, fit=ce.FIT_SOFT)
    return -1 if scores is None else int(np.argmax(scores))


def _class_equalizer_decision(y: np.ndarray, start: str = ce.START_FIT) -> int:
    scores = class_scores(y, HIGH_ORDER_LABELS, start=start)
    return -1 if scores is None else int(np.argmax(scores))


def _decide(y: np.ndarray, n0: float, hyp: hob.Hypotheses) -> int:
    ll = hob.symbol_loglik(y, np.full(y.size, 1.0 / max(n0, 1e-6)), hyp)
    return int(hob.class_loglik(ll, np.array([y.size]), hyp).argmax(axis=1)[0])


def summarize(rows: list[dict]) -> dict:
    """Accuracy of each receiver by delay-spread bin and overall, with counts."""
    spread = np.array([r["spread_symbols"] for r in rows])
    truth = np.array([r["class"] for r in rows])
    out = {}
    for lo, hi in (*SPREAD_BINS, (0.0, math.inf)):
        m = (spread >= lo) & (spread < hi)
        key = "all" if (lo, hi) == (0.0, math.inf) else f"{lo}-{hi}"
        out[key] = {"n": int(m.sum()), **{rx: float(np.mean(np.array([r[rx] for r in rows])[m] == truth[m]))
                                          if m.any() else float("nan") for rx in RECEIVERS}}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run (a few seconds)")
    ap.add_argument("--per-class", type=int, default=250, help="faded bursts per class (default 250)")
    ap.add_argument("--json", default=None, help="write the results to this path")
    ap.add_argument("--seed", type=int, default=20261216)
    args = ap.parse_args(argv)
    per_class = 3 if args.quick else args.per_class
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    rows = run(per_class, rng, hob.hypotheses())
    table = summarize(rows)
    lo, hi = SNR_RANGE_DB
    print(f"{len(rows)} faded high-order bursts of {N_SAMPLES} samples, SNR {lo:.0f}..{hi:.0f} dB, "
          f"{time.perf_counter() - t0:.0f} s")
    print(f"{'rms delay spread, symbols':>26} {'bursts':>7} " + " ".join(f"{rx:>23}" for rx in RECEIVERS))
    for key, s in table.items():
        print(f"{key:>26} {s['n']:7d} " + " ".join(f"{100 * s[rx]:22.1f}%" for rx in RECEIVERS))
    if args.json:
        result = {"config": {"seed": args.seed, "per_class": per_class, "n_samples": N_SAMPLES,
                             "snr_range_db": list(SNR_RANGE_DB), "eq_symbols": EQ_SYMBOLS,
                             "sps": f"log-uniform {SPS_RANGE}, rounded to an integer",
                             "channel": "ChannelConfig() multipath, always on, frozen over the burst"},
                  "accuracy_by_spread_symbols": table, "elapsed_s": round(time.perf_counter() - t0, 1)}
        Path(args.json).write_text(json.dumps(clean_json(result), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
