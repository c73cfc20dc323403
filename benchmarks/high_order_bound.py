"""Genie upper bound on the accuracy any classifier can reach on the 12 high-order classes.

The genie knows the pulse, timing, carrier, gain and samples per symbol of every burst, and
the channel is AWGN only. Matched-filter outputs at the symbol instants are then a sufficient
statistic, y_k = c_k + n_k with n_k i.i.d. CN(0, N0) and Es/N0 = SNR * sps (a unit-energy
root-Nyquist pulse; checked against the real synthesizer by `measure_es_n0`). The decision
among the 12 classes with a uniform prior is the Bayes one: the largest
sum_k log((1/M) sum_m exp(-|y_k - c_m|^2 / N0)), with 16/32APSK's per-burst DVB-S2 ring ratio
a uniform mixture over its table (the genie does not know the class, so it cannot know the
ratio). Its Monte Carlo accuracy is the Bayes accuracy with a genie; why that bounds every
classifier on our test data, and where the argument is loose, is in high_order_bound.md.

Symbols per burst of N samples: "tight" = ceil(N / sps) full symbols (as much signal energy
as the window holds, rounded up); "all" = ceil(N / sps) + 16, every symbol whose +-8-symbol
pulse touches the window, each seen whole: a looser bound that needs no windowing argument.

    python3 benchmarks/high_order_bound.py [--quick] [--json PATH] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Runnable as `python3 benchmarks/high_order_bound.py` from a checkout without PYTHONPATH.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfclassify.dsp import channel as ch  # noqa: E402 (after the path fix)
from rfclassify.dsp import measure
from rfclassify.dsp.constellations import APSK16_RATIOS, APSK32_RATIOS, apsk, constellation
from rfclassify.dsp.linear import RRC_SPAN_SYMBOLS
from rfclassify.dsp.synth import SPS_RANGE, ChannelConfig, synthesize
from rfclassify.labels import HIGH_ORDER_LABELS
from rfclassify.model.evaluate import HIGH_SNR_DB, clean_json

N_OTHER_CLASSES = 16  # the 28 labels minus the 12 high-order ones
GOAL_MEAN, GOAL_HIGH = 0.64, 0.95
CHUNK_SYMBOLS = 1024  # rows of the (symbols x 1000 points) work array: ~8 MB of float64


@dataclass(frozen=True)
class Hypotheses:
    """Every alphabet the 12 classes can use, flattened: `points` (P,) complex128 holds them
    back to back; alphabet v starts at `offsets[v]` and belongs to class `variant_class[v]`."""

    points: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    variant_class: np.ndarray
    alphabets: tuple[np.ndarray, ...]


def hypotheses() -> Hypotheses:
    """The product's own alphabets (rfclassify.dsp.constellations), one per APSK ring ratio."""
    alphabets, owner = [], []
    for c, label in enumerate(HIGH_ORDER_LABELS):
        if label == "16APSK":
            variants = [apsk((4, 12), (1.0, r)) for r in APSK16_RATIOS]
        elif label == "32APSK":
            variants = [apsk((4, 12, 16), (1.0, r2, r3)) for r2, r3 in APSK32_RATIOS]
        else:
            variants = [constellation(label)]
        alphabets += [np.asarray(a, np.complex128) for a in variants]
        owner += [c] * len(variants)
    sizes = np.array([a.size for a in alphabets])
    return Hypotheses(points=np.concatenate(alphabets), offsets=np.concatenate([[0], np.cumsum(sizes)[:-1]]),
                      sizes=sizes, variant_class=np.array(owner), alphabets=tuple(alphabets))


def es_n0_db(snr_db: float | np.ndarray, sps: float | np.ndarray) -> float | np.ndarray:
    """Per-symbol Es/N0 of matched-filter outputs: SNR (signal power over noise power in the
    whole sampled band) times samples per symbol, for a unit-energy root-Nyquist pulse."""
    return snr_db + 10 * np.log10(sps)


def symbol_loglik(y: np.ndarray, inv_n0: np.ndarray, hyp: Hypotheses) -> np.ndarray:
    """(S, V) float64: log((1/M_v) sum_m exp(-|y_s - c_m|^2 / N0_s)) for every alphabet v,
    up to a per-symbol constant (-|y_s|^2 / N0_s - log(pi N0_s)) that is the same for all v."""
    y = np.asarray(y, np.complex128)
    inv_n0 = np.asarray(inv_n0, np.float64)
    c = hyp.points
    proj = np.stack([2 * c.real, 2 * c.imag])  # Re(2 y c*) = [yr, yi] @ proj
    energy = np.abs(c) ** 2
    out = np.empty((y.size, hyp.sizes.size))
    for s in range(0, y.size, CHUNK_SYMBOLS):
        sl = slice(s, s + CHUNK_SYMBOLS)
        a = np.stack([y[sl].real, y[sl].imag], axis=1) @ proj
        a -= energy
        a *= inv_n0[sl, None]
        peak = np.maximum.reduceat(a, hyp.offsets, axis=1)  # logsumexp, stable at any N0
        a -= np.repeat(peak, hyp.sizes, axis=1)
        np.exp(a, out=a)
        out[sl] = np.log(np.add.reduceat(a, hyp.offsets, axis=1)) + peak - np.log(hyp.sizes)
    return out


def class_loglik(per_symbol: np.ndarray, counts: np.ndarray, hyp: Hypotheses,
                 keep: np.ndarray | None = None) -> np.ndarray:
    """(B, 12) log-likelihood of each class for bursts of counts[b] consecutive symbols; APSK
    ring ratios mixed uniformly. keep (S,) bool: only those symbols count."""
    ll = per_symbol if keep is None else per_symbol * keep[:, None]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    burst = np.add.reduceat(ll, starts, axis=0)  # (B, V)
    n_class = len(HIGH_ORDER_LABELS)
    out = np.empty((burst.shape[0], n_class))
    for c in range(n_class):
        v = burst[:, hyp.variant_class == c]
        peak = v.max(axis=1, keepdims=True)
        out[:, c] = (peak + np.log(np.mean(np.exp(v - peak), axis=1, keepdims=True)))[:, 0]
    return out


def draw_symbols(classes: np.ndarray, counts: np.ndarray, hyp: Hypotheses, rng: np.random.Generator
                 ) -> np.ndarray:
    """Flat (sum counts,) complex128: counts[b] uniform i.i.d. symbols of class classes[b], its
    APSK ring ratio drawn uniformly per burst, as the synthesizer does."""
    variant = np.empty(classes.size, np.intp)
    for c in np.unique(classes):
        rows = np.flatnonzero(classes == c)
        options = np.flatnonzero(hyp.variant_class == c)
        variant[rows] = options[rng.integers(0, options.size, rows.size)]
    per_symbol_variant = np.repeat(variant, counts)
    pick = (rng.random(per_symbol_variant.size) * hyp.sizes[per_symbol_variant]).astype(np.intp)
    return hyp.points[hyp.offsets[per_symbol_variant] + pick]


def genie_decide(classes: np.ndarray, snr_db: float, sps: np.ndarray, n_tight: np.ndarray,
                 n_extra: int, hyp: Hypotheses, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Decisions (tight, all) for bursts of the given true classes and samples per symbol:
    n_tight[b] symbols, then n_extra more seen only by the "all" decision."""
    counts = n_tight + n_extra
    c = draw_symbols(classes, counts, hyp, rng)
    n0 = np.repeat(10 ** (-es_n0_db(snr_db, sps) / 10), counts)  # Es = 1 (unit-energy alphabets)
    noise = rng.standard_normal((2, c.size))
    y = c + np.sqrt(n0 / 2) * (noise[0] + 1j * noise[1])
    ll = symbol_loglik(y, 1.0 / n0, hyp)
    keep = np.arange(c.size) - np.repeat(np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    keep = keep < np.repeat(n_tight, counts)
    tight = class_loglik(ll, counts, hyp, keep).argmax(axis=1)
    every = class_loglik(ll, counts, hyp).argmax(axis=1)
    return tight, every


def run_cell(n_samples: int, snr_db: float, per_class: int, hyp: Hypotheses, rng: np.random.Generator,
             sps: float | None = None) -> dict:
    """One (length, SNR) cell: per_class bursts of each class, sps log-uniform over the
    synthesizer's SPS_RANGE (or fixed). Returns accuracies, their standard errors and decisions."""
    n_class = len(HIGH_ORDER_LABELS)
    classes = np.repeat(np.arange(n_class), per_class)
    b = classes.size
    sps_b = ch.log_uniform(SPS_RANGE, b, rng) if sps is None else np.full(b, float(sps))
    n_tight = np.ceil(n_samples / sps_b).astype(np.intp)
    tight, every = genie_decide(classes, snr_db, sps_b, n_tight, 2 * RRC_SPAN_SYMBOLS, hyp, rng)
    acc_t, acc_a = float(np.mean(tight == classes)), float(np.mean(every == classes))
    return {"snr_db": snr_db, "n": b, "accuracy": acc_t, "se": math.sqrt(acc_t * (1 - acc_t) / b),
            "accuracy_all_symbols": acc_a, "se_all_symbols": math.sqrt(acc_a * (1 - acc_a) / b),
            "_classes": classes, "_pred": tight}


def summarize(cells: list[dict], key: str) -> dict:
    """Mean over the SNR grid and over SNR >= 10 dB (equal weight per cell, like the test set),
    with Monte Carlo standard errors, and the implied 28-class caps."""
    acc = np.array([c[key] for c in cells])
    se = np.array([c["se" if key == "accuracy" else "se_all_symbols"] for c in cells])
    high = np.array([c["snr_db"] >= HIGH_SNR_DB for c in cells])
    mean, mean_se = float(acc.mean()), float(np.sqrt(np.sum(se ** 2)) / acc.size)
    ge10, ge10_se = float(acc[high].mean()), float(np.sqrt(np.sum(se[high] ** 2)) / high.sum())
    n_hi = len(HIGH_ORDER_LABELS)
    total = n_hi + N_OTHER_CLASSES
    return {"mean_over_snr": mean, "mean_over_snr_se": mean_se, "snr_ge_10db": ge10, "snr_ge_10db_se": ge10_se,
            "implied_28_class_mean_over_snr_cap": (n_hi * mean + N_OTHER_CLASSES) / total,
            "implied_28_class_snr_ge_10db_cap": (n_hi * ge10 + N_OTHER_CLASSES) / total}


def measure_es_n0(snr_db: float, n_samples: int, n_bursts: int, rng: np.random.Generator,
                  label: str = "16QAM") -> list[dict]:
    """Es/N0 of matched-filter outputs on real synthesizer bursts (clean channel plus AWGN at
    snr_db) against SNR + 10 log10(sps). The noise is noisy minus noiseless burst from the same
    seed (the synthesizer draws noise from its own stream). Also the lag-1 correlation of the
    filtered noise, which the i.i.d. model needs near 0."""
    seed = int(rng.integers(0, 2**63 - 1))
    clean_cfg = ChannelConfig.clean()
    clean = synthesize([label] * n_bursts, n_samples, np.random.default_rng(seed), channel=clean_cfg)
    noisy = synthesize([label] * n_bursts, n_samples, np.random.default_rng(seed), snr_db, clean_cfg)
    rows = []  # sd of the measurement: ~4.34 / sqrt(n_symbols) dB from the noise estimate alone
    for x, z, p in zip(clean.iq, noisy.iq, clean.params, strict=True):
        sps, rolloff = float(p["samples_per_symbol"]), float(p["rolloff"])
        sym = measure.matched_filter(x, sps, rolloff)
        nz = measure.matched_filter(z.astype(np.complex128) - x, sps, rolloff)
        rows.append({"sps": sps, "n_symbols": int(sym.size),
                     "predicted_es_n0_db": float(es_n0_db(snr_db, sps)),
                     "measured_es_n0_db": float(10 * np.log10(np.mean(np.abs(sym) ** 2) / np.mean(np.abs(nz) ** 2))),
                     "noise_lag1_correlation": float(np.abs(np.mean(nz[1:] * np.conj(nz[:-1])))
                                                     / np.mean(np.abs(nz) ** 2))})
    return rows


def _pct(x: float) -> str:
    return f"{100 * x:5.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run (< 30 s)")
    ap.add_argument("--json", default=None, help="write the results to this path")
    ap.add_argument("--seed", type=int, default=20261201)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    hyp = hypotheses()
    if args.quick:
        snrs, lengths, per_class, sweep_per_class = tuple(range(-20, 31, 10)), (128, 1024), 8, 8
        sweep_sps = (2.0, 4.0, 16.0)
    else:
        snrs, lengths, per_class, sweep_per_class = tuple(range(-20, 31, 2)), (128, 256, 1024, 4096), 100, 200
        sweep_sps = tuple(float(round(2 * 2 ** (k / 2), 3)) for k in range(7))  # 2 .. 16, log steps
    t0 = time.perf_counter()

    check = measure_es_n0(10.0, 4096, 4 if args.quick else 32, rng)
    err = np.array([r["measured_es_n0_db"] - r["predicted_es_n0_db"] for r in check])
    print(f"Es/N0 check (16QAM, clean channel, SNR 10 dB, 4096 samples, {len(check)} bursts): "
          f"measured - predicted = {err.mean():+.3f} dB mean, {np.abs(err).max():.3f} dB max |.|; "
          f"noise lag-1 correlation <= {max(r['noise_lag1_correlation'] for r in check):.3f}")

    results: dict = {"per_length": {}}
    confusion = np.zeros((len(HIGH_ORDER_LABELS),) * 2, np.int64)
    for n in lengths:
        cells = []
        for snr in snrs:
            cell = run_cell(n, float(snr), per_class, hyp, rng)
            if n == 1024 and snr >= HIGH_SNR_DB:
                np.add.at(confusion, (cell["_classes"], cell["_pred"]), 1)
            cells.append({k: v for k, v in cell.items() if not k.startswith("_")})
        results["per_length"][str(n)] = {"per_snr": cells, "tight": summarize(cells, "accuracy"),
                                         "all_symbols": summarize(cells, "accuracy_all_symbols")}
        print(f"  {n} samples done ({time.perf_counter() - t0:.0f} s)")

    sweep = []
    for snr in (10.0, 20.0):
        for s in sweep_sps:
            cell = run_cell(1024, snr, sweep_per_class, hyp, rng, sps=s)
            sweep.append({"sps": s} | {k: v for k, v in cell.items() if not k.startswith("_")})
    elapsed = time.perf_counter() - t0

    print("\nBayes accuracy with a genie, 12 high-order classes (%; tight / all symbols), per SNR:")
    print("SNR dB | " + " | ".join(f"{n:>13}" for n in lengths))
    for i, snr in enumerate(snrs):
        row = [results["per_length"][str(n)]["per_snr"][i] for n in lengths]
        print(f"{snr:6d} | " + " | ".join(f"{_pct(r['accuracy'])} / {_pct(r['accuracy_all_symbols'])}" for r in row))
    print("\nlength | high-order mean | high-order >=10 dB | 28-class cap mean | 28-class cap >=10 dB  (tight; all symbols)")
    for n in lengths:
        for key in ("tight", "all_symbols"):
            s = results["per_length"][str(n)][key]
            print(f"{n:6d} | {_pct(s['mean_over_snr'])} +- {100 * s['mean_over_snr_se']:.1f} | "
                  f"{_pct(s['snr_ge_10db'])} +- {100 * s['snr_ge_10db_se']:.1f} | "
                  f"{_pct(s['implied_28_class_mean_over_snr_cap'])} | {_pct(s['implied_28_class_snr_ge_10db_cap'])}  ({key})")
    print("\nAccuracy vs samples/symbol, 1024 samples (tight):")
    for r in sweep:
        print(f"  SNR {r['snr_db']:4.0f} dB  sps {r['sps']:6.3f}: {_pct(r['accuracy'])} +- {100 * r['se']:.1f}")
    print("\nConfusion, 1024 samples, SNR >= 10 dB (rows true, columns decided):")
    short = [lb.replace("APSK", "A").replace("QAM", "Q").replace("PSK", "P") for lb in HIGH_ORDER_LABELS]
    print("        " + " ".join(f"{s:>5}" for s in short))
    for lb, row in zip(short, confusion, strict=True):
        print(f"{lb:>7} " + " ".join(f"{v:5d}" for v in row))
    print(f"\n{elapsed:.0f} s")

    results |= {
        "config": {"seed": args.seed, "quick": args.quick, "snr_grid_db": list(snrs), "lengths_samples": list(lengths),
                   "bursts_per_class_per_cell": per_class, "sps_distribution": f"log-uniform {SPS_RANGE}",
                   "symbols_tight": "ceil(N / sps)", "symbols_all": f"ceil(N / sps) + {2 * RRC_SPAN_SYMBOLS}",
                   "classes": list(HIGH_ORDER_LABELS), "goals": {"mean_over_snr": GOAL_MEAN, "snr_ge_10db": GOAL_HIGH}},
        "es_n0_check": check, "sps_sweep_1024": sweep,
        "confusion_1024_snr_ge_10db": {"labels": list(HIGH_ORDER_LABELS), "counts": confusion},
        "elapsed_s": elapsed,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(clean_json(results), f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
