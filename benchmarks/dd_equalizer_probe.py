"""Does a decision-directed equalizer per candidate class add to the sequence network? A diagnostic, not a test.

The sequence network's errors are in multipath bursts (benchmarks/sequence_net_limits.py):
40.6 % on the quarter of faded bursts with the largest delay spread. A blind equalizer
before a likelihood receiver lost (high_order_sync_ladder.md: CMA), and learned equalization
showed nothing (--gates; fractional_sequence_probe.py). This probe tries the remaining
form: an equalizer fitted per hypothesis, as the product computes it
(rfclassify.dsp.class_equalizer.class_scores, the refiner's `fit-refiner --equalizer`
inputs): for each of the 12 high-order classes' alphabets (one per DVB-S2 ring ratio for
16/32APSK), the clocked symbols are turned back by the residual carrier that alphabet fits
best (its carrier line and best start turn until the seventeenth session), a TAPS-tap
symbol-spaced equalizer is fitted by least squares to its own
decisions (at most --passes times), and the class is scored by the Gaussian-mixture
log-likelihood per symbol of the equalized symbols at unit signal power. With TAPS = 1 the
equalizer is only a complex gain: the same receiver without equalization.

It reports the classes' accuracies by the scores alone, and whether they add to the
shipped sequence network: a softmax regression on [network log-probabilities] against one
on [network log-probabilities, scores], fitted on one half of the bursts and scored on the
other.

    PYTHONPATH=. python3 benchmarks/dd_equalizer_probe.py [--bursts 2400] [--workers 2] [--passes 10] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfclassify.dsp import symbol_clock as sc  # noqa: E402
from rfclassify.dsp.channel import FADING_NONE  # noqa: E402
from rfclassify.dsp.class_equalizer import MIN_SYMBOLS, PASSES, class_scores  # noqa: E402
from rfclassify.dsp.symbol_sequence import clocked_symbols  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402

TAPS = (1, 5)
WORST_SPREAD_SYMBOLS = 0.215


def _burst_features(args: tuple[np.ndarray, int]) -> tuple[np.ndarray | None, list[np.ndarray] | None]:
    iq, passes = args
    from rfclassify.dsp.symbol_sequence import sequence_from_symbols
    from rfclassify.engine.refiner import Refiner
    from rfclassify.model.meta import ModelMeta, default_model_dir

    global _NET
    if "_NET" not in globals():
        meta = ModelMeta.load(default_model_dir())
        _NET = Refiner.load(default_model_dir(), meta.refiner, meta.labels).sequence
    y = clocked_symbols(sc.blind_symbols(iq))
    if y is None or y.size < MIN_SYMBOLS:
        return None, None
    y = y / math.sqrt(float(np.mean(np.abs(y) ** 2)))
    with np.errstate(all="ignore"):
        return (_NET.log_probs(sequence_from_symbols(y)),
                [class_scores(y, HIGH_ORDER_LABELS, taps=t, passes=passes) for t in TAPS])


def softmax_regression(x: np.ndarray, y: np.ndarray, classes: int, l2: float = 1e-3, steps: int = 3000
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(W, b, mean, scale) of a multinomial logistic regression fitted by full-batch gradient descent."""
    mean, scale = x.mean(0), x.std(0) + 1e-6
    xs = (x - mean) / scale
    w = np.zeros((x.shape[1], classes))
    b = np.zeros(classes)
    onehot = np.eye(classes)[y]
    for _ in range(steps):
        z = xs @ w + b
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        g = (p - onehot) / len(y)
        w -= 0.5 * (xs.T @ g + l2 * w)
        b -= 0.5 * g.sum(0)
    return w, b, mean, scale


def main(argv: list[str] | None = None) -> int:
    from rfclassify.dsp.synth import synthesize
    from rfclassify.model.meta import ModelMeta, default_model_dir
    from rfclassify.model.training_data import DataRecipe

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bursts", type=int, default=2400)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--passes", type=int, default=PASSES, help="least-squares passes per alphabet, at most")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    meta = ModelMeta.load(default_model_dir())
    overrides = meta.channel_overrides
    rng = np.random.default_rng(args.seed)
    cls = rng.integers(0, len(HIGH_ORDER_LABELS), args.bursts)
    snr = rng.uniform(10.0, 30.0, args.bursts)
    t0 = time.perf_counter()
    batch = synthesize([HIGH_ORDER_LABELS[c] for c in cls], args.length, rng, snr,
                       DataRecipe(channel_overrides=overrides).channel_config())
    jobs = [(iq, args.passes) for iq in batch.iq]
    if args.workers > 1:
        from multiprocessing import get_context

        with get_context("spawn").Pool(args.workers) as pool:
            feats = pool.map(_burst_features, jobs, chunksize=20)
    else:
        feats = [_burst_features(j) for j in jobs]
    ok = np.array([f[0] is not None for f in feats])
    net = np.stack([f[0] for f in feats if f[0] is not None])
    scores = [np.stack([f[1][t] for f in feats if f[0] is not None]) for t in range(len(TAPS))]
    truth = cls[ok]
    p = batch.params
    faded = (p["fading_type"] != FADING_NONE)[ok]
    spread = (p["delay_spread_samples"] / p["samples_per_symbol"])[ok]
    subsets = {"all": np.ones(truth.size, bool), "unfaded": ~faded, "faded": faded,
               f"faded, delay spread > {WORST_SPREAD_SYMBOLS} symbols": faded & (spread > WORST_SPREAD_SYMBOLS)}

    def acc(pred: np.ndarray, within: np.ndarray | None = None) -> dict[str, float]:
        m = np.ones(truth.size, bool) if within is None else within
        return {k: round(float(np.mean(pred[v & m] == truth[v & m])), 4) for k, v in subsets.items() if (v & m).any()}

    report: dict = {"bursts": args.bursts, "clocked": int(ok.sum()), "length": args.length, "snr_db": [10.0, 30.0],
                    "taps": list(TAPS), "passes": args.passes,
                    "subset_sizes": {k: int(v.sum()) for k, v in subsets.items()},
                    "alone": {"sequence network": acc(net.argmax(1))}}
    for t, s in zip(TAPS, scores, strict=True):
        report["alone"][f"likelihood, {t} tap(s)"] = acc(np.nan_to_num(s, nan=-1e9, neginf=-1e9).argmax(1))
    half = np.arange(truth.size) % 2 == 0
    fused = {}
    for name, x in (("network", net), ("network + 1-tap scores", np.hstack([net, scores[0]])),
                    (f"network + {TAPS[-1]}-tap scores", np.hstack([net, scores[-1]])),
                    ("network + both", np.hstack([net, *scores]))):
        x = np.nan_to_num(x, nan=-50.0, neginf=-50.0, posinf=50.0)
        w, b, mean, scale = softmax_regression(x[half], truth[half], len(HIGH_ORDER_LABELS))
        pred = (((x - mean) / scale) @ w + b).argmax(1)
        fused[name] = acc(pred, ~half)
    report["fused_on_held_out_half"] = fused
    report["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
