"""CPU A/B on the classes the shipped model fails: which change helps them learn fastest?

The 12 high-order labels only (8/16/32PSK, 16-128APSK, 16-256QAM), SNR uniform 10..30 dB,
the full impairment chain (or a plain channel), windows of LENGTH samples. Every arm trains
on bursts from the same seed (5; the same bursts unless the arm narrows the symbol rate or
resamples them), with a random carrier rotation per burst per step, for
STEPS steps of 64 with AdamW and a warmup/cosine schedule, and is scored on the same 4,096
held-out bursts (seed 99). Results of one run on the 2-core CPU are in high_order_cpu_ab.md.

    PYTHONPATH=. python3 benchmarks/high_order_cpu_ab.py ARM [LENGTH] [STEPS]
"""

from __future__ import annotations

import contextlib
import json
import sys
import time

import numpy as np
import torch

from rfclassify.dsp import synth
from rfclassify.dsp.rate import estimate_sps
from rfclassify.dsp.synth import ChannelConfig, synthesize
from rfclassify.dsp.windows import normalize_batch, to_model_input
from rfclassify.labels import HIGH_ORDER_LABELS
from rfclassify.model.network import PRODUCT_STEM, build_network
from rfclassify.model.train_step import EagerStep

BATCH = 64
_STAGES = [{"channels": 32, "kernel": 5, "dilations": [1]}, {"channels": 48, "kernel": 5, "dilations": [1]},
           {"channels": 64, "kernel": 3, "dilations": [1, 2]}, {"channels": 96, "kernel": 3, "dilations": [1, 2]},
           {"channels": 128, "kernel": 3, "dilations": [1, 2]}, {"channels": 128, "kernel": 3, "dilations": [1]}]
#: arm -> (network overrides, plain channel?, peak LR, torch seed[, samples-per-symbol range]);
#: in_channels 4 adds |x| and the lag-1 phase difference; the sps arms narrow the synthesizer's
#: log-uniform 2..16 to ask whether the spread of symbol rates, or the symbol count, is what is hard
ARMS: dict[str, tuple] = {
    "iq": ({}, False, 3e-3, 0),
    "iq_seed1": ({}, False, 3e-3, 1),
    "clean": ({}, True, 3e-3, 0),
    "lr1e-3": ({}, False, 1e-3, 0),
    "amp_dphase": ({"in_channels": 4}, False, 3e-3, 0),
    "product_stem": ({"product_stem": PRODUCT_STEM}, False, 3e-3, 0),
    "product_stem_amp_dphase": ({"in_channels": 4, "product_stem": PRODUCT_STEM}, False, 3e-3, 0),
    "wide_front": ({"stem_channels": 64, "stages": [{**_STAGES[0], "channels": 64}, {**_STAGES[1], "channels": 64},
                                                    *_STAGES[2:]]}, False, 3e-3, 0),
    "big_kernels": ({"stem_kernel": 15, "stages": [{**_STAGES[0], "kernel": 9}, {**_STAGES[1], "kernel": 7},
                                                   *_STAGES[2:]]}, False, 3e-3, 0),
    "sps4": ({}, False, 3e-3, 0, (4.0, 4.0001)),       # 64 symbols per 256-sample window, one rate
    "sps5.7": ({}, False, 3e-3, 0, (5.66, 5.6601)),    # the baseline's typical 45 symbols, one rate
    "sps8_16": ({}, False, 3e-3, 0, (8.0, 16.0)),      # the slowest third: 16..32 symbols
}
#: arms that keep the synthesizer's 2..16 samples/symbol but resample every burst to TARGET_SPS
#: before the network (crop the middle or zero-pad to the window): with the true rate (the
#: ceiling of a symbol-rate-normalizing front end) or with the product's blind estimate
#: (rfclassify.dsp.rate.estimate_sps; the recorded run used its prototype, clipped to 1.8..20)
RESAMPLE_ARMS = {"resample4_true": "true", "resample4_estimated": "estimated"}
TARGET_SPS = 4.0


def resample_to(iq: np.ndarray, sps: np.ndarray, length: int) -> np.ndarray:
    """Each burst resampled by TARGET_SPS / sps, then centre-cropped or zero-padded to `length`."""
    from fractions import Fraction

    from scipy.signal import resample_poly

    out = np.zeros((len(iq), length), np.complex64)
    for i, (x, s) in enumerate(zip(iq, sps)):
        r = Fraction(TARGET_SPS / float(s)).limit_denominator(32)
        y = resample_poly(x, r.numerator, r.denominator)
        if len(y) >= length:
            start = (len(y) - length) // 2
            out[i] = y[start:start + length]
        else:
            out[i, :len(y)] = y
    return out


@contextlib.contextmanager
def sps_range(rng_sps: tuple[float, float] | None):
    """Temporarily narrow the synthesizer's samples-per-symbol range (None: leave it)."""
    saved = synth.SPS_RANGE
    if rng_sps is not None:
        synth.SPS_RANGE = rng_sps
    try:
        yield
    finally:
        synth.SPS_RANGE = saved


def bursts(n: int, length: int, plain: bool, rng: np.random.Generator, resample: str = ""
           ) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, len(HIGH_ORDER_LABELS), n)
    snr = rng.uniform(10, 30, n).astype(np.float32)
    channel = ChannelConfig.only("timing", "phase") if plain else ChannelConfig()
    sb = synthesize([HIGH_ORDER_LABELS[i] for i in labels], length, rng, snr_db=snr, channel=channel)
    iq = normalize_batch(sb.iq)  # per burst, as the product does before windowing
    if resample:
        sps = sb.params["samples_per_symbol"] if resample == "true" else estimate_sps(iq)
        iq = resample_to(iq, sps, length)
    return iq, labels


def features(w: np.ndarray, channels: int) -> np.ndarray:
    x = to_model_input(w)
    if channels == 2:
        return x
    amp = np.abs(w).astype(np.float32)
    dphase = np.zeros_like(amp)
    dphase[:, 1:] = np.angle(w[:, 1:] * np.conj(w[:, :-1])) / np.pi
    return np.concatenate([x, amp[:, None, None, :], dphase[:, None, None, :]], axis=1)


def main(arm: str, length: int = 256, steps: int = 2500) -> dict:
    resample = RESAMPLE_ARMS.get(arm, "")
    # the resampling arms are the baseline plus a front end; any other unknown name is a KeyError
    arch, plain, peak_lr, torch_seed, *sps = ARMS["iq" if resample else arm]
    channels = int(arch.get("in_channels", 2))
    torch.set_num_threads(2)
    rng = np.random.default_rng(5)
    with sps_range(sps[0] if sps else None):
        train_w, train_y = bursts(BATCH * steps, length, plain, rng, resample)
        val_w, val_y = bursts(4096, length, plain, np.random.default_rng(99), resample)
    torch.manual_seed(torch_seed)
    net = build_network({**arch, "n_classes": len(HIGH_ORDER_LABELS)})
    opt = torch.optim.AdamW(net.parameters(), lr=peak_lr, weight_decay=0.02)
    step = EagerStep(net, opt, max_grad_norm=5.0, label_smoothing=0.0, snr_loss_weight=0.0, noise_idx=-1, bf16=False)
    t0 = time.time()
    net.train()
    for i in range(steps):
        for g in opt.param_groups:
            g["lr"] = peak_lr * min(1.0, (i + 1) / 100) * 0.5 * (1 + np.cos(np.pi * i / steps))
        w = train_w[i * BATCH:(i + 1) * BATCH]
        w = w * np.exp(1j * rng.uniform(0, 2 * np.pi, (BATCH, 1))).astype(np.complex64)
        y = torch.from_numpy(train_y[i * BATCH:(i + 1) * BATCH].astype(np.int64))
        step(torch.from_numpy(features(w, channels)), y, torch.full((BATCH,), float("nan")))
    net.eval()
    with torch.no_grad():
        pred = np.concatenate([net(torch.from_numpy(features(val_w[i:i + 512], channels)))[0].argmax(1).numpy()
                               for i in range(0, len(val_w), 512)])
    result = {"arm": arm, "length": length, "steps": steps, "accuracy": round(float(np.mean(pred == val_y)), 4),
              "train_s": round(time.time() - t0), "per_class": {
                  name: round(float(np.mean(pred[val_y == c] == c)), 3) for c, name in enumerate(HIGH_ORDER_LABELS)}}
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:4]))
