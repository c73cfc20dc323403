"""What the model's refiners cost per burst: Classifier.classify with and without them, one process.

Three Classifiers on the same model and backend, one with the model's refiners (the
constellation refiner, and the low-order one where the model has it) and their DC pass
(engine.dc_pass), one with the refiners without the DC pass, and one with refiner=False,
classify the same synthesized bursts (all 28 labels, the full channel, SNR uniform 10..30
dB, one length) in alternating rounds, so the machine's load hits them alike. Prints
bursts/s of each, the ratios, the share of bursts the refiner re-decided and the added time
per re-decided burst. A measurement, not a test.

--workers N puts the refiner's statistics in N processes (Classifier.load refiner_workers; -1:
as many as the daemon's default takes, all cores but two) and prints their resident memory;
--rate-rule RULE clocks its bursts by that rule (Classifier.load refiner_rate_rule);
--against-rule RULE times one more Classifier, its refiner's bursts clocked by RULE, in the
same rounds, and prints its time over the first's; --against-model DIR does the same for
another model's refiners (its own serving rule): what one refiner costs over another.
--skip-above P sets the refiners' Classifier's refiner_skip_above (default: the model's, its
skipped share of the bursts printed); --against-skip-above P times one more with P (1: every
burst through the DC pass and the refiners) and prints its time over the first's.

    PYTHONPATH=. python3 benchmarks/refiner_cost.py [--model-dir models] [--length 1024] [--bursts 280] [--rounds 5]
        [--backend onnxruntime|torch] [--workers N] [--rate-rule alphabet_fit] [--against-rule coherence]
        [--against-model DIR] [--skip-above P] [--against-skip-above 1]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfclassify.dsp.channel import ChannelConfig  # noqa: E402
from rfclassify.dsp.synth import synthesize  # noqa: E402
from rfclassify.engine.classifier import Classifier  # noqa: E402
from rfclassify.labels import LABELS  # noqa: E402


def cost_bursts(n: int, length: int) -> list[np.ndarray]:
    """n synthesized bursts of `length` samples: the 28 labels in turn, the full channel, SNR
    uniform 10..30 dB, always the same ones (seed 5)."""
    rng = np.random.default_rng(5)
    labels = [LABELS[i % len(LABELS)] for i in range(n)]
    return list(synthesize(labels, length, rng, rng.uniform(10, 30, len(labels)), ChannelConfig()).iq)


def workers_resident_mb(clf: Classifier) -> list[float]:
    """The resident memory (MB) of each of clf's refiner worker processes, from /proc (Linux;
    empty without workers or /proc)."""
    pool = clf._refiner_pool.executor if clf._refiner_pool is not None else None
    out = []
    for pid in getattr(pool, "_processes", None) or {}:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        kb = [line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")]
        if kb:
            out.append(int(kb[0]) / 1024)
    return out


def add_cost_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of a cost measurement over cost_bursts: the model, the bursts, the rounds, the backend."""
    ap.add_argument("--model-dir", default="models")
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--bursts", type=int, default=280)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--backend", default="onnxruntime")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cost_arguments(ap)
    ap.add_argument("--workers", type=int, default=0,
                    help="refiner_workers of the Classifier with the refiner (-1: the daemon's default)")
    ap.add_argument("--rate-rule", default=None, help="refiner_rate_rule of the Classifier with the refiner")
    ap.add_argument("--against-rule", default=None, help="also time the refiner with its bursts clocked by this rule")
    ap.add_argument("--against-model", default=None, help="also time another model's refiners")
    ap.add_argument("--skip-above", type=float, default=None,
                    help="refiner_skip_above of the Classifier with the refiner (default: the model's)")
    ap.add_argument("--against-skip-above", type=float, default=None,
                    help="also time the refiner with this refiner_skip_above (1: every burst refined)")
    args = ap.parse_args(argv)
    bursts = cost_bursts(args.bursts, args.length)
    with Classifier.load(args.model_dir, backend=args.backend, refiner_workers=args.workers,
                         refiner_rate_rule=args.rate_rule, refiner_skip_above=args.skip_above) as on, \
            Classifier.load(args.model_dir, backend=args.backend, refiner_workers=args.workers,
                            refiner_rate_rule=args.rate_rule, dc_pass=False,
                            refiner_skip_above=args.skip_above) as no_dc, \
            Classifier.load(args.model_dir, backend=args.backend, refiner=False) as off, \
            contextlib.ExitStack() as stack:
        other = None if args.against_rule is None else stack.enter_context(
            Classifier.load(args.model_dir, backend=args.backend, refiner_workers=args.workers,
                            refiner_rate_rule=args.against_rule))
        model = None if args.against_model is None else stack.enter_context(
            Classifier.load(args.against_model, backend=args.backend, refiner_workers=args.workers))
        skip = None if args.against_skip_above is None else stack.enter_context(
            Classifier.load(args.model_dir, backend=args.backend, refiner_workers=args.workers,
                            refiner_rate_rule=args.rate_rule, refiner_skip_above=args.against_skip_above))
        if not on.refiners:
            print(f"{args.model_dir} has no refiner")
            return 1
        resident, workers = workers_resident_mb(on), on.refiner_workers
        network = np.stack([r.probabilities for r in off.classify(bursts)])
        top = network.argmax(1)
        skipped = (network.max(1) > on.refiner_skip_above) & (args.length >= on.meta.refiner_skip_min_samples)
        shares = {("low-order" if ref is on.low_order_refiner else "constellation"):
                  np.mean(np.isin(top, ref.index) & ~skipped) for ref in on.refiners}
        refined = sum(shares.values())
        clfs = ([("with", on), ("no DC pass", no_dc), ("without", off)] + ([("other rule", other)] if other else [])
                + ([("other model", model)] if model else []) + ([("other skip", skip)] if skip else []))
        for _, clf in clfs:  # warm them
            clf.classify(bursts[:8])
        times: dict[str, list[float]] = {name: [] for name, _ in clfs}
        for _ in range(args.rounds):
            for name, clf in clfs:
                t0 = time.perf_counter()
                clf.classify(bursts)
                times[name].append(time.perf_counter() - t0)
    t_on, t_no_dc, t_off = (float(np.median(times[k])) for k in ("with", "no DC pass", "without"))
    where = f"{workers} processes" if workers else "the calling thread"
    print(f"{args.bursts} bursts of {args.length} samples, {args.backend}, median of {args.rounds} rounds, "
          f"refiner statistics in {where}")
    print(f"network alone: {args.bursts / t_off:8.1f} bursts/s")
    print(f"with refiner : {args.bursts / t_on:8.1f} bursts/s  ({t_on / t_off:.2f}x the time; "
          f"{t_on / t_no_dc:.2f}x the refiner's without its DC pass, {args.bursts / t_no_dc:.1f} bursts/s)")
    print(f"re-decided   : {100 * refined:.1f} % of bursts ("
          + ", ".join(f"{name} {100 * v:.1f} %" for name, v in shares.items()) + "), "
          f"{1e3 * (t_on - t_off) / max(refined * args.bursts, 1):.2f} ms added per re-decided burst; "
          f"{100 * np.mean(skipped):.1f} % skip them, the network's top probability above "
          f"{on.refiner_skip_above:g}")
    if resident:
        print(f"workers      : {len(resident)} processes resident {sum(resident):.0f} MB in all, "
              f"{min(resident):.0f}-{max(resident):.0f} MB each (once started and warmed)")
    if args.against_rule:
        t_other = float(np.median(times["other rule"]))
        print(f"clocked by {args.against_rule}: {args.bursts / t_other:8.1f} bursts/s  ({t_other / t_on:.2f}x the time "
              f"of the refiner above, {t_other / t_off:.2f}x the network's)")
    if args.against_model:
        t_model = float(np.median(times["other model"]))
        print(f"{args.against_model}: {args.bursts / t_model:8.1f} bursts/s  ({t_on / t_model:.2f}x its time for "
              f"{args.model_dir}'s refiner above; it {t_model / t_off:.2f}x the network's)")
    if args.against_skip_above is not None:
        t_skip = float(np.median(times["other skip"]))
        print(f"skip above {args.against_skip_above:g}: {args.bursts / t_skip:8.1f} bursts/s  ({t_skip / t_on:.2f}x the "
              f"time of the refiner above, {t_skip / t_off:.2f}x the network's)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
