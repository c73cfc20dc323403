"""What does not knowing the carrier cost a likelihood classifier of the high-order classes?

The AWGN genie of high_order_bound.py knows the clock, the carrier and the noise; the served
refiner knows none of them and reads the high-order classes 25-35 points under that genie at
0..8 dB. This probe asks how much of that a receiver pays for the carrier alone. It
synthesizes high-order bursts, clocks them with the synthesizer's own rate, timing and
roll-off (a genie clock), takes out the recorded carrier offset at the burst's centre, and
decides each burst by feature_screen.glrt_class_scores (an exact soft likelihood per
alphabet, the noise and gain fitted) with the carrier:

- ``known``: frequency 0 and phase 0 (only with ``--channel clean``, where the synthesizer adds
  no phase, so the carrier is known exactly);
- ``phase``: frequency 0, the phase fitted (class_equalizer.carrier_fit, reach 0);
- ``reach<R>``: the residual frequency fitted within +-R cycles a symbol and the phase, for
  each R of --reaches (0.07 is the refiner's search, class_equalizer.CARRIER_MAX_OFFSET);
- ``served_clock``: the served blind clock (symbol_clock.blind_symbols, the shipped model's
  `coherence_cyclic` rule) instead of the genie's, the carrier fitted as the refiner's is.

Printed: accuracy by SNR and arm, paired differences between neighbouring arms (+- 1 SE), and
by class for each arm. A measurement, not a test; tests/test_bench_carrier_price_probe.py
checks its parts. Results: benchmarks/carrier_price_probe.md.

    PYTHONPATH=. python3 benchmarks/carrier_price_probe.py [--channel clean|full] [--snrs 4,6,8]
        [--per-class 30] [--reaches 0.007,0.07] [--workers 2] [--seed 7] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from feature_screen import glrt_class_scores  # noqa: E402
from rfclassify.dsp import class_equalizer as ce  # noqa: E402
from rfclassify.dsp import symbol_clock as sc  # noqa: E402
from rfclassify.dsp.channel import ChannelConfig  # noqa: E402
from rfclassify.dsp.synth import synthesize  # noqa: E402
from rfclassify.dsp.windows import central  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402

SERVED_RULE = sc.COHERENCE_CYCLIC


def genie_symbols(iq: np.ndarray, params: np.void) -> np.ndarray:
    """The matched-filter outputs of one burst at the synthesizer's recorded clock (rate with
    its sample-rate offset, timing, roll-off) after its recorded carrier offset is taken out
    at the burst's centre: symbols that still hold the channel's phase (and, on the full
    chain, every other impairment)."""
    x = central(np.asarray(iq).reshape(-1), sc.MAX_CLOCK_SAMPLES)
    cut = (iq.size - x.size) // 2
    sps, timing = float(params["samples_per_symbol"]), float(params["timing_offset_samples"])
    sro = float(params["sro_ppm"]) if math.isfinite(float(params["sro_ppm"])) else 0.0
    f0 = float(np.nan_to_num(params["cfo_cyc_per_sample"])) + \
        float(np.nan_to_num(params["cfo_drift_cyc_per_sample2"])) * iq.size / 2
    prepared = sc.remove_dc_line(x) * np.exp(-2j * np.pi * f0 * (np.arange(x.size) + cut))
    stretch = 1 + 1e-6 * sro
    return sc.symbols_at(prepared, sps * stretch, float(params["rolloff"]), ((timing - cut) % sps) * stretch)


def decide(y: np.ndarray | None, reach: float | None) -> int:
    """The high-order class (index into HIGH_ORDER_LABELS) the soft likelihood picks for
    symbols y with the carrier fitted within `reach` (None: known, frequency and phase 0);
    -1 where there are too few symbols."""
    if y is None:
        return -1
    y = central(np.asarray(y, complex), ce.MAX_SYMBOLS)
    if y.size < ce.MIN_SYMBOLS:
        return -1
    y = y / math.sqrt(max(float(np.mean(np.abs(y) ** 2)), 1e-30))
    bank = ce.alphabet_bank(HIGH_ORDER_LABELS)
    if reach is None:
        carrier = (np.zeros(len(bank.sizes)), np.zeros(len(bank.sizes)))
    else:
        carrier = ce.carrier_fit(y, bank, reach=reach)
        if reach == 0:
            carrier = (np.zeros(len(bank.sizes)), carrier[1])
    s = glrt_class_scores(y, carrier)
    return -1 if s is None else int(np.argmax(s))


def arm_names(channel: str, reaches: tuple[float, ...]) -> list[str]:
    return (["known"] if channel == "clean" else []) + ["phase"] + [f"reach{r:g}" for r in reaches] + ["served_clock"]


def read_burst(job: tuple[np.ndarray, np.void, str, tuple[float, ...]]) -> dict[str, int]:
    """Every arm's decision for one burst."""
    iq, params, channel, reaches = job
    out: dict[str, int] = {}
    with np.errstate(all="ignore"):
        y = genie_symbols(iq, params)
        if channel == "clean":
            out["known"] = decide(y, None)
        out["phase"] = decide(y, 0.0)
        for r in reaches:
            out[f"reach{r:g}"] = decide(y, r)
        found = sc.blind_symbols(iq, SERVED_RULE)
        out["served_clock"] = decide(None if found is None else found.symbols, ce.CARRIER_MAX_OFFSET)
    return out


def bursts(channel: str, snrs: list[float], per_class: int, seed: int, n_samples: int = 1024
           ) -> tuple[list[np.ndarray], list[np.void], np.ndarray, np.ndarray]:
    """(bursts, params, class index into HIGH_ORDER_LABELS, SNR): per_class of each high-order
    class, their SNRs drawn from snrs, on the AWGN-only chain or the full training chain."""
    rng = np.random.default_rng(seed)
    cfg = ChannelConfig.clean() if channel == "clean" else ChannelConfig()
    iq, params, truth, snr = [], [], [], []
    for c, label in enumerate(HIGH_ORDER_LABELS):
        s = rng.choice(np.asarray(snrs, float), per_class)
        b = synthesize([label] * per_class, n_samples, rng, s, cfg)
        iq += list(b.iq)
        params += list(b.params)
        truth += [c] * per_class
        snr += list(s)
    return iq, params, np.array(truth), np.array(snr)


def summarize(arms: list[str], rows: list[dict[str, int]], truth: np.ndarray, snr: np.ndarray) -> dict:
    right = {a: np.array([r[a] for r in rows]) == truth for a in arms}
    table = {a: {"all": float(right[a].mean() * 100),
                 **{f"{s:g} dB": float(right[a][snr == s].mean() * 100) for s in np.unique(snr)}} for a in arms}
    steps = {}
    for a, b in zip(arms[:-1], arms[1:]):
        d = right[b].astype(float) - right[a]
        steps[f"{a} -> {b}"] = {"points": float(d.mean() * 100), "se": float(d.std(ddof=1) / math.sqrt(d.size) * 100)}
    by_class = {a: {label: float(right[a][truth == c].mean() * 100) for c, label in enumerate(HIGH_ORDER_LABELS)}
                for a in arms}
    return {"accuracy": table, "steps": steps, "by_class": by_class}


def format_table(result: dict, arms: list[str]) -> str:
    acc = result["accuracy"]
    cols = list(acc[arms[0]])
    lines = ["| arm | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    lines += [f"| {a} | " + " | ".join(f"{acc[a][c]:.1f}" for c in cols) + " |" for a in arms]
    lines += [f"{k}: {v['points']:+.1f} +- {v['se']:.1f} points" for k, v in result["steps"].items()]
    lines += ["by class: " + "; ".join(f"{a} " + " ".join(f"{lb} {v:.0f}" for lb, v in result["by_class"][a].items())
                                       for a in arms)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--channel", choices=("clean", "full"), default="clean")
    ap.add_argument("--snrs", default="4,6,8", help="SNRs in dB the bursts are drawn at, comma-separated")
    ap.add_argument("--per-class", type=int, default=30)
    ap.add_argument("--reaches", default="0.007,0.07", help="frequency reaches fitted, cycles a symbol")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    snrs = [float(v) for v in args.snrs.split(",") if v]
    reaches = tuple(float(v) for v in args.reaches.split(",") if v)
    if not snrs or args.per_class < 1 or any(r < 0 for r in reaches):
        print("carrier_price_probe: need SNRs, --per-class >= 1 and reaches >= 0", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    iq, params, truth, snr = bursts(args.channel, snrs, args.per_class, args.seed)
    jobs = [(b, p, args.channel, reaches) for b, p in zip(iq, params)]
    if args.workers > 1:
        with ProcessPoolExecutor(args.workers) as pool:
            rows = list(pool.map(read_burst, jobs, chunksize=4))
    else:
        rows = [read_burst(j) for j in jobs]
    arms = arm_names(args.channel, reaches)
    result = summarize(arms, rows, truth, snr)
    print(f"{len(rows)} {args.channel} bursts, {time.perf_counter() - t0:.0f} s")
    print(format_table(result, arms))
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, **result}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
