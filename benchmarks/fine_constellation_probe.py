"""Which impairment keeps the CNN from the fine constellations? High-order bursts at 30 dB, one impairment at a time.

PSK (8/16/32), QAM (16..256) and APSK (16..128) bursts of 1024 samples at 30 dB SNR go
through a model as the serving Classifier runs them, on a channel with nothing but noise,
with one or a few impairment families alone (ChannelConfig.only), and on the full chain;
first at 4 samples/symbol (256 symbols), then at the synthesizer's 2..16. Then the confusion
of the PSK and QAM classes on the noise-only channel. Results of one run:
fine_constellation_probe.md.

    python3 benchmarks/fine_constellation_probe.py [MODEL_DIR] [--per-class N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ensemble_diagnostic import burst_log_probs  # noqa: E402

from rfclassify.dsp import synth  # noqa: E402
from rfclassify.dsp.channel import ChannelConfig  # noqa: E402
from rfclassify.engine.classifier import Classifier  # noqa: E402
from rfclassify.labels import LABELS  # noqa: E402

GROUPS = {"PSK": ("8PSK", "16PSK", "32PSK"), "QAM": ("16QAM", "32QAM", "64QAM", "128QAM", "256QAM"),
          "APSK": ("16APSK", "32APSK", "64APSK", "128APSK")}
CHANNELS = {"noise only": ChannelConfig.clean(), "timing": ChannelConfig.only("timing"),
            "phase": ChannelConfig.only("phase"), "cfo": ChannelConfig.only("cfo"),
            "timing + phase + cfo": ChannelConfig.only("timing", "phase", "cfo"), "full chain": ChannelConfig()}


def _bursts(labels: list[str], channel: ChannelConfig, seed: int) -> synth.SynthBatch:
    rng = np.random.default_rng(seed)
    return synth.synthesize(labels, 1024, rng, snr_db=np.full(len(labels), 30.0), channel=channel)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir", nargs="?", default="models")
    ap.add_argument("--per-class", type=int, default=40)
    args = ap.parse_args()
    clf = Classifier.load(args.model_dir, backend="onnxruntime")
    print(f"model {clf.meta.model_id}, 1024 samples, 30 dB, {args.per_class} bursts per class")
    default_sps = synth.SPS_RANGE
    try:
        for sps in ((4.0, 4.0), default_sps):
            synth.SPS_RANGE = sps  # the synthesizer's module constant: this script's only knob on it
            print(f"\n| channel ({sps[0]:g}..{sps[1]:g} samples/symbol) | " + " | ".join(GROUPS) + " |")
            for name, channel in CHANNELS.items():
                cells = []
                for labels in GROUPS.values():
                    sb = _bursts([lab for lab in labels for _ in range(args.per_class)], channel, 11)
                    ok = burst_log_probs(clf, list(sb.iq)).argmax(axis=1) == sb.label_index
                    cells.append(f"{ok.mean():.0%}")
                print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
        synth.SPS_RANGE = (4.0, 4.0)
        labels = [lab for g in ("PSK", "QAM") for lab in GROUPS[g] for _ in range(args.per_class)]
        sb = _bursts(labels, ChannelConfig.clean(), 12)
        pred = burst_log_probs(clf, list(sb.iq)).argmax(axis=1)
        print("\nnoise only, 4 samples/symbol: true class -> what the model says (count)")
        for lab in dict.fromkeys(labels):
            got = pred[np.array(labels) == lab]
            calls = sorted(((LABELS[i], int(n)) for i, n in zip(*np.unique(got, return_counts=True))),
                           key=lambda t: -t[1])
            print(f"  {lab}: " + ", ".join(f"{c} {n}" for c, n in calls))
    finally:
        synth.SPS_RANGE = default_sps


if __name__ == "__main__":
    main()
