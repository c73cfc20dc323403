"""Can the symbols' structure estimate a receiver DC offset where the burst's mean cannot?

The mean of a burst is the offset plus the signal's own 0 Hz content (about -10 log10(symbols)
dB of its power), and taking it out costs the high-order classes as much as leaving a
-20 dB offset in (dc_offset_robustness.md, `--paired`). Here the offset is fitted instead:
the burst at its blind clock (symbol_clock.blind_symbols) holds the offset as a tone of
known shape in the symbol domain (the matched filter's output for the band centroid's
derotation of a constant), so each high-order alphabet's class-equalizer fit (its carrier
fit, then least squares to its own decisions, rfclassify.dsp.class_equalizer) gets that tone
as one more regressor beside its filter taps. The best-fitting alphabet's coefficient, mapped
back through its filter, is the estimate, which is subtracted from the raw burst before the
served Classifier (refiner included) sees it.

The bursts are dc_offset_robustness --paired's for the high-order labels (SNR 10..30 dB,
1024 samples, the full chain without an offset, then the same with one of -40..-10 dB
added): accuracy as drawn, with the offset, with the offset less its estimate, and without
an offset less its estimate (what a false estimate costs). Scratch-grade: the estimate is
made for every burst as if it were high-order, at the class equalizer's cost.

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

from rfclassify.dsp import class_equalizer as ce  # noqa: E402
from rfclassify.dsp import symbol_clock as sc  # noqa: E402
from rfclassify.dsp.windows import central  # noqa: E402
from rfclassify.engine.classifier import Classifier  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402


def estimate_offset(x: np.ndarray) -> complex:
    """The receiver DC offset of raw burst x, in its own units, from the best-fitting
    high-order alphabet's equalizer fit with the offset's tone as a regressor; what
    remove_dc_line takes out (or 0) where the burst has no clock or too few symbols."""
    try:
        with np.errstate(all="ignore"):
            return _estimate_offset(np.asarray(x, np.complex128))
    except np.linalg.LinAlgError:
        return 0.0


def _estimate_offset(x: np.ndarray) -> complex:
    x = central(x, sc.MAX_CLOCK_SAMPLES)
    found = sc.blind_symbols(x)
    if found is None:
        return 0.0
    # what blind_symbols did to x before the clock (remove_dc_line): the mean out where 0 Hz holds a line, unit RMS
    mean = x.mean() if sc.zero_hz_line_ratio(x) > sc.DC_LINE_RATIO else 0.0
    rms = math.sqrt(float(np.mean(np.abs(x - mean) ** 2)))
    unit = (x - mean) / rms
    turn = found.baseband / np.where(np.abs(unit) > 0, unit, 1.0)       # the centroid's derotation
    turn = turn / np.abs(turn)
    tone = sc.symbols_at(turn, found.sps, sc.BLIND_ROLLOFF, found.timing_samples,
                         pulse=sc.rrc_lookup(sc.BLIND_ROLLOFF))          # a unit offset at the symbols
    n = min(found.symbols.size, tone.size)
    y, tone = central(found.symbols[:n], ce.MAX_SYMBOLS), central(tone[:n], ce.MAX_SYMBOLS)
    if y.size < ce.MIN_SYMBOLS or not (np.all(np.isfinite(y)) and np.all(np.isfinite(tone))):
        return mean
    scale = math.sqrt(float(np.mean(np.abs(y) ** 2)))
    y = y / scale
    bank = ce.alphabet_bank(tuple(HIGH_ORDER_LABELS))
    freq, phase = ce.carrier_fit(y, bank)
    rot = np.exp(-2j * np.pi * freq[:, None] * np.arange(y.size)[None, :])
    y_rot, tone_rot = y[None, :] * rot, tone[None, :] * rot
    cols = np.concatenate([np.stack([ce.filter_inputs(row, ce.TAPS) for row in y_rot]), tone_rot[:, :, None]], axis=2)
    solve = np.linalg.pinv(cols)
    w = np.zeros((len(bank.sizes), ce.TAPS + 1), complex)
    w[:, ce.TAPS // 2] = np.exp(-1j * phase)
    z, decided = ce.decision_directed(np.einsum("ant,at->an", cols, w), cols, solve, bank)
    w = np.einsum("atn,an->at", solve, decided)
    ll = ce.unit_power_logliks(z, decided, bank)[0]
    if not np.isfinite(ll).any():
        return mean
    a = int(np.argmax(np.where(np.isfinite(ll), ll, -np.inf)))
    # the offset d reaches the output as d * (tone through the filter); the regressor cancels it
    through = ce.filter_inputs(tone_rot[a], ce.TAPS) @ w[a, :-1]
    unit_offset = -w[a, -1] * np.vdot(through, tone_rot[a]) / max(float(np.vdot(through, through).real), 1e-30)
    return complex(mean + unit_offset * scale * rms)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-label", type=int, default=50)
    ap.add_argument("--model-dir", default="models")
    args = ap.parse_args()
    clf = Classifier.load(args.model_dir, backend="onnxruntime")
    labels = [name for name in HIGH_ORDER_LABELS for _ in range(args.per_label)]
    bursts, level, offset = offset_pairs(labels)
    power = np.mean(np.abs(bursts) ** 2, axis=1)
    drawn = list(bursts)
    offset_bursts = [x + d for x, d in zip(drawn, offset)]
    t0 = time.perf_counter()
    est = np.array([estimate_offset(x) for x in offset_bursts])
    ms = 1e3 * (time.perf_counter() - t0) / len(labels)
    est_drawn = np.array([estimate_offset(x) for x in drawn])
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
