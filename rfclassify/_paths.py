"""Where a file or folder a command will write can go, checked before the work that makes it."""

from __future__ import annotations

import os
from pathlib import Path


def nearest_existing(path: Path) -> Path:
    """`path`, or the nearest of its parents that exists (where a folder would be made)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def writable_folder(path: Path) -> bool:
    """Whether `path` is a folder this process may make files in."""
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)
