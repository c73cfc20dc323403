"""argparse types for the numbers and paths the subcommands take (stdlib, rfclassify._cpus and
rfclassify._paths only: `status` imports it)."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path

from rfclassify._cpus import MAX_REFINER_WORKERS, MAX_THREADS
from rfclassify._paths import nearest_existing, writable_folder


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


def float_range(lo: float, hi: float, *, lo_open: bool = False) -> Callable[[str], float]:
    """An argparse type for a float option in lo..hi ((lo, hi] with lo_open): past such bounds
    a value went on to overflow time.sleep or a ZeroMQ poll (status --timeout 1e300), divide by
    zero (bench daemon --seconds 1e-300) or reach torch's optimizer (train --lr -1) as a
    traceback."""
    def parse(text: str) -> float:
        value = finite_float(text)
        if not ((lo < value) if lo_open else (lo <= value)) or value > hi:
            bounds = f"more than {lo:g} and at most {hi:g}" if lo_open else f"in {lo:g}..{hi:g}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {text if len(text) <= 20 else text[:17] + '...'}")
        return value
    parse.__name__ = f"number in {lo:g}..{hi:g}"
    return parse


def int_range(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type for an integer option in lo..hi: a value outside went on to fail deep
    inside (a negative seed in numpy's generator, a thread count in ONNX Runtime's C++) as a
    traceback."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be in {lo}..{hi}, got {text if len(text) <= 20 else text[:17] + '...'}")
        return value
    parse.__name__ = f"integer in {lo}..{hi}"
    return parse


#: the most a count of bursts, examples or steps may be: numpy and torch read such counts as C
#: ints, and past it an option ended in OverflowError (fifty-eighth session)
COUNT_MAX = 2 ** 31 - 1


def count(lo: int = 1) -> Callable[[str], int]:
    """A count option: lo..COUNT_MAX."""
    return int_range(lo, COUNT_MAX)


seed = int_range(0, 2 ** 63 - 1)           # numpy's generators take a non-negative seed
thread_count = int_range(0, MAX_THREADS)
worker_count = int_range(0, 1024)          # processes; past a C int they were an OverflowError
refiner_worker_count = int_range(-1, MAX_REFINER_WORKERS)   # -1: automatic
#: the most a layer's channels or a batch's size may be
MAX_WIDTH = 65536
width = int_range(1, MAX_WIDTH)
seconds = float_range(0.0, 86400.0, lo_open=True)  # a wait or a duration: positive, at most a day
learning_rate = float_range(0.0, 10.0, lo_open=True)


def path_text(text: str) -> str:
    """A file or folder option's value: any path but an empty one, which reads as the current
    folder, or as the option's default where a command takes `value or default` (`export --out ''`
    exported into the shipped model's folder, `evaluate --out ''` wrote into it)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty: give a path, or leave the option out where it "
                                         "has a default")
    return text


def output_file(text: str) -> Path:
    """A file option a command writes at its end: not empty, not a folder, under a folder that is
    one or can be made, and writable there: a file can be made in that folder (or the nearest
    one that exists, where the folder is still to be made), and an existing file is writable.
    Checked as the command line is read, so that a mistake ends the command before its work
    rather than after it (`bench daemon --json` under a file, or `bench --json` on a read-only
    mount or in /sys, measured for its whole run, then failed). A file that is there needs only
    to be writable itself (a device, a FIFO, a link, or a file in a folder that takes no new
    one is written in place). '-' passes (stdout where the command takes it so). A path that
    cannot even be looked at (a name too long, a folder this user may not enter) is refused
    naming it: argparse passes an OSError of a type on as a traceback."""
    p = Path(path_text(text))
    if text == "-":
        return p
    try:
        return _writable_file(p, text)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text} cannot be written: {(exc.strerror or str(exc)).lower()}") from None


def _writable_file(p: Path, text: str) -> Path:
    """output_file's checks of `p` (given as `text`); an OSError where a stat fails."""
    if text.endswith(os.sep):   # Path drops the slash: `o/new/` wrote a file named new
        raise argparse.ArgumentTypeError(f"{text} names a folder (it ends in {os.sep}); name a file")
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; name a file")
    if p.exists():   # written in place where its folder takes no new file (_atomic.write_atomic)
        if not os.access(p, os.W_OK):
            why = "the file is read-only" if p.is_file() else "permission denied"
            raise argparse.ArgumentTypeError(f"{text} cannot be written: {why}")
        return p
    parent = nearest_existing(p.parent)
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{parent} is not a directory, so {text} cannot be written")
    problem = _cannot_make_files_in(parent)
    if problem:
        raise argparse.ArgumentTypeError(f"{text} cannot be written: {parent}: {problem}")
    return p


def _cannot_make_files_in(folder: Path) -> str:
    """Why no file can be made in `folder`, or "". os.access sees the permissions and a
    read-only file system (EROFS), but root passes it where the file system itself refuses
    (/sys), so a nameless temporary file (O_TMPFILE; a named one, removed at once, where the
    file system lacks it) is made there and closed."""
    import tempfile   # here, not at the top: `status` imports this module

    if not writable_folder(folder):
        try:
            read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
        except OSError:
            read_only = False
        return "read-only file system" if read_only else "permission denied"
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()
    return ""
