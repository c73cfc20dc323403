"""The training step: the loss terms, learning-rate updates, and CUDA-graph replay against eager steps."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from rfclassify.labels import LABELS, NOISE_LABEL  # noqa: E402
from rfclassify.model.network import build_network  # noqa: E402
from rfclassify.model.train_step import GRAPH_WARMUP_STEPS, EagerStep, GraphedStep, set_lr, step_losses  # noqa: E402

NOISE = LABELS.index(NOISE_LABEL)
LOSS_ARGS = {"label_smoothing": 0.0, "snr_loss_weight": 0.5, "noise_idx": NOISE, "bf16": False}


def _tiny_net():
    torch.manual_seed(0)
    return build_network({"stem_channels": 8, "stages": [{"channels": 8, "kernel": 3, "dilations": [1]}] * 2,
                          "head_channels": 8, "snr_head_channels": 8})


def _batch(n, length, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, 1, length, generator=g)
    y = torch.randint(0, len(LABELS), (n,), generator=g)
    s = torch.rand(n, generator=g) * 40 - 10
    return x, y, s


def test_snr_loss_ignores_noise_bursts_and_nan_snr():
    net = _tiny_net().eval()
    x, y, s = _batch(6, 64, 1)
    y[:3] = NOISE
    s[3] = float("nan")
    _, base = step_losses(net, x, y, s, **LOSS_ARGS)
    # changing the SNR target of masked rows (NOISE, NaN) leaves the SNR loss alone ...
    s2 = s.clone()
    s2[:3] += 100.0
    _, same = step_losses(net, x, y, s2, **LOSS_ARGS)
    assert torch.equal(same, base)
    # ... while an unmasked row moves it; cross-entropy and the total are consistent
    s2[4] += 100.0
    _, moved = step_losses(net, x, y, s2, **LOSS_ARGS)
    assert moved[2] > base[2] + 10
    assert torch.isclose(base[0], base[1] + 0.5 * base[2])
    assert 0 <= base[3] <= 6


def test_set_lr_updates_floats_and_tensors_in_place():
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.AdamW([p], lr=1e-3)
    set_lr(opt, 5e-4)
    assert opt.param_groups[0]["lr"] == 5e-4
    lr = torch.tensor(1e-3)
    opt.param_groups[0]["lr"] = lr
    set_lr(opt, 2e-4)
    assert opt.param_groups[0]["lr"] is lr and float(lr) == pytest.approx(2e-4)


def test_eager_step_lowers_the_loss_on_a_fixed_batch():
    net = _tiny_net().train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    step = EagerStep(net, opt, max_grad_norm=5.0, **LOSS_ARGS)
    batch = _batch(16, 128, 2)
    first = step(*batch)
    for _ in range(40):
        last = step(*batch)
    assert last[0] < 0.8 * first[0] and last[1] < first[1]  # total and cross-entropy both fall


def test_graphed_step_refuses_an_optimizer_that_cannot_be_captured():
    net = _tiny_net()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    with pytest.raises(ValueError, match="capturable"):
        GraphedStep(net, opt, max_grad_norm=5.0, **LOSS_ARGS)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_graphed_steps_match_eager_steps_on_cuda():
    """Same start, same batches of two shapes, warm-up + capture + replays: same weights as eager,
    and a weight average that follows the replayed parameters as it follows eager ones."""
    from rfclassify.model.weight_average import WeightAverage

    torch.backends.cudnn.deterministic = True
    base = _tiny_net().cuda().train()
    nets = [copy.deepcopy(base), copy.deepcopy(base)]
    opts = [torch.optim.AdamW(n.parameters(), lr=1e-3, fused=True, capturable=True) for n in nets]
    steps = [EagerStep(nets[0], opts[0], max_grad_norm=5.0, **LOSS_ARGS),
             GraphedStep(nets[1], opts[1], max_grad_norm=5.0, **LOSS_ARGS)]
    averages = [WeightAverage(n, half_life_steps=3) for n in nets]
    shapes = [(8, 128), (8, 256)] * (GRAPH_WARMUP_STEPS + 3)
    for i, (n, length) in enumerate(shapes):
        batch = [t.cuda() for t in _batch(n, length, 100 + i)]
        for opt, step in zip(opts, steps):
            set_lr(opt, 1e-3 * (1 + i % 3))  # a changing LR must reach the replayed graph
            stats = step(*batch)
        for avg in averages:
            avg.update()
        assert torch.isfinite(stats).all()
    assert len(steps[1].graphs) == 2
    for a, b in zip(nets[0].state_dict().values(), nets[1].state_dict().values()):
        assert torch.allclose(a.float(), b.float(), rtol=1e-3, atol=1e-4)
    eager_avg, graphed_avg = (a.state_dict() for a in averages)
    for k in eager_avg:
        assert torch.allclose(eager_avg[k], graphed_avg[k], rtol=1e-3, atol=1e-4), k
    start = base.state_dict()
    assert sum(not torch.equal(graphed_avg[k], start[k]) for k in graphed_avg) > len(graphed_avg) // 2
    # and training moved the weights (the comparison is not between two untouched copies)
    moved = [not torch.equal(a, b) for a, b in zip(base.state_dict().values(), nets[1].state_dict().values())]
    assert sum(moved) > len(moved) // 2
