"""The rfclassify HDF5 dataset schema (version 1) and its writer.

One file holds variable-length bursts (64..8192 samples) and their ground truth:

    /iq           complex64 (total_samples,)  every burst's samples, concatenated
    /offset       int64   (N,)  where burst i starts in /iq
    /length       int32   (N,)  its length in samples (64..8192)
    /label_index  int16   (N,)  index into the root attribute `labels` (== rfclassify.LABELS)
    /snr_db       float32 (N,)  the SNR the burst was made at (NaN: no noise added)
    /channel_index int8   (N,)  index into the root attribute `channel_names` (which channel
                                 preset made the burst)
    /params       compound (N,) every modulation/impairment parameter (PARAM_DTYPE of the
                                 source; NaN where not applicable)

Root attributes: `format` ("rfclassify-dataset"), `schema_version` (1), `labels` (JSON list,
the model's label order), `classes` (JSON list of the labels present by design), `source`
("synth" or "gnuradio"), `seed`, `generator` (program + version), `channel_names` (JSON
list) and `channel` (JSON object: preset name -> its channel configuration), `snr_grid_db`
(JSON list), `lengths` (JSON description of the length rule), `command_line`, `created_utc`, and `extra` (JSON, source specific).

Every dataset is chunked so appending and partial reads are cheap; /iq may be compressed
(gzip or lzf: noisy float samples shrink little, so the default is none). Writers append in
order and the file only gets its final name once complete (see `DatasetWriter`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from rfclassify._atomic import failed_write
from rfclassify._exceptions import InputError
from rfclassify._paths import storable
from rfclassify._signals import signals_held
from rfclassify.data._partial_file import PartialFile
from rfclassify.labels import LABELS

FORMAT_NAME = "rfclassify-dataset"
SCHEMA_VERSION = 1
MIN_BURST_SAMPLES = 64
MAX_BURST_SAMPLES = 8192

IQ = "iq"
OFFSET = "offset"
LENGTH = "length"
LABEL_INDEX = "label_index"
SNR_DB = "snr_db"
CHANNEL_INDEX = "channel_index"
PARAMS = "params"
PER_EXAMPLE = (OFFSET, LENGTH, LABEL_INDEX, SNR_DB, CHANNEL_INDEX, PARAMS)

_IQ_CHUNK_SAMPLES = 1 << 16
_EXAMPLE_CHUNK = 4096
COMPRESSIONS = ("none", "gzip", "lzf")


@dataclass(frozen=True)
class DatasetAttrs:
    """The root attributes of a dataset file (what it is and how it was made)."""

    source: str
    seed: int | None
    generator: str
    classes: tuple[str, ...]
    snr_grid_db: tuple[float, ...]
    channel: dict[str, Any]          # preset name -> channel configuration (JSON-able)
    lengths: dict[str, Any]
    command_line: str = ""
    created_utc: str = ""
    labels: tuple[str, ...] = LABELS
    extra: dict[str, Any] | None = None

    def to_hdf5(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "schema_version": SCHEMA_VERSION,
            "labels": json.dumps(list(self.labels)),
            "classes": json.dumps(list(self.classes)),
            "source": self.source,
            "seed": -1 if self.seed is None else int(self.seed),
            "generator": self.generator,
            "channel_names": json.dumps(list(self.channel)),
            "channel": json.dumps(self.channel, default=_json_default),
            "snr_grid_db": json.dumps([float(s) for s in self.snr_grid_db]),
            "lengths": json.dumps(self.lengths, sort_keys=True),
            "command_line": storable(self.command_line),   # a path's bytes that are not UTF-8 as \xNN
            "created_utc": self.created_utc,
            "extra": json.dumps(self.extra or {}, sort_keys=True, default=_json_default),
        }

    @classmethod
    def from_hdf5(cls, attrs: Any, path: str) -> DatasetAttrs:
        """Parse and check root attributes; InputError when the file is not one of ours."""
        fmt = _text(attrs.get("format", ""))
        if fmt != FORMAT_NAME:
            raise InputError(f"{path}: not an rfclassify dataset (format attribute {fmt!r})")
        try:
            version = int(attrs.get("schema_version", -1))
        except (ValueError, TypeError):
            version = None          # reported below as a version this rfclassify does not read
        if version != SCHEMA_VERSION:
            raise InputError(f"{path}: dataset schema version {version}, this rfclassify reads {SCHEMA_VERSION}")
        try:
            seed = int(attrs["seed"])
            return cls(
                source=_text(attrs["source"]),
                seed=None if seed < 0 else seed,
                generator=_text(attrs["generator"]),
                classes=tuple(json.loads(_text(attrs["classes"]))),
                snr_grid_db=tuple(float(s) for s in json.loads(_text(attrs["snr_grid_db"]))),
                channel=json.loads(_text(attrs["channel"])),
                lengths=json.loads(_text(attrs["lengths"])),
                command_line=_text(attrs.get("command_line", "")),
                created_utc=_text(attrs.get("created_utc", "")),
                labels=tuple(json.loads(_text(attrs["labels"]))),
                extra=json.loads(_text(attrs.get("extra", "{}"))),
            )
        except (KeyError, ValueError, TypeError, RecursionError) as exc:
            raise InputError(f"{path}: corrupt dataset attributes ({exc})") from None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    return str(obj)


def hdf5_param_dtype(dtype: np.dtype) -> np.dtype:
    """PARAM_DTYPE with unicode fields turned into UTF-8 bytes (HDF5 has no numpy 'U')."""
    fields = []
    for name in dtype.names or ():
        sub = dtype.fields[name][0]
        if sub.kind == "U":
            sub = np.dtype(f"S{sub.itemsize // 4}")
        fields.append((name, sub))
    return np.dtype(fields)


def check_replaceable(path: Path) -> None:
    """InputError where `path` exists and is not a regular file: the writer renames its finished
    file onto `path`, which would put it in place of a folder's name, or of a device or pipe
    (`--out /dev/null --force`, run as root, left a regular file where /dev/null was)."""
    if path.is_dir():
        raise InputError(f"{path} is a directory")
    if path.exists() and not path.is_file():
        raise InputError(f"{path} is not a regular file (a device, pipe or socket); a dataset is written "
                         "only to a new file or in place of one")


class DatasetWriter:
    """Appends bursts to a new dataset file; the file appears at `path` only after `commit()`.

    Writes go to `<path>.partial`; `commit()` closes it and renames it into place, so a crash
    or Ctrl-C never leaves a truncated file under the final name. Use as a context manager:
    leaving the block without commit() removes the partial file. A write that fails (a full
    disk) is an OSError from `append` or `commit` naming `path`, the partial file removed.
    """

    def __init__(self, path: str | os.PathLike[str], attrs: DatasetAttrs, param_dtype: np.dtype,
                 compression: str = "none") -> None:
        if compression not in COMPRESSIONS:
            raise InputError(f"compression must be one of {', '.join(COMPRESSIONS)}, got {compression!r}")
        self.path = Path(path)
        check_replaceable(self.path)
        self.tmp_path = self.path.with_name(self.path.name + ".partial")
        self._param_dtype = hdf5_param_dtype(np.dtype(param_dtype))
        try:   # an OSError here names the partial file; the user's --out is what to name
            self.tmp_path.parent.mkdir(parents=True, exist_ok=True)
            self._io = PartialFile(self.tmp_path)
        except OSError as exc:
            raise InputError(f"{self.path}: cannot be written ({exc.strerror or exc})") from None
        self._f: h5py.File | None = None
        self._done = False
        try:   # the partial file exists from here: a Ctrl-C or SIGTERM before the caller's `with`
            # block has the writer would leave it behind (a SIGTERM to `dataset import` did)
            with signals_held():     # HDF5 calls back into PartialFile: no interrupt inside them
                self._make_file(attrs, compression)
        except BaseException:
            self.abort()
            raise
        self._check_room()
        self.n_examples = 0
        self.n_samples = 0

    def _make_file(self, attrs: DatasetAttrs, compression: str) -> None:
        self._f = h5py.File(self._io, "w")   # through PartialFile: a full disk segfaulted HDF5
        for key, value in attrs.to_hdf5().items():
            self._f.attrs[key] = value
        comp = {} if compression == "none" else {"compression": compression, "shuffle": True}
        self._f.create_dataset(IQ, shape=(0,), maxshape=(None,), dtype=np.complex64,
                               chunks=(_IQ_CHUNK_SAMPLES,), **comp)
        for name, dt in ((OFFSET, np.int64), (LENGTH, np.int32), (LABEL_INDEX, np.int16),
                         (SNR_DB, np.float32), (CHANNEL_INDEX, np.int8), (PARAMS, self._param_dtype)):
            self._f.create_dataset(name, shape=(0,), maxshape=(None,), dtype=dt, chunks=(_EXAMPLE_CHUNK,))

    def append(self, iq: np.ndarray | list[np.ndarray], label_index: np.ndarray,
               snr_db: np.ndarray, params: np.ndarray, channel_index: int | np.ndarray = 0) -> None:
        """Append B bursts: `iq` (B, n) complex or a list of B 1-D arrays of any lengths.

        channel_index: one index into the `channel` presets for all B bursts, or one per burst."""
        bursts = [np.asarray(x, dtype=np.complex64).ravel() for x in iq]
        b = len(bursts)
        lengths = np.array([x.size for x in bursts], dtype=np.int64)
        if b and (lengths.min() < MIN_BURST_SAMPLES or lengths.max() > MAX_BURST_SAMPLES):
            raise InputError(f"burst lengths must be {MIN_BURST_SAMPLES}..{MAX_BURST_SAMPLES}, got "
                             f"{int(lengths.min())}..{int(lengths.max())}")
        for name, arr in ((LABEL_INDEX, label_index), (SNR_DB, snr_db), (PARAMS, params)):
            if len(arr) != b:
                raise InputError(f"{name} has {len(arr)} entries for {b} bursts")
        if b == 0:
            return
        offsets = self.n_samples + np.concatenate(([0], np.cumsum(lengths)[:-1]))
        total = int(lengths.sum())
        samples = np.concatenate(bursts)
        new_n = self.n_examples + b
        values = {OFFSET: offsets, LENGTH: lengths.astype(np.int32),
                  LABEL_INDEX: np.asarray(label_index, dtype=np.int16),
                  SNR_DB: np.asarray(snr_db, dtype=np.float32),
                  CHANNEL_INDEX: np.broadcast_to(np.asarray(channel_index, dtype=np.int8), (b,)),
                  PARAMS: np.asarray(params).astype(self._param_dtype)}
        # a Ctrl-C inside HDF5's writes (they call back into PartialFile) segfaulted or committed
        # a wrong /iq: held to the end of the append, then raised as ever
        with signals_held():
            ds = self._f[IQ]
            ds.resize((self.n_samples + total,))
            ds[self.n_samples:self.n_samples + total] = samples
            for name, arr in values.items():
                self._f[name].resize((new_n,))
                self._f[name][self.n_examples:new_n] = arr
            del ds                  # its close flushes its chunk cache: a write too
        self.n_examples = new_n
        self.n_samples += total
        self._check_room()

    def commit(self, attrs: DatasetAttrs | None = None) -> Path:
        """Close the file and move it to its final name (replacing an older one). attrs, when
        given, replace the root attributes first: what a writer learns only as it writes (which
        classes came, from a recording's labels)."""
        with signals_held():
            if attrs is not None:
                for key, value in attrs.to_hdf5().items():
                    self._f.attrs[key] = value
            self._f.close()     # HDF5 writes most of what it holds here
        self._check_room()
        self._io.close()
        os.replace(self.tmp_path, self.path)
        self._done = True
        return self.path

    def _check_room(self) -> None:
        """Where a write to the partial file failed (a full disk, a quota, `ulimit -f`): the
        partial file removed, that error raised naming the file asked for (exit 1 from the CLI:
        the machine's state, not the user's mistake; `rfclassify._atomic.failed_write`)."""
        if self._io.failure is not None:
            failure = self._io.failure
            self.abort()
            raise failed_write(self.path, failure) from failure

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            if self._f is not None:
                with signals_held():
                    self._f.close()
        finally:
            self._io.close()
            self.tmp_path.unlink(missing_ok=True)

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()
