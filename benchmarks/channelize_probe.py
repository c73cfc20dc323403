"""How much cutting an annotated band out of a wideband capture matters to the shipped model.

Synthesizes linear-modulation bursts (rfclassify.dsp.synth, the full impairment chain) at one
SNR, puts each into a capture at --upsample times its rate at a random offset, beside another
burst of the same power a quarter of the capture's rate away and white noise --noise-db under
the burst across the capture, and classifies each three ways: as synthesized, the whole
capture, and the capture cut to the burst's occupied band ((1 + roll-off) x symbol rate) by
rfclassify.dsp.channelize, as `rfclassify classify` does for a SigMF annotation with
core:freq_lower_edge / core:freq_upper_edge.

    PYTHONPATH=. python3 benchmarks/channelize_probe.py [--bursts 190] [--upsample 16] [--snr-db 20]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from scipy.signal import resample_poly

from rfclassify.dsp.channelize import channelize
from rfclassify.dsp.linear import LINEAR_LABELS
from rfclassify.dsp.synth import synthesize
from rfclassify.engine.classifier import Classifier


def captures(n: int, upsample: int, snr_db: float, noise_db: float, seed: int):
    """(labels, synthesized bursts, whole captures, cut captures)."""
    rng = np.random.default_rng(seed)
    labels = [LINEAR_LABELS[i % len(LINEAR_LABELS)] for i in range(n)]
    wanted = synthesize(labels, 1024, rng, snr_db=np.full(n, snr_db))
    others = synthesize(list(rng.choice(LINEAR_LABELS, n)), 1024, rng, snr_db=np.full(n, 30.0))
    whole, cut = [], []
    for i in range(n):
        sps, rolloff = float(wanted.params["samples_per_symbol"][i]), float(wanted.params["rolloff"][i])
        band = (1 + (rolloff if np.isfinite(rolloff) else 0.35)) / sps   # in units of the burst's rate
        up = resample_poly(wanted.iq[i], upsample, 1)
        t = np.arange(up.size)
        f0 = rng.uniform(-0.3, 0.3)                                       # cycles per capture sample
        f1 = f0 + (0.25 if f0 < 0 else -0.25)
        x = up * np.exp(2j * np.pi * f0 * t) + resample_poly(others.iq[i], upsample, 1)[:up.size] * np.exp(
            2j * np.pi * f1 * t)
        scale = np.sqrt(np.mean(np.abs(up) ** 2) * 10 ** (-noise_db / 10) / 2)
        x = (x + scale * (rng.standard_normal(up.size) + 1j * rng.standard_normal(up.size))).astype(np.complex64)
        whole.append(x)
        cut.append(channelize(x, float(upsample), f0 * upsample, band)[0])
    return labels, list(wanted.iq), whole, cut


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bursts", type=int, default=190)
    ap.add_argument("--upsample", type=int, default=16)
    ap.add_argument("--snr-db", type=float, default=20.0)
    ap.add_argument("--noise-db", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", default="", help="write the table here too")
    args = ap.parse_args()
    labels, *views = captures(args.bursts, args.upsample, args.snr_db, args.noise_db, args.seed)
    out = {"args": vars(args)}
    with Classifier.load(backend="onnxruntime") as clf:
        for name, bursts in zip(("synthesized", "whole capture", "cut to its band"), views, strict=True):
            start = time.perf_counter()
            results = clf.classify(bursts)
            pairs = list(zip(results, labels, strict=True))
            right = np.mean([r.ok and r.label == truth for r, truth in pairs])          # `unknown` counts wrong
            best = np.mean([r.ok and r.top[0][0] == truth for r, truth in pairs])       # the best guess
            out[name] = {"accuracy_pct": round(100 * float(right), 1), "best_guess_pct": round(100 * float(best), 1),
                         "mean_samples": round(float(np.mean([b.size for b in bursts])))}
            print(f"{name:16s} {100 * right:5.1f} % right ({100 * best:5.1f} % best guess), "
                  f"{out[name]['mean_samples']} samples a burst, {time.perf_counter() - start:.0f} s", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
