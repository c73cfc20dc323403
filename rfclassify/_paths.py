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


def storable(text: str) -> str:
    """`text` (a path, or a command line that holds one) as a UTF-8 file or an HDF5 attribute
    takes it: bytes that are not UTF-8, which Python holds as lone surrogates ('\\udcff' for the
    byte 0xff of `--out $'o/out\\xff.h5'`), written as `\\xff`; other text as it is. Writing
    them as they came failed as a UnicodeEncodeError traceback after the command's work."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:   # a surrogate that stands for no byte
            return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
