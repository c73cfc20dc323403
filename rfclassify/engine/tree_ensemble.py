"""Gradient-boosted decision trees of a multiclass model, evaluated in numpy: the refiner's second fuser.

The refiner's perceptrons and a tree ensemble fitted on the same rows err on different bursts
(docs/model.md, "Twenty-eighth session"), so a refiner may carry one beside its perceptrons and
serve the mix of their class probabilities. The trees are fitted by LightGBM
(rfclassify.model.tree_fit, a training dependency only) and stored as the flat arrays below, so
serving needs numpy alone.

Every tree's nodes, leaves included, sit in one set of arrays, each tree in depth-first order
(a node's children come after it). An internal node sends a row left when its feature is at or
below the threshold; a leaf is a node whose children are itself. raw_scores walks every (row,
tree) pair down at once, one level a step, and drops each walk as it lands on a leaf (most trees
are far shallower than the deepest: for the shipped trees 0.18 against 0.29 ms a burst in batches
of 64 for walking every pair to the deepest tree's depth, docs/model.md). Missing values follow
LightGBM's rules: a NaN counts as 0.0 unless the node's missing type is NaN; a node whose missing
type is ZERO (or NaN) sends 0.0 (or NaN) its default way. A class's raw score is the sum of its
trees' leaf values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rfclassify.engine.results import log_softmax

PREFIX = "trees_"               # array names of a tree ensemble inside the refiner's file
MISSING_NONE, MISSING_ZERO, MISSING_NAN = 0, 1, 2
ZERO_THRESHOLD = 1e-35          # LightGBM's: |x| at or below this is zero for a ZERO missing type
_ARRAYS = ("feature", "threshold", "left", "right", "default_left", "missing", "value", "root", "tree_class")


@dataclass(frozen=True, eq=False)
class TreeEnsemble:
    feature: np.ndarray         # (N,) int32: the feature an internal node splits on (0 at leaves)
    threshold: np.ndarray       # (N,) float64: left when the feature is <= this
    left: np.ndarray            # (N,) int32: child node indices; a leaf's are its own
    right: np.ndarray           # (N,) int32
    default_left: np.ndarray    # (N,) bool: where a missing value goes
    missing: np.ndarray         # (N,) int8: MISSING_NONE, MISSING_ZERO or MISSING_NAN
    value: np.ndarray           # (N,) float64: a leaf's value (0 at internal nodes)
    root: np.ndarray            # (T,) int32: each tree's first node
    tree_class: np.ndarray      # (T,) int32: the class whose raw score each tree adds to
    n_classes: int
    n_features: int
    #: the share of the refiner's class probabilities that comes from the trees (the rest is
    #: the perceptrons')
    share: float = 0.5

    def __post_init__(self) -> None:
        problem = _structure_problem(self)
        if problem:
            raise ValueError(f"not a tree ensemble: {problem}")
        object.__setattr__(self, "_depth", _depth(self.left, self.right, self.root))
        object.__setattr__(self, "_zero_missing", bool(np.any(self.missing == MISSING_ZERO)))
        idx = np.arange(self.left.size)
        object.__setattr__(self, "_is_leaf", (self.left == idx) & (self.right == idx))
        object.__setattr__(self, "_class_onehot", np.eye(self.n_classes)[self.tree_class])

    @property
    def n_trees(self) -> int:
        return int(self.root.size)

    def raw_scores(self, x: np.ndarray) -> np.ndarray:
        """(n, n_classes) float64 raw scores (the softmax's inputs) of (n, n_features) rows."""
        x = np.atleast_2d(np.asarray(x, np.float64))
        n = x.shape[0]
        flat = x.ravel()
        plain = not self._zero_missing and bool(np.all(np.isfinite(x)))   # no value is missing anywhere
        # every (row, tree) walk, flattened; those on a leaf leave the working set as they land
        leaf = np.empty(n * self.n_trees, np.int32)
        where = np.arange(n * self.n_trees)
        node = np.tile(self.root, n)
        offset = np.repeat(np.arange(n) * x.shape[1], self.n_trees)
        for _ in range(self._depth + 1):
            done = self._is_leaf[node]
            if done.any():
                leaf[where[done]] = node[done]
                going = ~done
                where, node, offset = where[going], node[going], offset[going]
                if not node.size:
                    break
            v = flat[offset + self.feature[node]]
            if plain:
                go_left = v <= self.threshold[node]
            else:
                kind = self.missing[node]
                v = np.where(np.isnan(v) & (kind != MISSING_NAN), 0.0, v)
                absent = (((kind == MISSING_ZERO) & (np.abs(v) <= ZERO_THRESHOLD))
                          | ((kind == MISSING_NAN) & np.isnan(v)))
                go_left = np.where(absent, self.default_left[node], v <= self.threshold[node])
            node = np.where(go_left, self.left[node], self.right[node])
        values = self.value[leaf].reshape(n, self.n_trees)
        return values @ self._class_onehot

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """(n, n_classes) softmax of raw_scores."""
        return np.exp(log_softmax(self.raw_scores(x)))

    def arrays(self, prefix: str = PREFIX) -> dict[str, np.ndarray]:
        """Its arrays for np.savez, named with `prefix`."""
        out = {prefix + k: getattr(self, k) for k in _ARRAYS}
        out[prefix + "shape"] = np.array([self.n_classes, self.n_features], np.int64)
        out[prefix + "share"] = np.float64(self.share)
        return out

    @classmethod
    def from_arrays(cls, z: Any, prefix: str = PREFIX) -> TreeEnsemble:
        """The ensemble stored by `arrays` in an npz (or any mapping); KeyError when an array is
        missing, ValueError when they do not make trees."""
        n_classes, n_features = (int(v) for v in np.asarray(z[prefix + "shape"]).reshape(2))
        kinds = {"feature": np.int32, "left": np.int32, "right": np.int32, "root": np.int32, "tree_class": np.int32,
                 "threshold": np.float64, "value": np.float64, "default_left": bool, "missing": np.int8}
        return cls(**{k: np.asarray(z[prefix + k]).astype(kinds[k]) for k in _ARRAYS},
                   n_classes=n_classes, n_features=n_features, share=float(z[prefix + "share"]))


def _structure_problem(t: TreeEnsemble) -> str:
    """What makes t's arrays not a tree ensemble ('' when nothing)."""
    n = t.feature.shape
    if len(n) != 1 or n[0] == 0:
        return "the node arrays must be one non-empty axis"
    if any(getattr(t, k).shape != n for k in _ARRAYS[:7]):
        return "the node arrays differ in length"
    if t.root.ndim != 1 or t.root.shape != t.tree_class.shape or t.root.size == 0:
        return "root and tree_class must be one non-empty axis of the same length"
    if t.n_classes < 2 or t.n_features < 1:
        return f"{t.n_classes} classes and {t.n_features} features"
    if not 0.0 <= t.share <= 1.0:
        return f"share {t.share} is not in 0..1"
    idx = np.arange(n[0])
    leaf = (t.left == idx) & (t.right == idx)
    internal = ~leaf
    if np.any(internal & ((t.left <= idx) | (t.right <= idx) | (t.left >= n[0]) | (t.right >= n[0]))):
        return "an internal node's children must come after it"
    if np.any((t.feature < 0) | (t.feature >= t.n_features)):
        return f"a split feature outside 0..{t.n_features - 1}"
    if np.any((t.root < 0) | (t.root >= n[0])) or np.any((t.tree_class < 0) | (t.tree_class >= t.n_classes)):
        return "a root or a tree's class out of range"
    if np.any(~np.isin(t.missing, (MISSING_NONE, MISSING_ZERO, MISSING_NAN))):
        return "an unknown missing-value type"
    if not (np.all(np.isfinite(t.value)) and np.all(np.isfinite(t.threshold[internal]))):
        return "a value or threshold that is not finite"
    return ""


def _depth(left: np.ndarray, right: np.ndarray, root: np.ndarray) -> int:
    """Steps from the roots after which every path is on a leaf (children come after their
    node, so the walk ends within len(left) steps)."""
    idx = np.arange(left.size)
    frontier = np.unique(root)
    for depth in range(left.size + 1):
        frontier = frontier[(left[frontier] != idx[frontier]) | (right[frontier] != idx[frontier])]
        if frontier.size == 0:
            return depth
        frontier = np.unique(np.concatenate([left[frontier], right[frontier]]))
    raise ValueError("not a tree ensemble: a path that never reaches a leaf")
