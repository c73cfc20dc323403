"""benchmarks/snr_prior_probe.py: per-band class biases find a class the probabilities over-call
in one band of the SNR estimate, gain nothing on calibrated probabilities, and a predictions
file without probabilities is refused with a clear message."""

from __future__ import annotations

import numpy as np

from benchmark_modules import load_benchmark
from rfclassify.model.paired import save_predictions

spp = load_benchmark("snr_prior_probe")

DATASET = {"file": "toy.h5", "seed": 1, "n_bursts": 12000}


def _outcomes(over_call: float, seed: int = 0) -> dict:
    """12,000 bursts of 4 classes in two bands of the SNR estimate (2 and 20 dB). The truth is
    drawn from each burst's posterior, so the stored probabilities are calibrated; with
    over_call > 1 the 2 dB band's stored probabilities call class 0 that many times too often."""
    rng = np.random.default_rng(seed)
    n, k = DATASET["n_bursts"], 4
    snr = np.where(np.arange(n) % 3 == 0, 20.0, 2.0)
    z = rng.normal(0.0, 1.5, (n, k))
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    truth = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    stored = p.copy()
    stored[snr == 2.0, 0] *= over_call
    stored /= stored.sum(axis=1, keepdims=True)
    return {"truth": truth, "pred": stored.argmax(axis=1), "snr_db": snr, "bucket": np.full(n, 1024),
            "probabilities": stored, "snr_estimate_db": snr + rng.normal(0.0, 0.3, n)}


def _save(path, d):
    save_predictions(path, DATASET, d["truth"], d["pred"], d["snr_db"], d["bucket"], d["probabilities"],
                     d["snr_estimate_db"])
    return path


def test_biases_undo_a_class_over_called_in_one_band(tmp_path):
    d = spp.load_with_probabilities(_save(tmp_path / "p.npz", _outcomes(over_call=6.0)))
    biases = spp.fit_biases(d, l2=1e-3)
    low, high = spp.bands(np.array([2.0]))[0], spp.bands(np.array([20.0]))[0]
    assert biases[low, 0] < biases[low, 1:].min() - 1.0          # class 0 pushed down where over-called
    assert np.ptp(biases[high]) < 0.3                             # and left alone where calibrated
    for diff in spp.cross_fit(d, l2=1e-3):
        o = diff["overall"]
        assert o["mean_over_snr"] > 3 * o["mean_over_snr_se"] > 0  # held-out half: clearly better
        assert o["b_only_right"] > 1.5 * o["a_only_right"]


def test_calibrated_probabilities_gain_nothing(tmp_path):
    d = spp.load_with_probabilities(_save(tmp_path / "p.npz", _outcomes(over_call=1.0, seed=1)))
    for diff in spp.cross_fit(d, l2=1e-2):
        o = diff["overall"]
        assert abs(o["mean_over_snr"]) < max(3 * o["mean_over_snr_se"], 0.005)


def test_main_prints_and_refuses_files_without_probabilities(tmp_path, capsys):
    path = _save(tmp_path / "p.npz", _outcomes(over_call=6.0))
    assert spp.main([str(path), "--apply-to", str(path), "--l2", "0.01", "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert out.count("biased (l2 0.01") == 3 and (tmp_path / "r.json").exists()
    d = _outcomes(over_call=1.0)
    save_predictions(tmp_path / "old.npz", DATASET, d["truth"], d["pred"], d["snr_db"], d["bucket"])
    assert spp.main([str(tmp_path / "old.npz")]) == 2
    assert "no probabilities in it" in capsys.readouterr().err
