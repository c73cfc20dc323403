"""Files replaced in one step: written under a temporary name beside the target, flushed to the
disk, then renamed over it, so that a reader, a crash or a power cut finds the old file or the
new one, never part of one, and a write that fails leaves no temporary file behind."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def temporary_name(path: Path) -> Path:
    """Where `path` is written before the rename: hidden, beside it (the same file system, so the
    rename is atomic), and this process's own."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yields the temporary path to write; when the block ends without an error, that file
    replaces `path` (its folder made where missing). On an error it is removed and `path` is
    left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    with contextlib.suppress(OSError):   # the rename itself on the disk; a file system may refuse
        _fsync(path.parent, directory=True)


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Replace `path` with `data` (str: as UTF-8) in one step; the path written."""
    with replacing(path) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
    return Path(path)
