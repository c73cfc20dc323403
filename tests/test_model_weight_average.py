"""The weight average: its update rule, half-life, and what it leaves to the live model."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rfclassify.model.weight_average import WeightAverage  # noqa: E402


def _net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(2, 3, (1, 3)), torch.nn.BatchNorm2d(3))


def test_the_average_moves_halfway_to_the_live_weights_in_one_half_life():
    net = _net()
    with torch.no_grad():
        for t in net.state_dict().values():
            if t.is_floating_point():
                t.zero_()
    avg = WeightAverage(net, half_life_steps=10)
    with torch.no_grad():  # the live weights jump to 1 and stay there; the average follows
        for t in net.state_dict().values():
            if t.is_floating_point():
                t.fill_(1.0)
    for _ in range(10):
        avg.update()
    for name, t in avg.state_dict().items():  # weights and batch-norm statistics alike
        assert torch.allclose(t, torch.full_like(t, 0.5), atol=1e-6), name
    assert "1.running_var" in avg.state_dict() and "1.num_batches_tracked" not in avg.state_dict()


def test_copy_to_puts_the_average_in_and_keeps_the_live_step_counter():
    net = _net()
    kept = {k: v.clone() + 3.0 for k, v in net.state_dict().items() if v.is_floating_point()}
    avg = WeightAverage(net, half_life_steps=5, state=kept, since_step=7)
    net[1].num_batches_tracked.fill_(42)
    avg.copy_to(net)
    state = net.state_dict()
    assert all(torch.equal(state[k], kept[k]) for k in kept)
    assert int(state["1.num_batches_tracked"]) == 42 and avg.since_step == 7


def test_an_average_of_another_network_or_a_zero_half_life_is_refused():
    with pytest.raises(ValueError, match="another network"):
        WeightAverage(_net(), 5, state={"0.weight": torch.zeros(3, 2, 1, 3)})
    with pytest.raises(ValueError, match="half_life_steps"):
        WeightAverage(_net(), 0)
