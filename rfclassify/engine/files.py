"""Bursts stored in files, for `rfclassify classify`: which reader a file needs, and the readers
of what is not SigMF (rfclassify.engine.sigmf reads that).

HDF5: the dataset schema of ``rfclassify.data.schema``, read with ``DatasetReader``; every
example is a burst with its label and SNR as truth.

WAV (two channels, I and Q) and raw recordings (samples of a SigMF datatype, nothing else):
their bursts are found by the daemon's gr-stream cutting (its DC blocker and energy detector;
rfclassify.engine.file_bursts), or the whole file is taken (one burst, or pieces of at most
2**20 samples where it is longer: file_bursts.whole_bursts).

NumPy arrays (np.save's .npy): one recording or an array of bursts, complex or real I/Q
(iter_npy says which layouts).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rfclassify._exceptions import InputError
from rfclassify._paths import not_a_file, not_a_file_text
from rfclassify.engine.file_bursts import (FileBurst, Reading, UnreadSamples, chunked, pieces, split_note,
                                           unmarked_bursts)
from rfclassify.engine.sigmf import (Dataset, SampleMap, as_float, is_sigmf, is_sigmf_archive, read_sigmf_archive,
                                     real_baseband, sigmf_bursts, sigmf_dtype, sigmf_paths)

log = logging.getLogger(__name__)


def iter_raw(path: str | Path, chunk: int = 4096, limit: int | None = None, reading: Reading = Reading()
             ) -> Iterator[list[FileBurst]]:
    """Chunks of the bursts of a raw recording: samples of reading.raw's SigMF datatype and
    nothing else (GNU Radio's file_sink of gr_complex is cf32_le; an SDR tool's .cfile or .iq),
    found by the daemon's energy detector unless reading.cut is "whole" (the file taken whole,
    in pieces past 2**20 samples).
    A real datatype's bursts are made complex baseband at half the rate (sigmf.real_baseband).
    The file is checked before the first chunk; limit 0 checks it and reads nothing."""
    p = Path(path)
    if reading.raw is None:
        raise InputError(f"{p}: a raw recording needs its datatype (--raw)")
    component, is_complex = sigmf_dtype(reading.raw)
    try:
        dataset = Dataset(p, 0, p.stat().st_size)
    except OSError as exc:
        raise InputError(f"{p}: cannot read it ({exc})") from None
    samples = SampleMap(dataset, component, is_complex, 0, [], 0, p)
    for found in unmarked_bursts(samples.read, samples.n, str(p), reading.sample_rate_hz, reading, chunk, limit):
        yield [real_baseband(b, samples) for b in found]


def iter_wav(path: str | Path, chunk: int = 4096, limit: int | None = None, reading: Reading = Reading()
             ) -> Iterator[list[FileBurst]]:
    """Chunks of the bursts of a two-channel WAV IQ recording (I left, Q right: what SDR#,
    SDRuno, HDSDR and GQRX record), its rate from the header, found by energy unless
    reading.cut is "whole". 8-bit samples are centred on zero; the file is memory-mapped. A file
    cut short (or whose header was never finalized) gives the samples it holds, with a warning."""
    p = Path(path)
    rate_hz, data, _ = _read_wav(p, warn=limit != 0)   # limit 0 checks the file: the read after it warns

    def read(start: int, count: int) -> np.ndarray:
        return as_float(data[start:start + count], True)

    yield from unmarked_bursts(read, data.shape[0], str(p), rate_hz, reading, chunk, limit)


def wav_layout(path: str | Path) -> tuple[str, float | None, int, int]:
    """A WAV IQ recording as SigMF sees its file: (core:datatype, sample rate in Hz or None,
    bytes before the samples, bytes after them: of a file cut short, the part of a sample pair it
    ends in). InputError for 24-bit samples, which have no SigMF datatype."""
    p = Path(path)
    rate_hz, data, header = _read_wav(p, warn=False)   # classify's read of it warns
    if header is None:
        raise InputError(f"{p}: its {8 * data.dtype.itemsize}-bit samples were widened to be read "
                         "(24-bit WAV) and have no SigMF datatype")
    kind = {"f": "cf", "i": "ci", "u": "cu"}[data.dtype.kind]
    bits = 8 * data.dtype.itemsize
    order = "" if bits == 8 else ("_be" if data.dtype.str[0] == ">" else "_le")
    trailing = p.stat().st_size - header - data.nbytes
    return f"{kind}{bits}{order}", rate_hz, int(header), int(trailing)


def _data_chunk_end(p: Path) -> int:
    """The byte after the header of a WAV's data chunk (the last, as scipy reads), where its
    samples would begin."""
    end, pos, size = None, 12, p.stat().st_size
    with open(p, "rb") as fh:
        while pos + 8 <= size:
            fh.seek(pos)
            head = fh.read(8)
            if head[:4] == b"data":
                end = pos + 8
            n = int.from_bytes(head[4:], "little")
            pos += 8 + n + n % 2   # a chunk of odd size has a pad byte
    if end is None:
        raise InputError(f"{p}: a WAV without a data chunk")
    return end


def _read_wav(p: Path, warn: bool = True) -> tuple[float | None, np.ndarray, int | None]:
    """(sample rate in Hz or None, (n, 2) samples, the byte where they begin in the file) of a WAV
    IQ recording: the samples memory-mapped but for 24-bit ones, widened to be read (whole; their
    byte None). A file cut short, or whose header was never finalized (a recorder killed), gives
    the whole sample pairs it holds, mapped, and (warn) one warning naming it and what is missing:
    before, scipy's mapping failed and the fallback read the whole file into memory, with scipy's
    own warning silenced. InputError for anything that is not a WAV IQ recording."""
    import warnings

    from scipy.io import wavfile

    try:
        size = p.stat().st_size
        span = _wav_span(p, size)
        with warnings.catch_warnings():   # vendors' own chunks (SDRuno's auxi) are skipped, not warned of
            warnings.simplefilter("ignore", wavfile.WavFileWarning)
            if span is not None and span.unfinished(size):
                rate, data, header = _read_unfinished_wav(p, span, size, wavfile)
            else:
                try:
                    rate, data = wavfile.read(p, mmap=True)
                    header = data.offset if data.size else _data_chunk_end(p)   # numpy maps nothing for none
                except ValueError:   # 24-bit samples cannot be memory-mapped: read them whole
                    if span is not None and span.mappable:
                        raise
                    (rate, data), header = wavfile.read(p, mmap=False), None
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - scipy's parser lets struct.error, ZeroDivisionError and
        # UnboundLocalError out of a damaged header (a fuzz of 1,500 mutated files): all are a bad file
        raise InputError(f"{p}: cannot read it as WAV ({type(exc).__name__}: {exc})") from None
    if data.ndim != 2 or data.shape[1] != 2:
        raise InputError(f"{p}: a WAV IQ recording has two channels (I, Q); this one has "
                         f"{1 if data.ndim == 1 else data.shape[1]}")
    rate_hz = float(rate) if rate > 0 else None
    if warn and span is not None and span.unfinished(size):
        log.warning("%s", span.missing_text(p, size, rate_hz))
    return rate_hz, data, header


@dataclass(frozen=True)
class _WavSpan:
    """Where a WAV file's samples lie, by its header's chunks (the data chunk scipy reads)."""

    start: int            # the byte of the first sample
    declared: int         # bytes of samples the header gives
    frame: int            # bytes of one sample pair (all channels: fmt's block align)
    channels: int
    big_endian: bool
    rf64: bool
    finalized: bool       # False: sizes left 0 (the RIFF's and the data chunk's), the samples run to the end

    @property
    def mappable(self) -> bool:
        """Whether numpy maps the samples as stored (not 24-bit)."""
        return self.channels > 0 and self.frame % self.channels == 0 and self.frame // self.channels in (1, 2, 4, 8)

    def unfinished(self, size: int) -> bool:
        """Whether the file of size bytes holds fewer samples than the header gives, or the
        header gives none but samples follow it (never finalized)."""
        return self.start + self.declared > size or (not self.finalized and size > self.start)

    def missing_text(self, p: Path, size: int, rate_hz: float | None) -> str:
        held = (size - self.start) // self.frame
        part = (size - self.start) % self.frame
        tail = f", and {part} bytes of an unfinished one (left out)" if part else ""
        if not self.finalized or self.declared == 0xFFFFFFFF:
            return (f"{p}: its WAV header was never finalized (the recorder stopped before writing its size): "
                    f"reading the {held:,} IQ samples the file holds{tail}")
        missing = self.declared // self.frame - held
        seconds = "" if rate_hz is None else f", {missing / rate_hz:.3g} s"
        return (f"{p}: the WAV file is cut short: its header gives {self.declared // self.frame:,} IQ samples, "
                f"the file holds {held:,} ({missing:,} missing{seconds}){tail}; reading those it holds")


def _wav_span(p: Path, size: int) -> _WavSpan | None:
    """Where the samples of the WAV file p (of size bytes) lie by its header, walked as scipy
    walks it (RIFF, RIFX big-endian, RF64 with its ds64 sizes; the last data chunk); None where
    the walk finds no fmt chunk before a data chunk (scipy then says what is wrong)."""
    import struct

    with open(p, "rb") as fh:
        head = fh.read(12)
        if head[:4] not in (b"RIFF", b"RIFX", b"RF64") or head[8:12] != b"WAVE":
            return None
        order, rf64 = (">" if head[:4] == b"RIFX" else "<"), head[:4] == b"RF64"
        riff_size = struct.unpack(order + "I", head[4:8])[0]
        ds64_data = frame = channels = found = None
        pos = 12
        while pos + 8 <= size:
            fh.seek(pos)
            name, n = fh.read(4), struct.unpack(order + "I", fh.read(4))[0]
            body = fh.read(min(n, 16))
            if name == b"ds64" and len(body) == 16:
                ds64_data = struct.unpack("<Q", body[8:16])[0]
            elif name == b"fmt " and len(body) >= 14:
                channels, frame = struct.unpack(order + "H", body[2:4])[0], struct.unpack(order + "H", body[12:14])[0]
            elif name == b"data":
                n = ds64_data if rf64 and ds64_data is not None else n   # RF64's sizes are ds64's
                if not frame:
                    return None
                found = _WavSpan(pos + 8, n, frame, channels or 0, order == ">", rf64,
                                 finalized=rf64 or n != 0 or riff_size != 0)
                if found.unfinished(size):   # the samples run to the end: no chunk after them
                    return found
            pos += 8 + n + n % 2   # a chunk of odd size has a pad byte
    return found


def _read_unfinished_wav(p: Path, span: _WavSpan, size: int, wavfile: Any) -> tuple[int, np.ndarray, int | None]:
    """(rate, samples, their first byte or None where widened) of a WAV file cut short or never
    finalized: the whole sample pairs it holds. scipy reads the header, its sizes set to those
    pairs (it cannot be told to read fewer samples than the header gives), and numpy maps them."""
    import io
    import struct

    held = (size - span.start) // span.frame
    nbytes = held * span.frame
    with open(p, "rb") as fh:
        head = bytearray(fh.read(span.start))
    if span.rf64:   # ds64: RIFF size, then data size, each 64 bits
        head[20:36] = struct.pack("<QQ", span.start - 8 + nbytes, nbytes)
    else:
        order = ">" if span.big_endian else "<"
        head[4:8] = struct.pack(order + "I", min(span.start - 8 + nbytes, 0xFFFFFFFF))
        head[span.start - 4:span.start] = struct.pack(order + "I", nbytes)
    rate, none = wavfile.read(io.BytesIO(bytes(head)))   # the header alone: its dtype and channels
    if not span.mappable:   # 24-bit: widened, as a whole file of them is
        with open(p, "rb") as fh:
            fh.seek(span.start)
            return *wavfile.read(io.BytesIO(bytes(head) + fh.read(nbytes))), None
    shape = (held, *none.shape[1:])
    if not held:
        return rate, none, span.start
    return rate, np.memmap(p, dtype=none.dtype, mode="r", offset=span.start, shape=shape), span.start


def iter_npy(path: str | Path, chunk: int = 4096, limit: int | None = None, reading: Reading = Reading()
             ) -> Iterator[list[FileBurst]]:
    """Chunks of the bursts of a NumPy array saved with np.save (memory-mapped): complex (L,)
    is one recording, (N, L) N bursts; real I and Q on the last axis, (L, 2) or (N, L, 2), or on
    the axis before it, (2, L) or (N, 2, L) (RadioML 2016's layout). A recording is taken whole
    (file_bursts.whole_bursts: one burst, or pieces of at most longest_whole() samples) unless
    reading.cut is "energy" (an array is most often a burst, not a capture with a noise floor to
    cut against); each row of an array of bursts is one burst, classified in pieces of at most
    longest_whole() samples where it is longer (file_bursts.pieces; reading.note told once).
    Sample rate: reading.sample_rate_hz. Unsigned integers are centred on zero. Samples are read
    from the mapping as their burst is asked for."""
    import dataclasses

    p = Path(path)
    try:
        data = np.load(p, mmap_mode="r", allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - object arrays and truncated data are ValueError, but numpy's
        # header parser lets tokenize.TokenError out of a damaged header (a fuzz of 400 mutated files)
        raise InputError(f"{p}: cannot read it as a NumPy array ({type(exc).__name__}: {exc})") from None
    rows, one = _npy_rows(data, p)
    is_complex = rows.dtype.kind == "c"

    def as_iq(samples: np.ndarray) -> np.ndarray:
        if not is_complex:
            return as_float(samples, True)
        # complex128 past float32 becomes inf and its burst a non_finite reject, not a warning
        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(samples, dtype=np.complex64)

    if one:
        whole = dataclasses.replace(reading, cut="whole") if reading.cut == "auto" else reading
        yield from unmarked_bursts(lambda start, count: as_iq(rows[0, start:start + count]), rows.shape[1], str(p),
                                   reading.sample_rate_hz, whole, chunk, limit)
        return
    split = pieces(0, rows.shape[1])

    def row_bursts() -> Iterator[FileBurst]:
        if len(split) > 1 and reading.note is not None:
            reading.note(split_note(str(p), f"each of its {rows.shape[0]:,} rows", rows.shape[1]))
        for i in range(rows.shape[0]):
            for start, count in split:
                yield FileBurst(as_iq(rows[i, start:start + count]), str(p), i, start, reading.sample_rate_hz)

    yield from chunked(row_bursts(), chunk, limit)


def _npy_rows(data: np.ndarray, p: Path) -> tuple[np.ndarray, bool]:
    """(the array as (bursts, samples) complex or (bursts, samples, 2) real I/Q, whether it is
    one recording); InputError for a layout that is not IQ."""
    if data.dtype.kind == "c" and data.ndim in (1, 2):
        return (data[None] if data.ndim == 1 else data), data.ndim == 1
    if data.dtype.kind in "fiu" and data.ndim in (2, 3):
        if data.shape[-1] == 2:
            return (data[None] if data.ndim == 2 else data), data.ndim == 2
        if data.shape[-2] == 2:
            turned = np.swapaxes(data, -1, -2)
            return (turned[None] if data.ndim == 2 else turned), data.ndim == 2
    raise InputError(f"{p}: a NumPy array of shape {data.shape} and dtype {data.dtype} is not IQ: expected "
                     "complex (L,) or (N, L), or real I/Q (L, 2), (N, L, 2), (2, L) or (N, 2, L)")


HDF5_CHUNK_SAMPLES = 1 << 24   # samples of an HDF5 dataset read at a time (128 MiB), at least one burst


def iter_hdf5(path: str | Path, chunk: int = 4096, limit: int | None = None) -> Iterator[list[FileBurst]]:
    """Chunks of the bursts of an rfclassify HDF5 dataset, with label and SNR as truth; at most
    chunk bursts and HDF5_CHUNK_SAMPLES samples a chunk. A burst that cannot be read (a damaged
    chunk of /iq, a /length past the reader's MAX_READ_SAMPLES: DatasetReader.read_or_reject)
    has UnreadSamples saying why, and the others are read."""
    from rfclassify.data.reader import DatasetReader

    with DatasetReader(path) as ds:
        n = len(ds) if limit is None else min(len(ds), limit)
        names = ds.label_names
        for idx in _hdf5_chunks(ds.lengths[:n], chunk):
            yield [
                FileBurst(iq, str(path), int(i), int(ds.offsets[i]), None, str(names[i]),
                          None if np.isnan(ds.snr_db[i]) else float(ds.snr_db[i]),
                          span=int(ds.lengths[i]) if isinstance(iq, UnreadSamples) else None)
                for i, iq in zip(idx, ds.read_or_reject(idx), strict=True)
            ]


def _hdf5_chunks(lengths: np.ndarray, chunk: int) -> Iterator[np.ndarray]:
    """The indices of bursts of these lengths in consecutive chunks of at most chunk bursts and
    HDF5_CHUNK_SAMPLES samples (a longer burst alone), a burst too long to be read counted as none:
    4096 bursts of a million samples each were one read of 32 GiB."""
    from rfclassify.data.reader import MAX_READ_SAMPLES

    n = lengths.size
    ends = np.cumsum(np.where(lengths <= MAX_READ_SAMPLES, lengths, 0))
    lo = 0
    while lo < n:
        before = int(ends[lo - 1]) if lo else 0
        hi = min(n, lo + chunk, int(np.searchsorted(ends, before + HDF5_CHUNK_SAMPLES, side="right")))
        hi = max(hi, lo + 1)
        yield np.arange(lo, hi)
        lo = hi


def iter_file_bursts(path: str | Path, chunk: int = 4096, limit: int | None = None,
                     reading: Reading = Reading()) -> Iterator[list[FileBurst]]:
    """Chunks of bursts from a SigMF recording or archive, an HDF5 dataset, a WAV IQ recording,
    a NumPy array, or (with reading.raw, a SigMF datatype) a raw recording, read as `reading` says;
    InputError for anything else. limit 0 checks the file and reads no burst."""
    kind, p = recording_format(path, reading)
    if kind in ("archive", "sigmf"):   # the bursts of each recording, every one checked first
        recordings = read_sigmf_archive(p, reading) if kind == "archive" else [sigmf_bursts(p, reading)]
        for bursts in recordings:   # chunks never mix recordings; limit counts them all
            for found in chunked(bursts, chunk, limit):
                limit = None if limit is None else limit - len(found)
                yield found
    elif kind == "hdf5":
        yield from iter_hdf5(p, chunk, limit)
    elif kind == "wav":
        yield from iter_wav(p, chunk, limit, reading)
    elif kind == "npy":
        yield from iter_npy(p, chunk, limit, reading)
    else:
        yield from iter_raw(p, chunk, limit, reading)


def recording_format(path: str | Path, reading: Reading = Reading()) -> tuple[str, Path]:
    """(format, the file that holds it) of what iter_file_bursts reads: "archive" (SigMF),
    "sigmf" (the file is the recording's metadata, data or NAME), "hdf5", "wav", "npy", or
    "raw" (any other file, when reading.raw gives its datatype); InputError for anything else."""
    p = Path(path)
    if p.is_dir() and not (p.name and is_sigmf(p)):   # a recording NAME beside a folder NAME is read
        raise InputError(f"{str(path) or repr('')}: a directory; name a SigMF recording or an HDF5 dataset")
    if not p.exists() and p.name and not is_sigmf(p) and is_sigmf_archive(p.with_name(p.name + ".sigmf")):
        p = p.with_name(p.name + ".sigmf")   # NAME for NAME.sigmf, as NAME names a pair
    if is_sigmf_archive(p):
        return "archive", p
    if is_sigmf(p):
        return "sigmf", p
    if not p.is_file():
        raise InputError(_not_a_file_text(p))
    if _is_hdf5(p):
        return "hdf5", p
    if _is_wav(p):
        return "wav", p
    if _has_magic(p, b"\x93NUMPY"):
        return "npy", p
    if reading.raw is not None:
        return "raw", p
    raise InputError(f"{p}: neither SigMF (.sigmf-meta + .sigmf-data, or a .sigmf archive), an rfclassify HDF5 "
                     "dataset, a WAV IQ recording nor a NumPy .npy array; a raw recording needs --raw DATATYPE "
                     "(cf32_le for GNU Radio's file_sink of gr_complex)")


def _not_a_file_text(p: Path) -> str:
    """The error for a FILE that names no regular file, nor a SigMF recording: a pipe, a FIFO and
    a NAME whose NAME.sigmf-meta is a folder were "no such file" before."""
    if p.exists():
        return not_a_file_text(p)
    meta = sigmf_paths(p)[0]
    kind = not_a_file(meta)
    if kind == "no such file":
        return f"{p}: no such file (nor {meta.name})"
    return f"{p}: no such file, and {meta.name} is {kind}, not SigMF metadata"


def _is_wav(path: Path) -> bool:
    head = _head(path, 12)
    return head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE"


def _has_magic(path: Path, magic: bytes) -> bool:
    return _head(path, len(magic)) == magic


def _head(path: Path, n: int) -> bytes:
    """The first n bytes of the file (fewer, or none where it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


def _is_hdf5(path: Path) -> bool:
    import h5py

    try:
        return bool(h5py.is_hdf5(str(path)))
    except OSError:
        return False
