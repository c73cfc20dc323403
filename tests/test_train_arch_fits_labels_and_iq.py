"""`train` refuses, before it makes any data, a network that does not give one logit per label
or does not read a burst's I and Q: from --arch, from the parent of --init-from, or from the
checkpoint of --resume.

Before the seventy-first session arch_problems checked the counts' range alone: `--arch
'{"n_classes": 5}'` ended in an IndexError traceback, `'{"in_channels": 3}'` in conv2d's
RuntimeError, and `'{"n_classes": 40}'` trained and exported (exit 0) a model that classify
then refused ("arch.n_classes is 40 but labels lists 28"), which --init-from trained again."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from rfclassify._exceptions import ConfigError  # noqa: E402
from rfclassify.cli import main  # noqa: E402
from rfclassify.labels import LABELS  # noqa: E402
from rfclassify.model.meta import ModelMeta  # noqa: E402
from rfclassify.model.network import DEFAULT_ARCH, build_network  # noqa: E402
from rfclassify.model.train import TrainConfig  # noqa: E402

_TINY = ["--steps", "2", "--batch-size", "4", "--workers", "0", "--buckets", "128", "--val-per-bucket", "4",
         "--device", "cpu"]


@pytest.mark.parametrize(("arch", "problem"), [
    ({"n_classes": 5}, "n_classes must be 28 (one logit per label), got 5"),
    ({"n_classes": 40}, "n_classes must be 28 (one logit per label), got 40"),
    ({"in_channels": 3}, "in_channels must be 2 (a burst's I and Q), got 3"),
])
def test_an_arch_of_other_label_or_input_counts_is_refused_before_any_work(arch, problem, tmp_path, capsys):
    out = tmp_path / "t1"
    assert main(["train", "--out", str(out), *_TINY, "--arch", json.dumps(arch)]) == 2
    assert capsys.readouterr().err == f"rfclassify train: error: --arch: {problem}\n"
    assert not out.exists()


def test_a_parent_of_another_class_count_is_refused_for_init_from(tmp_path, capsys):
    """The model an --arch '{"n_classes": 40}' run wrote: weights and model.json that agree."""
    parent = tmp_path / "parent"
    parent.mkdir()
    arch = {**DEFAULT_ARCH, "n_classes": 40}
    torch.save(build_network(arch).state_dict(), parent / "model.pt")
    ModelMeta(model_id="forty-classes", arch=arch).save(parent)
    out = tmp_path / "child"
    assert main(["train", "--out", str(out), *_TINY, "--seed", "3", "--init-from", str(parent)]) == 2
    assert capsys.readouterr().err == (f"rfclassify train: error: the network of --init-from {parent}: "
                                       "n_classes must be 28 (one logit per label), got 40\n")
    assert not out.exists()


def test_the_checks_name_every_mismatch_and_pass_the_shipped_shape(tmp_path):
    from rfclassify.model.network import io_problems

    assert io_problems(None) == [] and io_problems(DEFAULT_ARCH) == [] and len(LABELS) == 28
    assert io_problems({"in_channels": 1, "n_classes": 27}) == [
        "in_channels must be 2 (a burst's I and Q), got 1", "n_classes must be 28 (one logit per label), got 27"]
    # a --resume of a checkpoint such an --arch wrote: its network is the run's arch
    with pytest.raises(ConfigError, match=r"^the network of --resume c/checkpoint.pt: n_classes must be 28"):
        TrainConfig(out_dir=str(tmp_path / "r"), steps=1, resume="c/checkpoint.pt", arch={"n_classes": 40})
