"""Which bursts need the refiner's EM scores: refits on saved examples with the scores kept
only for the bursts a gate passes.

The EM scores (`fit-refiner --em-channel`, rfclassify.dsp.em_channel) gained only in the
dense QAMs (thirty-eighth session), yet they are fitted for every routed burst and cost about
as much as the rest of the classification. A gate that picks, from what the network already
said (its probabilities over the refiner's classes and its SNR estimate), the bursts whose
EM scores are worth fitting would cut that cost in proportion. This refits the refiner on
examples saved with `--em-channel` (`fit-refiner --save-examples`), once per gate, with the
EM columns zeroed outside it (the value a burst without EM scores gets when served), and
prints each fit's held-out accuracy beside the fits with all and with no EM scores, paired
burst for burst on the same held-out rows (+- one standard error), and the share of the
routed bursts the gate passes (the share of the EM cost kept).

    PYTHONPATH=. python3 benchmarks/em_gate_screen.py EXAMPLES.npz [--gates all,none,dense_top2_snr5,...] \
        [--seeds S] [--members 10] [--no-trees] [--workers N] [--json OUT.json]

With --seeds S each gate is refitted S times, seed k holding out its own share of the bursts
(the held-out rows of all seeds are pooled; a row held out by two seeds counts twice), so
the paired differences rest on more bursts than one held-out share holds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rfclassify.dsp import em_channel  # noqa: E402
from rfclassify.labels import LABELS  # noqa: E402
from rfclassify.model.refiner_fit import RefinerFitConfig, _fit_and_score, gate_em_columns, holdout_split  # noqa: E402

SEED, PER_CLASS = 20261208, 6000       # the thirty-eighth session's examples
GATES = "all,none,snr5,dense_top1,dense_top2_snr5,dense_top3_snr5,dense5_top1_snr5"


def fit_gate(examples: str, gate: str, seed: int, members: int, trees: bool) -> tuple[str, int, float, dict]:
    """(gate, seed, share of bursts with EM scores, {held-out row: right}) of one refit with
    seed `seed` (its held-out share and initial weights); gate `none` zeroes every burst's."""
    with np.load(examples) as z:
        ex = {k: z[k] for k in ("features", "truth", "network_top", "snr_db", "length")}
        ex["features"] = ex["features"].astype(np.float32)
        key = json.loads(str(z["key"]))
    classes = tuple(key["classes"])
    index = np.array([LABELS.index(c) for c in classes])
    cfg = RefinerFitConfig(per_class=PER_CLASS, seed=seed, members=members, trees=trees, em_channel=True,
                           rate_rule=key["rate_rule"])
    if gate == "none":
        features = ex["features"].copy()
        features[:, -em_channel.n_scores(classes):] = 0.0
    else:
        features = gate_em_columns(ex["features"], LABELS, classes, gate)
    kept = np.any(features[:, -em_channel.n_scores(classes):] != 0, axis=1)
    refiner, _ = _fit_and_score(ex, features, cfg, classes, index, None, cfg.rate_rule, (), True)
    hold, _, _ = holdout_split(len(ex["truth"]), cfg)
    pred = refiner.logits(features[hold]).argmax(1)
    pred = np.where(ex["length"][hold] >= refiner.min_samples, pred, ex["network_top"][hold])
    return gate, seed, float(kept.mean()), dict(zip(hold.tolist(), (pred == ex["truth"][hold]).tolist()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("examples")
    ap.add_argument("--gates", default=GATES)
    ap.add_argument("--seeds", type=int, default=1, help="refits per gate, each with its own held-out share")
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--no-trees", action="store_true")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    with np.load(args.examples) as z:
        key = json.loads(str(z["key"]))
        snr_db = z["snr_db"]
    if not key.get("em_channel"):
        print(f"{args.examples}: examples without the EM scores (fit-refiner --em-channel)", file=sys.stderr)
        return 2
    gates = args.gates.split(",")
    bad = [g for g in gates if g != "none" and not em_channel.gate_is_valid(g)]
    if bad:
        print(f"unknown gates: {', '.join(bad)}", file=sys.stderr)
        return 2
    jobs = [(args.examples, g, SEED + 1000 * k, args.members, not args.no_trees) for k in range(args.seeds) for g in gates]
    t0 = time.time()
    with ProcessPoolExecutor(args.workers) as pool:
        done = list(pool.map(fit_gate, *zip(*jobs)))
    right: dict[str, dict[tuple[int, int], bool]] = {g: {} for g in gates}
    passed = {}
    for gate, seed, share, rows in done:
        passed[gate] = share
        right[gate].update({(seed, r): v for r, v in rows.items()})
    keys = sorted(right[gates[0]])
    high = np.array([snr_db[r] >= 10.0 for _, r in keys])
    vec = {g: np.array([right[g][k] for k in keys], float) for g in gates}
    out = {"examples": Path(args.examples).name, "seeds": args.seeds, "members": args.members,
           "trees": not args.no_trees, "held_out_rows": len(keys), "wall_s": round(time.time() - t0), "gates": {}}
    for g in gates:
        out["gates"][g] = {"passed": round(passed[g], 4), "holdout": round(100 * vec[g].mean(), 2),
                           "holdout_snr_ge_10db": round(100 * vec[g][high].mean(), 2)}
        print(f"{g:18s} passes {passed[g]:6.1%} of routed bursts; held out {vec[g].mean():6.2%}, "
              f">= 10 dB {vec[g][high].mean():6.2%}")
    for base in ("all", "none"):
        for g in gates:
            if base not in vec or g == base:
                continue
            rows = {}
            for name, m in (("over_snr", np.ones(len(keys), bool)), ("snr_ge_10db", high)):
                d = vec[g][m] - vec[base][m]
                rows[name] = [round(100 * d.mean(), 2), round(100 * d.std(ddof=1) / np.sqrt(d.size), 2)]
            out["gates"][g][f"against_{base}"] = rows
            print(f"{g:18s} against {base:4s}: {rows['over_snr'][0]:+.2f} +- {rows['over_snr'][1]:.2f} over SNR, "
                  f"{rows['snr_ge_10db'][0]:+.2f} +- {rows['snr_ge_10db'][1]:.2f} at >= 10 dB")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
