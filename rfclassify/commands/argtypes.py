"""argparse types for the numbers the subcommands take (stdlib only: `status` imports it)."""

from __future__ import annotations

import argparse
import math


def finite_float(text: str) -> float:
    """A float option's value: any finite number. Python's float() also reads 'nan' and
    'inf', which pass every range check a command makes after (a NaN compares false) and
    then fail deep inside as a traceback, so they are a usage error here."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value
