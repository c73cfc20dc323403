"""Files replaced in one step: written under a temporary name beside the target, flushed to the
disk, then renamed over it, so that a reader, a crash or a power cut finds the old file or the
new one, never part of one, and a write that fails leaves no temporary file behind.
`replacing_together` does it for a set of files that name each other (an index written last)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from rfclassify._paths import writable_folder
from rfclassify._signals import signals_held


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


@contextlib.contextmanager
def replacing_together(paths: Sequence[str | os.PathLike[str]]) -> Iterator[list[Path]]:
    """Several files replaced as a set: yields their temporary paths (temporary_name, in the
    order given) to write and check. When the block ends without an error, each is flushed to
    the disk and they replace their paths in the order given (the file that names the others
    last: model.json after the files whose sha256s it records), Ctrl-C and SIGTERM held until
    the last rename is done (then raised). On an error or an interrupt in the block every
    temporary file is removed and every path left as it was; only a crash during the renames
    themselves (milliseconds) can leave some replaced and others not."""
    targets = [Path(p) for p in paths]
    temporaries = [temporary_name(p) for p in targets]
    try:
        for folder in dict.fromkeys(p.parent for p in targets):
            folder.mkdir(parents=True, exist_ok=True)
        yield temporaries
        for tmp in temporaries:
            _fsync(tmp)
        with signals_held():
            for tmp, path in zip(temporaries, targets, strict=True):
                os.replace(tmp, path)
    finally:
        for tmp in temporaries:
            tmp.unlink(missing_ok=True)
    for folder in dict.fromkeys(p.parent for p in targets):
        with contextlib.suppress(OSError):
            _fsync(folder, directory=True)


def failed_write(path: str | os.PathLike[str], exc: BaseException) -> OSError | None:
    """What to raise where `exc` ended the writing of `path` (after the file was opened), if a
    write failed: an OSError, or a RuntimeError one caused (torch.save reports its file's write
    that raised as "unexpected pos", that OSError its context); None for any other error. The
    error keeps the errno and says `path`, the file asked for (not the temporary one written),
    in its text but leaves `filename` empty, so the CLI ends with exit 1: a disk that fills up
    meanwhile (ENOSPC, EDQUOT; EFBIG under `ulimit -f`) is the machine's state, where an OSError
    naming a file is an output the user pointed somewhere unwritable (exit 2)."""
    cause = exc.__context__ if isinstance(exc, RuntimeError) else exc
    if not isinstance(cause, OSError):
        return None
    return OSError(cause.errno, f"{os.fspath(path)}: {cause.strerror or cause}")


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Replace `path` with `data` (str: as UTF-8) in one step; the path written. Written in place
    instead where there is no file to replace, or replacing it would do harm: a path that is
    neither a regular file nor a folder (/dev/null, a FIFO: the rename would put a file where
    the device was), a symbolic link (the rename replaced the link, /dev/stdout too, not what it
    points to), a file in a folder that takes no new one (its temporary file could not be made).
    An OSError that names no file (a full disk, `ulimit -f`: the temporary file's write) is raised
    again naming `path`, the file the caller asked for."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        mode = path.stat().st_mode
    except OSError:
        mode = None
    in_place = mode is not None and (path.is_symlink() or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))
                                     or not writable_folder(path.parent))
    try:
        if in_place:
            with open(path, "wb") as fh:
                fh.write(payload)
            return path
        with replacing(path) as tmp:
            tmp.write_bytes(payload)
    except OSError as exc:
        if exc.filename is None or Path(exc.filename) == temporary_name(path):
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
    return path


#: a write that failed for want of room (a full disk, a quota, `ulimit -f`): the machine's state
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def write_error(path: str | os.PathLike[str], exc: OSError, source: str | os.PathLike[str] | None = None) -> OSError:
    """What to raise where writing `path` through its temporary file failed with `exc`, naming
    `path`, the file asked for: for want of room (NO_ROOM) as failed_write says it (exit 1);
    else as the file written (filename; filename2 after `source`, where it is a copy's), exit 2
    (a place the user pointed at)."""
    if exc.errno in NO_ROOM:
        return failed_write(path, exc) or exc
    if source is None:
        return OSError(exc.errno, exc.strerror or str(exc), os.fspath(path))
    return OSError(exc.errno, exc.strerror or str(exc), os.fspath(source), None, os.fspath(path))


def copy_atomic(source: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """Copy the file `source` to `path` (data, permission bits and times: shutil.copy2) in one
    step, as `replacing` does: a copy that fails (a full disk) leaves `path` as it was, where
    copying onto it left part of the file. An error of the write names `path` (write_error),
    not the temporary file, nor `source` alone (shutil names the file read first)."""
    import shutil

    path = Path(path)
    tmp = temporary_name(path)
    try:
        with replacing(path) as written:
            shutil.copy2(source, written)
    except OSError as exc:
        named = {exc.filename, exc.filename2} - {None}
        if not named or any(Path(name) == tmp for name in named):
            raise write_error(path, exc, source) from exc
        raise
    return path
