"""What a path is, for commands' messages: where a file or folder a command will write can go
(checked before the work that makes it), and what a path named as a file to read is instead."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def nearest_existing(path: Path) -> Path:
    """`path`, or the nearest of its parents that exists (where a folder would be made)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def writable_folder(path: Path) -> bool:
    """Whether `path` is a folder this process may make files in."""
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def not_a_file(path: Path) -> str:
    """What `path`, named as a file to read, is instead: "no such file", "a directory", "a pipe
    (FIFO)", "a socket", "a device"; "" for a regular file. A pipe (`<(...)`, a FIFO) and a
    folder were "no such file" before."""
    try:
        mode = path.stat().st_mode
    except (OSError, ValueError):
        return "no such file"
    if stat.S_ISREG(mode):
        return ""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


def not_a_file_text(path: Path, what: str = "file") -> str:
    """'PATH: no such WHAT' or 'PATH: a pipe (FIFO), not a file ...': the error for a path that
    names no regular file (where not_a_file(path) is not "")."""
    kind = not_a_file(path)
    if kind == "no such file":
        return f"{path}: no such {what}"
    if kind == "a pipe (FIFO)":
        return f"{path}: a pipe (FIFO), not a file: the readers seek in what they read; save it to a file first"
    return f"{path}: {kind}, not a file"
