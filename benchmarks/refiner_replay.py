"""Score constellation-refiner variants served, burst for burst, without serving them again.

A refiner variant that changes only the perceptron (another fit on the same statistics: more
or fewer examples, label smoothing, a wider layer) gives its served answers from what the
shipped refiner already receives when a dataset is served: the network's probabilities after
the DC pass, its SNR estimates and the statistics of the bursts the refiner takes. `record`
serves a dataset once (rfclassify.model.evaluate.evaluate_file, the model's refiner and DC
pass) and keeps those; `score` replays them through other models' refiners
(Refiner.refine_measured, the same code serving runs) and compares each with the recorded
run burst for burst (rfclassify.model.paired). A variant whose statistics differ (another
sequence network, rate rule, blind view or equalizer) is refused: it has to be served. The
bursts a low-order refiner takes (fit-refiner --group low-order) keep their served answers, so
a variant must carry the recorded model's low-order refiner file (or none where it had none),
and so do the bursts the model's skip left to the network (refiner_skip_above; recorded with
length 0, as the refiners got them without their samples).

    PYTHONPATH=. python3 benchmarks/refiner_replay.py record FILE.h5 --model-dir models --out CACHE.npz \
        [--refiner-workers N]
    PYTHONPATH=. python3 benchmarks/refiner_replay.py score CACHE.npz MODEL_DIR [MODEL_DIR ...] [--json OUT.json]

`record` checks that replaying the recorded refiner gives the served predictions exactly.
A measurement tool, not a test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import rfclassify.engine.refiner as refiner_module  # noqa: E402
from rfclassify.engine.refiner import Refiner  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402
from rfclassify.model.paired import format_difference, load_predictions, paired_difference  # noqa: E402


def statistics_key(ref: Refiner) -> str:
    """What a refiner's statistics depend on: its classes, rate rule, equalizer and its sequence
    networks (their weights' sha256, the blind view and its reader). Which bursts it measures
    also depends on its min_samples, kept beside the key in a cache."""
    digest = hashlib.sha256()
    nets = [] if ref.sequence is None else [ref.sequence, ref.sequence.blind_reader]
    for net in nets:
        if net is not None:
            for name, a in sorted(net.arrays().items()):
                digest.update(name.encode() + np.ascontiguousarray(a).tobytes())
    what = {"classes": list(ref.labels), "rate_rule": ref.rate_rule,
            "equalizer": list(ref.equalizer), "sequence": digest.hexdigest() if nets else None,
            "blind_view": bool(ref.sequence is not None and ref.sequence.blind_view),
            "with_features": bool(ref.sequence is not None and ref.sequence.with_features),
            "power_lines": bool(ref.sequence is not None and ref.sequence.power_lines)}
    return json.dumps(what, sort_keys=True)


def _fingerprint(x: np.ndarray) -> bytes:
    return hashlib.sha1(np.ascontiguousarray(x).tobytes()).digest()


def record(dataset: Path, model_dir: Path, out: Path, workers: int) -> int:
    """Serve `dataset` once through evaluate_file, keeping for every burst what the refiners
    received (matched to its place in the dataset by its samples: the Classifier groups a
    chunk's bursts by bucket), and check that replaying the refiner gives the served answers."""
    from rfclassify.engine.classifier import Classifier, as_burst
    from rfclassify.model.evaluate import evaluate_file
    from rfclassify.model.meta import ModelMeta

    place: dict[bytes, int] = {}          # a burst's samples -> its index in the dataset
    pending: list[int] = []               # the indices of the bursts of the _results call under way
    seen: dict[int, tuple[np.ndarray, float, bool, np.ndarray | None, int]] = {}
    slot: list[list[np.ndarray | None]] = []
    refiner: list[Refiner] = []
    original = (Classifier.classify, Classifier._results, refiner_module.refine_routed,
                refiner_module.statistics_many)

    def classify(self: Classifier, bursts: Any, sample_rate: float | None = None) -> Any:
        for b in bursts:
            place.setdefault(_fingerprint(as_burst(b)), len(place))
        return original[0](self, bursts, sample_rate)

    def results(self: Classifier, outputs: Any, n_windows: Any, snr_offsets: Any, n_samples: Any,
                bucket_samples: int, sample_rates: Any, bursts: Any) -> Any:
        pending[:] = [place[_fingerprint(b)] for b in bursts]
        return original[1](self, outputs, n_windows, snr_offsets, n_samples, bucket_samples, sample_rates, bursts)

    def routed(refiners: Any, probs: list[np.ndarray], snr_db: list[float], bursts: list[Any], pool: Any = None):
        ref = _constellation_refiner(refiners)
        refiner[:] = [ref]
        slot.clear()
        answer = original[2](refiners, probs, snr_db, bursts, pool)
        network = [np.asarray(p, np.float64) for p in probs]
        takes = [[r.wants(p, x) for p, x in zip(network, bursts, strict=True)] for r in refiners]
        # refine_routed measures each refiner's bursts in one statistics_many call, in the
        # refiners' order, and skips a refiner that takes none of them
        calls = [r for r, t in zip(refiners, takes, strict=True) if any(t)]
        wants = takes[list(refiners).index(ref)]
        stats = iter(slot[calls.index(ref)] if ref in calls else [])
        for i, p, snr, w, x in zip(pending, probs, snr_db, wants, bursts, strict=True):
            seen[i] = (np.asarray(p, np.float64), float(snr), w, next(stats) if w else None,
                       0 if x is None else int(np.shape(x)[0]))
        return answer

    def many(*args: Any, **kwargs: Any) -> list[np.ndarray | None]:
        stats = original[3](*args, **kwargs)
        slot.append(stats)
        return stats

    Classifier.classify, Classifier._results = classify, results
    refiner_module.refine_routed, refiner_module.statistics_many = routed, many
    try:
        with tempfile.TemporaryDirectory() as tmp:
            evaluate_file(dataset, model_dir, backend="onnxruntime", out_dir=tmp, plots=False, predictions=True,
                          refiner_workers=workers)
            served = load_predictions(Path(tmp) / "predictions.npz")
    finally:
        Classifier.classify, Classifier._results = original[0], original[1]
        refiner_module.refine_routed, refiner_module.statistics_many = original[2], original[3]
    n = len(served["pred"])
    if sorted(seen) != list(range(n)):
        raise SystemExit(f"refiner_replay: {n - len(seen)} bursts went past the refiner unrecorded (rejected?)")
    rows = [seen[i] for i in range(n)]
    width = next((r[3].size for r in rows if r[3] is not None), 0)
    stats = np.full((n, width), np.nan, np.float32)
    for i, r in enumerate(rows):
        if r[3] is not None:
            stats[i] = r[3]
    cache = {"probs": np.stack([r[0] for r in rows]), "snr_estimate": np.array([r[1] for r in rows]),
             "wants": np.array([r[2] for r in rows]), "length": np.array([r[4] for r in rows]), "stats": stats,
             "served_pred": served["pred"],
             "truth": served["truth"], "snr_db": served["snr_db"], "bucket": served["bucket"],
             "dataset": np.array(served["dataset"]), "key": np.array(statistics_key(refiner[0])),
             "min_samples": np.int64(refiner[0].min_samples), "low_order_sha256": np.array(_low_order_file(ModelMeta.load(model_dir)))}
    mismatch = int(np.sum(replay(cache, refiner[0]) != served["pred"]))
    np.savez(out, **cache)
    print(f"wrote {out}: {n} bursts, {int(cache['wants'].sum())} taken by the refiner; its replay differs from "
          f"the served predictions on {mismatch}")
    return 0 if mismatch == 0 else 1


def _constellation_refiner(refiners: Any) -> Refiner:
    """The refiner over the high-order classes among a model's refiners (a low-order one beside
    it keeps its served answers in a replay)."""
    mine = [r for r in refiners if set(r.labels) & set(HIGH_ORDER_LABELS)]
    if len(mine) != 1:
        raise SystemExit("refiner_replay: the model has no constellation refiner")
    return mine[0]


def _low_order_file(meta: Any) -> str:
    """The sha256 of a model's low-order refiner file (its ModelMeta's), "" where it has none:
    the bursts that refiner takes keep their recorded answers in a replay, so a variant must
    serve the same."""
    return str((meta.low_order_refiner or {}).get("sha256", ""))


def replay(cache: dict[str, Any], ref: Refiner) -> np.ndarray:
    """The predictions served with constellation refiner `ref` on the recorded bursts: those
    the recorded refiner took and `ref` takes too (its min_samples may be larger, not
    smaller); every other burst keeps its served answer (the network's, or a low-order
    refiner's)."""
    probs = np.asarray(cache["probs"], np.float64)
    pred = np.asarray(cache["served_pred"]).astype(np.int64)
    pred[cache["wants"]] = probs[cache["wants"]].argmax(axis=1)
    rows = np.flatnonzero(cache["wants"] & (cache["length"] >= ref.min_samples))
    stats = [None if np.isnan(s).any() else s for s in np.asarray(cache["stats"])[rows]]
    refined = ref.refine_measured(list(probs[rows]), list(cache["snr_estimate"][rows]), stats)
    pred[rows] = [int(np.argmax(p)) for p in refined]
    return pred


def score(cache_path: Path, model_dirs: list[Path], json_out: Path | None) -> int:
    from rfclassify.engine.classifier import Classifier

    with np.load(cache_path) as z:
        cache = {k: z[k] for k in z.files}
    base = {"truth": cache["truth"], "pred": cache["served_pred"], "snr_db": cache["snr_db"],
            "bucket": cache["bucket"], "dataset": str(cache["dataset"])}
    report = {}
    for model_dir in model_dirs:
        with Classifier.load(model_dir, backend="onnxruntime", warmup=False) as clf:
            ref, low_order = clf.refiner, _low_order_file(clf.meta)
        if low_order != str(cache.get("low_order_sha256", "")):
            print(f"refiner_replay: {model_dir} serves another low-order refiner than the recorded model (or none "
                  "where it had one); serve it", file=sys.stderr)
            return 2
        if ref is None or statistics_key(ref) != str(cache["key"]):
            print(f"refiner_replay: {model_dir}'s refiner measures other statistics than the recorded one; "
                  "serve it (rfclassify evaluate --predictions)", file=sys.stderr)
            return 2
        if ref.min_samples < int(cache["min_samples"]):
            print(f"refiner_replay: {model_dir}'s refiner takes bursts from {ref.min_samples} samples, the recorded "
                  f"one from {int(cache['min_samples'])}: their statistics were not measured; serve it",
                  file=sys.stderr)
            return 2
        diff = paired_difference(base, {**base, "pred": replay(cache, ref)})
        print(format_difference(diff, "recorded", str(model_dir)))
        report[str(model_dir)] = diff
    if json_out:
        json_out.write_text(json.dumps({"cache": str(cache_path), "dataset": base["dataset"], **report}, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="serve a dataset once and keep what the refiner receives")
    rec.add_argument("dataset", type=Path)
    rec.add_argument("--model-dir", type=Path, default=Path("models"))
    rec.add_argument("--out", type=Path, required=True)
    rec.add_argument("--refiner-workers", type=int, default=0)
    sc = sub.add_parser("score", help="replay recorded bursts through other models' refiners")
    sc.add_argument("cache", type=Path)
    sc.add_argument("model_dirs", type=Path, nargs="+")
    sc.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.command == "record":
        return record(args.dataset, args.model_dir, args.out, args.refiner_workers)
    return score(args.cache, args.model_dirs, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
