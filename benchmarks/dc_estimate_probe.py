"""Can the symbols' structure estimate a receiver DC offset where the burst's mean cannot?

The mean of a burst is the offset plus the signal's own 0 Hz content (about -10 log10(symbols)
dB of its power), and taking it out costs the high-order classes as much as leaving a
-20 dB offset in (dc_offset_robustness.md, `--paired`). Here the offset is fitted instead,
by rfclassify.dsp.dc_estimate.estimate_offset (the offset's tone at the blind clock as one
more regressor of each high-order alphabet's class-equalizer fit; it began in this probe),
for every burst as if it were high-order, under all twelve high-order classes' alphabets,
and subtracted from the raw burst before the served Classifier (refiner included, its DC
pass off) sees it.

The bursts are dc_offset_robustness --paired's for the high-order labels (SNR 10..30 dB,
1024 samples, the full chain without an offset, then the same with one of -40..-10 dB
added): accuracy as drawn, with the offset, with the offset less its estimate, and without
an offset less its estimate (what a false estimate costs). The product's DC pass
(rfclassify.engine.dc_pass) fits only the network's three likeliest classes and gates the
result; `dc_offset_robustness.py --paired` measures it as served.

    python3 benchmarks/dc_estimate_probe.py [--per-label N] [--model-dir models]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dc_offset_robustness import LEVEL_BANDS_DB, PAIRED_RANGE_DB, offset_pairs  # noqa: E402

from rfclassify.dsp.dc_estimate import estimate_offset  # noqa: E402
from rfclassify.engine.classifier import Classifier  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-label", type=int, default=50)
    ap.add_argument("--model-dir", default="models")
    args = ap.parse_args()
    clf = Classifier.load(args.model_dir, backend="onnxruntime", dc_pass=False)
    labels = [name for name in HIGH_ORDER_LABELS for _ in range(args.per_label)]
    bursts, level, offset = offset_pairs(labels)
    power = np.mean(np.abs(bursts) ** 2, axis=1)
    drawn = list(bursts)
    offset_bursts = [x + d for x, d in zip(drawn, offset)]
    t0 = time.perf_counter()
    est = np.array([estimate_offset(x, HIGH_ORDER_LABELS).offset for x in offset_bursts])
    ms = 1e3 * (time.perf_counter() - t0) / len(labels)
    est_drawn = np.array([estimate_offset(x, HIGH_ORDER_LABELS).offset for x in drawn])
    means = np.array([x.mean() for x in offset_bursts])

    def error_db(e: np.ndarray) -> str:
        q = np.quantile(10 * np.log10(np.abs(e - offset) ** 2 / power), [0.1, 0.5, 0.9])
        return " / ".join(f"{v:.1f}" for v in q)

    print(f"{clf.meta.model_id}; {len(labels)} high-order bursts, 1024 samples, SNR 10..30 dB, offset "
          f"{PAIRED_RANGE_DB[0]:.0f}..{PAIRED_RANGE_DB[1]:.0f} dB; the estimate {ms:.1f} ms a burst (this machine)")
    print(f"error against the true offset, dB of the signal's power, 10 / 50 / 90 %: the estimate {error_db(est)}, "
          f"the burst's mean {error_db(means)}")

    def right(bursts: list[np.ndarray]) -> np.ndarray:
        res = clf.classify([b.astype(np.complex64) for b in bursts])
        return np.array([r.top[0][0] == lb for r, lb in zip(res, labels)])

    arms = {"as drawn (no offset)": right(drawn), "offset": right(offset_bursts),
            "offset less its estimate": right([x - e for x, e in zip(offset_bursts, est)]),
            "no offset less its estimate": right([x - e for x, e in zip(drawn, est_drawn)])}
    print("| bursts | accuracy | by offset level " + " / ".join(f"{lo:.0f}..{hi:.0f}" for lo, hi in LEVEL_BANDS_DB)
          + " dB |\n|---|---:|---|")
    for name, ok in arms.items():
        bands = " / ".join(f"{ok[(level >= lo) & (level < hi)].mean():.1%}" for lo, hi in LEVEL_BANDS_DB)
        print(f"| {name} | {ok.mean():.1%} | {bands} |")
    for a, b in (("offset", "offset less its estimate"), ("as drawn (no offset)", "no offset less its estimate")):
        d = arms[b].astype(float) - arms[a]
        print(f"{b} - {a}: {100 * d.mean():+.1f} +- {100 * d.std() / math.sqrt(d.size):.1f} points (paired)")


if __name__ == "__main__":
    main()
