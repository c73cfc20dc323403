"""Which part of the blind front end loses the faded high-order bursts for the EM receiver?

The EM channel receiver (rfclassify.dsp.em_channel) reads 95.6 % of faded high-order bursts
at a known clock and carrier, and about 80 % at the blind clock (em_channel_probe.md). This
probe reads the same synthesized bursts (a dataset file with the synthesizer's params) through
the served blind clock and through clocks that know more, one part at a time:

- ``blind``: symbol_clock.blind_symbols with the ``coherence`` rule, as the refiner was served
  until the forty-first session;
- ``true_rate``: the recorded rate, the timing from the |x|^2 line's phase at that rate, the
  blind carrier;
- ``true_timing``: the recorded rate and timing (symbol 0 centred at timing_offset_samples),
  the blind carrier;
- ``true_carrier``: the recorded rate, timing and carrier offset (at the burst's centre);
- ``rate_and_carrier``: the recorded rate and carrier, the line's timing;
- ``cyclic_carrier``: the blind rate and timing, the carrier from the cyclic spectrum
  (cyclic_coherence.cyclic_carrier: the coherence_cyclic rule's clock);
- ``filtered_start``: that clock, each alphabet's fit started from the class-blind filter's
  outputs instead of the matched filter's (em_channel.START_FILTERED; forty-second session).

Each arm fits every high-order class's alphabets with em_channel's passes (the refiner's fast
ones unless --passes says) and decides by the best unit-power score (EM alone, no network).
Printed: accuracy per arm by delay spread in symbols, paired differences between arms, and the
blind clock's rate, timing and carrier errors. --synth VARIANT synthesizes faded bursts with
only some impairments instead (variant_config). Results: benchmarks/blind_front_probe.md.

    PYTHONPATH=. python3 benchmarks/blind_front_probe.py big1024.h5 --per-class 60 --workers 2 --json OUT
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rfclassify.dsp import em_channel  # noqa: E402
from rfclassify.dsp.cyclic_coherence import cyclic_carrier  # noqa: E402
from rfclassify.dsp.channel import FAMILIES, ChannelConfig  # noqa: E402
from rfclassify.dsp.synth import synthesize  # noqa: E402
from rfclassify.dsp.symbol_clock import (COHERENCE, MAX_CLOCK_SAMPLES, at_clock, blind_symbols,  # noqa: E402
                                         remove_dc_line, timing_at_rate)
from rfclassify.dsp.windows import central  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS, LABELS  # noqa: E402

ARMS = ("blind", "true_rate", "true_timing", "true_carrier", "rate_and_carrier", "cyclic_carrier", "filtered_start")
STEPS = (("blind", "true_rate"), ("true_rate", "true_timing"), ("true_timing", "true_carrier"),
         ("true_rate", "rate_and_carrier"), ("blind", "cyclic_carrier"), ("cyclic_carrier", "rate_and_carrier"),
         ("cyclic_carrier", "filtered_start"))
SPREAD_BINS = ((0.0, 1e-9, "unfaded"), (1e-9, 0.1, "< 0.1"), (0.1, 0.3, "0.1-0.3"), (0.3, np.inf, ">= 0.3"))


def spread_symbols(params: np.void) -> float:
    """The burst's rms delay spread in symbols (0 without multipath)."""
    tau = float(params["delay_spread_samples"])
    if not math.isfinite(tau) or int(params["fading_type"]) == 0:
        return 0.0
    return tau / float(params["samples_per_symbol"])


def em_decision(found, passes: tuple[int, int], fit_start: str = em_channel.START_MATCHED) -> int:
    """The high-order class (index into HIGH_ORDER_LABELS) EM alone picks at a clock, -1 if none."""
    s = em_channel.scores_at_clock(found, HIGH_ORDER_LABELS, None, passes=passes, fit_start=fit_start)
    return -1 if s is None else int(np.argmax(s[:len(HIGH_ORDER_LABELS)]))


def read_burst(job: tuple[np.ndarray, np.void, tuple[int, int], tuple[str, ...]]) -> dict:
    """Every arm's decision and the blind clock's errors for one burst."""
    iq, params, passes, arms = job
    sps, timing = float(params["samples_per_symbol"]), float(params["timing_offset_samples"])
    x = central(np.asarray(iq).reshape(-1), MAX_CLOCK_SAMPLES)
    cut = (iq.size - x.size) // 2
    found = blind_symbols(iq, COHERENCE)
    out = {"decisions": {}}
    if found is None:
        return {"decisions": {a: -1 for a in arms}, "rate_error": math.nan, "timing_error": math.nan,
                "carrier_error": math.nan, "cyclic_carrier_error": math.nan}
    with np.errstate(all="ignore"):
        prepared = remove_dc_line(x)
        true_timing = (timing - cut) % sps
        n_mid = iq.size / 2
        true_f0 = float(params["cfo_cyc_per_sample"]) + float(params["cfo_drift_cyc_per_sample2"]) * n_mid
        line_timing = timing_at_rate(prepared, sps)
        cyclic_f0 = cyclic_carrier(prepared, found.sps)   # the coherence_cyclic rule's carrier at the blind rate
        clocks = {
            "blind": lambda: found,
            "true_rate": lambda: at_clock(prepared, sps, line_timing, found.carrier),
            "true_timing": lambda: at_clock(prepared, sps, true_timing, found.carrier),
            "true_carrier": lambda: at_clock(prepared, sps, true_timing, true_f0),
            "rate_and_carrier": lambda: at_clock(prepared, sps, line_timing, true_f0),
            "cyclic_carrier": lambda: at_clock(prepared, found.sps, found.timing_samples, cyclic_f0),
        }
        clocks["filtered_start"] = clocks["cyclic_carrier"]
        for arm in arms:
            start = em_channel.START_FILTERED if arm == "filtered_start" else em_channel.START_MATCHED
            out["decisions"][arm] = em_decision(clocks[arm](), passes, start)
    # Timing error in symbols, at the true rate (the blind timing moved to the nearest symbol).
    dt = (line_timing - true_timing) / sps
    out["rate_error"] = found.sps / sps - 1
    out["timing_error"] = float(dt - round(dt))
    out["carrier_error"] = float(((found.carrier - true_f0 + 0.5) % 1.0 - 0.5) * sps)   # cycles a symbol
    out["cyclic_carrier_error"] = float(((cyclic_f0 - true_f0 + 0.5) % 1.0 - 0.5) * sps)
    return out


def pick(labels: np.ndarray, snr: np.ndarray, params: np.ndarray, per_class: int, snr_min: float,
         snr_max: float, faded_share: float, seed: int) -> np.ndarray:
    """per_class high-order bursts of each class at snr_min..snr_max, faded_share of them at
    >= 0.1 symbols of delay spread."""
    rng = np.random.default_rng(seed)
    spread = np.array([spread_symbols(p) for p in params])
    chosen = []
    for c in HIGH_ORDER_LABELS:
        ok = (labels == LABELS.index(c)) & (snr >= snr_min) & (snr <= snr_max)
        faded = np.flatnonzero(ok & (spread >= 0.1))
        other = np.flatnonzero(ok & (spread < 0.1))
        n_faded = int(round(per_class * faded_share))
        chosen += list(rng.choice(faded, min(n_faded, faded.size), replace=False))
        chosen += list(rng.choice(other, min(per_class - n_faded, other.size), replace=False))
    return np.sort(np.array(chosen))


def summarize(truth: np.ndarray, spread: np.ndarray, rows: list[dict], arms: tuple[str, ...] = ARMS) -> dict:
    dec = {a: np.array([r["decisions"][a] for r in rows]) for a in arms}
    right = {a: dec[a] == truth for a in arms}
    table = {}
    for lo, hi, name in SPREAD_BINS:
        m = (spread >= lo) & (spread < hi) if name != "unfaded" else spread == 0
        if name == "< 0.1":
            m = (spread > 0) & (spread < hi)
        if m.any():
            table[name] = {"bursts": int(m.sum()), **{a: float(right[a][m].mean() * 100) for a in arms}}
    table["all"] = {"bursts": int(truth.size), **{a: float(right[a].mean() * 100) for a in arms}}
    steps = {}
    for a, b in (step for step in STEPS if set(step) <= set(arms)):
        d = right[b].astype(float) - right[a]
        steps[f"{a} -> {b}"] = {"points": float(d.mean() * 100), "se": float(d.std(ddof=1) / math.sqrt(d.size) * 100),
                                "won": int((d > 0).sum()), "lost": int((d < 0).sum())}
    rate = np.array([r["rate_error"] for r in rows])
    tim = np.array([r["timing_error"] for r in rows])
    car = np.array([r["carrier_error"] for r in rows])
    cyc = np.array([r["cyclic_carrier_error"] for r in rows])
    bad_rate = np.abs(rate) > 0.02
    errors = {"rate_off_2pct": float(np.mean(bad_rate) * 100),
              "rate_off_2pct_faded": float(np.mean(bad_rate[spread >= 0.1]) * 100),
              "timing_error_abs_median_symbols": float(np.nanmedian(np.abs(tim))),
              "timing_error_abs_p90_symbols": float(np.nanpercentile(np.abs(tim), 90)),
              "timing_error_abs_median_faded": float(np.nanmedian(np.abs(tim[spread >= 0.1]))),
              "carrier_error_abs_median_cyc_per_symbol": float(np.nanmedian(np.abs(car))),
              "carrier_error_over_0.07_faded": float(np.mean(np.abs(car[spread >= 0.1]) > 0.07) * 100),
              "cyclic_carrier_error_abs_median_cyc_per_symbol": float(np.nanmedian(np.abs(cyc))),
              "cyclic_carrier_error_over_0.07_faded": float(np.mean(np.abs(cyc[spread >= 0.1]) > 0.07) * 100)}
    if "blind" in right:
        errors["blind_right_when_rate_off"] = float(right["blind"][bad_rate].mean() * 100) if bad_rate.any() else None
        errors["blind_right_when_rate_ok"] = float(right["blind"][~bad_rate].mean() * 100)
    return {"table": table, "steps": steps, "clock_errors": errors}


FROZEN_DOPPLER = (1e-8, 2e-8)     # cycles/sample: the channel does not move over a burst


def variant_config(variant: str) -> ChannelConfig:
    """The chain of a --synth variant: "frozen" (timing and multipath, a channel that does
    not move), "doppler" (timing and multipath as the training chain draws them), "full"
    (the training chain, every burst faded), or "frozen+F" for F one of channel.FAMILIES."""
    if variant == "full":
        return dataclasses.replace(ChannelConfig(), p_multipath=1.0)
    doppler = ChannelConfig().doppler_cyc_per_sample_range if variant == "doppler" else FROZEN_DOPPLER
    families = ["timing", "multipath"]
    added = variant.split("+", 1)[1] if variant.startswith("frozen+") else None
    if added in FAMILIES:
        families.append(added)
    elif added is not None or variant not in ("frozen", "doppler"):
        raise SystemExit(f"unknown variant {variant!r}: frozen, doppler, full or frozen+F, F in {FAMILIES}")
    return dataclasses.replace(ChannelConfig.only(*families), doppler_cyc_per_sample_range=doppler)


def synthesized(variant: str, per_class: int, snr_min: float, snr_max: float, n_samples: int, seed: int
                ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """(bursts, labels, params): per_class faded (>= 0.1 symbols) bursts of each high-order class
    synthesized on variant_config(variant), at even SNRs in snr_min..snr_max."""
    rng = np.random.default_rng(seed)
    cfg = variant_config(variant)
    bursts, labels, params = [], [], []
    grid = np.arange(snr_min, snr_max + 1e-9, 2.0)
    for c in HIGH_ORDER_LABELS:
        kept = 0
        while kept < per_class:
            batch = synthesize([c] * (4 * per_class), n_samples, rng, rng.choice(grid, 4 * per_class), cfg)
            for i in range(len(batch.label_index)):
                if kept < per_class and spread_symbols(batch.params[i]) >= 0.1:
                    bursts.append(batch.iq[i])
                    labels.append(batch.label_index[i])
                    params.append(batch.params[i])
                    kept += 1
    return bursts, np.array(labels), np.array(params)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset", type=Path, nargs="?", help="a dataset file with the synthesizer's params")
    ap.add_argument("--synth", metavar="VARIANT", help="bursts synthesized here instead (variant_config)")
    ap.add_argument("--samples", type=int, default=1024, help="--synth: samples a burst")
    ap.add_argument("--per-class", type=int, default=60)
    ap.add_argument("--faded-share", type=float, default=0.75)
    ap.add_argument("--snr-min", type=float, default=10.0)
    ap.add_argument("--snr-max", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=20261204)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--arms", default=",".join(ARMS), help="which arms, comma-separated")
    ap.add_argument("--passes", default="%d,%d" % em_channel.FAST_PASSES,
                    help="EM's annealed and final passes (the refiner's fast ones by default)")
    args = ap.parse_args(argv)
    arms = tuple(args.arms.split(","))
    passes = tuple(int(v) for v in args.passes.split(","))
    if not set(arms) <= set(ARMS):
        ap.error(f"--arms: each of {', '.join(ARMS)}")
    t0 = time.time()
    if args.synth:
        bursts, labels, params = synthesized(args.synth, args.per_class, args.snr_min, args.snr_max, args.samples,
                                             args.seed)
        idx = np.arange(len(bursts))
        jobs = [(b, p, passes, arms) for b, p in zip(bursts, params)]
    elif args.dataset:
        with h5py.File(args.dataset, "r") as f:
            labels, snr, params = f["label_index"][:], f["snr_db"][:], f["params"][:]
            idx = pick(labels, snr, params, args.per_class, args.snr_min, args.snr_max, args.faded_share, args.seed)
            off, length = f["offset"][:], f["length"][:]
            iq = f["iq"]
            jobs = [(iq[off[i]:off[i] + length[i]], params[i], passes, arms) for i in idx]
    else:
        ap.error("give a dataset or --synth VARIANT")
    high = {LABELS.index(c): k for k, c in enumerate(HIGH_ORDER_LABELS)}
    truth = np.array([high[int(labels[i])] for i in idx])
    spread = np.array([spread_symbols(params[i]) for i in idx])
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(read_burst, jobs, chunksize=4))
    result = summarize(truth, spread, rows, arms)
    result |= {"dataset": args.synth or str(args.dataset), "bursts": int(idx.size), "seconds": round(time.time() - t0, 1),
               "args": {k: str(v) for k, v in vars(args).items()}}
    print(json.dumps(result, indent=1))
    if args.json:
        np.savez(args.json.with_suffix(".npz"), index=idx, truth=truth, spread=spread,
                 **{arm: np.array([r["decisions"][arm] for r in rows]) for arm in arms},
                 rate_error=np.array([r["rate_error"] for r in rows]),
                 timing_error=np.array([r["timing_error"] for r in rows]),
                 carrier_error=np.array([r["carrier_error"] for r in rows]),
                 cyclic_carrier_error=np.array([r["cyclic_carrier_error"] for r in rows]))
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
