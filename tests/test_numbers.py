"""as_finite_float: the one reader of numbers from outside (wire headers, SigMF, config, model.json, PMT)."""

import math

import numpy as np

from rfclassify._numbers import as_finite_float


def test_finite_ints_and_floats_are_read_and_everything_else_is_none():
    assert as_finite_float(3) == 3.0 and isinstance(as_finite_float(3), float)
    assert as_finite_float(-2.5) == -2.5
    assert as_finite_float(np.float32(0.5)) == 0.5 and as_finite_float(np.int64(-7)) == -7.0
    assert as_finite_float(10 ** 308) == 1e308
    for bad in (10 ** 400, -(10 ** 400), math.nan, math.inf, -math.inf, True, False, np.bool_(True), np.float32("nan"), "1", None, [1], 1j):
        assert as_finite_float(bad) is None, bad
