"""Can the blind clock's rate misses be fixed by trying the next |x|^2 lines? A diagnostic, not a test.

The shipped sequence network gets 17 % of the high-order bursts whose blind rate is more
than 2 % off, and 67 % of them clocked at the true rate (sequence_net_limits_run13.json);
nearly all misses have a roll-off below 0.3, where the |x|^2 line is weak. This probe takes
the top K candidates of the product's line search (symbol_clock.estimate_symbol_rate,
n_candidates=K, within the same coarse window) and asks:

1. how often the true rate (within 2 %) is among them;
2. how often each rule picks a wrong one: the strongest line (the product's rule); the
   candidate whose symbols the best-fitting high-order alphabet explains best (the
   class_equalizer likelihood with 1 tap and 2 passes, on the central SCORE_SYMBOLS
   symbols, at the candidate's own carrier); and that candidate only where it beats the
   strongest line's by a margin (nats per symbol);
3. what the scoring costs per burst;
4. how often the product's rule (symbol_clock.blind_clock with ALPHABET_FIT: the same idea
   at 128 symbols, skipped where the strongest line is CLEAR_LINE times the next) misses,
   and what it costs.

To serve a refiner with the alphabet fit's clock whatever it was fitted on, use
`rfclassify evaluate FILE.h5 --refiner-rate-rule alphabet_fit` (this probe's --evaluate mode
until the fifteenth session).

    PYTHONPATH=. python3 benchmarks/rate_candidates_probe.py [--bursts 2400] [--length 1024]
        [--candidates 4] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfclassify.dsp import symbol_clock as sc  # noqa: E402
from rfclassify.dsp.class_equalizer import alphabet_bank, equalized_logliks  # noqa: E402
from rfclassify.dsp.rate import estimate_sps  # noqa: E402
from rfclassify.dsp.synth import synthesize  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402
from rfclassify.model.meta import ModelMeta, default_model_dir  # noqa: E402
from rfclassify.model.training_data import DataRecipe  # noqa: E402

SCORE_SYMBOLS = 256
MARGINS = (0.0, 0.05, 0.1, 0.2, 0.4)
MISS = 0.02                 # a rate more than 2 % off is a miss


def candidate_fit(x: np.ndarray, sps: float, timing: float) -> float:
    """Per-symbol log-likelihood of the best-fitting high-order alphabet (1 tap, 2 passes)
    of the burst clocked at (sps, timing) with its own carrier; -inf for too few symbols."""
    y = sc.at_clock(x, sps, timing, sc.estimate_carrier_and_noise(x, sps)[0]).symbols
    if y.size < 16:
        return -np.inf
    start = max(0, (y.size - SCORE_SYMBOLS) // 2)
    y = y[start:start + SCORE_SYMBOLS]
    with np.errstate(all="ignore"):
        y = y / np.sqrt(np.mean(np.abs(y) ** 2))
        ll = equalized_logliks(y, alphabet_bank(HIGH_ORDER_LABELS), taps=1, passes=2)[0]
    ll = np.nan_to_num(ll, nan=-np.inf)
    return float(ll.max())


def pick(fits: list[float], margin: float) -> int:
    """The best-fitting candidate where it beats the first (strongest line) by margin, else the first."""
    best = int(np.argmax(fits))
    return best if fits[best] > fits[0] + margin else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bursts", type=int, default=2400)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--candidates", type=int, default=4)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    meta = ModelMeta.load(default_model_dir())
    overrides = meta.channel_overrides
    rng = np.random.default_rng(args.seed)      # the bursts of sequence_net_limits.py at the same seed
    cls = rng.integers(0, len(HIGH_ORDER_LABELS), args.bursts)
    snr = rng.uniform(10.0, 30.0, args.bursts)
    batch = synthesize([HIGH_ORDER_LABELS[c] for c in cls], args.length, rng, snr,
                       DataRecipe(channel_overrides=overrides).channel_config())
    true, rolloff = batch.params["samples_per_symbol"], batch.params["rolloff"]
    alphabet_bank(HIGH_ORDER_LABELS)
    among = np.zeros(args.bursts, bool)
    chosen = {"strongest line": np.zeros(args.bursts)} | {f"best fit, margin {m}": np.zeros(args.bursts)
                                                           for m in MARGINS}
    product = np.zeros(args.bursts)
    t_fit = t_product = 0.0
    for i, iq in enumerate(batch.iq):
        x = sc.remove_dc_line(np.asarray(iq, np.complex128))
        cands = sc.estimate_symbol_rate(x, float(estimate_sps(x[None, :])[0]), n_candidates=args.candidates,
                                        nfft=sc.line_search_nfft(x.size))
        err = [abs(true[i] / sps - 1) for sps, _ in cands]
        among[i] = min(err) <= MISS
        t0 = time.perf_counter()
        fits = [candidate_fit(x, sps, timing) for sps, timing in cands]
        t_fit += time.perf_counter() - t0
        chosen["strongest line"][i] = err[0]
        for m in MARGINS:
            chosen[f"best fit, margin {m}"][i] = err[pick(fits, m)]
        t0 = time.perf_counter()
        with np.errstate(all="ignore"):
            clock = sc.blind_clock(x, sc.ALPHABET_FIT)
        t_product += time.perf_counter() - t0
        product[i] = abs(true[i] / clock[0] - 1) if clock is not None else np.inf
    chosen["product rule (blind_clock, alphabet_fit)"] = product
    low = rolloff < 0.3
    report = {"bursts": args.bursts, "length": args.length, "candidates": args.candidates, "seed": args.seed,
              "true_rate_among_candidates": {"all": round(float(among.mean()), 4),
                                             "rolloff < 0.3": round(float(among[low].mean()), 4)},
              "missed": {k: {"all": round(float(np.mean(v > MISS)), 4),
                             "rolloff < 0.3": round(float(np.mean(v[low] > MISS)), 4),
                             "rolloff >= 0.3": round(float(np.mean(v[~low] > MISS)), 4)}
                         for k, v in chosen.items()},
              "fit_ms_per_burst": round(1000 * t_fit / args.bursts, 2),
              "product_rule_clock_ms_per_burst": round(1000 * t_product / args.bursts, 2)}
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
