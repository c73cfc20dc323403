"""Can the sequence network learn to undo multipath? An unrolled blind equalizer in front of it.

Three arms are trained in lockstep on the same batches of the same streamed bursts (the
product's data path: rfclassify.model.sequence_fit, the coherence clock, the lines carrier
pass, the clocked front's 21 channels) and scored on the same fresh 1024-sample bursts:

- ``plain``: the shipped sequence network's shape on the 21 channels;
- ``cma``: the same network, its input the 21 channels and three more (I, Q and |z|^2 of z, the
  burst's symbols through a 9-tap filter fitted by ``iterations`` unrolled constant-modulus
  gradient steps, each step size and the modulus learned with the network);
- ``learned``: as ``cma``, but each step's error is (|z|^2 - R) plus a small learned function
  of |z|^2 and the step (starting at zero), so the training can turn the constant-modulus
  step into whatever decision-directed step the classes want.

The symbols the filter starts from are channels 2-3 of the front (the burst's symbols turned
by the phase of their whole-burst 4th-power line); the filter's output is turned back the
same way (not differentiated). Every step renormalizes the filter to unit output power.

Why: the high-order errors at >= 10 dB are multipath bursts (three quarters of them on
big1024, thirty-sixth session), where a receiver that knows the channel is right 98 % of the
time (benchmarks/multipath_bound.md) and the class-blind filter's fixed 50 steps paid a few
tenths. A network that learns its own equalizer end to end is the one form not tried.

    PYTHONPATH=. python3 benchmarks/learned_equalizer_probe.py --device cuda --workers 15 \
        --bursts 700000 --start-bursts 60000 --train-s 400 --eval-bursts 12000 --json $OUT/probe.json

``--quick`` is a CPU smoke run of a minute. Reports each arm's accuracy on the evaluation
bursts (SNR 0..30 dB), at 10..30 and 0..10 dB, and at >= 10 dB by the channel's rms delay
spread in symbols, with each equalizing arm's paired difference to ``plain`` (+- 1 SE).
``--save W.pt`` keeps the arms' weights; ``feature_screen.py collect --torch-arms W.pt``
screens them against the served model.

Thirty-sixth session (docs/model.md): trained 7,747 steps of 1,024, ``learned`` is +0.7 +- 0.3
points over ``plain`` at 10..30 dB alone (+3.7 at >= 0.3 symbols of delay spread, nothing
unfaded), and neither adds anything to the served answers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from rfclassify.dsp.sequence_fronts import burst_front_sequence, front_channels  # noqa: E402
from rfclassify.dsp.symbol_clock import COHERENCE  # noqa: E402
from rfclassify.dsp.symbol_sequence import CARRIER_LINES, MAX_SYMBOLS  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402
from rfclassify.model import sequence_fit as sf  # noqa: E402

ARMS = ("plain", "cma", "learned")
EVAL_LENGTH = 1024
EVAL_SNR_DB = (0.0, 30.0)
SPREAD_BINS = ((-1.0, 0.0, "no multipath"), (0.0, 0.1, "< 0.1"), (0.1, 0.3, "0.1-0.3"), (0.3, 1e9, ">= 0.3"))


# -- evaluation bursts, with their channels ----------------------------------------------
def eval_chunk(job: tuple[int, int, dict]) -> tuple[list[np.ndarray], list[int], list[tuple[float, float]]]:
    """(sequences, classes, (SNR dB, delay spread in symbols or -1 without multipath)) of one
    chunk of 1024-sample high-order bursts, whole sequences as served."""
    from rfclassify.dsp.synth import synthesize
    from rfclassify.model.training_data import DataRecipe

    seed, n, overrides = job
    rng = np.random.default_rng(seed)
    cls = rng.integers(0, len(HIGH_ORDER_LABELS), n)
    snr = rng.uniform(*EVAL_SNR_DB, n)
    batch = synthesize([HIGH_ORDER_LABELS[c] for c in cls], EVAL_LENGTH, rng, snr,
                       DataRecipe(channel_overrides=overrides).channel_config())
    seqs, ys, info = [], [], []
    for iq, c, p, s in zip(batch.iq, cls, batch.params, snr, strict=True):
        seq = burst_front_sequence(iq, "clocked", HIGH_ORDER_LABELS, MAX_SYMBOLS, COHERENCE, CARRIER_LINES)
        if seq is None:
            continue
        spread = float(p["delay_spread_samples"]) / float(p["samples_per_symbol"]) if p["n_taps"] > 1 else -1.0
        seqs.append(seq.astype(np.float16))
        ys.append(int(c))
        info.append((float(s), spread))
    return seqs, ys, info


def make_eval(n: int, seed: int, workers: int, overrides: dict):
    jobs = [(seed + i, min(200, n - a), overrides) for i, a in enumerate(range(0, n, 200))]
    seqs, ys, info = [], [], []
    for s, y, i in sf._chunks(jobs, workers, eval_chunk):
        seqs += s
        ys += y
        info += i
    return seqs, np.array(ys), np.array(info)


# -- the arms ------------------------------------------------------------------------------
def make_arms(cfg: sf.SequenceFitConfig, taps: int, iterations: int):
    import dataclasses

    import torch
    from torch import nn

    class Unrolled(nn.Module):
        """z = w * y, w fitted to the burst by `iterations` unrolled gradient steps."""

        def __init__(self, learned: bool) -> None:
            super().__init__()
            self.mu = nn.Parameter(torch.full((iterations,), 0.4))
            self.radius = nn.Parameter(torch.tensor(1.3))
            self.learned = learned
            if learned:
                self.g = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 1))
                nn.init.zeros_(self.g[2].weight)
                nn.init.zeros_(self.g[2].bias)

        def forward(self, y, m):                       # y complex (B, L), m (B, L)
            pad = taps // 2
            n = m.sum(1).clamp_min(1.0)
            ym = y * m
            yp = torch.complex(nn.functional.pad(ym.real, (pad, pad)), nn.functional.pad(ym.imag, (pad, pad)))
            Y = yp.unfold(1, taps, 1).flip(-1)         # Y[b, i, k] = y[i - k + pad]
            w = torch.zeros(y.shape[0], taps, dtype=y.dtype, device=y.device)
            w[:, pad] = 1.0
            for t in range(iterations):
                z = (Y * w[:, None, :]).sum(-1)
                s = (((z.real ** 2 + z.imag ** 2) * m).sum(1) / n).clamp_min(1e-6).rsqrt()
                w = w * s[:, None]
                z = z * s[:, None]
                r = z.real ** 2 + z.imag ** 2
                e = r - self.radius
                if self.learned:
                    e = e + self.g(torch.stack([r, torch.full_like(r, t / iterations)], -1))[..., 0]
                grad = ((e * m)[:, :, None] * z[:, :, None] * Y.conj()).sum(1) / n[:, None]
                w = w - self.mu[t] * grad
            z = (Y * w[:, None, :]).sum(-1)
            z = z * (((z.real ** 2 + z.imag ** 2) * m).sum(1) / n).clamp_min(1e-6).rsqrt()[:, None]
            with torch.no_grad():
                turn = torch.exp(-1j * torch.angle((z ** 4 * m).sum(1)) / 4)
            z = z * turn[:, None]
            return torch.stack([z.real, z.imag, z.real ** 2 + z.imag ** 2], 1) * m[:, None, :]

    class Arm(nn.Module):
        def __init__(self, eq) -> None:
            super().__init__()
            self.eq = eq
            self.net = sf.make_torch_net(cfg if eq is None else dataclasses.replace(cfg, front="equalized"))

        def forward(self, x, mask):
            if self.eq is None:
                return self.net(x, mask)
            extra = self.eq(torch.complex(x[:, 2], x[:, 3]), mask[:, 0])
            return self.net(torch.cat([x, extra], 1), mask)

    return {"plain": Arm(None), "cma": Arm(Unrolled(False)), "learned": Arm(Unrolled(True))}


def score(preds: dict[str, np.ndarray], y: np.ndarray, info: np.ndarray) -> dict:
    snr, spread = info[:, 0], info[:, 1]
    groups = {"all": np.ones(y.size, bool), "10..30 dB": snr >= 10, "0..10 dB": snr < 10}
    for lo, hi, name in SPREAD_BINS:      # spread is -1 without multipath: the first bin
        groups[f">= 10 dB, spread {name}"] = (snr >= 10) & (spread >= lo) & (spread < hi)
    out = {}
    for g, m in groups.items():
        row = {"bursts": int(m.sum())}
        base = preds["plain"][m] == y[m] if "plain" in preds else None
        for arm, p in preds.items():
            ok = p[m] == y[m]
            row[arm] = round(100 * float(ok.mean()), 2) if m.any() else None
            if arm != "plain" and base is not None and m.sum() > 1:
                d = ok.astype(float) - base
                row[f"{arm} - plain"] = [round(100 * float(d.mean()), 2), round(100 * float(d.std(ddof=1) / np.sqrt(d.size)), 2)]
        out[g] = row
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--bursts", type=int, default=700_000)
    ap.add_argument("--start-bursts", type=int, default=60_000)
    ap.add_argument("--train-s", type=float, default=400.0)
    ap.add_argument("--eval-bursts", type=int, default=12_000)
    ap.add_argument("--eval-every", type=int, default=3000)
    ap.add_argument("--taps", type=int, default=9)
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--seed", type=int, default=20261236)
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated, of " + ", ".join(ARMS))
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--save", type=Path, help="the arms' weights (torch state dicts), saved at every evaluation")
    ap.add_argument("--quick", action="store_true", help="a CPU smoke run")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.quick:
        args.bursts, args.start_bursts, args.train_s, args.eval_bursts, args.eval_every = 3000, 1500, 30.0, 400, 10**9

    import torch

    from rfclassify.model.meta import ModelMeta, default_model_dir

    overrides = ModelMeta.load(default_model_dir()).channel_overrides
    cfg = sf.SequenceFitConfig(bursts=args.bursts, start_bursts=args.start_bursts, train_s=args.train_s,
                               seed=args.seed, rate_rule=COHERENCE, workers=args.workers, device=args.device,
                               batch=args.batch, lr=args.lr)
    chosen = args.arms.split(",")
    if not chosen or set(chosen) - set(ARMS):
        ap.error(f"--arms takes some of {', '.join(ARMS)}")
    t0 = time.perf_counter()
    ev_seqs, ev_y, ev_info = make_eval(args.eval_bursts, args.seed + 9_000_000, args.workers, overrides)
    print(f"{len(ev_seqs)} evaluation bursts in {time.perf_counter() - t0:.0f} s", flush=True)
    torch.manual_seed(cfg.seed)
    dev = torch.device(cfg.device)
    arms = {k: v.to(dev) for k, v in make_arms(cfg, args.taps, args.iterations).items() if k in chosen}

    def save() -> None:
        if args.save:
            torch.save({"arms": {k: m.state_dict() for k, m in arms.items()}, "taps": args.taps,
                        "iterations": args.iterations, "config": {"rate_rule": cfg.rate_rule, "carrier": cfg.carrier}},
                       args.save)
    opts = {k: torch.optim.AdamW(v.parameters(), cfg.lr, weight_decay=cfg.weight_decay) for k, v in arms.items()}
    data = sf._StreamedSet(sf._jobs(cfg.bursts, cfg.seed, cfg, overrides, cfg.snr_range_db, cfg.max_keep, None),
                           cfg.workers, cfg.max_keep, front_channels(cfg.front), dev)
    history = []
    try:
        data.take(until=cfg.start_bursts, progress=lambda s: print(s, flush=True))
        print(f"training starts on {data.count} sequences ({time.perf_counter() - t0:.0f} s)", flush=True)
        gen = torch.Generator(device=dev)
        gen.manual_seed(cfg.seed)
        rng = np.random.default_rng(cfg.seed)
        losses = {k: 0.0 for k in arms}
        step, t1 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t1) < cfg.train_s:
            data.take()
            idx, xb, mask = sf.draw_windows(data, cfg, gen, rng)
            lr = cfg.lr * min(1.0, (step + 1) / cfg.warmup_steps) * max(0.02, 1 - elapsed / cfg.train_s)
            for k, model in arms.items():
                for g in opts[k].param_groups:
                    g["lr"] = lr
                loss = torch.nn.functional.cross_entropy(model(xb, mask), data.y[idx])
                opts[k].zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
                opts[k].step()
                losses[k] = 0.98 * losses[k] + 0.02 * loss.item() if step else loss.item()
            step += 1
            if step % args.eval_every == 0:
                preds = {k: sf.predict_sequences(m, ev_seqs, cfg.device) for k, m in arms.items()}
                row = {"step": step, "train_s": round(elapsed, 1), "bursts": data.count,
                       "loss": {k: round(v, 4) for k, v in losses.items()},
                       "accuracy": {k: round(100 * float(np.mean(p == ev_y)), 2) for k, p in preds.items()}}
                history.append(row)
                print(json.dumps(row), flush=True)
                save()
        preds = {k: sf.predict_sequences(m, ev_seqs, cfg.device) for k, m in arms.items()}
        save()
    finally:
        data.close()
    eqs = {k: {"mu": [round(float(v), 4) for v in m.eq.mu], "radius": round(float(m.eq.radius), 4)}
           for k, m in arms.items() if m.eq is not None}
    report = {"steps": step, "examples_per_arm": step * cfg.batch, "training_bursts": data.count,
              "train_s": cfg.train_s, "taps": args.taps, "iterations": args.iterations, "seed": args.seed,
              "eval_bursts": len(ev_seqs), "eval_length": EVAL_LENGTH, "eval_snr_db": list(EVAL_SNR_DB),
              "params": {k: int(sum(p.numel() for p in m.parameters())) for k, m in arms.items()},
              "equalizers": eqs, "history": history, "scores": score(preds, ev_y, ev_info),
              "total_s": round(time.perf_counter() - t0, 1)}
    print(json.dumps(report["scores"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
