"""What the symbol-rate front end costs a serving CPU: burst_to_windows with and without it.

Each length: 256 synthesized bursts (all labels, 0..30 dB), cut into windows by the plain
bucket policy (the baseline: DC removal, unit RMS, windowing) and by the same policy with
SymbolRateNormalizer(4) (adds the occupied-bandwidth estimate, one resample_poly and a second
RMS scaling), alternating in the same process, best of 5 passes each. Prints microseconds
per burst and the ratio. Results in benchmarks/README.md.

    PYTHONPATH=. python3 benchmarks/rate_front_end_cpu.py [LENGTH ...]
"""

from __future__ import annotations

import sys
import time

import numpy as np

from rfclassify.dsp.rate import SymbolRateNormalizer
from rfclassify.dsp.synth import synthesize
from rfclassify.dsp.windows import BucketPolicy, burst_to_windows
from rfclassify.labels import LABELS


def per_burst_us(bursts: np.ndarray, policy: BucketPolicy) -> float:
    t0 = time.perf_counter()
    for x in bursts:
        burst_to_windows(x, policy)
    return 1e6 * (time.perf_counter() - t0) / len(bursts)


def main(lengths: list[int]) -> None:
    rng = np.random.default_rng(0)
    plain, rate = BucketPolicy(), BucketPolicy(rate=SymbolRateNormalizer(4.0))
    print(f"{'length':>7} {'plain us':>9} {'rate us':>9} {'ratio':>6}")
    for n in lengths:
        labels = [LABELS[i] for i in rng.integers(0, len(LABELS), 256)]
        bursts = synthesize(labels, n, rng, snr_db=rng.uniform(0, 30, 256)).iq
        best = {"plain": np.inf, "rate": np.inf}
        for _ in range(5):
            best["plain"] = min(best["plain"], per_burst_us(bursts, plain))
            best["rate"] = min(best["rate"], per_burst_us(bursts, rate))
        print(f"{n:7d} {best['plain']:9.1f} {best['rate']:9.1f} {best['rate'] / best['plain']:6.1f}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [128, 1024, 4096, 16384])
