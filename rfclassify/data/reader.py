"""Reading rfclassify HDF5 datasets (schema in `rfclassify.data.schema`) for training and evaluation.

    with DatasetReader("train.h5") as ds:
        for batch in ds.iter_batches(256, length_samples=1024, shuffle_rng=rng, normalize=True):
            x = to_model_input(batch.iq)          # (B, 2, 1, 1024)
            y = batch.label_index

Per-example arrays (labels, SNR, lengths) are loaded once; samples are read on demand
(contiguous runs in one slice each), or all at once with `in_memory=True`.

A burst whose samples cannot be read (a damaged compressed chunk of /iq, or a /length past
MAX_READ_SAMPLES) is an InputError naming the file and the burst from `read`; `read_or_reject`
gives an UnreadSamples for it instead and reads the others (what `rfclassify classify` and
`evaluate` count), as `iter_batches` leaves it out where asked (training). `unreadable_bursts`
says which bursts those are before any is asked for; `samples_sha256` reads past them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from rfclassify._exceptions import InputError, MessageError
from rfclassify._paths import not_a_file_text
from rfclassify.data import schema
from rfclassify.dsp.windows import BucketPolicy, check_normalization, normalize_burst
from rfclassify.engine.file_bursts import UnreadSamples

#: the longest burst read: the daemon's default max_burst_samples (docs/ingest.md: it classifies
#: no longer burst whole), 128 times the schema's longest. A /length past it is a damaged or
#: foreign file's, and reading it took what it claimed (2**33 samples of a sparse /iq: "not
#: enough memory", the whole run lost, neither file nor burst named).
MAX_READ_SAMPLES = 1 << 20
#: h5py's errors for samples that cannot be read (a compressed chunk that fails to decompress)
_READ_ERRORS = (OSError, RuntimeError)


#: the reject codes of a burst read_or_reject cannot read (an UnreadSamples): its /length passes
#: MAX_READ_SAMPLES; its samples lie in a damaged chunk of /iq
TOO_LONG, UNREADABLE = "too_long", "unreadable"


@dataclass(frozen=True)
class Batch:
    """Equal-length bursts from a dataset, with their truth and their example indices."""

    iq: np.ndarray           # (B, n) complex64
    label_index: np.ndarray  # (B,) int16, into DatasetReader.labels
    snr_db: np.ndarray       # (B,) float32 (NaN: no noise)
    lengths: np.ndarray      # (B,) int32 original burst lengths (before crop/pad)
    indices: np.ndarray      # (B,) int64 example indices in the file


class DatasetReader:
    """Read-only view of one dataset file; a context manager (closes the HDF5 file)."""

    def __init__(self, path: str | os.PathLike[str], in_memory: bool = False) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise InputError(not_a_file_text(self.path, "dataset file"))
        try:
            self._f = h5py.File(self.path, "r")
        except OSError as exc:
            raise InputError(f"{self.path}: not a readable HDF5 file ({exc})") from None
        try:
            self.attrs = schema.DatasetAttrs.from_hdf5(self._f.attrs, str(self.path))
            missing = [n for n in (schema.IQ, *schema.PER_EXAMPLE) if n not in self._f]
            if missing:
                raise InputError(f"{self.path}: corrupt dataset, missing {', '.join(missing)}")
            self.offsets = self._column(schema.OFFSET, np.int64)
            self.lengths = self._column(schema.LENGTH, np.int64)
            self.label_index = self._column(schema.LABEL_INDEX, np.int16)
            self.snr_db = self._column(schema.SNR_DB, np.float32)
            self.channel_index = self._column(schema.CHANNEL_INDEX, np.int8)
            n = self.offsets.size
            params = self._f[schema.PARAMS]
            params.dtype   # its field names decoded here, not first when .params is read
            if not (self.lengths.size == self.label_index.size == self.snr_db.size == n
                    == self.channel_index.size == params.shape[0]):
                raise InputError(f"{self.path}: corrupt dataset, per-example arrays differ in length")
            total = self._f[schema.IQ].shape[0]
            if n and (self.offsets.min() < 0 or int((self.offsets + self.lengths).max()) > total):
                raise InputError(f"{self.path}: corrupt dataset, bursts point past the end of /iq")
            if n and (self.label_index.min() < 0 or self.label_index.max() >= len(self.attrs.labels)):
                raise InputError(f"{self.path}: corrupt dataset, label index out of range")
            if n and self.lengths.min() < 0:
                raise InputError(f"{self.path}: corrupt dataset, a negative burst length")
            self._iq_mem = self._f[schema.IQ][()] if in_memory else None
        except (KeyError, OSError, RuntimeError, ValueError, UnicodeDecodeError) as exc:
            # h5py's errors for damaged files: RuntimeError (a bad heap), ValueError and
            # UnicodeDecodeError (a damaged compound type); each was a traceback before the 66th session
            self._f.close()
            raise InputError(f"{self.path}: corrupt dataset ({exc})") from None
        except BaseException:
            self._f.close()
            raise
        self._params: np.ndarray | None = None
        self._damaged: list[tuple[int, int]] | None = None   # damaged_ranges, once found

    # -- what is in the file -------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.offsets.size)

    @property
    def labels(self) -> tuple[str, ...]:
        """Label names; `label_index` values index this tuple (== rfclassify.LABELS)."""
        return self.attrs.labels

    @property
    def channel_names(self) -> tuple[str, ...]:
        """Channel preset names; `channel_index` values index this tuple."""
        return tuple(self.attrs.channel)

    @property
    def label_names(self) -> np.ndarray:
        """(N,) array of each example's label name."""
        return np.asarray(self.labels, dtype=object)[self.label_index]

    def samples_sha256(self, chunk: int = 1 << 22) -> str:
        """sha256 of the samples the bursts use (the bytes of the union of their ranges of /iq, in
        file order): what tells two files made by the same command apart (a GNU Radio set can
        differ between machines, docs/datasets.md). A file rfclassify writes stores its bursts
        back to back from /iq's start to its end, so this is the sha256 of its /iq, the digest
        recorded before; a /iq that claims more (2**34 samples, sparse) is no longer hashed whole
        (minutes of zeros before `evaluate` began). A burst past MAX_READ_SAMPLES is left out (it
        is never read). Samples that cannot be read (a damaged compressed chunk) are hashed as
        the text "unreadable FIRST..LAST", so a damaged copy's digest is not its intact file's;
        they were an InputError before the seventy-first session (`evaluate` of such a file
        classified nothing). What it finds damaged is kept for damaged_ranges."""
        import hashlib

        digest = hashlib.sha256()
        damaged = []
        for start, stop, block in self._pieces(chunk):
            if block is None:
                damaged.append((start, stop))
                digest.update(f"unreadable {start}..{stop - 1}".encode())
            else:
                digest.update(np.ascontiguousarray(block).tobytes())
        self._damaged = _joined(damaged)
        return digest.hexdigest()

    def damaged_ranges(self) -> list[tuple[int, int]]:
        """The ascending [lo, hi) ranges of /iq, of the samples the bursts use, that cannot be read
        (damaged compressed chunks), touching ones joined: found by reading them all once, kept
        (samples_sha256 finds them as it hashes). A /iq stored without filters (no compression,
        no checksum) has nothing that can fail to decode and is not read: []."""
        if self._damaged is None:
            if self._iq_mem is not None or not self._f[schema.IQ].id.get_create_plist().get_nfilters():
                return []
            self._damaged = _joined([(a, b) for a, b, block in self._pieces(1 << 22) if block is None])
        return list(self._damaged)

    def unreadable_bursts(self) -> np.ndarray:
        """The indices of the bursts read_or_reject gives an UnreadSamples for, ascending: a
        /length past MAX_READ_SAMPLES, or samples in damaged_ranges()."""
        bad = self.lengths > MAX_READ_SAMPLES
        ends = self.offsets + self.lengths
        for lo, hi in self.damaged_ranges():
            bad |= (self.offsets < hi) & (ends > lo) & (self.lengths > 0)
        return np.flatnonzero(bad)

    def _pieces(self, chunk: int) -> Iterator[tuple[int, int, np.ndarray | None]]:
        """(start, stop, samples) of the samples the bursts use (_used_ranges), in file order, at
        most `chunk` at a time. A piece that cannot be read is read again by /iq's storage chunks,
        and one of those that fails comes as (start, stop, None)."""
        chunks = self._f[schema.IQ].chunks
        for lo, hi in self._used_ranges():
            for start in range(lo, hi, chunk):
                stop = min(hi, start + chunk)
                block = self._range_or_none(start, stop)
                if block is not None or not chunks:
                    yield start, stop, block
                    continue
                step = chunks[0]
                edges = [start, *range((start // step + 1) * step, stop, step), stop]
                for a, b in zip(edges[:-1], edges[1:]):
                    yield a, b, self._range_or_none(a, b)

    def _used_ranges(self) -> list[tuple[int, int]]:
        """The ascending, disjoint [lo, hi) ranges of /iq that the bursts read cover (touching
        ones joined)."""
        keep = (self.lengths > 0) & (self.lengths <= MAX_READ_SAMPLES)
        lo = self.offsets[keep]
        order = np.argsort(lo, kind="stable")
        lo, hi = lo[order], (lo + self.lengths[keep])[order]
        if not lo.size:
            return []
        reach = np.maximum.accumulate(hi)
        first = np.flatnonzero(np.concatenate(([True], lo[1:] > reach[:-1])))
        last = np.concatenate((first[1:] - 1, [lo.size - 1]))
        return list(zip(lo[first].tolist(), reach[last].tolist()))

    @property
    def params(self) -> np.ndarray:
        """(N,) structured array of generation parameters (loaded on first use)."""
        if self._params is None:
            try:
                self._params = self._f[schema.PARAMS][()]
            except (OSError, RuntimeError, ValueError, UnicodeDecodeError) as exc:
                raise InputError(f"{self.path}: corrupt dataset, /{schema.PARAMS} unreadable ({exc})") from None
        return self._params

    def buckets(self, policy: BucketPolicy | None = None) -> np.ndarray:
        """(N,) the serving length bucket of every example (the rule of rfclassify.dsp.windows)."""
        policy = policy or BucketPolicy()
        edges = np.asarray(policy.buckets_samples)
        pos = np.searchsorted(edges, self.lengths, side="right") - 1
        return edges[np.maximum(pos, 0)]

    def indices_for_bucket(self, bucket_samples: int, policy: BucketPolicy | None = None) -> np.ndarray:
        """Example indices whose bursts the serving path would put into `bucket_samples` windows."""
        policy = policy or BucketPolicy()
        if bucket_samples not in policy.buckets_samples:
            raise InputError(f"{bucket_samples} is not a bucket of {list(policy.buckets_samples)}")
        return np.flatnonzero(self.buckets(policy) == bucket_samples)

    def indices_for_labels(self, names: Sequence[str]) -> np.ndarray:
        wanted = [self.labels.index(n) for n in names if n in self.labels]
        return np.flatnonzero(np.isin(self.label_index, wanted))

    # -- samples -------------------------------------------------------------------------
    def read(self, indices: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        """The bursts at `indices` (in that order), each a 1-D complex64 array; InputError naming
        the file and the burst where one cannot be read (read_or_reject says which)."""
        out = self.read_or_reject(indices)
        bad = [b for b in out if isinstance(b, UnreadSamples)]
        if bad:
            more = f" (and {len(bad) - 1} more of the {len(out)} asked for)" if len(bad) > 1 else ""
            raise InputError(f"{self.path}: {bad[0].detail}{more}")
        return out  # type: ignore[return-value]

    def read_or_reject(self, indices: Sequence[int] | np.ndarray) -> list[np.ndarray | UnreadSamples]:
        """The bursts at `indices` (in that order), each a 1-D complex64 array, or an UnreadSamples
        where its /length passes MAX_READ_SAMPLES or its samples lie in a chunk of /iq that
        cannot be read (a damaged compressed chunk: every burst with samples in it), the others
        read as ever."""
        idx = np.asarray(indices, dtype=np.int64).ravel()
        if idx.size and (idx.min() < -len(self) or idx.max() >= len(self)):
            raise InputError(f"example index out of range 0..{len(self) - 1}")
        idx = np.where(idx < 0, idx + len(self), idx)
        out: list[np.ndarray | UnreadSamples | None] = [None] * idx.size
        lengths = self.lengths[idx]
        for j in np.flatnonzero(lengths > MAX_READ_SAMPLES):
            out[j] = UnreadSamples(TOO_LONG, f"burst {idx[j]} claims {int(lengths[j]):,} samples, past the "
                                             f"longest read, {MAX_READ_SAMPLES:,} (the daemon's max_burst_samples)")
        fits = np.flatnonzero(lengths <= MAX_READ_SAMPLES)
        order = fits[np.argsort(idx[fits], kind="stable")]
        # Bursts are usually stored back to back: each run of adjacent examples whose samples
        # follow each other is one sample range. The schema does not promise that order (read
        # gave empty bursts for a file whose offsets did not follow it before the 66th session).
        runs: list[tuple[int, int, np.ndarray]] = []  # (lo, hi, positions in `out`)
        run_start = 0
        for k in range(1, order.size + 1):
            if k < order.size:
                a, b = idx[order[k - 1]], idx[order[k]]
                if a == b or (b == a + 1 and self.offsets[b] == self.offsets[a] + self.lengths[a]):
                    continue
            first, last = idx[order[run_start]], idx[order[k - 1]]
            runs.append((int(self.offsets[first]), int(self.offsets[last] + self.lengths[last]),
                         order[run_start:k]))
            run_start = k
        try:
            blocks: list[np.ndarray | None] = list(self._samples([(lo, hi) for lo, hi, _ in runs]))
        except _READ_ERRORS:   # a damaged chunk: found run by run, then burst by burst
            blocks = [self._range_or_none(lo, hi) for lo, hi, _ in runs]
        for (lo, _, positions), block in zip(runs, blocks):
            for j in positions:
                o, n = int(self.offsets[idx[j]]), int(self.lengths[idx[j]])
                out[j] = self._one(int(idx[j])) if block is None else block[o - lo:o - lo + n].copy()
        return out  # type: ignore[return-value]

    def _range_or_none(self, lo: int, hi: int) -> np.ndarray | None:
        """Samples [lo, hi) of /iq, or None where some cannot be read."""
        try:
            return self._samples([(lo, hi)])[0]
        except _READ_ERRORS:
            return None

    def _one(self, i: int) -> np.ndarray | UnreadSamples:
        """Burst i, or the UnreadSamples of its samples."""
        o, n = int(self.offsets[i]), int(self.lengths[i])
        try:
            return self._samples([(o, o + n)])[0]
        except _READ_ERRORS as exc:
            return UnreadSamples(UNREADABLE, f"burst {i}: its samples ({o}..{o + n - 1} of /{schema.IQ}) "
                                             f"cannot be read ({exc})")

    def _samples(self, ranges: list[tuple[int, int]]) -> list[np.ndarray]:
        """The samples of ascending, disjoint [lo, hi) ranges of /iq."""
        if self._iq_mem is not None:
            return [self._iq_mem[lo:hi] for lo, hi in ranges]
        if len(ranges) <= 2:
            return [self._f[schema.IQ][lo:hi] for lo, hi in ranges]
        # One HDF5 read of the union of the ranges (HDF5 returns them in file order):
        # ~10x faster than a Python-level slice per range for scattered training batches.
        dset = self._f[schema.IQ]
        fspace = dset.id.get_space()
        fspace.select_none()
        for lo, hi in ranges:
            fspace.select_hyperslab((lo,), (hi - lo,), op=h5py.h5s.SELECT_OR)
        sizes = [hi - lo for lo, hi in ranges]
        buf = np.empty(sum(sizes), dtype=np.complex64)
        dset.id.read(h5py.h5s.create_simple((buf.size,)), fspace, buf)
        return np.split(buf, np.cumsum(sizes)[:-1])

    def iter_batches(self, batch_size: int, length_samples: int | None = None,
                     shuffle_rng: np.random.Generator | None = None,
                     indices: Sequence[int] | np.ndarray | None = None,
                     normalize: bool = False, drop_last: bool = False,
                     normalization: str = "remove_dc", unreadable: set[int] | None = None) -> Iterator[Batch]:
        """Yield batches of equal-length bursts.

        length_samples None: bursts keep their length; each batch holds bursts of one length
        (generated files store equal-length groups, so this costs nothing).
        length_samples L: every burst becomes one window of L samples, like a model input:
        a longer burst is cropped (random start with `shuffle_rng`, else its first L
        samples), a shorter one is zero-padded at the end (as the serving bucket rule does).
        normalize: normalize each whole burst *before* cropping, exactly as serving does
        (rfclassify.dsp.windows.normalize_burst with `normalization`, by default removing
        DC and scaling to unit power); a burst that cannot be normalized is left as is (all
        zeros), or made all NaN where it holds a NaN or an infinity, so that every window of it
        shows it.
        shuffle_rng: shuffle examples (and the order of length groups); None keeps file order.
        indices: restrict to these examples (e.g. `indices_for_bucket(1024)`).
        unreadable: None: a burst that cannot be read is an InputError (`read`); a set: such a
        burst is left out of its batch and its index added to the set (training), and a batch
        left with none is not yielded.
        """
        if batch_size < 1:
            raise InputError(f"batch_size must be >= 1, got {batch_size}")
        if length_samples is not None and length_samples < 1:
            raise InputError(f"length_samples must be >= 1, got {length_samples}")
        check_normalization(normalization)
        idx = np.arange(len(self)) if indices is None else np.asarray(indices, dtype=np.int64).ravel()
        if shuffle_rng is not None:
            idx = idx[shuffle_rng.permutation(idx.size)]
        if length_samples is None:
            groups = [idx[self.lengths[idx] == n] for n in np.unique(self.lengths[idx])]
            chunks = [g[i:i + batch_size] for g in groups for i in range(0, g.size, batch_size)]
            if shuffle_rng is not None:
                chunks = [chunks[i] for i in shuffle_rng.permutation(len(chunks))]
        else:
            chunks = [idx[i:i + batch_size] for i in range(0, idx.size, batch_size)]
        for chunk in chunks:
            if drop_last and chunk.size < batch_size:
                continue
            if unreadable is None:
                bursts = self.read(chunk)
            else:
                got = self.read_or_reject(chunk)
                kept = np.array([not isinstance(b, UnreadSamples) for b in got], dtype=bool)
                unreadable.update(chunk[~kept].tolist())
                chunk, bursts = chunk[kept], [b for b, k in zip(got, kept) if k]
                if not chunk.size:
                    continue
            if normalize:
                bursts = [_normalized(b, normalization) for b in bursts]
            if length_samples is None:
                iq = np.stack(bursts).astype(np.complex64, copy=False)
            else:
                iq = _fit_length(bursts, length_samples, shuffle_rng)
            yield Batch(iq=iq, label_index=self.label_index[chunk], snr_db=self.snr_db[chunk],
                        lengths=self.lengths[chunk].astype(np.int32), indices=chunk)

    # -- life cycle ----------------------------------------------------------------------
    def close(self) -> None:
        self._f.close()

    def _column(self, name: str, dtype: type[np.generic]) -> np.ndarray:
        """The 1-D per-example array `name` as `dtype`; InputError where it is not one of numbers
        of that kind or holds values the type cannot: a string /snr_db raised numpy's ValueError
        as a traceback, and a label index past int16 wrapped round to another label."""
        ds = self._f[name]
        want_int = np.issubdtype(dtype, np.integer)
        if ds.ndim != 1 or ds.dtype.kind not in ("iu" if want_int else "iuf"):
            raise InputError(f"{self.path}: corrupt dataset, /{name} is not a list of "
                             f"{'integers' if want_int else 'numbers'} (dtype {ds.dtype}, shape {ds.shape})")
        values = ds[()]
        if want_int and values.size:
            info = np.iinfo(dtype)
            if values.min() < info.min or values.max() > info.max:
                raise InputError(f"{self.path}: corrupt dataset, /{name} holds values past {np.dtype(dtype).name}")
        return values.astype(dtype)

    def __enter__(self) -> DatasetReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _normalized(burst: np.ndarray, normalization: str) -> np.ndarray:
    """The burst normalized; one with no power as it is (zeros), and one with a NaN or an infinity
    all NaN: passed through as it was, a window cropped away from its bad samples came out finite
    and at the file's scale, past any check of the caller's (training leaves NaN windows out)."""
    try:
        return normalize_burst(burst, normalization)
    except MessageError as exc:
        if exc.reason == "non_finite":
            return np.full(burst.shape, np.nan, dtype=np.complex64)
        return burst


def _fit_length(bursts: list[np.ndarray], n: int, rng: np.random.Generator | None) -> np.ndarray:
    out = np.zeros((len(bursts), n), dtype=np.complex64)
    for i, b in enumerate(bursts):
        if b.size >= n:
            start = int(rng.integers(0, b.size - n + 1)) if rng is not None else 0
            out[i] = b[start:start + n]
        else:
            out[i, :b.size] = b
    return out


def _joined(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Ascending [lo, hi) ranges with the touching or overlapping ones made one."""
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out
