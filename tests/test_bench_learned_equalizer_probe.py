"""The parts of benchmarks/learned_equalizer_probe.py: its unrolled constant-modulus filter
undoes a channel, its arms read the clocked front, its table pairs them, and the feature
screen reads saved arms as candidates."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark_modules import load_benchmark

torch = pytest.importorskip("torch")

probe = load_benchmark("learned_equalizer_probe")
fs = load_benchmark("feature_screen")


def _qam16(n: int, rng: np.random.Generator) -> np.ndarray:
    levels = np.array([-3.0, -1.0, 1.0, 3.0])
    s = rng.choice(levels, n) + 1j * rng.choice(levels, n)
    return s / np.sqrt(10.0)


def _residual(z: np.ndarray, s: np.ndarray) -> float:
    """Mean squared error of z against the symbols s after the best complex gain and a shift
    of up to 4 symbols (the filter may centre the channel's strongest path elsewhere)."""
    best = np.inf
    for d in range(-4, 5):
        zz, ss = np.roll(z, -d)[8:-8], s[8:-8]
        g = np.vdot(zz, ss) / np.vdot(zz, zz)
        best = min(best, float(np.mean(np.abs(g * zz - ss) ** 2)))
    return best


def _equalize(y: np.ndarray, iterations: int) -> np.ndarray:
    from rfclassify.model.sequence_fit import SequenceFitConfig

    eq = probe.make_arms(SequenceFitConfig(), 9, iterations)["cma"].eq
    with torch.no_grad():
        out = eq(torch.tensor(y[None], dtype=torch.complex64), torch.ones(1, y.size))[0].numpy()
    return out[0] + 1j * out[1]


def test_the_unrolled_filter_opens_the_eye_of_a_multipath_burst():
    """Three paths of strengths 1, 0.6, 0.3: the filter as initialized (12 steps of 0.4)
    takes the residual interference down by more than half on every draw; with no steps it
    passes the symbols unchanged (up to gain and turn)."""
    rng = np.random.default_rng(3)
    for _ in range(5):
        s = _qam16(256, rng)
        h = np.array([1.0, 0.6 * np.exp(2j * np.pi * rng.random()), 0.3 * np.exp(2j * np.pi * rng.random())])
        y = np.convolve(s, h)[:256]
        y = y / np.sqrt(np.mean(np.abs(y) ** 2))
        before = _residual(y, s)
        assert _residual(_equalize(y, 12), s) < 0.5 * before
        assert _residual(_equalize(y, 0), s) == pytest.approx(before, rel=1e-3, abs=1e-6)


def test_arms_read_a_masked_batch_of_the_clocked_front():
    from rfclassify.model.sequence_fit import SequenceFitConfig

    arms = probe.make_arms(SequenceFitConfig(), 9, 4)
    x = torch.randn(3, 21, 40)
    mask = torch.ones(3, 1, 40)
    mask[1, :, 25:] = 0
    for model in arms.values():
        out = model(x, mask)
        assert out.shape == (3, 12)
        # the padding of a masked burst does not change its reading
        x2 = x.clone()
        x2[1, :, 25:] = 5.0
        model.eval()
        assert torch.allclose(model(x, mask)[1], model(x2, mask)[1], atol=1e-5)


def test_score_pairs_each_arm_against_plain_by_spread():
    y = np.array([0, 1, 2, 3, 0, 1])
    info = np.array([[20.0, -1.0], [20.0, 0.05], [20.0, 0.5], [5.0, -1.0], [15.0, 0.2], [25.0, 0.4]])
    preds = {"plain": np.array([0, 0, 0, 3, 0, 0]), "learned": np.array([0, 1, 2, 3, 1, 1])}
    table = probe.score(preds, y, info)
    assert table["all"]["plain"] == pytest.approx(50.0)
    assert table["all"]["learned"] == pytest.approx(83.33, abs=0.01)
    assert table["10..30 dB"]["bursts"] == 5
    assert table[">= 10 dB, spread >= 0.3"]["bursts"] == 2
    assert table[">= 10 dB, spread >= 0.3"]["learned - plain"][0] == pytest.approx(100.0)
    assert table["10..30 dB"]["learned - plain"][0] == pytest.approx(40.0)   # 4 of 5 against 2 of 5
    assert "learned - plain" not in table[">= 10 dB, spread no multipath"]   # one burst: no spread to pair


def test_the_screen_reads_saved_arms_as_candidates(tmp_path):
    from rfclassify.model.sequence_fit import SequenceFitConfig

    arms = probe.make_arms(SequenceFitConfig(), 9, 3)
    path = tmp_path / "arms.pt"
    torch.save({"arms": {k: arms[k].state_dict() for k in ("plain", "learned")}, "taps": 9, "iterations": 3,
                "config": {}}, path)
    try:
        names = fs.register_torch_arms(path)
        assert names == ["arm_plain", "arm_learned"]
        rng = np.random.default_rng(0)
        views = fs.BurstViews(iq=np.zeros(8, complex), symbols=_qam16(128, rng), filtered=None)
        for name in names:
            size, fn = fs.FEATURES[name]
            lp = fn(views)
            assert lp.shape == (size,) == (12,)
            assert np.exp(lp).sum() == pytest.approx(1.0, abs=1e-5)
        assert fs.FEATURES["arm_plain"][1](fs.BurstViews(np.zeros(8, complex), None, None)) is None
    finally:
        for name in ("arm_plain", "arm_learned"):
            fs.FEATURES.pop(name, None)
