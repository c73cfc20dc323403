"""How does a model cope with a receiver DC offset (LO leakage) stronger than training had?

For each DC-offset level range, the same bursts (1024 samples, SNR uniform 10..30 dB, every
label N times, the full impairment chain with the receiver's DC offset always on and drawn
from that range, relative to the signal's power) go through each model as the serving
Classifier runs them. Prints accuracy over all labels and over the labels a kept or removed
mean confuses (OOK/BPSK, 4ASK/8ASK/PAM4, AM with and without carrier). Training draws the
DC offset from -40..-10 dB (40 % of bursts). Results of one run: dc_offset_robustness.md.

    python3 benchmarks/dc_offset_robustness.py MODEL_DIR [MODEL_DIR ...] [--per-label N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ensemble_diagnostic import burst_log_probs  # noqa: E402

from rfclassify.dsp.synth import ChannelConfig, synthesize  # noqa: E402
from rfclassify.engine.classifier import Classifier  # noqa: E402
from rfclassify.labels import LABELS  # noqa: E402

CARRIER_PAIRS = ("OOK", "BPSK", "4ASK", "8ASK", "PAM4", "AM-DSB-WC", "AM-DSB-SC", "AM-SSB-WC", "AM-SSB-SC")
LEVELS_DB: dict[str, tuple[float, float] | None] = {
    "none": None, "-40..-10 dB (training's range)": (-40.0, -10.0), "-10..-5 dB": (-10.0, -5.0),
    "-5..0 dB": (-5.0, 0.0), "0..+6 dB": (0.0, 6.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--per-label", type=int, default=40)
    args = ap.parse_args()
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
