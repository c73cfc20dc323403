"""Does the class-blind equalizer let the sequence network read multipath bursts? A measurement, not a test.

For the high-order bursts of one length and an SNR range in an HDF5 set (`rfclassify dataset
generate`; its recorded channel parameters give each burst's fading and delay spread), clocked
as the model's refiner clocks them (`blind_symbols` by its rate rule, `clocked_symbols` by its
sequence network's carrier pass), the model's sequence network names a class among its labels
from three views of the same symbols:

  raw      the clocked symbols, as the refiner has always given them
  blind    the same after rfclassify.dsp.blind_equalizer.kurtosis_equalize
  sum      the raw log-probabilities plus half the blind ones

and, with --cma, from the symbols after a least-squares constant-modulus filter (the classic
blind equalizer, 9 taps, 15 passes). Accuracy per view, over all and by channel: unfaded, and
faded by the rms delay spread in symbols. The twenty-fifth session ran it on big1024 (seed 778)
at 10..30 dB, 80 bursts a class (docs/model.md, "Twenty-fifth session"); the refiner then
learned to weigh the first two views (`fit-refiner --blind-view`).

    PYTHONPATH=. python3 benchmarks/blind_view_probe.py FILE.h5 [--model-dir models] [--length 1024]
        [--snr-min 10] [--snr-max 30] [--per-class 80] [--seed 1] [--cma] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfclassify.dsp.blind_equalizer import kurtosis_equalize  # noqa: E402
from rfclassify.dsp.channel import FADING_NONE  # noqa: E402
from rfclassify.dsp.power_lines import constant_modulus  # noqa: E402
from rfclassify.dsp.symbol_clock import blind_symbols  # noqa: E402
from rfclassify.dsp.symbol_sequence import clocked_symbols, finite_sequence  # noqa: E402

SPREAD_BINS = ((0.0, 0.1), (0.1, 0.2), (0.2, 0.5), (0.5, float("inf")))   # rms delay spread, symbols


def condition(fading: int, spread_symbols: float) -> str:
    """'unfaded', or 'faded a-b' by the rms delay spread in symbols (SPREAD_BINS)."""
    if fading == FADING_NONE:
        return "unfaded"
    for lo, hi in SPREAD_BINS:
        if lo <= spread_symbols < hi:
            return f"faded {lo:g}-{hi:g}"
    return "faded ?"


def probe(path: str, model_dir: str, length: int, snr: tuple[float, float], per_class: int, seed: int,
          cma: bool) -> dict:
    import h5py

    from rfclassify.engine.classifier import Classifier
    from rfclassify.labels import LABELS

    with Classifier.load(model_dir, backend="onnxruntime") as clf:
        refiner = clf.refiner
    if refiner is None or refiner.sequence is None:
        raise SystemExit(f"{model_dir}: its refiner has no sequence network to probe")
    net, rule = refiner.sequence, refiner.rate_rule
    views = ("raw", "blind", "sum") + (("cma",) if cma else ())
    rng = np.random.default_rng(seed)
    rows: list[tuple[str, dict[str, bool]]] = []
    with h5py.File(path, "r") as f:
        truth, snr_db, lengths = f["label_index"][:], f["snr_db"][:], f["length"][:]
        offsets, params = f["offset"][:], f["params"][:]
        spread = params["delay_spread_samples"] / params["samples_per_symbol"]
        for k, label in enumerate(net.labels):
            pick = np.flatnonzero((truth == LABELS.index(label)) & (lengths == length)
                                  & (snr_db >= snr[0]) & (snr_db <= snr[1]))
            for i in rng.permutation(pick)[:per_class]:
                y = clocked_symbols(blind_symbols(f["iq"][offsets[i]:offsets[i] + lengths[i]], rule),
                                    carrier=net.carrier)
                raw = None if y is None else finite_sequence(y)
                if raw is None:
                    continue
                blind = finite_sequence(kurtosis_equalize(y)[0])
                lp_raw = net.log_probs(raw)
                lp_blind = net.log_probs(blind) if blind is not None else net.uniform()
                lps = {"raw": lp_raw, "blind": lp_blind, "sum": lp_raw + 0.5 * lp_blind}
                if cma:
                    seq = finite_sequence(constant_modulus(y))
                    lps["cma"] = net.log_probs(seq) if seq is not None else net.uniform()
                rows.append((condition(int(params["fading_type"][i]), float(spread[i])),
                             {v: int(np.argmax(lps[v])) == k for v in views}))
    groups = ["all", "unfaded"] + [f"faded {lo:g}-{hi:g}" for lo, hi in SPREAD_BINS]
    table = {}
    for g in groups:
        right = [r for c, r in rows if g == "all" or c == g]
        if right:
            table[g] = {"bursts": len(right), **{v: round(100 * float(np.mean([r[v] for r in right])), 1)
                                                 for v in views},
                        "either_raw_or_blind": round(100 * float(np.mean([r["raw"] or r["blind"] for r in right])), 1)}
    return {"file": Path(path).name, "model_dir": str(model_dir), "rate_rule": rule, "length": length,
            "snr_db": list(snr), "per_class": per_class, "seed": seed, "accuracy_percent": table}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--model-dir", default="models")
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--snr-min", type=float, default=10.0)
    ap.add_argument("--snr-max", type=float, default=30.0)
    ap.add_argument("--per-class", type=int, default=80)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cma", action="store_true", help="also the least-squares constant-modulus filter's view")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    t0 = time.time()
    out = probe(args.file, args.model_dir, args.length, (args.snr_min, args.snr_max), args.per_class, args.seed,
                args.cma)
    out["seconds"] = round(time.time() - t0, 1)
    for group, row in out["accuracy_percent"].items():
        print(f"{group:14s} " + "  ".join(f"{k} {v}" for k, v in row.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
