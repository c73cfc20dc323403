"""How does a model cope with a receiver DC offset (LO leakage) stronger than training had?

For each DC-offset level range, the same bursts (1024 samples, SNR uniform 10..30 dB, every
label N times, the full impairment chain with the receiver's DC offset always on and drawn
from that range, relative to the signal's power) go through each model as the serving
Classifier runs them. Prints accuracy over all labels and over the labels a kept or removed
mean confuses (OOK/BPSK, 4ASK/8ASK/PAM4, AM with and without carrier). Training draws the
DC offset from -40..-10 dB (40 % of bursts). Results of one run: dc_offset_robustness.md.

``--paired`` asks instead what that training range costs the served model (refiner included,
``--no-refiner`` for the network alone, ``--no-dc-pass`` without the Classifier's DC pass,
engine.dc_pass) on the high-order and the other labels: the same
bursts (SNR 10..30 dB, the full chain without a DC offset) are classified as drawn and with
an offset added after synthesis, its level uniform in -40..-10 dB, and each set also after a
removal rule (REMOVALS: none; the sample mean always; the mean only where the 0 Hz bin
holds a leak and not a carrier, dc_estimate.leak_line_offset; ``--removals`` picks some).

    python3 benchmarks/dc_offset_robustness.py MODEL_DIR [MODEL_DIR ...] [--per-label N]
    python3 benchmarks/dc_offset_robustness.py --paired MODEL_DIR [--per-label N] [--no-refiner] [--no-dc-pass]
                                               [--removals none,mean]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ensemble_diagnostic import burst_log_probs  # noqa: E402

from rfclassify.dsp.dc_estimate import leak_line_offset  # noqa: E402
from rfclassify.dsp.synth import ChannelConfig, synthesize  # noqa: E402
from rfclassify.engine.classifier import Classifier  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS, LABELS  # noqa: E402

CARRIER_PAIRS = ("OOK", "BPSK", "4ASK", "8ASK", "PAM4", "AM-DSB-WC", "AM-DSB-SC", "AM-SSB-WC", "AM-SSB-SC")
LEVELS_DB: dict[str, tuple[float, float] | None] = {
    "none": None, "-40..-10 dB (training's range)": (-40.0, -10.0), "-10..-5 dB": (-10.0, -5.0),
    "-5..0 dB": (-5.0, 0.0), "0..+6 dB": (0.0, 6.0)}

PAIRED_RANGE_DB = (-40.0, -10.0)
LEVEL_BANDS_DB = ((-40.0, -30.0), (-30.0, -20.0), (-20.0, -10.0))
REMOVALS = ("none", "mean", "leak line")


def remove_dc(x: np.ndarray, rule: str) -> np.ndarray:
    """Burst x after a DC removal rule (REMOVALS)."""
    x = np.asarray(x, np.complex128)
    mean = x.mean()
    if rule == "mean":
        return x - mean
    if rule == "leak line":
        return x - leak_line_offset(x)
    if rule != "none":
        raise ValueError(f"unknown rule {rule!r} (one of {', '.join(REMOVALS)})")
    return x


def offset_pairs(labels: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bursts (n, 1024) complex128 of the full chain without a DC offset at SNR 10..30 dB,
    each one's offset level in dB of its power, uniform in PAIRED_RANGE_DB, and that offset)."""
    rng = np.random.default_rng(23)
    sb = synthesize(labels, 1024, rng, snr_db=rng.uniform(10.0, 30.0, len(labels)),
                    channel=ChannelConfig(p_dc_offset=0.0))
    level = rng.uniform(*PAIRED_RANGE_DB, len(labels))
    power = np.mean(np.abs(sb.iq) ** 2, axis=1)
    offset = np.sqrt(power * 10 ** (level / 10)) * np.exp(2j * np.pi * rng.random(len(labels)))
    return sb.iq.astype(np.complex128), level, offset


def paired(model_dir: str, per_label: int, refiner: bool, dc_pass: bool = True,
           removals: tuple[str, ...] = REMOVALS) -> None:
    """The paired cost of training's DC offsets, and of the removal rules, per label group."""
    clf = Classifier.load(model_dir, backend="onnxruntime", refiner=refiner, dc_pass=dc_pass)
    labels = [name for name in LABELS for _ in range(per_label)]
    bursts, level, offset = offset_pairs(labels)
    high = np.isin(np.array(labels), HIGH_ORDER_LABELS)
    served = ("the network alone" if clf.refiner is None else
              "with its refiner" + ("" if clf.dc_pass else ", no DC pass"))
    print(f"{clf.meta.model_id}, {served}; "
          f"{len(labels)} bursts ({high.sum()} high-order), 1024 samples, SNR 10..30 dB; offset "
          f"{PAIRED_RANGE_DB[0]:.0f}..{PAIRED_RANGE_DB[1]:.0f} dB added to the same bursts")
    print("| removal | set | high-order | other labels | high-order by offset level " +
          " / ".join(f"{lo:.0f}..{hi:.0f}" for lo, hi in LEVEL_BANDS_DB) + " |")
    print("|---|---|---:|---:|---|")
    for rule in removals:
        right = {}
        for name, xs in (("no offset", list(bursts)), ("offset", [x + d for x, d in zip(bursts, offset)])):
            res = clf.classify([remove_dc(x, rule).astype(np.complex64) for x in xs])
            right[name] = np.array([r.top[0][0] == lb for r, lb in zip(res, labels)])
        for name, ok in right.items():
            bands = ("" if name == "no offset" else " / ".join(
                f"{ok[high & (level >= lo) & (level < hi)].mean():.1%}" for lo, hi in LEVEL_BANDS_DB))
            print(f"| {rule} | {name} | {ok[high].mean():.1%} | {ok[~high].mean():.1%} | {bands} |", flush=True)
        d = right["offset"].astype(float) - right["no offset"]
        print(f"| {rule} | offset - no offset (points, paired) | {100 * d[high].mean():+.1f} +- "
              f"{100 * d[high].std() / np.sqrt(high.sum()):.1f} | {100 * d[~high].mean():+.1f} +- "
              f"{100 * d[~high].std() / np.sqrt((~high).sum()):.1f} | |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--per-label", type=int, default=40)
    ap.add_argument("--paired", action="store_true", help="the paired cost of training's offsets (one model)")
    ap.add_argument("--no-refiner", action="store_true", help="with --paired: the network alone")
    ap.add_argument("--no-dc-pass", action="store_true", help="with --paired: without the Classifier's DC pass")
    ap.add_argument("--removals", default=",".join(REMOVALS),
                    help=f"with --paired: the removal rules to run (of {', '.join(REMOVALS)})")
    args = ap.parse_args()
    if args.paired:
        removals = tuple(r.strip() for r in args.removals.split(",") if r.strip())
        if not removals or set(removals) - set(REMOVALS):
            ap.error(f"--removals: a comma-separated list of {', '.join(REMOVALS)}")
        for d in args.models:
            paired(d, args.per_label, not args.no_refiner, not args.no_dc_pass, removals)
        return
    clfs = {d: Classifier.load(d, backend="onnxruntime") for d in args.models}
    labels = [name for name in LABELS for _ in range(args.per_label)]
    pairs = np.isin(np.array(labels), CARRIER_PAIRS)
    print(f"{len(labels)} bursts per level; " + "; ".join(
        f"{d}: {c.meta.model_id} ({c.meta.normalization})" for d, c in clfs.items()))
    print("| receiver DC offset | " + " | ".join(f"{c.meta.model_id[-8:]} all / carrier pairs" for c in clfs.values()) + " |")
    for name, level in LEVELS_DB.items():
        rng = np.random.default_rng(5)  # the same bursts at every level but for the offset
        channel = (ChannelConfig(p_dc_offset=0.0) if level is None
                   else ChannelConfig(p_dc_offset=1.0, dc_offset_db_range=level))
        sb = synthesize(labels, 1024, rng, snr_db=rng.uniform(10.0, 30.0, len(labels)), channel=channel)
        cells = []
        for c in clfs.values():
            ok = burst_log_probs(c, list(sb.iq)).argmax(axis=1) == sb.label_index
            cells.append(f"{ok.mean():.1%} / {ok[pairs].mean():.1%}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
