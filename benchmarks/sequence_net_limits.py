"""Where the sequence network's errors are, and whether whitening the symbols helps. A diagnostic, not a test.

The eleventh session trained the refiner's sequence network on 986,334 bursts instead of
690,116, and a wider one (width 64, 156,108 parameters) beside it: held-out accuracy at 1024
samples stayed at 69.0 and 69.5 % (the shipped one 69.1 %). This script says where the
network's errors are on fresh high-order bursts of one length:

1. accuracy of every network given (the shipped model's, plus any --nets) and of the
   averages of their log-probabilities (an ensemble);
2. the shipped network's accuracy by the synthesizer's recorded channel: fading type, the
   faded bursts' delay spread in symbols (quartiles), samples per symbol on unfaded bursts,
   SNR, and class; and by what the receiver made of the burst (thirteenth session): the
   blind clock's rate error against the true rate, and the symbols clocked, unfaded bursts
   apart (is the plateau the clock or the symbol count?), and the shipped network again on
   the bursts whose blind rate was off by more than 2 %, clocked at their true rate (the
   timing and carrier still blind: what a right rate would give);
3. the same network on the symbols whitened by a linear predictor (forward, backward, and
   whichever of none / forward / backward has the lowest kurtosis), a cheap blind
   equalizer for the delay spread that (2) blames.

    PYTHONPATH=. python3 benchmarks/sequence_net_limits.py [--bursts 2400] [--length 1024]
        [--nets A.npz B.npz] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from itertools import combinations
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfclassify.dsp import symbol_clock as sc  # noqa: E402
from rfclassify.dsp.channel import FADING_NONE, FADING_RAYLEIGH, FADING_RICIAN  # noqa: E402
from rfclassify.dsp.sequence_fronts import front_sequence  # noqa: E402
from rfclassify.dsp.symbol_sequence import clocked_symbols, sequence_from_symbols  # noqa: E402
from rfclassify.dsp.synth import synthesize  # noqa: E402
from rfclassify.engine.refiner import Refiner  # noqa: E402
from rfclassify.engine.sequence_net import SequenceNet  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402
from rfclassify.model.meta import ModelMeta, default_model_dir  # noqa: E402
from rfclassify.model.training_data import DataRecipe  # noqa: E402

WHITENING_ORDER = 3
RATE_ERROR_BINS = (0.0, 0.005, 0.02, np.inf)            # |blind rate / true rate - 1|
SYMBOL_BINS = (16, 96, 160, 256, 1025)                  # symbols clocked


def predictor(y: np.ndarray, order: int) -> np.ndarray:
    """Coefficients a (order,) of the forward linear predictor y[n] ~ sum_k a[k-1] y[n-k]
    (Yule-Walker on the sample autocorrelation)."""
    from scipy.linalg import solve_toeplitz

    n = y.size
    r = np.array([np.vdot(y[:n - k], y[k:]) / n for k in range(order + 1)])   # r[k] = mean y[n+k] conj(y[n])
    return solve_toeplitz((r[:order], np.conj(r[:order])), r[1:order + 1])


def whiten_forward(y: np.ndarray, order: int = WHITENING_ORDER) -> np.ndarray:
    """The forward prediction error of y (order symbols shorter)."""
    a = predictor(y, order)
    e = y.astype(np.complex128)
    for k in range(1, order + 1):
        e[k:] -= a[k - 1] * y[:-k]
    return e[order:]


def whiten_backward(y: np.ndarray, order: int = WHITENING_ORDER) -> np.ndarray:
    """The backward prediction error: the forward one of the time-reversed conjugate."""
    return np.conj(whiten_forward(np.conj(y[::-1]), order)[::-1])


def kurtosis(e: np.ndarray) -> float:
    m2 = np.mean(np.abs(e) ** 2)
    return float(np.mean(np.abs(e) ** 4) / max(m2 ** 2, 1e-30))


def variants(y: np.ndarray) -> dict[str, np.ndarray]:
    """The symbols as they are, whitened forward and backward, and the lowest-kurtosis pick."""
    out = {"as clocked": y}
    if y.size > 4 * WHITENING_ORDER:
        out["forward"] = whiten_forward(y)
        out["backward"] = whiten_backward(y)
    out["lowest kurtosis"] = out[min(out, key=lambda k: kurtosis(out[k]))]
    return out


def symbols_at_true_rate(iq: np.ndarray, sps: float) -> sc.BlindSymbols | None:
    """blind_symbols with the rate given: the timing from the phase of the |x|^2 line at
    that rate (symbol_clock.timing_at_rate), the carrier from the band's centroid."""
    x = np.asarray(iq, np.complex128).reshape(-1)[:sc.MAX_CLOCK_SAMPLES]
    with np.errstate(all="ignore"):
        x = sc.remove_dc_line(x)
        return sc.at_clock(x, sps, sc.timing_at_rate(x, sps), sc.estimate_carrier_and_noise(x, sps)[0])


def share(ok: np.ndarray, mask: np.ndarray) -> dict[str, float | int]:
    return {"n": int(mask.sum()), "accuracy": round(float(ok[mask].mean()), 4) if mask.any() else float("nan")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--bursts", type=int, default=2400)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--nets", nargs="*", default=[], help="more sequence networks (fit-sequence output)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    model_dir = args.model_dir or default_model_dir()
    meta = ModelMeta.load(model_dir)
    shipped = Refiner.load(model_dir, meta.refiner, meta.labels).sequence
    if shipped is None:
        print(f"{model_dir}'s refiner has no sequence network")
        return 1
    nets = {"shipped": shipped} | {Path(p).stem: SequenceNet.load(p) for p in args.nets}
    labels = HIGH_ORDER_LABELS
    overrides = meta.channel_overrides
    rng = np.random.default_rng(args.seed)
    cls = rng.integers(0, len(labels), args.bursts)
    snr = rng.uniform(10.0, 30.0, args.bursts)
    t0 = time.perf_counter()
    batch = synthesize([labels[c] for c in cls], args.length, rng, snr,
                       DataRecipe(channel_overrides=overrides).channel_config())
    p = batch.params
    lp = {name: np.full((args.bursts, len(labels)), -np.log(len(labels))) for name in nets}
    whitened: dict[str, np.ndarray] = {}
    rate_error = np.full(args.bursts, np.nan)       # |blind rate / true rate - 1|; nan: no clock
    n_symbols = np.zeros(args.bursts, np.int64)
    for i, iq in enumerate(batch.iq):
        found = sc.blind_symbols(iq)
        y = clocked_symbols(found)
        if y is None or y.size < 16:
            continue
        rate_error[i] = abs(p["samples_per_symbol"][i] / found.sps - 1.0)
        n_symbols[i] = y.size
        y = y / np.sqrt(np.mean(np.abs(y) ** 2))
        with np.errstate(all="ignore"):
            for name, net in nets.items():
                seq = front_sequence(y, net.front, net.labels)
                if seq is not None:
                    lp[name][i] = net.log_probs(seq)
            for k, v in variants(y).items():
                whitened.setdefault(k, np.zeros(args.bursts, bool))[i] = (
                    np.argmax(shipped.log_probs(sequence_from_symbols(v))) == cls[i])
    rate_missed = np.flatnonzero(rate_error > 0.02)
    at_true_rate = np.zeros(args.bursts, bool)
    for i in rate_missed:
        y = clocked_symbols(symbols_at_true_rate(batch.iq[i], float(p["samples_per_symbol"][i])))
        if y is not None and y.size >= 16:
            with np.errstate(all="ignore"):
                seq = front_sequence(y, shipped.front, shipped.labels)
            at_true_rate[i] = seq is not None and np.argmax(shipped.log_probs(seq)) == cls[i]
    ok = {name: v.argmax(1) == cls for name, v in lp.items()}
    names = list(nets)
    ensembles = {" + ".join(group): (sum(lp[n] for n in group).argmax(1) == cls)
                 for size in range(2, len(names) + 1) for group in combinations(names, size)}
    good = ok["shipped"]
    sps = p["samples_per_symbol"]
    fading = p["fading_type"]
    faded = fading != FADING_NONE
    spread = np.where(faded, p["delay_spread_samples"] / sps, np.nan)
    q = np.nanquantile(spread[faded], [0, 0.25, 0.5, 0.75, 1]) if faded.any() else np.zeros(5)
    report = {
        "bursts": args.bursts, "length": args.length, "seed": args.seed, "snr_db": [10.0, 30.0],
        "seconds": None,
        "networks": {n: round(float(v.mean()), 4) for n, v in ok.items()},
        "ensembles": {n: round(float(v.mean()), 4) for n, v in ensembles.items()},
        "by_fading": {name: share(good, fading == code) for name, code in
                      (("none", FADING_NONE), ("rayleigh", FADING_RAYLEIGH), ("rician", FADING_RICIAN))},
        "faded_by_delay_spread_symbols": {f"{q[j]:.3f}..{q[j + 1]:.3f}": share(good, faded & (spread >= q[j]) & (spread <= q[j + 1]))
                                          for j in range(4)},
        "unfaded_by_sps": {f"{lo}..{hi}": share(good, ~faded & (sps >= lo) & (sps < hi))
                           for lo, hi in ((2, 4), (4, 8), (8, 16.01))},
        "by_blind_rate_error": {**{f"{lo:g}..{hi:g}": share(good, (rate_error >= lo) & (rate_error < hi))
                                   for lo, hi in zip(RATE_ERROR_BINS, RATE_ERROR_BINS[1:])},
                                "no clock": share(good, np.isnan(rate_error))},
        "unfaded_by_blind_rate_error": {f"{lo:g}..{hi:g}": share(good, ~faded & (rate_error >= lo) & (rate_error < hi))
                                        for lo, hi in zip(RATE_ERROR_BINS, RATE_ERROR_BINS[1:])},
        "rate_missed_at_true_rate": {"blind clock": share(good, rate_error > 0.02),
                                     "true rate": share(at_true_rate, rate_error > 0.02),
                                     "rolloff of the missed, quartiles": [
                                         round(float(v), 3)
                                         for v in np.quantile(p["rolloff"][rate_missed], [0.25, 0.5, 0.75])]
                                     if rate_missed.size else []},
        "blind_rate_missed_by_rolloff": {
            f"{lo}..{hi}": {"n": int(m.sum()), "missed": round(float(np.mean(rate_error[m] > 0.02)), 4)}
            for lo, hi in ((0.15, 0.2), (0.2, 0.3), (0.3, 0.4), (0.4, 0.51))
            for m in [(p["rolloff"] >= lo) & (p["rolloff"] < hi)]},
        "unfaded_rate_within_0.005_by_symbols": {
            f"{lo}..{hi - 1}": share(good, ~faded & (rate_error < 0.005) & (n_symbols >= lo) & (n_symbols < hi))
            for lo, hi in zip(SYMBOL_BINS, SYMBOL_BINS[1:])},
        "by_snr_db": {f"{lo}..{hi}": share(good, (snr >= lo) & (snr < hi)) for lo, hi in ((10, 15), (15, 20), (20, 25), (25, 30.01))},
        "by_class": {lab: {"all": share(good, cls == c)["accuracy"], "unfaded": share(good, (cls == c) & ~faded)["accuracy"]}
                     for c, lab in enumerate(labels)},
        "whitening": {k: {"all": round(float(v.mean()), 4), "unfaded": share(v, ~faded)["accuracy"],
                          "faded": share(v, faded)["accuracy"],
                          "faded, largest delay-spread quartile": share(v, faded & (spread >= q[3]))["accuracy"]}
                      for k, v in whitened.items()},
    }
    report["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
