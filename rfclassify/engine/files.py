"""Bursts stored in files, for `rfclassify classify`: SigMF recordings and rfclassify HDF5 datasets.

SigMF (``NAME.sigmf-meta`` + ``NAME.sigmf-data``): every entry of ``annotations`` with
``core:sample_start`` (and ``core:sample_count``; absent = to the end) is one burst, and
its ``core:label`` is taken as ground truth when it is a canonical label; without
annotations the whole capture is one burst. ``core:datatype`` may be any single-channel
SigMF type: ``cf32_le``, ``cf64_be``, ``ci16_le``, ``ci8``, ``cu8``, ``rf32_le``, ...
The sample rate is the global ``core:sample_rate``. Samples are memory-mapped, so a long
recording costs only the annotated bursts.

HDF5: the dataset schema of ``rfclassify.data.schema``, read with ``DatasetReader``; every
example is a burst with its label and SNR as truth.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rfclassify._exceptions import InputError, quoted
from rfclassify._numbers import as_finite_float
from rfclassify.labels import LABELS

_SIGMF_TYPE = re.compile(r"^(?P<kind>[cr])(?P<fmt>[fiu])(?P<bits>8|16|32|64)(?:_(?P<end>le|be))?$")


@dataclass(frozen=True)
class FileBurst:
    """One burst read from a file, with where it came from and its truth when the file has it."""

    iq: np.ndarray                       # 1-D complex (or real for real SigMF types)
    source: str                          # the file
    index: int                           # burst number within the file
    start_sample: int                    # offset in the recording / dataset
    sample_rate_hz: float | None = None
    truth_label: str | None = None
    truth_snr_db: float | None = None


def sigmf_dtype(datatype: str) -> tuple[np.dtype, bool]:
    """(numpy dtype of one real component, is_complex) for a SigMF core:datatype."""
    m = _SIGMF_TYPE.match(datatype)
    if not m:
        raise InputError(f"unsupported SigMF datatype {datatype!r} (e.g. cf32_le, ci16_le, ci8)")
    fmt, bits, end = m["fmt"], int(m["bits"]), m["end"]
    if fmt == "f" and bits not in (32, 64):
        raise InputError(f"unsupported SigMF datatype {datatype!r}: floats are 32 or 64 bits")
    if bits > 8 and end is None:
        raise InputError(f"SigMF datatype {datatype!r} needs an endianness suffix (_le or _be)")
    order = "<" if end in (None, "le") else ">"
    return np.dtype(f"{order}{fmt}{bits // 8}"), m["kind"] == "c"


def sigmf_paths(path: str | Path) -> tuple[Path, Path]:
    """(meta, data) paths for NAME, NAME.sigmf-meta or NAME.sigmf-data."""
    p = Path(path)
    if p.suffix == ".sigmf":
        raise InputError(f"{p}: SigMF archives are not supported; extract the .sigmf-meta/.sigmf-data pair")
    base = p.with_suffix("") if p.suffix in (".sigmf-meta", ".sigmf-data") else p
    if not base.name:   # '' or '/': Path's with_name raised ValueError
        raise InputError(f"{str(path) or repr('')}: a directory, not a recording")
    return base.with_name(base.name + ".sigmf-meta"), base.with_name(base.name + ".sigmf-data")


def is_sigmf(path: str | Path) -> bool:
    return sigmf_paths(path)[0].is_file()


def read_sigmf(path: str | Path, limit: int | None = None) -> list[FileBurst]:
    """The bursts of one SigMF recording (see the module docstring), at most `limit` of them.

    Every annotation is checked, but only the bursts returned are converted from the file."""
    meta_path, data_path = sigmf_paths(path)
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError(f"{meta_path}: cannot read SigMF metadata ({exc})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("global"), dict):
        raise InputError(f"{meta_path}: SigMF metadata has no 'global' object")
    glob = meta["global"]
    if _sigmf_int(glob, "core:num_channels", 1, meta_path) != 1:
        raise InputError(f"{meta_path}: only single-channel SigMF recordings are supported")
    if "core:datatype" not in glob:
        raise InputError(f"{meta_path}: SigMF metadata has no core:datatype")
    component, is_complex = sigmf_dtype(str(glob["core:datatype"]))
    rate_hz = _sigmf_rate(glob.get("core:sample_rate"), meta_path)
    captures = _sigmf_list(meta, "captures", meta_path) or [{}]
    header = _sigmf_int(captures[0], "core:header_bytes", 0, meta_path) if isinstance(captures[0], dict) else 0
    samples = _map_samples(data_path, component, is_complex, header)
    annotations = [a for a in _sigmf_list(meta, "annotations", meta_path) if isinstance(a, dict)
                   and "core:sample_start" in a]
    if not annotations:
        return [FileBurst(_as_float(samples, is_complex), str(meta_path), 0, 0, rate_hz)][:limit]
    spans = []
    starts = [_sigmf_int(a, "core:sample_start", 0, meta_path) for a in annotations]
    for i, (start, a) in enumerate(sorted(zip(starts, annotations, strict=True), key=lambda pair: pair[0])):
        count = _sigmf_int(a, "core:sample_count", samples.shape[0] - start, meta_path)
        if start < 0 or count < 0 or start + count > samples.shape[0]:
            raise InputError(f"{meta_path}: annotation {i} ({start}+{count}) lies outside the "
                             f"{samples.shape[0]} samples of {data_path.name}")
        label = a.get("core:label")
        spans.append((i, start, count, label if label in LABELS else None))
    return [FileBurst(_as_float(samples[start:start + count], is_complex),
                      str(meta_path), i, start, rate_hz, truth)
            for i, start, count, truth in spans[:limit]]


def _sigmf_int(obj: dict, key: str, default: int, meta_path: Path) -> int:
    """obj[key] as an int (default when absent; a float of integral value, as some writers
    put it, taken); InputError naming it when it is not one."""
    value = obj.get(key, default)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{meta_path}: {key} must be an integer, got {quoted(value)}")
    return value


def _sigmf_rate(rate: object, meta_path: Path) -> float | None:
    """core:sample_rate in Hz: None when absent, InputError unless a positive finite number."""
    if rate is None:
        return None
    hz = as_finite_float(rate)
    if hz is None or hz <= 0:
        raise InputError(f"{meta_path}: core:sample_rate must be a positive finite number of Hz, "
                         f"got {quoted(rate)}")
    return hz


def _sigmf_list(meta: dict, key: str, meta_path: Path) -> list:
    """meta[key] (absent or null: []), InputError unless it is a list."""
    value = meta.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"{meta_path}: '{key}' must be a list, got {type(value).__name__}")
    return value


def _map_samples(data_path: Path, component: np.dtype, is_complex: bool, header_bytes: int) -> np.ndarray:
    """Memory-map the data file as (n, 2) components (complex) or (n,) (real)."""
    try:
        size = data_path.stat().st_size - header_bytes
    except OSError as exc:
        raise InputError(f"{data_path}: cannot read SigMF data ({exc})") from None
    item = component.itemsize * (2 if is_complex else 1)
    n = size // item
    if size < 0 or size % item:
        raise InputError(f"{data_path}: {size} bytes is not a whole number of {item}-byte samples")
    if n == 0:
        return np.zeros((0, 2) if is_complex else (0,), dtype=component)
    shape = (n, 2) if is_complex else (n,)
    return np.memmap(data_path, dtype=component, mode="r", offset=header_bytes, shape=shape)


def _as_float(samples: np.ndarray, is_complex: bool) -> np.ndarray:
    """complex64 (or float32 for real types); unsigned integers are centred on zero."""
    x = np.asarray(samples)
    if x.dtype.kind == "u":
        x = x.astype(np.float32) - float(2 ** (8 * x.dtype.itemsize - 1))
    # values past float32 (a cf64 file) become inf and their burst a non_finite reject, not a warning
    with np.errstate(over="ignore", invalid="ignore"):
        x = x.astype(np.float32)
        if not is_complex:
            return x
        return (x[:, 0] + 1j * x[:, 1]).astype(np.complex64)


def iter_hdf5(path: str | Path, chunk: int = 4096, limit: int | None = None) -> Iterator[list[FileBurst]]:
    """Chunks of the bursts of an rfclassify HDF5 dataset, with label and SNR as truth."""
    from rfclassify.data.reader import DatasetReader

    with DatasetReader(path) as ds:
        n = len(ds) if limit is None else min(len(ds), limit)
        names = ds.label_names
        for lo in range(0, n, chunk):
            idx = np.arange(lo, min(n, lo + chunk))
            yield [
                FileBurst(iq, str(path), int(i), int(ds.offsets[i]), None, str(names[i]),
                          None if np.isnan(ds.snr_db[i]) else float(ds.snr_db[i]))
                for i, iq in zip(idx, ds.read(idx), strict=True)
            ]


def iter_file_bursts(path: str | Path, chunk: int = 4096, limit: int | None = None
                     ) -> Iterator[list[FileBurst]]:
    """Chunks of bursts from a SigMF recording or an HDF5 dataset; InputError for anything else."""
    p = Path(path)
    if p.is_dir() and not (p.name and is_sigmf(p)):   # a recording NAME beside a folder NAME is read
        raise InputError(f"{str(path) or repr('')}: a directory; name a SigMF recording or an HDF5 dataset")
    if is_sigmf(p):
        bursts = read_sigmf(p, limit)
        for lo in range(0, len(bursts), chunk):
            yield bursts[lo:lo + chunk]
        return
    if not p.is_file():
        raise InputError(f"{p}: no such file (nor {sigmf_paths(p)[0].name})")
    if _is_hdf5(p):
        yield from iter_hdf5(p, chunk, limit)
        return
    raise InputError(f"{p}: neither SigMF (.sigmf-meta + .sigmf-data) nor an rfclassify HDF5 dataset")


def _is_hdf5(path: Path) -> bool:
    import h5py

    try:
        return bool(h5py.is_hdf5(str(path)))
    except OSError:
        return False

