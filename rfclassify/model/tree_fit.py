"""Fits the refiner's tree fuser with LightGBM and flattens it into a numpy TreeEnsemble.

LightGBM is a training dependency (the `train` extra); what it fits is served by
rfclassify.engine.tree_ensemble without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rfclassify._optional import require
from rfclassify.engine.tree_ensemble import MISSING_NAN, MISSING_NONE, MISSING_ZERO, TreeEnsemble

_MISSING = {"None": MISSING_NONE, "Zero": MISSING_ZERO, "NaN": MISSING_NAN}


@dataclass(frozen=True)
class TreeFitConfig:
    leaves: int = 15                # leaves per tree
    learning_rate: float = 0.1
    max_rounds: int = 5000          # boosting rounds at most; early stopping ends far sooner
    patience: int = 100             # rounds without a better early-stopping log-loss before stopping
    min_leaf: int = 40              # examples a leaf holds at least
    share: float = 0.5              # the trees' share of the served class probabilities
    seed: int = 0
    threads: int = 0                # LightGBM's threads (0: its default, every core)


def fit_trees(x: np.ndarray, y: np.ndarray, n_classes: int, early: np.ndarray, fit: np.ndarray,
              cfg: TreeFitConfig = TreeFitConfig()) -> tuple[TreeEnsemble, dict[str, Any]]:
    """A multiclass tree ensemble fitted on rows `fit` of (x, y), stopped early by the
    log-loss on rows `early`; returns it and its fit's facts (rounds kept). The same inputs
    give the same trees (LightGBM's deterministic mode, one seed)."""
    lgb = require("lightgbm", "fitting the refiner's trees")
    params = {"objective": "multiclass", "num_class": n_classes, "learning_rate": cfg.learning_rate,
              "num_leaves": cfg.leaves, "min_data_in_leaf": cfg.min_leaf, "feature_fraction": 0.8,
              "bagging_fraction": 0.8, "bagging_freq": 1, "lambda_l2": 1.0, "seed": cfg.seed,
              "deterministic": True, "force_col_wise": True, "num_threads": cfg.threads, "verbose": -1}
    booster = lgb.train(params, lgb.Dataset(x[fit], y[fit]), cfg.max_rounds,
                        valid_sets=[lgb.Dataset(x[early], y[early])],
                        callbacks=[lgb.early_stopping(cfg.patience, verbose=False)])
    rounds = int(booster.best_iteration) or booster.current_iteration()
    trees = from_lightgbm(booster.dump_model(num_iteration=rounds), x.shape[1], cfg.share)
    return trees, {"rounds": rounds, "trees": trees.n_trees, "leaves": cfg.leaves,
                   "learning_rate": cfg.learning_rate, "share": cfg.share}


def from_lightgbm(dump: dict[str, Any], n_features: int, share: float = 0.5) -> TreeEnsemble:
    """The TreeEnsemble of a LightGBM multiclass model's dump_model(); ValueError for what it
    cannot carry (other objectives, categorical splits)."""
    n_classes = int(dump.get("num_class", 1))
    per_round = int(dump.get("num_tree_per_iteration", n_classes))
    if n_classes < 2 or per_round != n_classes or not str(dump.get("objective", "")).startswith("multiclass"):
        raise ValueError(f"not a multiclass model (objective {dump.get('objective')!r}, {n_classes} classes, "
                         f"{per_round} trees a round)")
    nodes: dict[str, list[Any]] = {k: [] for k in ("feature", "threshold", "left", "right", "default_left",
                                                   "missing", "value")}
    roots, classes = [], []

    def add(node: dict[str, Any]) -> int:
        i = len(nodes["feature"])
        for k in nodes:
            nodes[k].append(0)
        if "leaf_value" in node or "split_feature" not in node:
            nodes["left"][i] = nodes["right"][i] = i
            nodes["value"][i] = float(node.get("leaf_value", 0.0))
            nodes["threshold"][i] = 0.0
            return i
        if node.get("decision_type", "<=") != "<=":
            raise ValueError(f"a {node.get('decision_type')!r} split (only numerical '<=' splits are served)")
        nodes["feature"][i] = int(node["split_feature"])
        nodes["threshold"][i] = float(node["threshold"])
        nodes["default_left"][i] = bool(node.get("default_left", True))
        nodes["missing"][i] = _MISSING[str(node.get("missing_type", "None"))]
        nodes["left"][i] = add(node["left_child"])
        nodes["right"][i] = add(node["right_child"])
        return i

    for t, info in enumerate(dump["tree_info"]):
        if "tree_structure" not in info:
            raise ValueError(f"tree {t} has no structure")
        roots.append(add(info["tree_structure"]))
        classes.append(t % n_classes)
    kinds = {"feature": np.int32, "threshold": np.float64, "left": np.int32, "right": np.int32,
             "default_left": bool, "missing": np.int8, "value": np.float64}
    return TreeEnsemble(**{k: np.array(v, dtype=kinds[k]) for k, v in nodes.items()},
                        root=np.array(roots, np.int32), tree_class=np.array(classes, np.int32),
                        n_classes=n_classes, n_features=n_features, share=share)
