"""Numbers that came from outside (a wire header, a metadata file, a config): finite floats or nothing.

JSON and TOML integers have no size limit in Python's readers, so float() of one can raise
OverflowError and math.isfinite() of one can too; each reader once guarded against that on
its own, and model.json's reader did not (a 400-digit temperature ended in a traceback).
"""

from __future__ import annotations

import math
import numbers
from typing import Any


def as_finite_float(value: Any) -> float | None:
    """`value` as a float if it is a real number (not a bool; numpy's too) that is finite as a
    float; None for anything else: NaN, an infinity, an integer past float range, another type."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None
