"""Does a small network over a burst's carrier-recovered symbols beat the refiner's 27 numbers?

The eighth session's refiner (rfclassify.engine.refiner) re-decides the bursts the CNN calls
high-order from 27 carrier-invariant statistics at the blind symbol clock; its next step in
docs/model.md was to give a network the clocked symbols themselves. Before growing the
product network a second input, this probe trains a separate small one on them and fuses it
late, the cheapest test of whether the sequence carries more than the 27 numbers.

- Features per burst (``clocked_sequence``): the product's blind clock (strongest |x|^2 line,
  band-centroid carrier, RRC 0.3 matched filter; rfclassify.dsp.symbol_clock), then a second
  carrier pass (the strongest line of y^4 or u^8 at the symbol rate, removed and filtered
  again), then per symbol 21 channels: the symbols derotated by the 4th-power line's local
  (64-symbol) phase and by the 4th, 8th and 16th-power line's whole-burst phase (I/Q each),
  |y|^2, the one-symbol lag product (I/Q), the unit-magnitude 8th/16th/32nd powers against
  their 16-symbol local means (I/Q), and the squared magnitudes of the local means of the
  4th..32nd powers. The derotated channels keep the constellation's amplitude structure,
  which no invariant does.
- The network (``SeqNet``): two 1x1 convolutions per symbol (64, 48), three residual blocks
  of two k = 5 convolutions (48), masked mean and max over the symbols, log symbol count,
  a 128-unit head, 12 outputs; 88,604 parameters. AdamW 2e-3, linear decay, batches of 128
  bursts cropped to 128 symbols, for --train-s seconds on the CPU.
- Training bursts: --per-class of each of the 12 high-order classes, 1024 samples, the full
  channel with the shipped model's DC range (-40..+6 dB), SNR uniform over 6..30 dB.
- Evaluation: the test split's 1024-sample bursts at SNR >= 10 dB (DATA.h5): the sequence
  network alone on the high-order ones; then a learned fusion like fusion_probe.py's (the
  refiner's perceptron on fresh routed bursts, --fusion-per-class of each class) with the
  CNN's log-probabilities and SNR plus (a) the 27 invariants, (b) those and the sequence
  network's 12 log-probabilities, (c) the sequence network instead of the invariants.

Results: sequence_refiner_probe.md.

    PYTHONPATH=. python3 benchmarks/sequence_refiner_probe.py MODEL_DIR DATA.h5 [--per-class 8000]
        [--train-s 720] [--fusion-per-class 1500] [--workers 2] [--json PATH] [--quick]
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

from rfclassify.dsp import symbol_clock as sc  # noqa: E402
from rfclassify.dsp.symbol_sequence import (  # noqa: E402
    MIN_SYMBOLS, N_CHANNELS, second_pass_symbols, sequence_from_symbols)
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402


def clocked_sequence(iq: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(sequence (N_CHANNELS, n), the invariants of the same symbols) of one raw burst at its
    blind clock with the second carrier pass; None for a burst the chain cannot clock. The
    sequence is the product's (rfclassify.dsp.symbol_sequence, where this probe's features
    moved in the tenth session), without its cap on the symbol count."""
    found = sc.blind_symbols(iq)
    if found is None or found.symbols.size < MIN_SYMBOLS:
        return None
    try:
        with np.errstate(all="ignore"):
            y = second_pass_symbols(found)
            if y.size < MIN_SYMBOLS:
                return None
            return sequence_from_symbols(y), sc.clock_invariants(y)
    except (ValueError, IndexError, ZeroDivisionError, FloatingPointError):
        return None


def _features_chunk(bursts: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray] | None]:
    return [clocked_sequence(b) for b in bursts]


def features(bursts: list[np.ndarray], workers: int) -> tuple[list[np.ndarray | None], np.ndarray]:
    """(sequences or None, invariants (n, N_INVARIANTS); zeros where the clock failed)."""
    chunks = [bursts[i:i + 200] for i in range(0, len(bursts), 200)]
    if workers > 1:
        with ProcessPoolExecutor(workers) as ex:
            out = [r for c in ex.map(_features_chunk, chunks) for r in c]
    else:
        out = [r for c in chunks for r in _features_chunk(c)]
    seqs = [None if r is None else r[0] for r in out]
    inv = np.stack([np.zeros(sc.N_INVARIANTS, np.float32) if r is None else r[1] for r in out])
    return seqs, inv


# -- the network ------------------------------------------------------------------------
def make_seqnet(width: int = 48, blocks: int = 3, kernel: int = 5, n_out: int = 12):
    import torch
    from torch import nn

    class SeqNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Sequential(nn.Conv1d(N_CHANNELS, 64, 1), nn.ReLU(), nn.Conv1d(64, width, 1), nn.ReLU())
            self.blocks = nn.ModuleList(nn.Sequential(
                nn.Conv1d(width, width, kernel, padding=kernel // 2), nn.BatchNorm1d(width), nn.ReLU(),
                nn.Conv1d(width, width, kernel, padding=kernel // 2), nn.BatchNorm1d(width)) for _ in range(blocks))
            self.head = nn.Sequential(nn.Linear(2 * width + 1, 128), nn.ReLU(), nn.Linear(128, n_out))

        def forward(self, x, mask):  # x (B, C, L), mask (B, 1, L)
            h = self.embed(x) * mask
            for b in self.blocks:
                h = torch.relu(h + b(h)) * mask
            n = mask.sum(-1).clamp_min(1)
            pooled = [h.sum(-1) / n, (h - 1e4 * (1 - mask)).amax(-1), torch.log(n) / 6]
            return self.head(torch.cat(pooled, 1))

    return SeqNet()


def padded(seqs: list[np.ndarray], crop: int | None, rng: np.random.Generator | None):
    """(x (B, C, L), mask (B, 1, L)) torch tensors; sequences longer than crop are cut at a
    random start."""
    import torch

    cut = []
    for s in seqs:
        if crop is not None and s.shape[1] > crop:
            a = int(rng.integers(0, s.shape[1] - crop + 1))
            s = s[:, a:a + crop]
        cut.append(s)
    n = max(s.shape[1] for s in cut)
    x = np.zeros((len(cut), N_CHANNELS, n), np.float32)
    m = np.zeros((len(cut), 1, n), np.float32)
    for j, s in enumerate(cut):
        x[j, :, :s.shape[1]] = s
        m[j, :, :s.shape[1]] = 1
    return torch.from_numpy(x), torch.from_numpy(m)


def log_probs(model, seqs: list[np.ndarray | None], batch: int = 256) -> np.ndarray:
    """(n, 12) log-probabilities; uniform where a burst has no sequence."""
    import torch

    out = np.full((len(seqs), 12), math.log(1 / 12), np.float32)
    ok = [i for i, s in enumerate(seqs) if s is not None and s.shape[1] >= MIN_SYMBOLS]
    ok.sort(key=lambda i: seqs[i].shape[1])
    model.eval()
    with torch.no_grad():
        for a in range(0, len(ok), batch):
            idx = ok[a:a + batch]
            x, m = padded([seqs[i] for i in idx], None, None)
            out[idx] = torch.log_softmax(model(x, m), 1).numpy()
    model.train()
    return out


def train_seqnet(seqs: list[np.ndarray | None], y: np.ndarray, seconds: float, seed: int, crop: int = 128,
                 batch: int = 128, lr: float = 2e-3):
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    keep = np.array([i for i, s in enumerate(seqs) if s is not None and s.shape[1] >= MIN_SYMBOLS])
    model = make_seqnet()
    opt = torch.optim.AdamW(model.parameters(), lr, weight_decay=1e-4)
    yt = torch.from_numpy(y.astype(np.int64))
    t0, step = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        idx = rng.choice(keep, batch)
        x, m = padded([seqs[i] for i in idx], crop, rng)
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, step / 200) * max(0.05, 1 - (time.perf_counter() - t0) / seconds)
        loss = torch.nn.functional.cross_entropy(model(x, m), yt[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
    return model, step


# -- data -------------------------------------------------------------------------------
def synthesized(per_class: int, seed: int, snr_range: tuple[float, float]) -> tuple[list[np.ndarray], np.ndarray]:
    """(bursts, class index in HIGH_ORDER_LABELS) of the 12 classes, 1024 samples, full channel."""
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.synth import synthesize

    rng = np.random.default_rng(seed)
    labels = np.repeat(np.array(HIGH_ORDER_LABELS), per_class)
    rng.shuffle(labels)
    snr = rng.uniform(*snr_range, labels.size)
    channel = ChannelConfig(dc_offset_db_range=(-40.0, 6.0))
    bursts: list[np.ndarray] = []
    for s in range(0, labels.size, 512):
        bursts += list(synthesize(list(labels[s:s + 512]), 1024, rng, snr[s:s + 512], channel).iq)
    return bursts, np.array([HIGH_ORDER_LABELS.index(str(lb)) for lb in labels])


def test_bursts(path: str, limit: int | None) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """(bursts, label index in the dataset's labels, SNR) of DATA.h5's 1024-sample bursts at >= 10 dB."""
    import h5py

    with h5py.File(path, "r") as f:
        length, snr, lab, off = f["length"][:], f["snr_db"][:], f["label_index"][:], f["offset"][:]
        sel = np.flatnonzero((length == 1024) & (snr >= 10))[:limit]
        bursts = [f["iq"][off[i]:off[i] + length[i]] for i in sel]
    return bursts, lab[sel], snr[sel]


def network_outputs(model_dir: str, bursts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    from rfclassify.engine.classifier import Classifier

    with Classifier.load(model_dir, backend="onnxruntime", refiner=False) as clf:
        res = clf.classify(bursts)
        labels = list(clf.labels)
    return np.stack([r.probabilities for r in res]), np.array([r.snr_db for r in res]), labels


def fused_accuracy(x: np.ndarray, y: np.ndarray, tx: np.ndarray, net: np.ndarray, routed: np.ndarray,
                   truth: np.ndarray, hidx: np.ndarray, seeds: tuple[int, ...]) -> tuple[float, float]:
    """(high-order accuracy, all-class accuracy) of the refiner's perceptron fitted on (x, y)
    re-deciding the routed test bursts, averaged over seeds."""
    from rfclassify.model.refiner_fit import RefinerFitConfig, train_perceptron

    high = np.isin(truth, hidx)
    scores = []
    for seed in seeds:
        w, _ = train_perceptron(x, y, 12, RefinerFitConfig(workers=0, seed=seed))
        h = np.maximum(((tx - w["mean"]) / w["scale"]) @ w["w1"] + w["b1"], 0.0)
        pred = net.argmax(1).copy()
        pred[routed] = hidx[(h @ w["w2"] + w["b2"])[routed].argmax(1)]
        scores.append(((pred == truth)[high].mean(), (pred == truth).mean()))
    return tuple(float(100 * v) for v in np.mean(scores, axis=0))


def run(model_dir: str, data: str, per_class: int, train_s: float, fusion_per_class: int, workers: int,
        seed: int, limit: int | None) -> dict:
    from rfclassify.engine.refiner import Refiner

    t0 = time.perf_counter()
    bursts, y = synthesized(per_class, seed, (6.0, 30.0))
    seqs, _ = features(bursts, workers)
    del bursts
    model, steps = train_seqnet(seqs, y, train_s, seed)
    del seqs
    tb, truth, tsnr = test_bursts(data, limit)
    net, net_snr, labels = network_outputs(model_dir, tb)
    hidx = np.array([labels.index(c) for c in HIGH_ORDER_LABELS])
    tseqs, tinv = features(tb, workers)
    tlp = log_probs(model, tseqs)
    high = np.isin(truth, hidx)
    routed = np.isin(net.argmax(1), hidx)
    out = {"train_bursts": int(y.size), "train_steps": steps, "train_s": train_s, "test_bursts": len(tb),
           "test_high_order": int(high.sum()), "test_routed": int(routed.sum()),
           "cnn_high_order": float(100 * (net.argmax(1) == truth)[high].mean()),
           "cnn_all": float(100 * (net.argmax(1) == truth).mean()),
           "seqnet_alone_high_order": float(100 * (hidx[tlp.argmax(1)] == truth)[high].mean())}
    fb, fy = synthesized(fusion_per_class, seed + 99, (10.0, 30.0))
    fprobs, fsnr, _ = network_outputs(model_dir, fb)
    keep = np.flatnonzero(np.isin(fprobs.argmax(1), hidx))
    fseqs, finv = features([fb[i] for i in keep], workers)
    base = Refiner.features(fprobs[keep], fsnr[keep], finv)
    tbase = Refiner.features(net, net_snr, tinv)
    flp = log_probs(model, fseqs)
    n_net = len(labels) + 1
    arms = {"invariants": (base, tbase),
            "invariants+seqnet": (np.hstack([base, flp]), np.hstack([tbase, tlp])),
            "seqnet": (np.hstack([base[:, :n_net], flp]), np.hstack([tbase[:, :n_net], tlp]))}
    out["fusion_examples"] = int(keep.size)
    out["fusion"] = {name: dict(zip(("high_order", "all"),
                                    fused_accuracy(x, fy[keep], tx, net, routed, truth, hidx, (1, 2))))
                     for name, (x, tx) in arms.items()}
    out["seconds"] = time.perf_counter() - t0
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("data", help="the test split (HDF5); its 1024-sample bursts at >= 10 dB are scored")
    ap.add_argument("--per-class", type=int, default=8000)
    ap.add_argument("--train-s", type=float, default=720.0)
    ap.add_argument("--fusion-per-class", type=int, default=1500)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=9001)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--quick", action="store_true", help="a smoke run: a few bursts, seconds of training")
    args = ap.parse_args(argv)
    if args.quick:
        args.per_class, args.train_s, args.fusion_per_class, limit = 10, 3.0, 10, 120
    else:
        limit = None
    out = run(args.model_dir, args.data, args.per_class, args.train_s, args.fusion_per_class, args.workers,
              args.seed, limit)
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
