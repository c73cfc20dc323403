"""The file object a dataset's HDF5 partial file is written through, which never lets a failed
write reach HDF5.

HDF5 (2.0, h5py 3.16) does not survive a write that fails: a dataset whose chunk cache cannot be
flushed (a full disk) is left half closed, and the next close of it, the file's or the
interpreter's at exit, is a segmentation fault (exit 139, the partial file left behind). So h5py
writes through `PartialFile` (its `fileobj` driver): the first OSError of a write is kept in
`failure`, and that write and every later one are kept in memory instead, where reads find them.
HDF5 sees a file that works, closes cleanly, and the writer raises the kept error and removes the
file. After a failure only what HDF5 still holds (its caches, the rest of one append) is written,
so the memory it takes is bounded by that.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


class PartialFile:
    """A binary file opened for writing (created or truncated), as h5py's `fileobj` driver uses
    one: seek, tell, read, write, truncate, flush; `close()` closes it. Reads past the end give
    zeros, as HDF5's default driver's do."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        self._pos = 0
        #: the first write that failed; from then on writes go to `_kept` and the disk is left alone
        self.failure: OSError | None = None
        self._kept: list[tuple[int, bytes]] = []
        self._size_after_failure = 0

    def _fail(self, exc: OSError) -> None:
        if self.failure is None:
            self.failure = exc
            self._size_after_failure = os.fstat(self._fd).st_size

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            self._pos = pos
        elif whence == os.SEEK_CUR:
            self._pos += pos
        else:
            self._pos = self._size() + pos
        return self._pos

    def tell(self) -> int:
        return self._pos

    def _size(self) -> int:
        if self.failure is None:
            return os.fstat(self._fd).st_size
        return max([self._size_after_failure, *(at + len(data) for at, data in self._kept)])

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while self.failure is None and done < len(view):
            try:
                n = os.pwrite(self._fd, view[done:], self._pos + done)
            except OSError as exc:
                self._fail(exc)
                break
            if n == 0:   # no room, and no errno to say so
                self._fail(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
                break
            done += n
        if done < len(view):
            self._kept.append((self._pos + done, bytes(view[done:])))
        self._pos += len(view)
        return len(view)

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            size = max(0, self._size() - self._pos)
        on_disk = size if self.failure is None else min(size, max(0, self._size_after_failure - self._pos))
        data = bytearray(os.pread(self._fd, on_disk, self._pos) if on_disk else b"")
        data.extend(bytes(size - len(data)))
        for at, kept in self._kept:    # later writes over earlier ones
            lo, hi = max(at, self._pos), min(at + len(kept), self._pos + size)
            if lo < hi:
                data[lo - self._pos:hi - self._pos] = kept[lo - at:hi - at]
        self._pos += size
        return bytes(data)

    def truncate(self, size: int | None = None) -> int:
        size = self._pos if size is None else size
        if self.failure is None:
            try:
                os.ftruncate(self._fd, size)
            except OSError as exc:   # `ulimit -f` refuses to lengthen it
                self._fail(exc)
        if self.failure is not None:
            self._size_after_failure = min(self._size_after_failure, size)
            self._kept = [(at, data[:size - at]) for at, data in self._kept if at < size]
        return size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._kept = []
