"""The network's contract: shapes for every bucket, size, DLA-friendly global pooling, FLOPs."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from rfclassify.dsp.windows import DEFAULT_BUCKETS_SAMPLES  # noqa: E402
from rfclassify.labels import LABELS  # noqa: E402
from rfclassify.model.flops import conv_macs, flops_per_bucket  # noqa: E402
from rfclassify.model.network import (  # noqa: E402
    DEFAULT_ARCH,
    PRODUCT_STEM,
    build_network,
    count_parameters,
    downsample_factor,
    pool_chain,
)


@pytest.mark.parametrize("length", DEFAULT_BUCKETS_SAMPLES)
def test_every_bucket_gives_both_outputs(length):
    net = build_network().eval()
    with torch.no_grad():
        logits, snr = net(torch.randn(3, 2, 1, length))
    assert logits.shape == (3, len(LABELS))
    assert snr.shape == (3,)
    assert torch.isfinite(logits).all() and torch.isfinite(snr).all()


def test_parameter_budget_and_arch_record():
    net = build_network()
    assert count_parameters(net) <= 1_000_000
    assert net.arch["n_classes"] == len(LABELS)
    # the arch dict round-trips: a network built from it has the same parameter shapes
    again = build_network(net.arch)
    assert [p.shape for p in again.parameters()] == [p.shape for p in net.parameters()]


def test_smaller_arch_is_honoured():
    small = build_network({"stem_channels": 8, "stages": [{"channels": 8, "kernel": 3, "dilations": [1]}] * 2})
    assert count_parameters(small) < count_parameters(build_network()) / 10


@pytest.mark.parametrize("length", [4, 8, 16, 32, 64, 128, 96, 7 * 8])
def test_pool_chain_is_a_product_of_dla_windows(length):
    chain = pool_chain(length)
    assert math.prod(chain) == length
    assert all(1 <= w <= 8 for w in chain)


def test_pool_chain_rejects_large_prime_factor():
    with pytest.raises(ValueError):
        pool_chain(11 * 4)


@pytest.mark.parametrize("length", [128, 1024, 4096])
def test_static_pool_chain_equals_global_mean(length, randomize_batchnorm):
    torch.manual_seed(0)
    net = randomize_batchnorm(build_network()).eval()
    x = torch.randn(2, 2, 1, length)
    with torch.no_grad():
        dyn_logits, dyn_snr = net(x)
        net.static_length = length
        net.squeeze_outputs = False
        st_logits, st_snr = net(x)
    assert st_logits.shape == (2, len(LABELS), 1, 1)
    assert torch.allclose(st_logits.flatten(1), dyn_logits, atol=1e-5)
    assert torch.allclose(st_snr.flatten(), dyn_snr, atol=1e-4)


def test_every_bucket_is_a_multiple_of_the_downsampling():
    ds = downsample_factor(DEFAULT_ARCH)
    for b in DEFAULT_BUCKETS_SAMPLES:
        assert b % ds == 0
        pool_chain(b // ds)


def test_flop_counter_matches_hand_count():
    conv = torch.nn.Conv2d(2, 4, (1, 5), padding=(0, 2), bias=False)
    assert conv_macs(conv, 100) == 100 * 4 * 2 * 5
    flops = flops_per_bucket(build_network(), [128, 1024])
    # convolutions dominate and scale with length; heads are constant, so slightly sub-linear
    assert 7.5 < flops[1024] / flops[128] <= 8.0


PRODUCT_ARCH = {"product_stem": PRODUCT_STEM}


@pytest.mark.parametrize("length", [128, 1024])
def test_product_stem_shapes_and_static_pool(length, randomize_batchnorm):
    torch.manual_seed(0)
    net = randomize_batchnorm(build_network(PRODUCT_ARCH)).eval()
    x = torch.randn(2, 2, 1, length)
    with torch.no_grad():
        logits, snr = net(x)
        net.static_length, net.squeeze_outputs = length, False
        st_logits, _ = net(x)
    assert logits.shape == (2, len(LABELS)) and snr.shape == (2,)
    assert torch.allclose(st_logits.flatten(1), logits, atol=1e-5)


def test_product_stem_is_second_and_fourth_order_in_the_input():
    # scaling the input by s scales the order-2 channels by s^2 and the order-4 ones by s^4
    # (with BN shifts zeroed and eval-mode statistics, the branch is a pure product of linear maps)
    net = build_network(PRODUCT_ARCH).eval()
    for m in net.product.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.weight.fill_(1.0)
                m.bias.zero_()
    x = torch.randn(1, 2, 1, 256)
    with torch.no_grad():
        one, two = net.product(x), net.product(2 * x)
    o2 = PRODUCT_STEM["order2"]
    assert torch.allclose(two[:, :o2], 4 * one[:, :o2], rtol=1e-4, atol=1e-5)
    assert torch.allclose(two[:, o2:], 16 * one[:, o2:], rtol=1e-4, atol=1e-4)


def test_product_stem_adds_its_channels_and_few_parameters():
    plain, prod = build_network(), build_network(PRODUCT_ARCH)
    assert prod.stages[0].proj.conv.in_channels == (
        DEFAULT_ARCH["stem_channels"] + PRODUCT_STEM["order2"] + PRODUCT_STEM["order4"])
    assert count_parameters(plain) < count_parameters(prod) <= 1_000_000
    with pytest.raises(ValueError, match="odd"):
        build_network({"product_stem": {**PRODUCT_STEM, "kernel": 30}})


def test_arch_dla_problems_are_found_before_training_and_agree_with_the_onnx_check(tmp_path):
    """The constructor-level check flags what the exported graph's DLA check flags."""
    import json

    from rfclassify._exceptions import ConfigError
    from rfclassify.model.dla_check import check_onnx_for_dla
    from rfclassify.model.export import export_onnx
    from rfclassify.model.network import DEFAULT_ARCH, build_network, dla_arch_problems
    from rfclassify.model.train import TrainConfig

    deep = json.loads(json.dumps(DEFAULT_ARCH))
    deep["stages"][2]["dilations"] = [1, 2, 4]  # kernel 3 at dilation 4 pads 4 >= 3
    assert dla_arch_problems(DEFAULT_ARCH, (128, 256, 512, 1024, 2048, 4096)) == []
    (problem,) = dla_arch_problems(deep)
    assert "stage 2 unit 2" in problem and "pads 4" in problem
    for arch, bad in ((DEFAULT_ARCH, False), (deep, True)):
        path = tmp_path / f"{bad}.onnx"
        export_onnx(build_network(arch).eval(), path, static_length=128)
        violations = check_onnx_for_dla(str(path))
        assert bool(violations) == bad
        assert all("not smaller than the kernel" in v.reason for v in violations)
    assert "bucket 1000" in dla_arch_problems(None, (1000,))[0]
    # the DLA's general limits, as dla_check holds the graph to them (sixty-seventh session)
    assert dla_arch_problems(None, (16384,)) == [
        "bucket 16384 is above the DLA's 8192 samples in a dimension other than the batch"]
    wide = json.loads(json.dumps(DEFAULT_ARCH))
    wide["stages"][5]["channels"] = 9000
    assert dla_arch_problems(wide) == ["stage 5: 9000 channels above the DLA's 8192"]
    with pytest.raises(ConfigError, match="would not run on the DLA: stage 2 unit 2"):
        TrainConfig(out_dir="x", steps=1, arch=deep)
    with pytest.raises(ConfigError, match="bucket 1000"):
        TrainConfig(out_dir="x", steps=1, buckets_samples=(128, 1000))


def test_an_arch_that_cannot_build_a_network_is_refused_by_train_before_torch_sees_it():
    """--arch '{"stages": "x"}' or '{"pool": 1e19}' ended in a TypeError or an overflow inside
    torch (and the same in model.json, whose load now runs the same check)."""
    from rfclassify._exceptions import ConfigError
    from rfclassify.model.network import DEFAULT_ARCH, PRODUCT_STEM, arch_problems
    from rfclassify.model.train import TrainConfig

    assert arch_problems(None) == [] and arch_problems(DEFAULT_ARCH) == []
    assert arch_problems({"product_stem": {**PRODUCT_STEM, "merge": "add"}}) == []
    bad = {"stages": [{"channels": 8, "kernel": 3, "dilations": [1]}, "x"], "pool": 10 ** 19,
           "head_channels": True, "product_stem": {"order2": 4, "kernel": 3, "merge": "mul"}}
    assert arch_problems(bad) == [
        "head_channels must be an integer in 1..65536, got true",
        "pool must be an integer in 1..4096, got 10000000000000000000",
        'stages[1] must be a JSON object, got "x"',
        'product_stem.merge must be "concat" or "add", got "mul"']
    with pytest.raises(ConfigError, match="arch cannot build a network: stages must be a non-empty list"):
        TrainConfig(out_dir="x", steps=1, arch={"stages": "x"})


def _deeper(arch, extra):
    """`arch` with `extra[i]` dilations appended to stage i."""
    stages = [{**s, "dilations": list(s["dilations"]) + list(add)} for s, add in zip(arch["stages"], extra)]
    return {**arch, "stages": stages}


def test_grown_network_starts_as_the_parent_and_then_learns_past_it():
    from rfclassify.model.network import grow_network, growth_problems

    torch.manual_seed(0)
    parent = build_network().train()
    with torch.no_grad():  # move the BN statistics and scales off their defaults, as training does
        parent(torch.randn(16, 2, 1, 256))
        for m in parent.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
    deeper = _deeper(parent.arch, [[1], [], [2], [], [], [1, 2]])
    grown = grow_network(parent, parent.arch, deeper)
    assert count_parameters(grown) > count_parameters(parent)
    assert len(grown.stages[5].units) == 3 and len(grown.stages[1].units) == 1
    x = torch.randn(4, 2, 1, 512)
    with torch.no_grad():
        (a, sa), (b, sb) = parent.eval()(x), grown.eval()(x)
    assert torch.equal(a, b) and torch.equal(sa, sb)
    # the added units are real parameters: one optimizer step changes the function
    grown.train()
    opt = torch.optim.SGD(grown.parameters(), lr=0.1)
    logits, _ = grown(x)
    torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 3])).backward()
    assert grown.stages[5].units[2].b.bn.weight.grad.abs().sum() > 0
    opt.step()
    with torch.no_grad():
        assert not torch.equal(grown.eval()(x)[0], a)
    assert growth_problems(parent.arch, deeper) == []


def test_growth_refuses_anything_but_appended_units():
    from rfclassify.model.network import grow_network, growth_problems

    base = build_network().arch
    wider = {**base, "stages": [{**base["stages"][0], "channels": 40}, *base["stages"][1:]]}
    assert growth_problems(base, wider) == ["stage 0 channels: 32 -> 40"]
    reordered = _deeper(base, [[], [], [], [], [], []])
    reordered["stages"][2] = {**base["stages"][2], "dilations": [2, 1]}
    assert "stage 2 dilations [1, 2] -> [2, 1]" in growth_problems(base, reordered)[0]
    assert growth_problems(base, {**base, "head_channels": 64}) == ["head_channels: 128 -> 64"]
    assert "only units can be added" in growth_problems(base, {**base, "stages": base["stages"][:5]})[0]
    with pytest.raises(ValueError, match="stage 0 channels"):
        grow_network(build_network(), base, wider)


def test_a_grown_product_stem_starts_as_the_parent_and_then_learns():
    from rfclassify.model.network import grow_network, growth_problems

    torch.manual_seed(1)
    parent = build_network().train()
    with torch.no_grad():
        parent(torch.randn(16, 2, 1, 256))
        for m in parent.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
    arch = {**parent.arch, "product_stem": {**PRODUCT_STEM, "merge": "add"}}
    assert growth_problems(parent.arch, arch) == []
    grown = grow_network(parent, parent.arch, arch)
    assert count_parameters(grown) > count_parameters(parent)
    x = torch.randn(4, 2, 1, 512)
    for train_mode in (False, True):  # BatchNorm on batch statistics too: the branch adds exactly 0
        with torch.no_grad():
            (a, sa), (b, sb) = parent.train(train_mode)(x), grown.train(train_mode)(x)
        assert torch.equal(a, b) and torch.equal(sa, sb), train_mode
    opt = torch.optim.SGD(grown.parameters(), lr=0.1)
    logits, _ = grown(x)
    torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 3])).backward()
    assert grown.product_merge.bn.weight.grad.abs().sum() > 0  # the zero scale is where learning starts
    opt.step()
    with torch.no_grad():
        assert not torch.equal(grown.eval()(x)[0], parent.eval()(x)[0])


def test_a_product_stem_can_only_be_grown_with_merge_add():
    from rfclassify.model.network import growth_problems

    base = build_network().arch
    assert "needs \"merge\": \"add\"" in growth_problems(base, {**base, "product_stem": PRODUCT_STEM})[0]
    with_stem = {**base, "product_stem": {**PRODUCT_STEM, "merge": "add"}}
    assert growth_problems(with_stem, {**with_stem, "product_stem": {**PRODUCT_STEM, "merge": "add", "kernel": 15}})
    with pytest.raises(ValueError, match="merge"):
        build_network({"product_stem": {**PRODUCT_STEM, "merge": "sum"}})
