"""Do several trained models fail on the same bursts? Each model alone against their ensemble.

For every burst of the chosen lengths in an HDF5 dataset, each model's temperature-scaled
log-probabilities are averaged over the burst's windows, exactly as the serving Classifier
does; the ensemble sums them across models. If the ensemble is much better than its best
member, the models' errors are independent (variance: more training or distillation helps);
if not, they share their errors (bias: the network family or the information in the bursts
is the limit). Prints accuracy as mean over SNR / at SNR >= 10 dB per length.

    PYTHONPATH=. python3 benchmarks/ensemble_diagnostic.py DATA.h5 MODEL_DIR MODEL_DIR [...] [--lengths 1024 4096]
"""

from __future__ import annotations

import argparse

import h5py
import numpy as np

from rfclassify.data.reader import DatasetReader
from rfclassify.dsp.windows import burst_to_windows
from rfclassify.engine.classifier import Classifier
from rfclassify.model.evaluate import accuracy_summary


def burst_log_probs(clf: Classifier, bursts: list[np.ndarray]) -> np.ndarray:
    """(n_bursts, n_labels): calibrated log-probabilities averaged over each burst's windows."""
    rows = []
    for b in bursts:
        w = burst_to_windows(np.asarray(b), clf.policy)
        logits, _ = clf.infer_windows(w.bucket_samples, w.windows)
        z = logits.astype(np.float64) / clf.meta.temperature
        z -= z.max(axis=1, keepdims=True)
        rows.append((z - np.log(np.exp(z).sum(axis=1, keepdims=True))).mean(axis=0))
    return np.array(rows)


def summary(log_probs: np.ndarray, labels: np.ndarray, snr_db: np.ndarray) -> tuple[float, float]:
    """(mean accuracy over the SNR grid, accuracy at SNR >= 10 dB), as `rfclassify evaluate` computes them."""
    acc = accuracy_summary(labels, log_probs.argmax(axis=1), snr_db)
    return acc["mean_accuracy_over_snr"], acc["accuracy_snr_ge_10db"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024])
    args = ap.parse_args()
    reader = DatasetReader(args.data)
    with h5py.File(args.data) as f:
        snr_db, labels, length = f["snr_db"][:], f["label_index"][:], f["length"][:]
    clfs = {d: Classifier.load(d, backend="onnxruntime") for d in args.models}
    for n in args.lengths:
        idx = np.where(length == n)[0]
        bursts = reader.read(idx)
        lp = {d: burst_log_probs(c, bursts) for d, c in clfs.items()}
        for d, p in [*lp.items(), ("ensemble", sum(lp.values()))]:
            mean, hi = summary(p, labels[idx], snr_db[idx])
            print(f"{n:5d} {d:40s} mean over SNR {mean:.4f}  >= 10 dB {hi:.4f}", flush=True)


if __name__ == "__main__":
    main()
