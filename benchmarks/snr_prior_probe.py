"""Whether class priors per SNR estimate would change the served answers for the better.

The served probabilities are calibrated over all bursts (a temperature, then the refiners).
If, within a band of the model's own SNR estimate, some classes were systematically over- or
under-called, a bias on the log-probabilities per band would move answers to the right class
and raise accuracy. This probe fits such biases (one per class and band of the estimate,
2 dB wide, by cross-entropy with an L2 penalty) on half of an evaluation's bursts and
applies them to the other half (the halves are the bursts of even and odd index; each half
is fitted once and scored on the other), and, with --apply-to, fits on all of the first file
and applies to other evaluations. It prints the paired difference against the served
answers (rfclassify.model.paired): the served answers are the argmax of the stored
probabilities.

Each file is a predictions.npz that carries probabilities (`rfclassify evaluate --predictions`
since the forty-third session), or its evaluation directory.

    PYTHONPATH=. python3 benchmarks/snr_prior_probe.py EVAL_DIR [--apply-to OTHER_DIR ...] [--l2 0.01]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfclassify._exceptions import ConfigError  # noqa: E402
from rfclassify.model.paired import format_difference, load_predictions, paired_difference  # noqa: E402

BAND_EDGES_DB = np.arange(-18.0, 30.0, 2.0)   # bands of the SNR estimate; the outer two are open
MIN_BAND_BURSTS = 200                         # a band with fewer fitting bursts keeps zero bias
LOG_FLOOR = 1e-8                              # stored probabilities are float16: zeros happen


def bands(snr_estimate_db: np.ndarray) -> np.ndarray:
    """Each burst's band of the SNR estimate, 0..len(BAND_EDGES_DB)."""
    return np.digitize(np.nan_to_num(np.asarray(snr_estimate_db, np.float64), nan=-100.0), BAND_EDGES_DB)


def _log_probs(d: dict[str, Any]) -> np.ndarray:
    return np.log(np.clip(d["probabilities"].astype(np.float64), LOG_FLOOR, 1.0))


def _band_bias(logp: np.ndarray, truth: np.ndarray, l2: float) -> np.ndarray:
    """The bias vector minimizing the mean cross-entropy of softmax(logp + b) plus l2 |b|^2."""
    from scipy.optimize import minimize

    k = logp.shape[1]
    target = np.bincount(truth, minlength=k) / truth.size

    def loss(b: np.ndarray) -> tuple[float, np.ndarray]:
        z = logp + b
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        s = e.sum(axis=1)
        nll = float(np.mean(np.log(s) - z[np.arange(truth.size), truth])) + l2 * float(b @ b)
        return nll, (e / s[:, None]).mean(axis=0) - target + 2.0 * l2 * b

    return minimize(loss, np.zeros(k), jac=True, method="L-BFGS-B").x


def fit_biases(d: dict[str, Any], l2: float) -> np.ndarray:
    """(bands, classes) biases fitted on the classified bursts of d with a model label."""
    ok = (d["pred"] >= 0) & (d["truth"] >= 0)
    logp, truth, band = _log_probs(d)[ok], d["truth"][ok].astype(np.int64), bands(d["snr_estimate_db"][ok])
    out = np.zeros((len(BAND_EDGES_DB) + 1, logp.shape[1]))
    for j in range(out.shape[0]):
        m = band == j
        if m.sum() >= MIN_BAND_BURSTS:
            out[j] = _band_bias(logp[m], truth[m], l2)
    return out


def served(d: dict[str, Any]) -> dict[str, Any]:
    """d with its answers taken from its stored probabilities (the served argmax)."""
    return {**d, "pred": np.where(d["pred"] >= 0, _log_probs(d).argmax(axis=1), d["pred"])}


def biased(d: dict[str, Any], biases: np.ndarray) -> dict[str, Any]:
    """d with every classified burst's answer re-decided under biases."""
    new = (_log_probs(d) + biases[bands(d["snr_estimate_db"])]).argmax(axis=1)
    return {**d, "pred": np.where(d["pred"] >= 0, new, d["pred"])}


def half(d: dict[str, Any], parity: int) -> dict[str, Any]:
    """The bursts of d whose index has this parity."""
    n = d["truth"].size
    m = np.arange(n) % 2 == parity
    return {k: v[m] if isinstance(v, np.ndarray) and v.ndim and v.shape[0] == n else v for k, v in d.items()}


def load_with_probabilities(path: Path) -> dict[str, Any]:
    d = load_predictions(path)
    if "probabilities" not in d or "snr_estimate_db" not in d:
        raise ConfigError(f"{path}: no probabilities in it (evaluate again with --predictions: files from "
                          "before the forty-third session keep the answers only)")
    return d


def cross_fit(d: dict[str, Any], l2: float) -> list[dict[str, Any]]:
    """Fit on each half, score on the other: two paired differences against the served answers."""
    out = []
    for parity in (0, 1):
        fit_on, score_on = half(d, parity), served(half(d, 1 - parity))
        out.append(paired_difference(score_on, biased(score_on, fit_biases(fit_on, l2))))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fit", type=Path, help="predictions.npz (or evaluation directory) to fit on")
    ap.add_argument("--apply-to", type=Path, nargs="*", default=[], help="evaluations to apply its fit to")
    ap.add_argument("--l2", type=float, nargs="*", default=[1e-3, 1e-2, 1e-1], help="penalties to try")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    try:
        d = load_with_probabilities(args.fit)
        others = [load_with_probabilities(p) for p in args.apply_to]
    except ConfigError as e:
        print(f"snr_prior_probe: {e}", file=sys.stderr)
        return 2
    record: dict[str, Any] = {"fit": str(args.fit), "runs": []}
    for l2 in args.l2:
        for parity, diff in enumerate(cross_fit(d, l2)):
            print(format_difference(diff, "served", f"biased (l2 {l2}, fitted on the half of parity {parity})"))
            record["runs"].append({"l2": l2, "fitted_on": f"{args.fit} parity {parity}", **diff})
        whole = fit_biases(d, l2)
        for path, other in zip(args.apply_to, others, strict=True):
            diff = paired_difference(served(other), biased(served(other), whole))
            print(format_difference(diff, "served", f"biased (l2 {l2}, fitted on {args.fit})"))
            record["runs"].append({"l2": l2, "fitted_on": str(args.fit), "applied_to": str(path), **diff})
    if args.json:
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
