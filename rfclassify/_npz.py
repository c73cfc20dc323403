"""np.load for files that must be .npz archives of arrays."""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def open_npz(path: str | os.PathLike[str], allow_pickle: bool = False) -> Any:
    """The archive at `path` (use it in `with`); ValueError where it is a bare .npy array, which
    np.load returns as an array that `with` cannot open (a TypeError traceback where a user gave
    one, before the sixty-sixth session)."""
    loaded = np.load(path, allow_pickle=allow_pickle)
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise ValueError("an array, not an .npz archive of arrays")
    return loaded
