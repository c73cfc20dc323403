"""Which bursts may skip the DC pass and the refiners: model.json's refiner_skip_above, chosen from evaluations.

Takes pairs of evaluations of the same held-out sets (`rfclassify evaluate FILE.h5
--predictions`): one of the network alone (`--no-refiner`) and one served with every burst
refined (`--refiner-skip-above 1`). A burst that skips keeps the network's answer, so what a
threshold does to a set follows from the pair: every burst whose network top probability is
above it takes the network's answer, every other the served one. Prints, per threshold and
length bucket, the share of bursts that skip and the answers that change (right to wrong,
wrong to right), and the threshold the rule picks: the lowest of the grid from which on no
threshold turns more answers wrong than right in any length bucket of at least
--min-samples (each bucket's changes summed over the sets). Bursts shorter than
--min-samples always go through the refiners (their losses are printed too, to choose
--min-samples by). Then the temperature that sharpens the skipped bursts' network
probabilities (model.json's refiner_skip_temperature): the one of least negative
log-likelihood on the skipped bursts of the sets, as the network's own temperature is
fitted. Use sets that are not test sets: new seeds of the training recipe (the fifty-sixth
session's: docs/model.md).

    PYTHONPATH=. python3 benchmarks/refiner_skip_choice.py NET_DIR SERVED_DIR [NET_DIR SERVED_DIR ...]
        [--min-samples 512] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfclassify.model.paired import load_predictions  # noqa: E402

GRID = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98)


def changes(network: dict, served: dict, threshold: float, keep: np.ndarray) -> dict[str, float]:
    """What skipping above `threshold` does to the bursts of mask `keep`: their share that
    skip, and the answers it turns right to wrong and wrong to right."""
    top = network["probabilities"].astype(np.float64)
    ok = (network["pred"] >= 0) & (served["pred"] >= 0) & keep
    skip = ok & (top.max(1) > threshold)
    truth, net, srv = network["truth"], top.argmax(1), served["probabilities"].argmax(1)
    moved = skip & (net != srv)
    return {"bursts": int(ok.sum()), "skip_share": float(skip.sum() / max(ok.sum(), 1)),
            "right_to_wrong": int((moved & (srv == truth)).sum()), "wrong_to_right": int((moved & (net == truth)).sum())}


def skipped_bursts(sets: list[tuple[str, dict, dict]], threshold: float, min_samples: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The network probabilities and true labels of the bursts that skip at `threshold`."""
    probs, truth = [], []
    for _, network, _ in sets:
        p = network["probabilities"].astype(np.float64)
        skip = (network["pred"] >= 0) & (network["bucket"] >= min_samples) & (p.max(1) > threshold)
        probs.append(p[skip])
        truth.append(network["truth"][skip])
    return np.concatenate(probs), np.concatenate(truth)


def sharpened_rows(probs: np.ndarray, temperature: float) -> np.ndarray:
    """Each row as classifier.sharpened serves it."""
    from rfclassify.engine.classifier import sharpened
    return np.stack([sharpened(p, temperature) for p in probs]) if len(probs) else probs


def skip_temperature(probs: np.ndarray, truth: np.ndarray) -> float:
    """The temperature of least negative log-likelihood of the true labels (1.0 for no bursts)."""
    if not len(truth):
        return 1.0
    from scipy.optimize import minimize_scalar

    def nll(t: float) -> float:
        return -float(np.mean(np.log(np.maximum(sharpened_rows(probs, t)[np.arange(len(truth)), truth], 1e-300))))
    return float(minimize_scalar(nll, bounds=(0.05, 2.0), method="bounded").x)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", nargs="+", type=Path, help="NET_DIR SERVED_DIR pairs (or their predictions.npz)")
    ap.add_argument("--min-samples", type=int, default=512)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if len(args.pairs) % 2:
        ap.error("give the evaluations in pairs: the network alone, then served")
    sets = []
    for net_path, srv_path in zip(args.pairs[::2], args.pairs[1::2], strict=True):
        network, served = load_predictions(net_path), load_predictions(srv_path)
        if "probabilities" not in network or "probabilities" not in served:
            ap.error(f"{net_path} or {srv_path} holds no probabilities (written before the forty-third session)")
        if not np.array_equal(network["truth"], served["truth"]) or network["dataset"] != served["dataset"]:
            ap.error(f"{net_path} and {srv_path} are not evaluations of the same set")
        sets.append((str(network["dataset"]), network, served))
    table: dict[str, dict[str, dict[str, float]]] = {}
    worst: dict[float, int] = {}    # the most answers any bucket of at least --min-samples loses on net
    for threshold in GRID:
        rows: dict[str, dict[str, float]] = {}
        lost: dict[int, int] = {}
        for name, network, served in sets:
            for bucket in np.unique(network["bucket"]):
                c = changes(network, served, threshold, network["bucket"] == bucket)
                rows[f"{name.split('|')[0]} {bucket}"] = c
                lost[int(bucket)] = lost.get(int(bucket), 0) + c["right_to_wrong"] - c["wrong_to_right"]
        table[f"{threshold:g}"] = rows
        worst[threshold] = max([v for b, v in lost.items() if b >= args.min_samples], default=0)
        print(f"above {threshold:g}: " + "; ".join(
            f"{key} {c['skip_share']:.0%} skip, {c['right_to_wrong']}/{c['wrong_to_right']}" for key, c in rows.items())
            + f"  (most lost in a bucket of >= {args.min_samples} samples: {worst[threshold]})")
    chosen = next((t for i, t in enumerate(GRID) if all(worst[u] <= 0 for u in GRID[i:])), 1.0)
    probs, truth = skipped_bursts(sets, chosen, args.min_samples)
    temperature = skip_temperature(probs, truth)
    sharp = sharpened_rows(probs, temperature)
    print(f"chosen: refiner_skip_above {chosen:g}, refiner_skip_min_samples {args.min_samples} "
          "(right to wrong / wrong to right per set and bucket above)")
    print(f"refiner_skip_temperature {temperature:.4f}: the {len(truth):,} skipped bursts, {np.mean(probs.argmax(1) == truth):.2%} "
          f"right, network confidence {probs.max(1).mean():.4f} on average, sharpened {sharp.max(1).mean():.4f}")
    if args.json:
        args.json.write_text(json.dumps({"min_samples": args.min_samples, "chosen": chosen,
                                         "temperature": round(temperature, 4), "skipped_bursts": int(len(truth)),
                                         "table": table, "sets": [name for name, _, _ in sets]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
