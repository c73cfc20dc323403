"""Does the blind clock find the symbol rate at a low SNR? A diagnostic, not a test.

Two tables, both on synthesized 1024-sample bursts of the full channel (twenty-third
session, docs/model.md):

1. *rate misses*: for each class, SNR and band of samples per symbol (2-4, 4-8, 8-16), the
   first `--per-cell` bursts drawn without fading, clocked by each rule
   (symbol_clock.blind_clock after remove_dc_line, as the refiner clocks them); a miss is a
   rate more than 2 % off the burst's own. Every rule sees the same bursts.
2. *the band the line search is centred on*: symbol_clock.coarse_sps, plain and with
   low_snr=True, over the true samples per symbol of bursts of 8-16 samples per symbol
   (all channels): its median and the share within COARSE_TOLERANCE, the line search's reach.

    PYTHONPATH=. python3 benchmarks/low_snr_clock_probe.py [--per-cell 40] [--seed 3]
        [--labels 8PSK,64QAM] [--snrs 0,4,7,12,20] [--rules alphabet_fit_3,alphabet_fit_3_low_snr]
        [--band-bursts 400] [--json OUT.json] [--quick]

The session's numbers (this 2-core CPU, the defaults): misses 494 (alphabet_fit_3) against
247 (alphabet_fit_3_low_snr) of 1,200; at 4 dB and 8-16 samples per symbol the plain band
puts the rate at a median 0.36 of the truth, never within 1.35x, the corrected one at 1.00,
99 % within.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfclassify.dsp import symbol_clock as sc  # noqa: E402
from rfclassify.dsp.channel import ChannelConfig  # noqa: E402
from rfclassify.dsp.synth import synthesize  # noqa: E402

SPS_BANDS = ((2.0, 4.0), (4.0, 8.0), (8.0, 16.0))
MISS = 0.02          # a rate this far off the burst's own is a miss
DRAW = 20            # bursts synthesized at a time while a cell fills
MAX_TRIED = 2000     # a cell gives up after this many draws


def rate_misses(labels: list[str], snrs: list[float], rules: list[str], per_cell: int, seed: int
                ) -> dict[str, dict[str, list[int]]]:
    """{rule: {"LABEL SNR dB": [misses per SPS_BANDS band]}} and, under "bursts", the bursts per cell."""
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, list[int]]] = {rule: {} for rule in rules}
    out["bursts"] = {}
    for label in labels:
        for snr in snrs:
            cell = f"{label} {snr:g} dB"
            for rule in rules:
                out[rule][cell] = []
            out["bursts"][cell] = []
            for lo, hi in SPS_BANDS:
                missed = {rule: 0 for rule in rules}
                n = tried = 0
                while n < per_cell and tried < MAX_TRIED:
                    batch = synthesize([label] * DRAW, 1024, rng, np.full(DRAW, float(snr)), ChannelConfig())
                    for x, p in zip(batch.iq, batch.params, strict=True):
                        tried += 1
                        if n >= per_cell or not lo <= p["samples_per_symbol"] < hi or p["fading_type"] > 0:
                            continue
                        n += 1
                        for rule in rules:
                            found = sc.blind_symbols(x, rule)
                            missed[rule] += found is None or abs(found.sps / p["samples_per_symbol"] - 1) > MISS
                for rule in rules:
                    out[rule][cell].append(int(missed[rule]))
                out["bursts"][cell].append(n)
    return out


def band_estimates(labels: list[str], snrs: list[float], bursts: int, seed: int) -> dict[str, dict[str, float]]:
    """{"LABEL SNR dB": {plain_median, plain_within, low_snr_median, low_snr_within, bursts}} at 8-16 sps."""
    rng = np.random.default_rng(seed)
    out = {}
    for label in labels:
        for snr in snrs:
            batch = synthesize([label] * bursts, 1024, rng, np.full(bursts, float(snr)), ChannelConfig())
            sps = batch.params["samples_per_symbol"]
            slow = np.flatnonzero(sps >= 8)
            row: dict[str, float] = {"bursts": int(slow.size)}
            for name, low in (("plain", False), ("low_snr", True)):
                r = np.array([sc.coarse_sps(sc.remove_dc_line(np.asarray(batch.iq[i], np.complex128)), low)
                              for i in slow]) / sps[slow]
                row[f"{name}_median"] = round(float(np.median(r)), 3) if r.size else float("nan")
                row[f"{name}_within"] = round(float(np.mean((r < sc.COARSE_TOLERANCE) & (r > 1 / sc.COARSE_TOLERANCE))),
                                              3) if r.size else float("nan")
            out[f"{label} {snr:g} dB"] = row
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-cell", type=int, default=40)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--labels", default="8PSK,64QAM")
    ap.add_argument("--snrs", default="0,4,7,12,20")
    ap.add_argument("--rules", default=f"{sc.ALPHABET_FIT_3},{sc.ALPHABET_FIT_3_LOW_SNR}")
    ap.add_argument("--band-bursts", type=int, default=400)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 3 bursts a cell, one class, two SNRs")
    args = ap.parse_args(argv)
    labels, snrs = args.labels.split(","), [float(s) for s in args.snrs.split(",")]
    rules = args.rules.split(",")
    unknown = [r for r in rules if r not in sc.RATE_RULES]
    if unknown:
        ap.error(f"unknown rate rules {unknown} (one of {', '.join(sc.RATE_RULES)})")
    per_cell, band_bursts = args.per_cell, args.band_bursts
    if args.quick:
        labels, snrs, per_cell, band_bursts = labels[:1], [4.0, 20.0], 3, 40
    misses = rate_misses(labels, snrs, rules, per_cell, args.seed)
    print("rate misses (more than 2 % off), unfaded bursts; samples per symbol " +
          " / ".join(f"{lo:g}-{hi:g}" for lo, hi in SPS_BANDS))
    for cell, n in misses["bursts"].items():
        print(f"  {cell:14s} " + "   ".join(f"{rule} " + " / ".join(f"{m}" for m in misses[rule][cell])
                                            for rule in rules) + f"   (of {' / '.join(map(str, n))})")
    totals = {rule: int(sum(sum(v) for v in misses[rule].values())) for rule in rules}
    print("  total: " + ", ".join(f"{rule} {t}" for rule, t in totals.items())
          + f" of {sum(sum(v) for v in misses['bursts'].values())}")
    bands = band_estimates(labels, snrs, band_bursts, args.seed)
    print(f"coarse_sps / true samples per symbol at 8-16 (median, share within {sc.COARSE_TOLERANCE}x)")
    for cell, row in bands.items():
        print(f"  {cell:14s} plain {row['plain_median']:.2f} {100 * row['plain_within']:3.0f} %   "
              f"low_snr {row['low_snr_median']:.2f} {100 * row['low_snr_within']:3.0f} %   ({row['bursts']} bursts)")
    if args.json:
        args.json.write_text(json.dumps({"rate_misses": misses, "totals": totals, "band_estimates": bands,
                                         "settings": {"per_cell": per_cell, "seed": args.seed, "labels": labels,
                                                      "snrs": snrs, "rules": rules, "band_bursts": band_bursts}},
                                        indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
