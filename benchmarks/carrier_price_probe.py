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
  `coherence_cyclic` rule) instead of the genie's, the carrier fitted as the refiner's is;
- with --integrate, ``phase_integrated`` and ``reach<R>_integrated`` (R the first of
  --reaches): the likelihood averaged over the phase (INTEGRATE_PHASES a symmetry period),
  and over the phase and every frequency within +-R (a grid of 1 / (INTEGRATE_STEPS n)
  cycles a symbol for n symbols) instead of fitted: what a receiver that does not pick one
  carrier would read. Each alphabet's noise share is the one its fitted carrier found.
  Costly: --symbols keeps every arm to the central N symbols.

Printed: accuracy by SNR and arm, paired differences between neighbouring arms (+- 1 SE), and
by class for each arm. A measurement, not a test; tests/test_bench_carrier_price_probe.py
checks its parts. Results: benchmarks/carrier_price_probe.md.

    PYTHONPATH=. python3 benchmarks/carrier_price_probe.py [--channel clean|full] [--snrs 4,6,8]
        [--per-class 30] [--reaches 0.007,0.07] [--integrate] [--symbols 512] [--workers 2] [--seed 7]
        [--json OUT]
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

from feature_screen import _unit, alphabet_logliks, glrt_class_scores, mixture_loglik  # noqa: E402
from rfclassify.dsp import class_equalizer as ce  # noqa: E402
from rfclassify.dsp import symbol_clock as sc  # noqa: E402
from rfclassify.dsp.channel import ChannelConfig  # noqa: E402
from rfclassify.dsp.synth import synthesize  # noqa: E402
from rfclassify.dsp.windows import central  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402

SERVED_RULE = sc.COHERENCE_CYCLIC
INTEGRATE_PHASES = 32     # phases a symmetry period the integrated arms average over
INTEGRATE_STEPS = 8       # their frequency grid: 1 / (INTEGRATE_STEPS n) cycles a symbol for n symbols


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


def unit_symbols(y: np.ndarray | None, symbols: int = ce.MAX_SYMBOLS) -> np.ndarray | None:
    """The central `symbols` of y at unit power; None for none or too few."""
    if y is None:
        return None
    y = central(np.asarray(y, complex), min(symbols, ce.MAX_SYMBOLS))
    return None if y.size < ce.MIN_SYMBOLS else _unit(y)


def decide(y: np.ndarray | None, reach: float | None) -> int:
    """The high-order class (index into HIGH_ORDER_LABELS) the soft likelihood picks for
    unit-power symbols y (unit_symbols) with the carrier fitted within `reach` (None:
    known, frequency and phase 0); -1 where there are none."""
    if y is None:
        return -1
    bank = ce.alphabet_bank(HIGH_ORDER_LABELS)
    if reach is None:
        carrier = (np.zeros(len(bank.sizes)), np.zeros(len(bank.sizes)))
    else:
        carrier = ce.carrier_fit(y, bank, reach=reach)      # reach 0: frequency 0, the phase fitted
    s = glrt_class_scores(y, carrier)
    return -1 if s is None else int(np.argmax(s))


def decide_integrated(y: np.ndarray | None, reach: float) -> int:
    """The class whose best alphabet's likelihood of unit-power symbols y, averaged over the
    phase and the frequencies within +-reach (reach 0: the phase alone), is the highest; each
    alphabet at the noise share its carrier fit within `reach` found. -1 where y is None."""
    if y is None:
        return -1
    bank = ce.alphabet_bank(HIGH_ORDER_LABELS)
    n, t = y.size, np.arange(y.size)
    freq, phase = ce.carrier_fit(y, bank, reach=reach)
    _, shares = alphabet_logliks(y, bank, freq, phase)
    freqs = np.arange(-reach, reach + 1e-12, 1.0 / (INTEGRATE_STEPS * n)) if reach > 0 else np.zeros(1)
    best = np.full(len(HIGH_ORDER_LABELS), -np.inf)
    for a in range(len(bank.sizes)):
        turns = 2 * np.pi / int(bank.symmetry[a]) * np.arange(INTEGRATE_PHASES) / INTEGRATE_PHASES
        z = y * np.exp(-1j * (2 * np.pi * freqs[:, None, None] * t + turns[None, :, None]))     # (F, P, n)
        total = n * mixture_loglik(z, bank.points[a, :bank.sizes[a]], shares[a]).ravel()
        peak = total.max()
        best[bank.owner[a]] = max(best[bank.owner[a]], peak + math.log(np.mean(np.exp(total - peak))))
    return int(np.argmax(best))


INTEGRATED = "_integrated"


def arm_names(channel: str, reaches: tuple[float, ...], integrate: bool = False) -> list[str]:
    """The arms in the order of what they know, less at each step; an integrated arm follows
    the fitted arm it averages instead (steps() pairs them)."""
    names = (["known"] if channel == "clean" else []) + ["phase"] + (["phase" + INTEGRATED] if integrate else [])
    for i, r in enumerate(reaches):
        names += [f"reach{r:g}"] + ([f"reach{r:g}" + INTEGRATED] if integrate and i == 0 else [])
    return names + ["served_clock"]


def steps(arms: list[str]) -> list[tuple[str, str]]:
    """The paired comparisons: each fitted arm against the one before it (integrated arms
    skipped), and each integrated arm against its fitted one."""
    fitted = [a for a in arms if not a.endswith(INTEGRATED)]
    pairs = list(zip(fitted[:-1], fitted[1:]))
    return pairs + [(a[:-len(INTEGRATED)], a) for a in arms if a.endswith(INTEGRATED)]


def read_burst(job: tuple[np.ndarray, np.void, str, tuple[float, ...], bool, int]) -> dict[str, int]:
    """Every arm's decision for one burst."""
    iq, params, channel, reaches, integrate, symbols = job
    out: dict[str, int] = {}
    with np.errstate(all="ignore"):
        y = unit_symbols(genie_symbols(iq, params), symbols)
        if channel == "clean":
            out["known"] = decide(y, None)
        out["phase"] = decide(y, 0.0)
        if integrate:
            out["phase_integrated"] = decide_integrated(y, 0.0)
        for r in reaches:
            out[f"reach{r:g}"] = decide(y, r)
        if integrate and reaches:
            out[f"reach{reaches[0]:g}_integrated"] = decide_integrated(y, reaches[0])
        found = sc.blind_symbols(iq, SERVED_RULE)
        out["served_clock"] = decide(unit_symbols(None if found is None else found.symbols, symbols),
                                     ce.CARRIER_MAX_OFFSET)
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
    paired = {}
    for a, b in steps(arms):
        d = right[b].astype(float) - right[a]
        paired[f"{a} -> {b}"] = {"points": float(d.mean() * 100), "se": float(d.std(ddof=1) / math.sqrt(d.size) * 100)}
    by_class = {a: {label: float(right[a][truth == c].mean() * 100) for c, label in enumerate(HIGH_ORDER_LABELS)}
                for a in arms}
    return {"accuracy": table, "steps": paired, "by_class": by_class}


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
    ap.add_argument("--integrate", action="store_true", help="also the arms that average over the carrier")
    ap.add_argument("--symbols", type=int, default=ce.MAX_SYMBOLS, help="central symbols every arm scores")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    snrs = [float(v) for v in args.snrs.split(",") if v]
    reaches = tuple(float(v) for v in args.reaches.split(",") if v)
    if not snrs or args.per_class < 1 or any(r < 0 for r in reaches) or args.symbols < ce.MIN_SYMBOLS:
        print(f"carrier_price_probe: need SNRs, --per-class >= 1, reaches >= 0 and --symbols >= {ce.MIN_SYMBOLS}",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    iq, params, truth, snr = bursts(args.channel, snrs, args.per_class, args.seed)
    jobs = [(b, p, args.channel, reaches, args.integrate, args.symbols) for b, p in zip(iq, params)]
    if args.workers > 1:
        with ProcessPoolExecutor(args.workers) as pool:
            rows = list(pool.map(read_burst, jobs, chunksize=4))
    else:
        rows = [read_burst(j) for j in jobs]
    arms = arm_names(args.channel, reaches, args.integrate)
    result = summarize(arms, rows, truth, snr)
    print(f"{len(rows)} {args.channel} bursts, {time.perf_counter() - t0:.0f} s")
    print(format_table(result, arms))
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, **result}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
