"""Do the samples between the symbols help the sequence network? A paired CPU A/B, not a test.

The eleventh session found the sequence network limited by its input: multipath
intersymbol interference (benchmarks/sequence_net_limits.py), which a symbol-spaced view
cannot equalize once the clock has sampled it. A fractionally spaced equalizer sees the
matched filter half a symbol after each symbol instant as well. This probe adds those
samples to the sequence as three channels (I and Q, turned by the same whole-burst
4th-power carrier phase as the symbols' own channels, and |.|^2) and trains two networks
side by side on the same batches of the same bursts:

  A: the product's 21 channels (rfclassify.dsp.symbol_sequence.sequence_from_symbols)
  B: the same 21 plus the 3 half-symbol channels

With --front equalized (twelfth session) B's three channels are instead the symbols as the
best-fitting alphabet's decision-directed equalizer leaves them (rfclassify.dsp.class_equalizer:
the alphabet of the 21 with the highest likelihood, its filtered symbols at unit signal power;
I, Q, |.|^2): does an equalized view let the network past the multipath?

Both are the product's torch network (rfclassify.model.sequence_fit.make_torch_net, B with
a wider first layer), gated (--gates) or not. High-order bursts of one length, SNR 0..30 dB
for training, 10..30 dB for scoring, the model's training channel. Scored on whole
sequences of fresh bursts, overall, unfaded, faded and on the faded bursts with the largest
delay spread (> 0.215 symbols, the worst quartile in sequence_net_limits.json).

    PYTHONPATH=. python3 benchmarks/fractional_sequence_probe.py [--bursts 80000] [--train-s 600]
        [--length 1024] [--workers 2] [--gates] [--front half-symbol|equalized] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfclassify.dsp import symbol_clock as sc  # noqa: E402
from rfclassify.dsp.channel import FADING_NONE  # noqa: E402
from rfclassify.dsp.carrier_lines import derotations  # noqa: E402
from rfclassify.dsp.symbol_sequence import (MAX_SYMBOLS, N_CHANNELS, second_pass_baseband,  # noqa: E402
                                            sequence_from_symbols)
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402

HALF_CHANNELS = 3
WORST_SPREAD_SYMBOLS = 0.215


def half_symbol_sequence(iq: np.ndarray) -> np.ndarray | None:
    """(N_CHANNELS + HALF_CHANNELS, n) float16: the product's channels of the second pass's
    symbols, then the matched filter half a symbol after each symbol instant (carrier taken out
    as for the symbols, turned by the same whole-burst 4th-power phase; I, Q, |.|^2)."""
    found = sc.blind_symbols(iq)
    if found is None or found.symbols.size < 16:
        return None
    with np.errstate(all="ignore"):
        xb = second_pass_baseband(found)
        pulse = sc.rrc_lookup(sc.BLIND_ROLLOFF)
        y = sc.symbols_at(xb, found.sps, sc.BLIND_ROLLOFF, found.timing_samples, pulse=pulse)
        # half a symbol later, kept from the same first symbol on (the edge moves with it)
        h = sc.symbols_at(xb, found.sps, sc.BLIND_ROLLOFF, found.timing_samples + found.sps / 2,
                          edge_symbols=sc.EDGE_SYMBOLS + 0.5, pulse=pulse)
        n = min(y.size, h.size, MAX_SYMBOLS)
        y, h = y[:n], h[:n]
        if n < 16 or not (np.all(np.isfinite(y)) and np.all(np.isfinite(h))):
            return None
        scale = math.sqrt(max(float(np.mean(np.abs(y) ** 2)), 1e-30))
        base = sequence_from_symbols(y)
        _, whole4 = derotations(y / scale, 4, local=False)
        turn = np.exp(1j * np.angle(whole4 * np.conj(y / scale)))       # the whole-burst phase, per symbol
        hr = h / scale * turn
        seq = np.concatenate([base, np.stack([hr.real, hr.imag, np.abs(hr) ** 2]).astype(np.float32)])
    return seq.astype(np.float16) if np.all(np.isfinite(seq)) else None


def equalized_sequence(iq: np.ndarray) -> np.ndarray | None:
    """(N_CHANNELS + HALF_CHANNELS, n) float16: the product's equalized front
    (rfclassify.dsp.sequence_fronts): the 21 channels of the clocked symbols, then the symbols
    as the best-fitting high-order alphabet's equalizer leaves them (I, Q, |.|^2)."""
    from rfclassify.dsp.sequence_fronts import burst_front_sequence

    seq = burst_front_sequence(iq, "equalized", HIGH_ORDER_LABELS)
    return None if seq is None else seq.astype(np.float16)


FRONTS = {"half-symbol": half_symbol_sequence, "equalized": equalized_sequence}


def _chunk(job: tuple[int, int, int, tuple[float, float], dict, str]) -> list[tuple[np.ndarray, int, int, float]]:
    """(sequence, class, fading type, delay spread in symbols) of one chunk of synthesized bursts."""
    from rfclassify.dsp.synth import synthesize
    from rfclassify.model.training_data import DataRecipe

    seed, n, length, snr_range, overrides, front = job
    rng = np.random.default_rng(seed)
    cls = rng.integers(0, len(HIGH_ORDER_LABELS), n)
    batch = synthesize([HIGH_ORDER_LABELS[c] for c in cls], length, rng, rng.uniform(*snr_range, n),
                       DataRecipe(channel_overrides=overrides).channel_config())
    p = batch.params
    out = []
    for i, iq in enumerate(batch.iq):
        s = FRONTS[front](iq)
        if s is not None:
            spread = float(p["delay_spread_samples"][i] / p["samples_per_symbol"][i])
            out.append((s, int(cls[i]), int(p["fading_type"][i]), spread))
    return out


def make(n: int, seed: int, length: int, snr_range: tuple[float, float], overrides: dict, workers: int,
         front: str = "half-symbol") -> list:
    jobs = [(seed + i, min(200, n - a), length, snr_range, overrides, front) for i, a in enumerate(range(0, n, 200))]
    if workers <= 1:
        return [r for job in jobs for r in _chunk(job)]
    from multiprocessing import get_context

    with get_context("spawn").Pool(workers) as pool:
        return [r for chunk in pool.imap(_chunk, jobs) for r in chunk]


def main(argv: list[str] | None = None) -> int:
    import torch

    from rfclassify.model.meta import ModelMeta, default_model_dir
    from rfclassify.model.sequence_fit import SequenceFitConfig, make_torch_net

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bursts", type=int, default=80_000)
    ap.add_argument("--eval-bursts", type=int, default=3000)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--train-s", type=float, default=600.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--gates", action="store_true")
    ap.add_argument("--front", choices=sorted(FRONTS), default="half-symbol", help="what B's three channels are")
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    meta = ModelMeta.load(default_model_dir())
    overrides = meta.channel_overrides
    t0 = time.perf_counter()
    train = make(args.bursts, args.seed, args.length, (0.0, 30.0), overrides, args.workers, args.front)
    test = make(args.eval_bursts, args.seed + 5_000_000, args.length, (10.0, 30.0), overrides, args.workers,
                args.front)
    t_data = time.perf_counter() - t0
    print(f"{len(train)} training and {len(test)} scoring sequences in {t_data:.0f} s", flush=True)

    keep, crops = 256, (32, 64, 128, 256)
    x = np.zeros((len(train), N_CHANNELS + HALF_CHANNELS, keep), np.float16)
    n_sym = np.zeros(len(train), np.int64)
    rng = np.random.default_rng(args.seed)
    for i, (s, *_rest) in enumerate(train):
        a = int(rng.integers(0, max(1, s.shape[1] - keep + 1)))
        w = s[:, a:a + keep]
        x[i, :, :w.shape[1]], n_sym[i] = w, w.shape[1]
    y = torch.tensor([t[1] for t in train])
    x_all, n_all = torch.from_numpy(x), torch.from_numpy(n_sym)
    cfg = SequenceFitConfig(gates=args.gates)
    b_name = f"B: 21 + 3 {args.front}"
    torch.manual_seed(args.seed)
    models = {"A: 21 channels": make_torch_net(cfg), b_name: make_torch_net(cfg)}
    with torch.no_grad():   # B: the same first layer, three more input channels
        wide = torch.nn.Conv1d(N_CHANNELS + HALF_CHANNELS, 64, 1)
        wide.weight.zero_()
        wide.weight[:, :N_CHANNELS] = models[b_name].embed[0].weight
        wide.bias.copy_(models[b_name].embed[0].bias)
        wide.weight[:, N_CHANNELS:].normal_(0, 0.05)
        models[b_name].embed[0] = wide
    channels = {"A: 21 channels": N_CHANNELS, b_name: N_CHANNELS + HALF_CHANNELS}
    opts = {k: torch.optim.AdamW(m.parameters(), cfg.lr, weight_decay=cfg.weight_decay) for k, m in models.items()}
    gen = torch.Generator().manual_seed(args.seed)
    arange = torch.arange(keep)
    step, t1 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t1) < args.train_s:
        idx = torch.randint(0, y.numel(), (cfg.batch,), generator=gen)
        crop = int(rng.choice(crops))
        n = n_all[idx]
        start = (torch.rand(cfg.batch, generator=gen) * (n - crop).clamp_min(0).add(1)).long()
        pos = (start[:, None] + arange[None, :crop]).clamp_max(keep - 1)
        xb = torch.gather(x_all[idx], 2, pos[:, None, :].expand(-1, x.shape[1], -1)).float()
        mask = (arange[None, :crop] < (n - start)[:, None]).float()[:, None, :]
        lr = cfg.lr * min(1.0, (step + 1) / cfg.warmup_steps) * max(0.02, 1 - elapsed / args.train_s)
        for k, model in models.items():
            for g in opts[k].param_groups:
                g["lr"] = lr
            loss = torch.nn.functional.cross_entropy(model(xb[:, :channels[k]], mask), y[idx])
            opts[k].zero_grad(set_to_none=True)
            loss.backward()
            opts[k].step()
        step += 1
    print(f"{step} paired steps of {cfg.batch} in {args.train_s:.0f} s", flush=True)

    cls = np.array([t[1] for t in test])
    fading = np.array([t[2] for t in test])
    spread = np.array([t[3] for t in test])
    faded = fading != FADING_NONE
    subsets = {"all": np.ones(cls.size, bool), "unfaded": ~faded, "faded": faded,
               f"faded, delay spread > {WORST_SPREAD_SYMBOLS} symbols": faded & (spread > WORST_SPREAD_SYMBOLS)}
    report = {"bursts": len(train), "eval_bursts": len(test), "length": args.length, "gates": args.gates,
              "front": args.front,
              "data_s": round(t_data, 1), "train_s": args.train_s, "paired_steps": step, "batch": cfg.batch,
              "subset_sizes": {k: int(v.sum()) for k, v in subsets.items()}, "accuracy": {}}
    for k, model in models.items():
        model.eval()
        pred = np.zeros(cls.size, np.int64)
        with torch.no_grad():
            for i, (s, *_rest) in enumerate(test):
                xs = torch.from_numpy(s[:channels[k]].astype(np.float32))[None]
                pred[i] = int(model(xs, torch.ones(1, 1, s.shape[1])).argmax(1))
        report["accuracy"][k] = {name: round(float(np.mean(pred[m] == cls[m])), 4) for name, m in subsets.items()}
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
