"""benchmarks/refiner_replay.py: what it records of a served run replays to the served answers,
a refiner fitted on other statistics is refused, and another perceptron is scored burst for
burst."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest

from benchmark_modules import load_benchmark

rr = load_benchmark("refiner_replay")


@pytest.fixture(scope="module")
def mixed_set(tmp_path_factory):
    """Two lengths, so that the Classifier's grouping by bucket reorders a chunk's bursts."""
    from rfclassify.data.generate import GenerateSpec, generate_dataset
    from rfclassify.labels import HIGH_ORDER_LABELS

    spec = GenerateSpec(classes=("QPSK", *HIGH_ORDER_LABELS[:6]), snr_grid_db=(20.0, 30.0), per_cell=2,
                        lengths_samples=(1024, 256), seed=3)
    return generate_dataset(spec, tmp_path_factory.mktemp("rr") / "m.h5", command_line="test").path


def test_the_recorded_run_replays_to_the_served_answers_and_variants_are_scored(mixed_set, tmp_path, capsys):
    from rfclassify.engine.classifier import Classifier
    from rfclassify._digest import file_sha256
    from rfclassify.engine.refiner import REFINER_FILE
    from rfclassify.model.meta import ModelMeta, default_model_dir

    shipped = str(default_model_dir())
    cache = tmp_path / "c.npz"
    assert rr.main(["record", str(mixed_set), "--model-dir", shipped, "--out", str(cache)]) == 0
    assert "differs from the served predictions on 0" in capsys.readouterr().out
    with np.load(cache) as z:
        assert len(z["truth"]) == 28 and z["wants"].sum() > 10
        # 0: a burst the network was sure of, which the refiners got without its samples (skip_sure)
        assert set(z["length"][z["wants"]]) == {256, 1024} and set(z["length"]) <= {0, 256, 1024}
        stats = z["stats"][z["wants"]]
        assert not np.isnan(stats).all(axis=1).any()
    # another fuser on the same statistics: the shipped perceptrons with their output layer's biases
    # moved, without the trees that would otherwise hold half of every decision
    variant = tmp_path / "v"
    shutil.copytree(shipped, variant, ignore=shutil.ignore_patterns("eval", "static", "*.pt"))
    with Classifier.load(shipped, backend="onnxruntime") as clf:
        moved = dataclasses.replace(clf.refiner, trees=None,
                                    b2=clf.refiner.b2 + np.linspace(-3, 3, clf.refiner.b2.shape[-1]))
    moved.save(variant / REFINER_FILE)
    meta = ModelMeta.load(variant)
    meta.with_updates(refiner={**meta.refiner, "sha256": file_sha256(variant / REFINER_FILE)}).save(variant)
    out = tmp_path / "score.json"
    assert rr.main(["score", str(cache), shipped, str(variant), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report[shipped]["overall"]["b_only_right"] == report[shipped]["overall"]["a_only_right"] == 0
    moved_overall = report[str(variant)]["overall"]
    assert moved_overall["b_only_right"] + moved_overall["a_only_right"] > 0
    # a refiner that measures other statistics (another rate rule) has to be served instead
    other = dataclasses.replace(moved, rate_rule="strongest_line")
    other.save(variant / REFINER_FILE)
    info = {k: v for k, v in meta.refiner.items() if k != "serve_rate_rule"}    # served on its own rule
    meta.with_updates(refiner={**info, "sha256": file_sha256(variant / REFINER_FILE)}).save(variant)
    assert rr.main(["score", str(cache), str(variant)]) == 2
    assert "measures other statistics" in capsys.readouterr().err
    # nor one that takes shorter bursts than the recorded one measured
    dataclasses.replace(moved, min_samples=64).save(variant / REFINER_FILE)
    meta.with_updates(refiner={**meta.refiner, "sha256": file_sha256(variant / REFINER_FILE)}).save(variant)
    assert rr.main(["score", str(cache), str(variant)]) == 2
    assert "takes bursts from 64 samples" in capsys.readouterr().err
    # nor one without the recorded model's low-order refiner (its bursts keep their recorded answers)
    assert str(np.load(cache)["low_order_sha256"]) == meta.low_order_refiner["sha256"]
    meta.with_updates(refiner={**meta.refiner, "sha256": file_sha256(variant / REFINER_FILE)},
                      low_order_refiner={}).save(variant)
    assert rr.main(["score", str(cache), str(variant)]) == 2
    assert "another low-order refiner" in capsys.readouterr().err


def test_a_replay_keeps_the_served_answers_of_bursts_the_constellation_refiner_did_not_take():
    """Bursts outside the constellation refiner (a low-order refiner's, say) keep what was
    served, not the network's top class; those it took start again from the network's."""
    from rfclassify.engine.classifier import Classifier
    from rfclassify.model.meta import default_model_dir

    with Classifier.load(default_model_dir(), backend="onnxruntime", warmup=False) as clf:
        ref = dataclasses.replace(clf.refiner, min_samples=2048)
    probs = np.full((3, 28), 0.01)
    probs[:, 4] = 0.9                       # the network says QPSK (index 4) for all three
    cache = {"probs": probs, "snr_estimate": np.zeros(3), "served_pred": np.array([0, 4, 7]),
             "wants": np.array([False, False, True]), "length": np.array([1024, 1024, 1024]),
             "stats": np.full((3, ref.n_features - 29), np.nan, np.float32)}
    # a burst the recorded refiner took but this one does not (shorter than its min_samples)
    # gets the network's answer back
    assert rr.replay(cache, ref).tolist() == [0, 4, 4]
