"""Accuracy measurements: per SNR, per class, per length bucket, confusion matrices, SNR error.

`accuracy_summary` is the one place the numbers are defined (training validation and
`rfclassify evaluate` both use it). `condition_table` splits accuracy at SNR >= 10 dB by the
generation parameters recorded with each burst (fading, phase noise, PA, samples per
symbol, ...) and by class group, to show whether the channel or the classes limit a model. `evaluate_file` runs an HDF5 dataset through the real
serving path (`rfclassify.engine.classifier.Classifier`) and writes tables and figures.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from rfclassify._atomic import write_atomic
from rfclassify._exceptions import InputError
from rfclassify.labels import HIGH_ORDER_LABELS, LABEL_TO_INDEX, LABELS, NOISE_LABEL

#: Range over which the SNR estimate's mean absolute error is reported (the goal: <= 2 dB).
SNR_MAE_RANGE_DB = (0.0, 20.0)
HIGH_SNR_DB = 10.0
EVAL_FILE = "evaluation.json"


def snr_bin_centres(snr_db: np.ndarray, width_db: float = 2.0) -> np.ndarray:
    """SNR of each example rounded to its bin: the values themselves on a grid of <= 64 levels."""
    s = np.asarray(snr_db, np.float64)
    finite = s[np.isfinite(s)]
    if np.unique(finite).size <= 64:
        return s
    return np.round(s / width_db) * width_db


def accuracy_summary(labels: np.ndarray, pred: np.ndarray, snr_db: np.ndarray,
                     snr_est_db: np.ndarray | None = None) -> dict[str, Any]:
    """Accuracy overall, mean over SNR bins, at SNR >= 10 dB, per SNR bin, and SNR estimate MAE.

    The SNR MAE counts non-NOISE examples with true SNR in SNR_MAE_RANGE_DB."""
    y = np.asarray(labels)
    correct = np.asarray(pred) == y
    snr = np.asarray(snr_db, np.float64)
    bins = snr_bin_centres(snr)
    per_snr = []
    for c in np.unique(bins[np.isfinite(bins)]):
        m = bins == c
        per_snr.append({"snr_db": float(c), "n": int(m.sum()), "accuracy": float(correct[m].mean())})
    high = snr >= HIGH_SNR_DB
    out: dict[str, Any] = {
        "n": int(y.size),
        "accuracy": float(correct.mean()) if y.size else float("nan"),
        "mean_accuracy_over_snr": float(np.mean([r["accuracy"] for r in per_snr])) if per_snr else float("nan"),
        "accuracy_snr_ge_10db": float(correct[high].mean()) if high.any() else float("nan"),
        "per_snr": per_snr,
    }
    if snr_est_db is not None:
        lo, hi = SNR_MAE_RANGE_DB
        m = (y != LABEL_TO_INDEX[NOISE_LABEL]) & (snr >= lo) & (snr <= hi)
        err = np.abs(np.asarray(snr_est_db, np.float64) - snr)
        out["snr_mae_db_0_20"] = float(err[m].mean()) if m.any() else float("nan")
        out["snr_mae_n"] = int(m.sum())
    return out


def per_class_accuracy(labels: np.ndarray, pred: np.ndarray, names: tuple[str, ...] = LABELS,
                       mask: np.ndarray | None = None) -> dict[str, float]:
    """Accuracy of each true class (optionally within `mask`); classes absent from the data are left out."""
    y, p = np.asarray(labels), np.asarray(pred)
    if mask is not None:
        y, p = y[mask], p[mask]
    return {names[c]: float((p[y == c] == c).mean()) for c in range(len(names)) if (y == c).any()}


def burst_conditions(params: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """Boolean masks of channel conditions and burst groups, from PARAM_DTYPE records.

    A field a dataset does not record (NaN, e.g. phase noise in the GNU Radio set) counts as
    the condition being absent."""
    def num(name: str) -> np.ndarray:
        return np.asarray(params[name], np.float64)

    fading, pa = num("fading_type"), num("pa_backoff_db")
    phase_noise = np.nan_to_num(num("phase_noise_deg_per_sqrt_sample")) > 0
    sps = num("samples_per_symbol")
    # the multipath's rms delay spread in symbols: how much intersymbol interference it makes
    # (NaN sps, an analog burst, counts as absent)
    spread = np.nan_to_num(num("delay_spread_samples")) / sps
    high_order = np.isin(np.asarray(labels), [LABEL_TO_INDEX[n] for n in HIGH_ORDER_LABELS])
    return {
        "Rayleigh fading": fading == 1,
        "Rician fading": fading == 2,
        "phase noise": phase_noise,
        "PA compression": np.isfinite(pa),
        "IQ imbalance": (np.nan_to_num(num("iq_gain_imbalance_db")) != 0)
        | (np.nan_to_num(num("iq_phase_imbalance_deg")) != 0),
        "8-bit quantization": num("quant_dtype_code") == 2,
        "CFO above 0.005 cycles/sample": np.abs(np.nan_to_num(num("cfo_cyc_per_sample"))) > 0.005,
        "2-4 samples/symbol": (sps >= 2) & (sps < 4),
        "4-8 samples/symbol": (sps >= 4) & (sps < 8),
        "8-16 samples/symbol": sps >= 8,
        "multipath delay spread 0.1-0.2 symbols": (spread >= 0.1) & (spread < 0.2),
        "multipath delay spread >= 0.2 symbols": spread >= 0.2,
        "high-order class": high_order,
        "high-order, no fading, phase noise or PA": high_order & (fading == 0) & ~phase_noise & ~np.isfinite(pa),
    }


def condition_table(correct: np.ndarray, params: np.ndarray, labels: np.ndarray) -> list[dict[str, Any]]:
    """Accuracy with and without each of burst_conditions (NaN accuracy where a side is empty)."""
    ok = np.asarray(correct, bool)
    rows = []
    for name, m in burst_conditions(params, labels).items():
        rows.append({"condition": name, "n_with": int(m.sum()), "n_without": int((~m).sum()),
                     "accuracy_with": float(ok[m].mean()) if m.any() else float("nan"),
                     "accuracy_without": float(ok[~m].mean()) if (~m).any() else float("nan")})
    return rows


def confusion(labels: np.ndarray, pred: np.ndarray, n_classes: int = len(LABELS)) -> np.ndarray:
    """Counts (true, predicted)."""
    cm = np.zeros((n_classes, n_classes), np.int64)
    np.add.at(cm, (np.asarray(labels), np.asarray(pred)), 1)
    return cm


def clean_json(obj: Any) -> Any:
    """NaN/inf -> None (strict JSON), numpy values -> Python, recursively."""
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return clean_json(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(path: Path, data: Any) -> None:
    """Strict JSON (see clean_json), written atomically."""
    write_atomic(path, json.dumps(clean_json(data), indent=2, default=str) + "\n")


def _dataset_info(reader: Any, path: Path) -> dict[str, Any]:
    a = reader.attrs
    return {"file": path.name, "source": a.source, "seed": a.seed, "generator": a.generator,
            "command_line": a.command_line, "channel": a.channel, "snr_grid_db": list(a.snr_grid_db),
            "lengths": a.lengths, "n_bursts": len(reader), "samples_sha256": reader.samples_sha256()}


def evaluate_file(path: str | Path, model_dir: str | Path | None = None, backend: str = "auto",
                  precision: str = "auto", out_dir: str | Path | None = None, chunk: int = 512,
                  name: str | None = None, plots: bool = True, refiner: bool = True, refiner_sequence: bool = True,
                  predictions: bool = False, refiner_rate_rule: str | None = None,
                  refiner_workers: int = 0, dc_pass: bool = True, low_order_refiner: bool = True,
                  refiner_em_classes: int | None = None, refiner_skip_above: float | None = None
                  ) -> dict[str, Any]:
    """Classify every burst of an HDF5 dataset through the serving Classifier (backend and
    precision as Classifier.load picks them) and measure it (with the model's refiners unless
    refiner=False, its low-order one unless low_order_refiner=False; the constellation
    refiner's bursts clocked by refiner_rate_rule and its EM scores fitted for
    refiner_em_classes classes where given, their statistics in refiner_workers processes
    (-1: as many as the cores allow), the DC pass unless dc_pass=False, the bursts the
    network is sure of skipping both above refiner_skip_above where given: Classifier.load).

    A burst whose samples cannot be read (a damaged compressed chunk of /iq: every burst with
    samples in it; a /length past the reader's MAX_READ_SAMPLES) is left out and counted in
    "unreadable", and the numbers are over the others; InputError where none can be read.

    Writes evaluation.json (and, with plots, confusion matrices and accuracy-vs-SNR PNGs;
    with predictions, each burst's outcome: rfclassify.model.paired) to out_dir when given;
    returns the same dictionary."""
    from rfclassify.data.reader import DatasetReader
    from rfclassify.engine.classifier import Classifier
    from rfclassify.engine.file_bursts import UnreadSamples
    from rfclassify.model.calibration import expected_calibration_error, threshold_table

    path = Path(path)
    with DatasetReader(path) as reader, Classifier.load(model_dir, backend=backend, precision=precision,
                                                                refiner=refiner,
                                                                refiner_sequence=refiner_sequence,
                                                                refiner_rate_rule=refiner_rate_rule,
                                                                refiner_workers=refiner_workers,
                                                                refiner_em_classes=refiner_em_classes,
                                                                dc_pass=dc_pass,
                                                                low_order_refiner=low_order_refiner,
                                                                refiner_skip_above=refiner_skip_above) as clf:
        info = _dataset_info(reader, path)
        to_model = np.array([LABEL_TO_INDEX.get(n, -1) for n in reader.labels])
        y = to_model[reader.label_index]
        foreign = sorted({reader.labels[i] for i in np.unique(reader.label_index) if to_model[i] < 0})
        if not len(reader) or not (y >= 0).any():
            # before: an evaluation of NaNs, written and reported as done
            raise InputError(f"{path}: nothing to evaluate: " + (
                "it holds no bursts" if not len(reader) else
                f"none of its labels is one this model classifies ({', '.join(foreign[:6])}"
                f"{', ...' if len(foreign) > 6 else ''})"))
        snr = reader.snr_db.astype(np.float64)
        params = reader.params
        n = len(reader)
        pred = np.full(n, -1)
        conf = np.zeros(n)
        snr_est = np.full(n, np.nan)
        bucket = np.zeros(n, np.int64)
        probs = np.zeros((n, len(LABELS)), np.float32)
        rejects: dict[str, int] = {}
        unread: dict[str, int] = {}     # bursts the file cannot give, by reason (not the model's rejects)
        first_unread = ""
        t0 = time.perf_counter()
        for lo in range(0, n, chunk):
            idx, bursts = np.arange(lo, min(n, lo + chunk)), []
            # a damaged chunk of /iq costs the bursts in it: before the seventy-first session it
            # ended the evaluation (one line, exit 2) before any burst was classified
            for i, burst in zip(idx, reader.read_or_reject(idx), strict=True):
                if isinstance(burst, UnreadSamples):
                    unread[burst.reason] = unread.get(burst.reason, 0) + 1
                    first_unread = first_unread or burst.detail
                else:
                    bursts.append((i, burst))
            if not bursts:
                continue
            for (i, _), r in zip(bursts, clf.classify([b for _, b in bursts]), strict=True):
                if not r.ok:
                    rejects[r.reject_reason] = rejects.get(r.reject_reason, 0) + 1
                    continue
                pred[i] = LABEL_TO_INDEX[r.top[0][0]]
                # the bucket of the burst as received (a rate-normalizing model may run it in another)
                conf[i], snr_est[i] = r.confidence, r.snr_db
                bucket[i] = clf.policy.bucket_for_length(r.n_samples)
                probs[i] = r.probabilities
        elapsed = time.perf_counter() - t0
        n_unread = sum(unread.values())
        if n_unread == n:
            raise InputError(f"{path}: nothing to evaluate: none of its {n} bursts can be read "
                             f"({counts_text(unread)}); the first: {first_unread}")
        if not ((pred >= 0) & (y >= 0)).any():   # every scorable burst rejected: NaNs, not an evaluation
            raise InputError(f"{path}: nothing to evaluate: every burst of a label this model classifies was "
                             f"rejected ({counts_text(rejects)})"
                             + (f" or cannot be read ({counts_text(unread)})" if n_unread else ""))
        damaged = reader.damaged_ranges()   # found as samples_sha256 read the file
        run = {"backend": clf.backend, "precision": clf.precision, "device": clf.device,
               "model": clf.model_id, "temperature": clf.meta.temperature,
               "unknown_threshold": clf.meta.unknown_threshold,
               "refiner": list(clf.refiner.labels) if clf.refiner else None,
               "refiner_sequence_net": bool(clf.refiner is not None and clf.refiner.sequence is not None),
               "refiner_rate_rule": clf.refiner.rate_rule if clf.refiner else None,
               "refiner_em_classes": clf.refiner.em_count if clf.refiner and clf.refiner.em_channel else None,
               "dc_pass": bool(clf.dc_pass and clf.refiners),
               "low_order_refiner": list(clf.low_order_refiner.labels) if clf.low_order_refiner else None,
               "refiner_workers": clf.refiner_workers,
               "refiner_skip_above": clf.refiner_skip_above if clf.refiners else None,
               "refiner_skip_min_samples": clf.meta.refiner_skip_min_samples if clf.refiners else None,
               "refiner_skip_temperature": clf.meta.refiner_skip_temperature if clf.refiners else None,
               "refiner_skip_counts": clf.refiner_skip_counts if clf.refiners else None}
    ok = (pred >= 0) & (y >= 0)
    y_ok, p_ok, s_ok = y[ok], pred[ok], snr[ok]
    high = s_ok >= HIGH_SNR_DB
    res: dict[str, Any] = {
        "name": name or f"{info['source']}:{path.stem}", "dataset": info, "run": run,
        "bursts_per_s": round((n - n_unread) / max(elapsed, 1e-9), 1), "rejected": rejects,
        # bursts the file cannot give (damaged chunks of /iq, DatasetReader.read_or_reject): left
        # out, every number below is over the others
        "unreadable": {"bursts": n_unread, "by_reason": unread,
                       **({"first": first_unread, "damaged_iq_ranges": [list(r) for r in damaged]}
                          if n_unread else {})},
        # bursts whose label the model does not classify: classified, never scored
        "not_scored": {"labels": foreign, "bursts": int((y < 0).sum())},
        "overall": accuracy_summary(y_ok, p_ok, s_ok, snr_est[ok]),
        "per_bucket": {str(b): accuracy_summary(y_ok[bucket[ok] == b], p_ok[bucket[ok] == b],
                                                s_ok[bucket[ok] == b], snr_est[ok][bucket[ok] == b])
                       for b in np.unique(bucket[ok])},
        "per_class": per_class_accuracy(y_ok, p_ok),
        "per_class_snr_ge_10db": per_class_accuracy(y_ok, p_ok, mask=high),
        "conditions_snr_ge_10db": condition_table(p_ok[high] == y_ok[high], params[ok][high], y_ok[high]),
        "open_set": threshold_table(probs[ok], y_ok),
        "ece": expected_calibration_error(probs[ok], y_ok) if ok.any() else float("nan"),
        "accepted_at_default_threshold": float((conf[ok] >= run["unknown_threshold"]).mean()) if ok.any() else 0.0,
    }
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if predictions:
            from rfclassify.model.paired import PREDICTIONS_FILE, save_predictions

            save_predictions(out / PREDICTIONS_FILE, info, y, pred, snr, bucket, probs, snr_est)
        write_json(out / EVAL_FILE, res)     # the numbers first: a figure that fails loses nothing
        if plots:
            res["figures"] = _figures(res, y_ok, p_ok, high, out)
            write_json(out / EVAL_FILE, res)
    return res


def counts_text(by_reason: dict[str, int]) -> str:
    """'non_finite 2, too_short 1'."""
    return ", ".join(f"{k} {v}" for k, v in sorted(by_reason.items()))


def _figures(res: dict[str, Any], y: np.ndarray, p: np.ndarray, high: np.ndarray, out: Path) -> list[str]:
    from rfclassify.model import plots

    curves = {f"L={b}": (np.array([r["snr_db"] for r in s["per_snr"]]), np.array([r["accuracy"] for r in s["per_snr"]]))
              for b, s in res["per_bucket"].items()}
    o = res["overall"]["per_snr"]
    curves["all"] = (np.array([r["snr_db"] for r in o]), np.array([r["accuracy"] for r in o]))
    plots.accuracy_vs_snr(curves, out / "accuracy_vs_snr.png", title=res["name"])
    plots.confusion_matrix(confusion(y, p), LABELS, out / "confusion_all.png", title="all SNR")
    plots.confusion_matrix(confusion(y[high], p[high]), LABELS, out / "confusion_snr_ge_10db.png",
                           title="SNR >= 10 dB")
    return ["accuracy_vs_snr.png", "confusion_all.png", "confusion_snr_ge_10db.png"]
