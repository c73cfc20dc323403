"""Can the CNN learn 16PSK against 32PSK at all? A targeted fine-tune against a matched-filter statistic.

Bursts of 16PSK and 32PSK only, 256 samples at 4 samples/symbol (64 symbols), SNR 20..30 dB,
no impairment but a fractional symbol-timing offset (no carrier phase or frequency offset:
the constellations keep their orientation). The shipped model, plain and with a grafted
product stem (network.PRODUCT_STEM with "merge": "add"), is fine-tuned on them alone for
STEPS steps of 64 (AdamW, lr 5e-4) and scored on 400 held-out bursts at 30 dB. The
reference is a plain statistic: matched RRC filter, the best of the 4 sample phases, and
|mean((z/|z|)^16)|, which is near 1 for 16PSK and near 0 for 32PSK; it decides 16PSK above
0.5. Results of one run on the 2-core CPU: psk_order_probe.md.

``--blind`` asks instead whether such a statistic survives what the product sees (seventh
session): 1024-sample 16PSK and 32PSK bursts with a random carrier phase and offset,
symbol timing and rate (2-16 samples/symbol), no training. Each burst goes through the RRC
matched filter of the nearest of four rates (or one filter for all), to unit magnitude and
the 16th power, and is scored by the largest |mean(w[n] w*[n-m])|^2 over lags m = 1..15
(a carrier offset holds the product's phase constant; the lag that is a whole number of
symbols shows the line) over every sample, as an in-graph branch would see them. The table
gives the best single threshold's accuracy.

    PYTHONPATH=. python3 benchmarks/psk_order_probe.py [MODEL_DIR] [--steps N]
    PYTHONPATH=. python3 benchmarks/psk_order_probe.py --blind
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfclassify.dsp import synth  # noqa: E402
from rfclassify.dsp.channel import ChannelConfig  # noqa: E402
from rfclassify.dsp.pulses import rrc  # noqa: E402
from rfclassify.dsp.windows import normalize_batch, to_model_input  # noqa: E402
from rfclassify.model.network import PRODUCT_STEM, grow_network, load_trained  # noqa: E402

CLASSES = ("16PSK", "32PSK")
SPS, LENGTH = 4, 256
CHANNEL = ChannelConfig.only("timing")
ARMS = ("plain network", "product stem", "power path, unit magnitude (not DLA-legal)",
        "power path, products only (DLA-legal)")


def bursts(n: int, rng: np.random.Generator, snr_db: tuple[float, float]) -> synth.SynthBatch:
    labels = [CLASSES[i] for i in rng.integers(0, 2, n)]
    return synth.synthesize(labels, LENGTH, rng, snr_db=rng.uniform(*snr_db, n), channel=CHANNEL)


def power16_statistic(iq: np.ndarray, rolloff: float) -> float:
    """|mean((z/|z|)^16)| at the best of the SPS sample phases after a matched RRC filter."""
    taps = rrc(np.arange(-8 * SPS, 8 * SPS + 1) / SPS, np.array(rolloff))  # 8 symbols each side
    z = np.convolve(iq, taps, mode="same")
    best = 0.0
    for phase in range(SPS):
        u = z[phase::SPS][8:-8]
        u = u / np.maximum(np.abs(u), 1e-12)
        best = max(best, float(np.abs(np.mean(u ** 16))))
    return best


def lag_statistic(iq: np.ndarray, sps: float, order: int = 16, max_lag: int = 15) -> np.ndarray:
    """Per burst, max over lags 1..max_lag of |mean(w[n] conj(w[n-m]))|^2, w = (z/|z|)^order, z matched-filtered."""
    t = np.arange(31) - 15
    taps = rrc(t / sps, np.array(0.35))
    z = np.array([np.convolve(x, taps / np.sqrt((taps ** 2).sum()), mode="same") for x in iq])
    w = (z / np.maximum(np.abs(z), 1e-12)) ** order
    return np.max([np.abs(np.mean(w[:, m:] * np.conj(w[:, :-m]), axis=1)) ** 2
                   for m in range(1, max_lag + 1)], axis=0)


def blind_table(n: int = 200) -> None:
    """Best-threshold accuracy of lag_statistic on 16PSK vs 32PSK with carrier phase, offset, timing and rate."""
    rng = np.random.default_rng(0)
    channel = ChannelConfig.only("timing", "cfo", "phase")
    banks = {"four matched filters (2.5, 4.5, 8, 13 samples/symbol; nearest)": (2.5, 4.5, 8.0, 13.0),
             "one filter (3 samples/symbol)": (3.0,)}
    print("| SNR | filters | 16PSK median | 32PSK median | best-threshold accuracy |\n|---|---|---|---|---|")
    for snr in (30.0, 20.0, 15.0):
        got = {}
        for label in CLASSES:
            b = synth.synthesize([label] * n, 1024, rng, snr_db=np.full(n, snr), channel=channel)
            iq, sps = normalize_batch(b.iq, "keep_dc"), b.params["samples_per_symbol"]
            for name, rates in banks.items():
                nearest = np.abs(np.log(sps[:, None] / np.array(rates)[None])).argmin(axis=1)
                got[label, name] = np.concatenate([lag_statistic(iq[nearest == i], r) for i, r in enumerate(rates)])
        for name in banks:
            a, c = got[CLASSES[0], name], got[CLASSES[1], name]
            acc = max(((a > t).mean() + (c <= t).mean()) / 2 for t in np.concatenate([a, c]))
            print(f"| {snr:.0f} dB | {name} | {np.median(a):.4f} | {np.median(c):.4f} | {acc:.1%} |", flush=True)


class PowerPath(torch.nn.Module):
    """Probe only: matched filter, optionally unit magnitude, then z^4, z^8, z^16 and their local means."""

    def __init__(self, unit_magnitude: bool, orders: tuple[int, ...] = (4, 8, 16), mean_samples: int = 31) -> None:
        super().__init__()
        self.unit_magnitude, self.orders, self.mean_samples = unit_magnitude, orders, mean_samples
        self.channels = 4 * len(orders)
        self.fir = torch.nn.Conv2d(2, 2, (1, 33), padding=(0, 16), groups=2, bias=False)
        taps = rrc(np.arange(-16, 17) / SPS, np.array(0.35)) / SPS
        with torch.no_grad():
            self.fir.weight[:] = torch.tensor(taps, dtype=torch.float32).view(1, 1, 1, 33)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.fir(x)
        re, im = z[:, 0:1], z[:, 1:2]
        if self.unit_magnitude:
            r = torch.sqrt(re * re + im * im) + 1e-6
            re, im = re / r, im / r
        feats, order = [], 1
        while order < max(self.orders):
            re, im, order = re * re - im * im, 2 * re * im, order * 2
            if order in self.orders:
                pad = (0, self.mean_samples // 2)
                feats += [re, im, torch.nn.functional.avg_pool2d(re, (1, self.mean_samples), 1, pad),
                          torch.nn.functional.avg_pool2d(im, (1, self.mean_samples), 1, pad)]
        return torch.cat(feats, dim=1)


def graft(model: torch.nn.Module, arm: str) -> torch.nn.Module:
    """The shipped network with the arm's extra branch merged into its stem (the parent's function at step 0)."""
    if arm == "product stem":
        return grow_network(model, model.arch, {**model.arch, "product_stem": {**PRODUCT_STEM, "merge": "add"}})
    if arm.startswith("power path"):
        model.product = PowerPath(unit_magnitude="unit" in arm)
        c = model.stem.conv.out_channels
        bn = torch.nn.BatchNorm2d(c)
        torch.nn.init.zeros_(bn.weight)
        model.product_merge = torch.nn.Sequential(torch.nn.Conv2d(model.product.channels, c, 1, bias=False), bn)
    return model


def fine_tune_curve(model: torch.nn.Module, normalization: str, draw, steps: int, every: int
                    ) -> list[tuple[int, float]]:
    """Fine-tune `model` on draw(n, rng, snr_range) -> (iq, label_index) bursts, 64 a step (AdamW, lr 5e-4),
    and score it on 400 held-out ones at 30 dB every `every` steps: [(step, accuracy)]. Shared by the probes."""
    held_iq, held_y = draw(400, np.random.default_rng(99), (30.0, 30.0))
    x_held = torch.from_numpy(to_model_input(normalize_batch(held_iq, normalization)))

    def score() -> float:
        model.eval()
        with torch.no_grad():
            ok = model(x_held)[0].argmax(1).numpy() == held_y
        model.train()
        return float(ok.mean())

    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.0)
    rng = np.random.default_rng(1)
    curve = [(0, score())]
    model.train()
    for step in range(1, steps + 1):
        iq, y = draw(64, rng, (20.0, 30.0))
        x = torch.from_numpy(to_model_input(normalize_batch(iq, normalization)))
        loss = torch.nn.functional.cross_entropy(model(x)[0], torch.from_numpy(y.astype(np.int64)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % every == 0:
            curve.append((step, score()))
    return curve


def fine_tune(model_dir: str, arm: str, steps: int) -> list[tuple[int, float]]:
    model, meta = load_trained(model_dir)

    def draw(n: int, rng: np.random.Generator, snr_db: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
        b = bursts(n, rng, snr_db)
        return b.iq, b.label_index

    return fine_tune_curve(graft(model, arm), meta.normalization, draw, steps, steps // 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir", nargs="?", default="models")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--blind", action="store_true", help="only the blind-statistic table (no training)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    if args.blind:
        blind_table()
        return
    default_sps = synth.SPS_RANGE
    synth.SPS_RANGE = (float(SPS), float(SPS))  # the synthesizer's module constant: this probe's only knob on it
    try:
        held = bursts(400, np.random.default_rng(99), (30.0, 30.0))
        stat = np.array([power16_statistic(x, float(r)) for x, r in zip(held.iq, held.params["rolloff"])])
        says_16 = stat > 0.5
        print(f"matched filter + |mean z^16| > 0.5: {np.mean(says_16 == (held.label_index == held.label_index.min())):.1%} "
              f"right (16PSK median {np.median(stat[held.label_index == held.label_index.min()]):.2f}, "
              f"32PSK median {np.median(stat[held.label_index != held.label_index.min()]):.2f})", flush=True)
        for arm in ARMS:
            t0 = time.perf_counter()
            curve = fine_tune(args.model_dir, arm, args.steps)
            print(f"{arm}: held-out accuracy by step "
                  + ", ".join(f"{s}: {a:.1%}" for s, a in curve) + f" ({time.perf_counter() - t0:.0f} s)", flush=True)
    finally:
        synth.SPS_RANGE = default_sps


if __name__ == "__main__":
    main()
