"""The sequence network of sequence_refiner_probe.py trained at scale on a GPU, against the
CNN on the same fresh high-order bursts (12,000: 1,000 per class, 1024 samples, the full
channel with DC offsets up to +6 dB, SNR 10..30 dB, seed 777000).

Training bursts are synthesized and clocked in all but one of the host's cores (SNR 6..30 dB,
at most 256 symbols kept per burst, float16), then the network trains on DEVICE in batches
of 512 cropped to 128 symbols. Every 1,000 steps it prints the network's accuracy alone and
that of a product of experts with the CNN (the CNN's probabilities of the 12 classes times
the network's, for the bursts the CNN calls high-order). Results: sequence_refiner_probe.md.

    PYTHONPATH=. python3 benchmarks/sequence_refiner_scale.py N_TRAIN TRAIN_S WIDTH DEVICE OUT_JSON
"""
import json
import math
import os
import sys
import time
from multiprocessing import get_context

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sequence_refiner_probe as P  # noqa: E402

MAX_KEEP = 256  # symbols kept per training burst (training crops 128 of them)


def _make(args):
    seed, n, snr_lo = args
    bursts, y = P.synthesized(max(1, n // 12), seed, (snr_lo, 30.0))
    out_s, out_y = [], []
    rng = np.random.default_rng(seed)
    for x, c in zip(bursts, y):
        r = P.clocked_sequence(x)
        if r is None or r[0].shape[1] < P.MIN_SYMBOLS:
            continue
        s = r[0]
        if s.shape[1] > MAX_KEEP:
            a = int(rng.integers(0, s.shape[1] - MAX_KEEP + 1))
            s = s[:, a:a + MAX_KEEP]
        out_s.append(s.astype(np.float16))
        out_y.append(c)
    return out_s, out_y


def make_set(n, seed, snr_lo, workers):
    chunk = 1200
    jobs = [(seed + i, chunk, snr_lo) for i in range(max(1, n // chunk))]
    seqs, ys = [], []
    with get_context("fork").Pool(workers) as pool:
        for s, y in pool.imap_unordered(_make, jobs):
            seqs += s
            ys += y
    return seqs, np.array(ys)


def main():
    import torch

    n_train, train_s, width, device, out = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    workers = max(1, (os.cpu_count() or 2) - 1)
    t0 = time.time()
    ev_bursts, ev_y = P.synthesized(1000, 777_000, (10.0, 30.0))
    from rfclassify.engine.classifier import Classifier
    with Classifier.load("models", backend="torch" if device != "cpu" else "onnxruntime", refiner=False) as clf:
        probs = np.stack([r.probabilities for r in clf.classify(ev_bursts)])
        labels = list(clf.labels)
    hidx = np.array([labels.index(c) for c in P.HIGH_ORDER_LABELS])
    truth = hidx[ev_y]
    cnn = float((probs.argmax(1) == truth).mean())
    ev_seqs, _ = P.features(ev_bursts, workers)
    print(f"eval set ready: CNN {100 * cnn:.1f} % ({time.time() - t0:.0f} s)", flush=True)
    seqs, y = make_set(n_train, 1000, 6.0, workers)
    print(f"train set: {len(seqs)} bursts ({time.time() - t0:.0f} s)", flush=True)

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = P.make_seqnet(width=width).to(device)
    opt = torch.optim.AdamW(model.parameters(), 2e-3, weight_decay=1e-4)
    yt = torch.from_numpy(y.astype(np.int64))
    batch, crop, step, log = 512, 128, 0, []
    t1 = time.time()

    def evaluate():
        model.eval()
        lp = np.full((len(ev_seqs), 12), math.log(1 / 12), np.float32)
        ok = [i for i, s in enumerate(ev_seqs) if s is not None and s.shape[1] >= P.MIN_SYMBOLS]
        ok.sort(key=lambda i: ev_seqs[i].shape[1])
        with torch.no_grad():
            for a in range(0, len(ok), 512):
                idx = ok[a:a + 512]
                xx, mm = P.padded([ev_seqs[i] for i in idx], None, None)
                lp[idx] = torch.log_softmax(model(xx.to(device), mm.to(device)), 1).cpu().numpy()
        model.train()
        alone = float((lp.argmax(1) == ev_y).mean())
        poe = np.log(np.maximum(probs[:, hidx], 1e-12)) + lp
        routed = np.isin(probs.argmax(1), hidx)
        pred = probs.argmax(1).copy()
        pred[routed] = hidx[poe[routed].argmax(1)]
        return alone, float((pred == truth).mean())

    while time.time() - t1 < train_s:
        idx = rng.integers(0, len(seqs), batch)
        xx, mm = P.padded([seqs[i].astype(np.float32) for i in idx], crop, rng)
        for g in opt.param_groups:
            g["lr"] = 2e-3 * min(1.0, step / 300) * max(0.05, 1 - (time.time() - t1) / train_s)
        loss = torch.nn.functional.cross_entropy(model(xx.to(device), mm.to(device)), yt[idx].to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 1000 == 0:
            alone, poe = evaluate()
            log.append({"step": step, "s": round(time.time() - t1), "loss": float(loss), "seq_alone": alone, "poe": poe})
            print(log[-1], flush=True)
    alone, poe = evaluate()
    res = {"n_train": len(seqs), "width": width, "steps": step, "examples": step * batch, "train_s": train_s,
           "eval_bursts": len(ev_y), "cnn_high_order": cnn, "seq_alone": alone, "poe_with_cnn": poe, "log": log,
           "params": sum(p.numel() for p in model.parameters())}
    print(json.dumps({k: v for k, v in res.items() if k != "log"}), flush=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
