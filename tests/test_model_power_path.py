"""The power path: DLA-legal unit magnitude, high-order statistics that survive a carrier offset, growth, export."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rfclassify.model.network import (  # noqa: E402
    POWER_PATH,
    build_network,
    count_parameters,
    dla_arch_problems,
    grow_network,
    growth_problems,
)

BUCKETS = (128, 256, 512, 1024, 2048, 4096)


def _path(**changes):
    return build_network({"power_path": {**POWER_PATH, **changes}}).power.eval()


def test_unit_magnitude_normalizes_real_samples_never_exceeds_one_and_leaves_near_zero_small():
    pp = _path()
    rng = np.random.default_rng(0)
    mag = np.concatenate([np.geomspace(0.5, 2.8, 200), np.geomspace(3.0, 50.0, 50), np.geomspace(1e-4, 0.02, 50)])
    ang = rng.uniform(0, 2 * np.pi, mag.size)
    re, im = (torch.tensor(v, dtype=torch.float32).view(1, 1, 1, -1) for v in (mag * np.cos(ang), mag * np.sin(ang)))
    ure, uim, p = pp.unit_magnitude(re, im)
    u = (ure * ure + uim * uim).sqrt().flatten().numpy()
    assert np.all(u <= 1 + 1e-5)
    np.testing.assert_allclose(u[:200], 1.0, atol=2e-3)           # 0.5 .. 2.8 x unit power: normalized
    assert np.all(u[200:250] > 0.7)                                # clipped peaks stay near the circle
    assert np.all(u[250:] < 0.2)                                   # near-zero samples stay small
    # phase of every normalized sample is the input's (the clip does not touch these)
    np.testing.assert_allclose(np.angle((ure + 1j * uim).flatten().numpy()[:200]), np.angle(np.exp(1j * ang[:200])),
                               atol=1e-4)
    assert float(p.max()) <= POWER_PATH["power_clip"] + 1e-4


def test_powers_turn_with_the_carrier_phase_and_the_symbol_lag_products_and_power_do_not():
    """A carrier phase theta turns the k-th power by k theta and leaves |x|^2, the products with the
    conjugate one symbol earlier and the squared local means of those unchanged: the complex
    arithmetic (squaring, conjugate, delay) done right, for every rate of the bank."""
    pp = _path()
    n, orders = len(POWER_PATH["sps"]), POWER_PATH["orders"]
    rng = np.random.default_rng(2)
    z = (rng.standard_normal(600) + 1j * rng.standard_normal(600)) / np.sqrt(2)
    theta = 0.3

    def features(c):
        x = torch.tensor(np.stack([c.real, c.imag])[:, None, :], dtype=torch.float32)[None]
        with torch.no_grad():
            return pp(x)[0, :, 0].double().numpy()

    a, b = features(z), features(z * np.exp(1j * theta))
    np.testing.assert_allclose(b[:n], a[:n], atol=1e-4)  # clipped power
    for i, k in enumerate(orders):
        f = n + i * 8 * n
        pa, pb = a[f:f + n] + 1j * a[f + n:f + 2 * n], b[f:f + n] + 1j * b[f + n:f + 2 * n]
        turned = pa * np.exp(1j * k * theta)
        assert np.abs(pa).max() > 0.9                       # the powers are near unit magnitude, not vanishing
        np.testing.assert_allclose(pb, turned, atol=2e-3 * k)
        np.testing.assert_allclose(b[f + 2 * n:f + 4 * n], a[f + 2 * n:f + 4 * n], atol=2e-3 * k)  # lag products
        lag_sq = slice(f + 6 * n, f + 8 * n)                # squared local means of the lag product's re, im
        np.testing.assert_allclose(b[lag_sq], a[lag_sq], atol=2e-3 * k)
    # the lag product is the power times its conjugate `round(sps)` samples earlier
    f, lag = n, round(POWER_PATH["sps"][1])
    w = a[f + 1] + 1j * a[f + n + 1]
    np.testing.assert_allclose(a[f + 2 * n + 1, 100:-100] + 1j * a[f + 3 * n + 1, 100:-100],
                               (w * np.conj(np.roll(w, lag)))[100:-100], atol=1e-4)


def test_a_grown_power_path_starts_as_the_parent_and_then_learns():
    torch.manual_seed(4)
    parent = build_network().train()
    with torch.no_grad():
        parent(torch.randn(16, 2, 1, 256))
        for m in parent.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
    arch = {**parent.arch, "power_path": POWER_PATH}
    assert growth_problems(parent.arch, arch) == []
    grown = grow_network(parent, parent.arch, arch)
    assert count_parameters(grown) - count_parameters(parent) < 10_000
    x = torch.randn(4, 2, 1, 512)
    for train_mode in (False, True):
        with torch.no_grad():
            (a, sa), (b, sb) = parent.train(train_mode)(x), grown.train(train_mode)(x)
        assert torch.equal(a, b) and torch.equal(sa, sb), train_mode
    opt = torch.optim.SGD(grown.parameters(), lr=0.1)
    logits, _ = grown(x)
    torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 3])).backward()
    assert grown.power_merge.bn.weight.grad.abs().sum() > 0
    opt.step()
    with torch.no_grad():
        assert not torch.equal(grown.eval()(x)[0], parent.eval()(x)[0])
    # once grown, the branch is part of the parent: changing it is not a deepening
    changed = {**arch, "power_path": {**POWER_PATH, "sps": [4.0]}}
    assert growth_problems(arch, changed) and "power_path" in growth_problems(arch, changed)[0]


def test_bad_power_path_specs_are_refused_before_training():
    from rfclassify._exceptions import ConfigError
    from rfclassify.model.train import TrainConfig

    assert dla_arch_problems({"power_path": POWER_PATH}, BUCKETS) == []
    (long_fir,) = dla_arch_problems({"power_path": {**POWER_PATH, "taps": 33}})
    assert "power_path fir: kernel 33" in long_fir
    slow = dla_arch_problems({"power_path": {**POWER_PATH, "sps": [2.0, 16.0]}})
    assert any("symbol delay: kernel 33" in p for p in slow)
    assert any("orders" in p for p in dla_arch_problems({"power_path": {**POWER_PATH, "orders": [4, 12]}}))
    assert any("mean_window" in p for p in dla_arch_problems({"power_path": {**POWER_PATH, "mean_window": 9}}))
    with pytest.raises(ConfigError, match="power_path fir: kernel 33"):
        TrainConfig(out_dir="x", steps=1, arch={"power_path": {**POWER_PATH, "taps": 33}})
    with pytest.raises(ValueError, match="taps"):
        build_network({"power_path": {**POWER_PATH, "taps": 30}})


def test_power_path_exports_dla_legal_and_in_parity(tmp_path, randomize_batchnorm):
    from rfclassify.model.dla_check import check_onnx_for_dla
    from rfclassify.model.export import export_onnx, onnx_parity

    torch.manual_seed(5)
    net = randomize_batchnorm(build_network({"power_path": POWER_PATH})).eval()
    with torch.no_grad():
        net.power_merge.bn.weight.uniform_(0.5, 1.5)  # the branch must matter for parity to test it
    path = export_onnx(net, tmp_path / "pp.onnx")
    x = np.random.default_rng(6).standard_normal((3, 2, 1, 512)).astype(np.float32)
    rep = onnx_parity(path, net, x)
    assert rep["max_abs_logit_diff"] < 1e-3 and rep["max_abs_snr_db_diff"] < 1e-2
    for b in (128, 4096):
        assert check_onnx_for_dla(export_onnx(net, tmp_path / f"pp{b}.onnx", static_length=b)) == [], b
