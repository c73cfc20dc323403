"""The refiner's tree ensemble: numpy evaluation, its storage, and LightGBM's models flattened into it."""

from __future__ import annotations

import numpy as np
import pytest

from rfclassify.engine.tree_ensemble import MISSING_NAN, MISSING_NONE, MISSING_ZERO, TreeEnsemble


def stumps(missing: int = MISSING_NONE, default_left: bool = False) -> TreeEnsemble:
    """Two trees: class 0's splits feature 1 at 0.5 (left 1.0, right 2.0); class 1's is one leaf of -3.0."""
    return TreeEnsemble(feature=np.array([1, 0, 0, 0], np.int32), threshold=np.array([0.5, 0, 0, 0]),
                        left=np.array([1, 1, 2, 3], np.int32), right=np.array([2, 1, 2, 3], np.int32),
                        default_left=np.array([default_left, False, False, False]),
                        missing=np.array([missing, 0, 0, 0], np.int8), value=np.array([0.0, 1.0, 2.0, -3.0]),
                        root=np.array([0, 3], np.int32), tree_class=np.array([0, 1], np.int32),
                        n_classes=2, n_features=2)


def test_a_row_goes_left_at_or_below_the_threshold_and_each_class_sums_its_own_trees():
    t = stumps()
    x = np.array([[9.0, 0.5], [9.0, 0.5000001], [-9.0, -4.0]])
    np.testing.assert_array_equal(t.raw_scores(x), [[1.0, -3.0], [2.0, -3.0], [1.0, -3.0]])
    p = t.probabilities(x[:1])
    np.testing.assert_allclose(p, [[np.exp(4) / (1 + np.exp(4)), 1 / (1 + np.exp(4))]])


def test_missing_values_follow_lightgbms_rules():
    nan_zero = np.array([[0.0, np.nan], [0.0, 0.0], [0.0, 1.0]])
    # no missing type: NaN is read as 0.0 (left), 0.0 is a number (left)
    np.testing.assert_array_equal(stumps(MISSING_NONE).raw_scores(nan_zero)[:, 0], [1.0, 1.0, 2.0])
    # NaN type: NaN goes the default way (right here); 0.0 is a number
    np.testing.assert_array_equal(stumps(MISSING_NAN).raw_scores(nan_zero)[:, 0], [2.0, 1.0, 2.0])
    # zero type: zero (and NaN, read as zero) go the default way
    np.testing.assert_array_equal(stumps(MISSING_ZERO).raw_scores(nan_zero)[:, 0], [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(stumps(MISSING_ZERO, default_left=True).raw_scores(nan_zero)[:, 0],
                                  [1.0, 1.0, 2.0])


def test_stored_arrays_load_back_and_broken_trees_are_refused():
    t = stumps()
    back = TreeEnsemble.from_arrays(t.arrays("x_"), "x_")
    x = np.random.default_rng(0).standard_normal((50, 2))
    np.testing.assert_array_equal(back.raw_scores(x), t.raw_scores(x))
    assert back.n_trees == 2 and back.share == 0.5
    arrays = t.arrays()
    cyclic = dict(arrays, trees_left=np.array([0, 1, 2, 3], np.int32))        # the root points at itself
    arrays_bad_feature = dict(arrays, trees_feature=np.array([2, 0, 0, 0], np.int32))
    for broken, why in ((cyclic, "children must come after"), (arrays_bad_feature, "split feature outside"),
                        (dict(arrays, trees_tree_class=np.array([0, 2], np.int32)), "out of range"),
                        (dict(arrays, trees_share=np.float64(1.5)), "share"),
                        (dict(arrays, trees_value=np.array([0.0, np.inf, 2.0, -3.0])), "not finite")):
        with pytest.raises(ValueError, match=why):
            TreeEnsemble.from_arrays(broken)
    with pytest.raises(KeyError):
        TreeEnsemble.from_arrays({k: v for k, v in arrays.items() if k != "trees_root"})


@pytest.mark.parametrize("zero_as_missing", [False, True])
def test_lightgbm_models_flatten_to_the_same_raw_scores(zero_as_missing):
    """from_lightgbm: the numpy trees give LightGBM's own raw scores on rows with NaN and zeros
    (both missing-value types LightGBM writes) and on rows with nothing missing; fit_trees stops
    early, says how many rounds it kept and fits the same trees again from the same inputs."""
    pytest.importorskip("lightgbm")
    import lightgbm as lgb

    from rfclassify.model.tree_fit import TreeFitConfig, fit_trees, from_lightgbm

    rng = np.random.default_rng(1)
    x = rng.standard_normal((2000, 5))
    y = (x[:, 0] > 0).astype(int) + 2 * (x[:, 1] > 0.3).astype(int)
    x[rng.random(x.shape) < 0.05] = np.nan
    x[rng.random(x.shape) < 0.05] = 0.0
    booster = lgb.train({"objective": "multiclass", "num_class": 4, "num_leaves": 7, "verbose": -1,
                         "zero_as_missing": zero_as_missing}, lgb.Dataset(x, y), 30)
    trees = from_lightgbm(booster.dump_model(), 5)
    assert trees.n_trees == 120 and trees.n_classes == 4
    kinds = set(trees.missing[trees.left != np.arange(trees.left.size)].tolist())
    assert (MISSING_ZERO in kinds) == zero_as_missing
    probe = rng.standard_normal((500, 5))
    probe[rng.random(probe.shape) < 0.1] = np.nan
    probe[rng.random(probe.shape) < 0.1] = 0.0
    # the same leaves (summed in another order: a last-bit difference at most)
    np.testing.assert_allclose(trees.raw_scores(probe), booster.predict(probe, raw_score=True), rtol=0, atol=1e-12)
    finite = rng.standard_normal((500, 5)).astype(np.float32)       # rows with nothing missing: the plain walk
    np.testing.assert_allclose(trees.raw_scores(finite), booster.predict(finite, raw_score=True), rtol=0, atol=1e-12)

    fitted, facts = fit_trees(x, y, 4, np.arange(1600, 2000), np.arange(1600),
                              TreeFitConfig(leaves=7, learning_rate=0.2, patience=10, share=0.3))
    assert 1 <= facts["rounds"] < 5000 and facts["trees"] == 4 * facts["rounds"] and fitted.share == 0.3
    assert np.mean(fitted.raw_scores(x[1600:]).argmax(1) == y[1600:]) > 0.9
    again, _ = fit_trees(x, y, 4, np.arange(1600, 2000), np.arange(1600),
                         TreeFitConfig(leaves=7, learning_rate=0.2, patience=10, share=0.3))
    np.testing.assert_array_equal(again.value, fitted.value)        # deterministic


def test_binary_models_are_refused():
    pytest.importorskip("lightgbm")
    import lightgbm as lgb

    from rfclassify.model.tree_fit import from_lightgbm

    x = np.random.default_rng(2).standard_normal((300, 3))
    booster = lgb.train({"objective": "binary", "verbose": -1}, lgb.Dataset(x, (x[:, 0] > 0).astype(int)), 3)
    with pytest.raises(ValueError, match="multiclass"):
        from_lightgbm(booster.dump_model(), 3)
