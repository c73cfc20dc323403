"""Do clocked, phase-invariant statistics add anything to the CNN on the real test distribution?

The seventh session's symbol-clock probe (symbol_clock_probe.md) found that 16PSK and 32PSK
separate once the network sees phase-invariant high-order statistics at the burst's symbol
instants, but only on clean bursts at 20-30 dB. Its open questions were fading, lower SNR and
the other fine pairs. This probe answers them before anything is built into the product, by
late fusion: a small classifier re-decides the bursts the shipped CNN calls high-order from

- ``cnn``: the CNN's calibrated log-probabilities (28), the control: any gain of this arm
  alone is recalibration, not new information;
- ``inv-line``: the same + the product's ``rfclassify.dsp.symbol_clock.burst_invariants``
  (what the serving refiner computes): ``clock_invariants`` (amplitude moments and histogram
  of the matched-filter symbols, and for k = 4, 8, 12, 16, 32 the magnitude of the mean
  one-symbol lag product of the unit-magnitude k-th power and the mean squared magnitude of
  its 8-symbol local mean, none of which a carrier phase or a small offset turns) at the
  strongest |x|^2 line's clock;
- ``inv``: the same invariants at the clock the blind likelihood receiver picks among the
  three strongest lines (costs the receiver's ~80 ms a burst);
- ``rx``: the same as ``cnn`` + the blind likelihood receiver's 12 class scores
  (high_order_sync_ladder.LadderDecider.score_classes at its best rate candidate);
- ``inv+rx``: both;
- ``inv-genie``: ``inv`` at the synthesizer's recorded clock and carrier (a bound on what a
  better clock would add).

Training bursts: the 12 high-order classes, 1024 samples, the full channel
(ChannelConfig()), SNR uniform over 10..30 dB, synthesized with --seed (not the test split's).
Evaluation: every 1024-sample burst of the test split (DATA.h5) at SNR >= 10 dB; the fusion
re-decides those whose CNN top class is high-order (its decision replaces the CNN's), the rest
keep the CNN's. Each fusion is a 2-layer MLP (128 hidden, AdamW, early stopping on 15 % of
the training bursts), averaged over --repeats seeds. The product's refiner (rfclassify.engine.refiner) is the
``inv-line`` arm fitted on more bursts and lengths. Results: fusion_probe.md.

    PYTHONPATH=. python3 benchmarks/fusion_probe.py MODEL_DIR DATA.h5 [--per-class N] [--workers 2]
        [--cache DIR] [--json PATH] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import time
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ensemble_diagnostic import burst_log_probs  # noqa: E402
from high_order_sync_ladder import LadderDecider, genie_symbols  # noqa: E402

from rfclassify.data.reader import DatasetReader  # noqa: E402
from rfclassify.dsp.channel import ChannelConfig  # noqa: E402
from rfclassify.dsp.rate import estimate_sps  # noqa: E402
from rfclassify.dsp.symbol_clock import (  # noqa: E402
    BLIND_ROLLOFF,
    N_INVARIANTS,
    burst_invariants,
    clock_invariants,
    estimate_carrier_and_noise,
    estimate_symbol_rate,
    remove_dc_line,
    symbols_at,
)
from rfclassify.dsp.synth import synthesize  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS, LABELS  # noqa: E402
from rfclassify.model.evaluate import HIGH_SNR_DB  # noqa: E402

N_SAMPLES = 1024
SNR_RANGE_DB = (10.0, 30.0)
RATE_CANDIDATES = 3                 # blind rate candidates the receiver scores
ARMS = ("cnn", "inv-line", "inv", "rx", "inv+rx", "inv-genie")
HIGH_INDEX = np.array([LABELS.index(lb) for lb in HIGH_ORDER_LABELS])


def burst_features(x: np.ndarray, params: np.void, dec: LadderDecider) -> np.ndarray:
    """One burst's [blind invariants, receiver scores (12), genie invariants, the product's
    invariants] (float32)."""
    product = burst_invariants(x)
    x = remove_dc_line(x)
    best = None
    for sps, timing in estimate_symbol_rate(x, float(estimate_sps(x[None, :])[0]), RATE_CANDIDATES):
        f0, noise = estimate_carrier_and_noise(x, sps)
        snr = max((1.0 - noise) / noise, 1e-3)
        scores, _ = dec.score_classes(x, sps, timing, f0, 1.0 / (snr * sps))
        if best is None or scores.max() > best[0].max():
            best = (scores, sps, timing, f0)
    scores, sps, timing, f0 = best
    xb = x * np.exp(-2j * np.pi * f0 * np.arange(x.size))
    blind = clock_invariants(symbols_at(xb, sps, BLIND_ROLLOFF, timing))
    if math.isfinite(float(params["samples_per_symbol"])):
        genie = clock_invariants(genie_symbols(x, params)[0])
    else:  # not a linear modulation (a high-order burst never is; the CNN's mistakes can be)
        genie = np.zeros(N_INVARIANTS, np.float32)
    return np.concatenate([blind, scores.astype(np.float32), genie, product])


def _features_chunk(args: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    iq, params = args
    dec = LadderDecider()
    return np.stack([burst_features(iq[i], params[i], dec) for i in range(len(iq))])


def all_features(iq: np.ndarray, params: np.ndarray, lp: np.ndarray, workers: int) -> np.ndarray:
    """Features of the bursts the CNN calls high-order (the only ones the fusion sees); zeros
    for the rest."""
    rows = np.flatnonzero(np.isin(lp.argmax(1), HIGH_INDEX))
    chunks = [(iq[rows[i:i + 64]], params[rows[i:i + 64]]) for i in range(0, rows.size, 64)]
    if workers <= 1:
        parts = [_features_chunk(c) for c in chunks]
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_features_chunk, chunks)
    out = np.zeros((len(iq), 3 * N_INVARIANTS + len(HIGH_ORDER_LABELS)), np.float32)
    if parts:
        out[rows] = np.concatenate(parts)
    return out


def split_features(f: np.ndarray) -> dict[str, np.ndarray]:
    n = N_INVARIANTS
    return {"inv": f[:, :n], "rx": f[:, n:n + 12], "inv-genie": f[:, n + 12:2 * n + 12], "inv-line": f[:, 2 * n + 12:]}


def arm_inputs(arm: str, lp: np.ndarray, feats: dict[str, np.ndarray]) -> np.ndarray:
    parts = [lp]
    if arm in ("inv", "inv+rx"):
        parts.append(feats["inv"])
    if arm in ("rx", "inv+rx"):
        parts.append(feats["rx"])
    if arm in ("inv-genie", "inv-line"):
        parts.append(feats[arm])
    return np.concatenate(parts, axis=1).astype(np.float32)


def fit_fusion(x: np.ndarray, y: np.ndarray, seed: int):
    """The product refiner's perceptron (refiner_fit.train_perceptron: 128 hidden units,
    AdamW, early stopping on a 15 % split) fitted to (x, y); returns predict(x) -> class index."""
    from rfclassify.engine.refiner import Refiner
    from rfclassify.model.refiner_fit import RefinerFitConfig, train_perceptron

    weights, _ = train_perceptron(x, y, len(HIGH_ORDER_LABELS), RefinerFitConfig(seed=seed))
    refiner = Refiner(labels=tuple(HIGH_ORDER_LABELS), index=HIGH_INDEX, **weights)
    return lambda xq: refiner.logits(xq).argmax(1)


def training_set(model_dir: str, per_class: int, seed: int, workers: int):
    from rfclassify.engine.classifier import Classifier

    rng = np.random.default_rng(seed)
    labels = [lb for lb in HIGH_ORDER_LABELS for _ in range(per_class)]
    snr = rng.uniform(*SNR_RANGE_DB, len(labels))
    batch = synthesize(labels, N_SAMPLES, rng, snr, ChannelConfig())
    clf = Classifier.load(model_dir, backend="onnxruntime")
    lp = burst_log_probs(clf, list(batch.iq))
    feats = all_features(batch.iq, batch.params, lp, workers)
    return {"lp": lp, "feats": feats, "label": batch.label_index, "snr": snr, "params": batch.params}


def test_set(model_dir: str, data: str, workers: int, limit: int | None):
    from rfclassify.engine.classifier import Classifier

    with h5py.File(data) as f:
        snr, lab, length, params = f["snr_db"][:], f["label_index"][:], f["length"][:], f["params"][:]
    idx = np.flatnonzero((length == N_SAMPLES) & (snr >= HIGH_SNR_DB))
    if limit:
        idx = np.random.default_rng(0).permutation(idx)[:limit]
    iq = np.stack(DatasetReader(data).read(idx))
    clf = Classifier.load(model_dir, backend="onnxruntime")
    lp = burst_log_probs(clf, list(iq))
    feats = all_features(iq, params[idx], lp, workers)
    return {"lp": lp, "feats": feats, "label": lab[idx], "snr": snr[idx], "params": params[idx]}


def _load_or_make(path: Path | None, make):
    if path is not None and path.exists():
        z = np.load(path, allow_pickle=False)
        return {k: z[k] for k in z.files}
    out = make()
    if path is not None:
        np.savez(path, **out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("data", help="the test split (HDF5); its 1024-sample bursts at >= 10 dB are scored")
    ap.add_argument("--per-class", type=int, default=900, help="training bursts per high-order class")
    ap.add_argument("--seed", type=int, default=20261208)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="fusion fits per arm (seeds), averaged")
    ap.add_argument("--cache", type=Path, help="directory for the feature arrays (reused when present)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--quick", action="store_true", help="smoke run: 6 bursts per class, 120 test bursts")
    args = ap.parse_args(argv)
    per_class, limit = (6, 120) if args.quick else (args.per_class, None)
    if args.cache:
        args.cache.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    train = _load_or_make(args.cache / f"train_{per_class}_{args.seed}.npz" if args.cache else None,
                          lambda: training_set(args.model_dir, per_class, args.seed, args.workers))
    test = _load_or_make(args.cache / f"test_{limit}.npz" if args.cache else None,
                         lambda: test_set(args.model_dir, args.data, args.workers, limit))
    t_feat = time.time() - t0
    high, hi_index = HIGH_ORDER_LABELS, HIGH_INDEX
    to_hi = {int(g): i for i, g in enumerate(hi_index)}

    tr_route = np.isin(train["lp"].argmax(1), hi_index)
    te_route = np.isin(test["lp"].argmax(1), hi_index)
    ytr = np.array([to_hi[int(v)] for v in train["label"][tr_route]])
    ftr, fte = split_features(train["feats"]), split_features(test["feats"])
    cnn_pred = test["lp"].argmax(1)
    te_hi = np.isin(test["label"], hi_index)
    faded = test["params"]["fading_type"] > 0
    results = {"train_bursts": int(len(train["label"])), "train_routed": int(tr_route.sum()),
               "test_bursts": int(len(test["label"])), "test_routed": int(te_route.sum()),
               "feature_seconds": round(t_feat, 1), "arms": {}}

    def scores(pred: np.ndarray) -> dict:
        ok = pred == test["label"]
        out = {"all": float(ok.mean()), "high_order": float(ok[te_hi].mean()),
               "high_order_faded": float(ok[te_hi & faded].mean()),
               "high_order_not_faded": float(ok[te_hi & ~faded].mean())}
        for lb in high:
            m = test["label"] == LABELS.index(lb)
            out[str(lb)] = float(ok[m].mean())
        return out

    results["arms"]["cnn_alone"] = scores(cnn_pred)
    for arm in ARMS:
        runs = []
        for r in range(args.repeats):
            predict = fit_fusion(arm_inputs(arm, train["lp"][tr_route], {k: v[tr_route] for k, v in ftr.items()}),
                                 ytr, seed=r)
            pred = cnn_pred.copy()
            pred[te_route] = hi_index[predict(arm_inputs(arm, test["lp"][te_route],
                                                         {k: v[te_route] for k, v in fte.items()}))]
            runs.append(scores(pred))
        results["arms"][arm] = {k: float(np.mean([s[k] for s in runs])) for k in runs[0]}
        results["arms"][arm]["high_order_sd_over_repeats"] = float(np.std([s["high_order"] for s in runs]))
    cols = ["all", "high_order", "high_order_faded", "high_order_not_faded"]
    print(f"train {results['train_bursts']} bursts ({results['train_routed']} routed), test "
          f"{results['test_bursts']} ({results['test_routed']} routed), features {t_feat:.0f} s")
    print(f"{'arm':12s} " + " ".join(f"{c:>22s}" for c in cols))
    for arm, s in results["arms"].items():
        print(f"{arm:12s} " + " ".join(f"{100 * s[c]:22.1f}" for c in cols))
    print("per class (high-order, test, %):")
    print(f"{'arm':12s} " + " ".join(f"{lb:>7s}" for lb in high))
    for arm, s in results["arms"].items():
        print(f"{arm:12s} " + " ".join(f"{100 * s[str(lb)]:7.1f}" for lb in high))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
