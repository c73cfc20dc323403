"""Does a symbol clock make 16PSK against 32PSK learnable? A fine-tune on genie-clocked input.

The seventh session found that features of every sample cannot carry the 16th-power line
that separates 16PSK from 32PSK when the carrier and rate are unknown (psk_order_probe.md,
"Seventh session"). This probe gives the network what a synchronizing front end would: the
burst's own symbol clock (the synthesizer's recorded rate, timing and roll-off; a genie),
but not its carrier. Bursts of 16PSK and 32PSK, 1200 samples at 2-8 samples/symbol, random
carrier phase, carrier offset up to 0.02 cycles/sample and symbol timing, SNR 20..30 dB
(held-out: 30 dB). Each burst is RRC matched-filtered at its symbol instants
(high_order_sync_ladder.symbols_at) and the network sees, normalized the model's way:

- ``raw``: the control, no clock: the first 1024 samples, as the model sees bursts today;
- ``aligned2``: 2 samples/symbol (each instant and the half-symbol point after it), 256
  samples = 128 symbols;
- ``aligned1``: the 256 symbols alone;
- ``aligned1+power``: the symbols, plus a grafted branch that scales them to unit magnitude
  and forms z^4, z^8, z^16 and their products with the conjugate one symbol earlier, each
  with a 31-symbol local mean (zero-started 1x1 conv + BN into the stem, as in
  psk_order_probe.py; Sqrt and Div, probe only);
- ``aligned1+invariant``: the same plus the squared magnitude of each local mean, which a
  carrier phase does not turn;
- ``blind1+invariant``: the same, but at a blind clock: the fifth session's estimate
  (high_order_sync_ladder.estimate_symbol_rate: the |x|^2 line, searched near the
  occupied-bandwidth guess of rfclassify.dsp.rate.estimate_sps) and a 0.3 roll-off.

The shipped model is fine-tuned on each for STEPS steps of 64 (AdamW, lr 5e-4, one CPU
thread) and scored on 400 held-out bursts. Results: symbol_clock_probe.md.

    PYTHONPATH=. python3 benchmarks/symbol_clock_probe.py ARM [--steps N] [--model-dir models] [--classes A,B,..]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from high_order_sync_ladder import BLIND_ROLLOFF, estimate_symbol_rate, symbols_at  # noqa: E402
from psk_order_probe import fine_tune_curve  # noqa: E402

from rfclassify.dsp import synth  # noqa: E402
from rfclassify.dsp.channel import ChannelConfig  # noqa: E402
from rfclassify.dsp.rate import estimate_sps  # noqa: E402
from rfclassify.model.network import load_trained  # noqa: E402

CLASSES = ["16PSK", "32PSK"]  # --classes replaces them
ARMS = ("raw", "aligned2", "aligned1", "aligned1+power", "aligned1+invariant", "blind1+invariant")
CHANNEL = ChannelConfig.only("timing", "cfo", "phase")
SPS = (2.0, 8.0)
BURST, WINDOW = 1200, 256


def clocked(iq: np.ndarray, params: np.ndarray, arm: str) -> np.ndarray:
    """(B, WINDOW) matched-filter outputs at the recorded (or, for blind arms, estimated) symbol clock, zero-padded."""
    out = np.zeros((len(iq), WINDOW), np.complex64)
    for i, (x, p) in enumerate(zip(iq, params)):
        if arm.startswith("blind"):  # the fifth session's blind clock: |x|^2 line within the bandwidth guess
            (sps, t), rolloff = estimate_symbol_rate(x, float(estimate_sps(x[None, :])[0]))[0], BLIND_ROLLOFF
        else:
            sps, rolloff, t = float(p["samples_per_symbol"]), float(p["rolloff"]), float(p["timing_offset_samples"])
        on = symbols_at(x, sps, rolloff, t)
        if arm.startswith("aligned2"):
            half = symbols_at(x, sps, rolloff, t + sps / 2)
            m = min(on.size, half.size, WINDOW // 2)
            s = np.empty(2 * m, np.complex64)
            s[0::2], s[1::2] = on[:m], half[:m]
        else:
            s = on[:WINDOW]
        out[i, :s.size] = s
    return out


def bursts(arm: str, n: int, rng: np.random.Generator, snr_db: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    labels = [CLASSES[i] for i in rng.integers(0, len(CLASSES), n)]
    b = synth.synthesize(labels, BURST, rng, snr_db=rng.uniform(*snr_db, n), channel=CHANNEL)
    if arm == "raw":  # the control: the model's own input, the first 1024 samples
        return b.iq[:, :1024], b.label_index
    return clocked(b.iq, b.params, arm), b.label_index


class SymbolPowers(torch.nn.Module):
    """Probe only: unit-magnitude symbols, z^4, z^8, z^16 and their one-symbol lag products, with local
    means; with `invariant`, also the squared magnitude of each local mean (a carrier phase turns the
    means, not their magnitudes)."""

    def __init__(self, invariant: bool) -> None:
        super().__init__()
        self.invariant = invariant
        self.channels = 30 if invariant else 24

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        re, im = x[:, 0:1], x[:, 1:2]
        r = torch.sqrt(re * re + im * im) + 1e-6
        re, im = re / r, im / r
        feats, order = [], 1
        while order < 16:
            re, im, order = re * re - im * im, 2 * re * im, 2 * order
            if order in (4, 8, 16):
                pre = torch.nn.functional.pad(re, (1, 0))[..., :-1]  # one symbol earlier
                pim = torch.nn.functional.pad(im, (1, 0))[..., :-1]
                lag_re, lag_im = re * pre + im * pim, im * pre - re * pim
                means = [torch.nn.functional.avg_pool2d(v, (1, 31), 1, (0, 15)) for v in (re, im, lag_re, lag_im)]
                feats += [re, im, lag_re, lag_im, *means]
                if self.invariant:
                    feats += [means[0] * means[0] + means[1] * means[1], means[2] * means[2] + means[3] * means[3]]
        return torch.cat(feats, dim=1)


def fine_tune(model_dir: str, arm: str, steps: int) -> list[tuple[int, float]]:
    model, meta = load_trained(model_dir)
    if "+" in arm:
        model.product = SymbolPowers(invariant=arm.endswith("+invariant"))
        c = model.stem.conv.out_channels
        bn = torch.nn.BatchNorm2d(c)
        torch.nn.init.zeros_(bn.weight)
        model.product_merge = torch.nn.Sequential(torch.nn.Conv2d(model.product.channels, c, 1, bias=False), bn)
    return fine_tune_curve(model, meta.normalization, lambda n, rng, snr: bursts(arm, n, rng, snr), steps, 250)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("arm", choices=ARMS)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--model-dir", default="models")
    ap.add_argument("--classes", default=",".join(CLASSES), help="comma-separated labels (default 16PSK,32PSK)")
    args = ap.parse_args()
    CLASSES[:] = args.classes.split(",")
    torch.set_num_threads(1)
    default_sps = synth.SPS_RANGE
    synth.SPS_RANGE = SPS  # the synthesizer's module constant: this probe's only knob on it
    try:
        t0 = time.perf_counter()
        curve = fine_tune(args.model_dir, args.arm, args.steps)
        print(f"{args.arm}: held-out accuracy by step " + ", ".join(f"{s}: {a:.1%}" for s, a in curve)
              + f" ({time.perf_counter() - t0:.0f} s)", flush=True)
    finally:
        synth.SPS_RANGE = default_sps


if __name__ == "__main__":
    main()
