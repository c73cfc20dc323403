"""Would a DSP refiner after the CNN help? The CNN alone against CNN + blind likelihood receiver.

For each burst of one length in an HDF5 dataset the shipped CNN decides as the serving
Classifier does (calibrated window log-probabilities averaged over the burst). When its top
class is one of the 12 high-order classes, the blind receiver of
benchmarks/high_order_sync_ladder.py (`LadderDecider.decide_blind`: symbol rate, timing and
carrier estimated from the burst, then the Bayes constellation likelihood) re-decides among
those 12. Prints accuracy (mean over SNR, at SNR >= 10 dB, high-order at >= 10 dB) of both,
and the refiner's cost per burst on this machine. A measurement, not a product stage.

    python3 benchmarks/hybrid_refiner_eval.py DATA.h5 [--model-dir DIR] [--length 1024] [--per-snr N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ensemble_diagnostic import burst_log_probs  # noqa: E402
from high_order_sync_ladder import LadderDecider  # noqa: E402

from rfclassify.data.reader import DatasetReader  # noqa: E402
from rfclassify.engine.classifier import Classifier  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402
from rfclassify.model.evaluate import (  # noqa: E402
    HIGH_SNR_DB,
    accuracy_summary,
    burst_conditions,
)


def scores(pred: np.ndarray, labels: np.ndarray, snr_db: np.ndarray, params: np.ndarray) -> dict[str, float]:
    """Accuracy overall (as `rfclassify evaluate` computes it), and of the high-order classes at
    >= 10 dB by channel condition (evaluate's burst_conditions)."""
    acc = accuracy_summary(labels, pred, snr_db)
    ok = pred == labels
    cond = burst_conditions(params, labels)
    hi = (snr_db >= HIGH_SNR_DB) & cond["high-order class"]
    fading = cond["Rayleigh fading"] | cond["Rician fading"]
    clean = hi & cond["high-order, no fading, phase noise or PA"]
    return {"mean_over_snr": acc["mean_accuracy_over_snr"], "snr_ge_10db": acc["accuracy_snr_ge_10db"],
            "high_order_snr_ge_10db": float(ok[hi].mean()),
            "high_order_snr_ge_10db_fading": float(ok[hi & fading].mean()),
            "high_order_snr_ge_10db_no_fading": float(ok[hi & ~fading].mean()),
            "high_order_snr_ge_10db_no_fading_pn_pa": float(ok[clean].mean()),
            "n_high_order_snr_ge_10db": int(hi.sum()), "n_no_fading_pn_pa": int(clean.sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--per-snr", type=int, default=0, help="bursts per SNR value (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    with h5py.File(args.data) as f:
        snr_db, labels, length = f["snr_db"][:], f["label_index"][:], f["length"][:]
    idx = np.flatnonzero(length == args.length)
    if args.per_snr:
        rng = np.random.default_rng(args.seed)
        idx = np.sort(np.concatenate([rng.permutation(idx[snr_db[idx] == v])[:args.per_snr]
                                      for v in np.unique(snr_db[idx])]))
    reader = DatasetReader(args.data)
    bursts, params = reader.read(idx), reader.params[idx]
    clf = Classifier.load(args.model_dir, backend="onnxruntime")
    names = list(clf.labels)
    high_idx = np.array([names.index(x) for x in HIGH_ORDER_LABELS])
    cnn = burst_log_probs(clf, bursts).argmax(axis=1)
    refined = cnn.copy()
    decider, t0, n_refined = LadderDecider(), time.perf_counter(), 0
    for i in np.flatnonzero(np.isin(cnn, high_idx)):
        refined[i] = high_idx[decider.decide_blind(np.asarray(bursts[i], np.complex128))[0]]
        n_refined += 1
    cost_ms = 1e3 * (time.perf_counter() - t0) / max(n_refined, 1)
    lab, snr = labels[idx], snr_db[idx]
    out = {"data": args.data, "length": args.length, "n": int(idx.size), "refined": n_refined,
           "refiner_ms_per_burst": round(cost_ms, 1), "model": clf.model_id,
           "cnn": scores(cnn, lab, snr, params),
           "cnn_plus_refiner": scores(refined, lab, snr, params)}
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
