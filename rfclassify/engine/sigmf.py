"""SigMF recordings and archives as bursts, read through their metadata.

A recording is ``NAME.sigmf-meta`` + ``NAME.sigmf-data``, or a ``.sigmf`` archive of such
pairs (an uncompressed tar, read in place). Every entry of ``annotations`` with
``core:sample_start`` (and ``core:sample_count``; absent = to the end) is one burst, and its
``core:label`` is taken as ground truth when it is a canonical label; without annotations the
whole capture is one burst, or (cut "energy") the bursts the daemon's energy detector finds. A
burst longer than file_bursts.longest_whole() (2**20 samples) is classified in consecutive
pieces of at most that many (file_bursts.pieces).
``core:datatype`` may be any SigMF type: ``cf32_le``, ``cf64_be``, ``ci16_le``, ``ci8``,
``cu8``, ``rf32_le``, ... (a real type's bursts are made complex baseband at half the rate:
real_baseband); a recording of ``core:num_channels`` interleaved channels gives each
burst once per channel (FileBurst.channel). The sample rate is the global
``core:sample_rate``. Sample indices are absolute, as the specification has them: the
dataset's first sample is ``core:offset`` (a recording split over files). A non-conforming
dataset is read too: ``core:dataset`` names the data file beside the metadata, each capture's
``core:header_bytes`` and the global ``core:trailing_bytes`` are skipped. Samples are
memory-mapped (inside an archive too), so a long recording costs only the annotated bursts. An
annotation that gives its band (``core:freq_lower_edge`` and ``core:freq_upper_edge``, Hz, as
its capture's ``core:frequency``) is cut to it: mixed to 0 Hz and decimated
(rfclassify.dsp.channelize), its burst's sample rate the decimated one, unless ``full_band``
keeps the whole band (rfclassify.engine.file_bursts.Reading says which). Annotations that
``rfclassify classify --annotate`` wrote (``core:generator`` "rfclassify ...") are results, not
bursts: they are skipped (rfclassify.engine.sigmf_annotations writes them). The datatypes and
the sample layout (SampleMap) serve raw recordings too.

A recording that cannot be read (its metadata, datatype, captures or data file) is an
InputError before any burst. An annotation that cannot be read (outside the samples, a start
or count that is not a whole number, a band that cannot be used) is not: its burst has no
samples (file_bursts.UnreadSamples), which Classifier.classify makes a ``bad_annotation`` reject naming
the annotation, and the recording's other annotations are read as ever.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import json
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rfclassify._exceptions import InputError, MessageError, quoted
from rfclassify._numbers import as_finite_float
from rfclassify.engine.file_bursts import (FileBurst, Reading, UnreadSamples, cut_notes, energy_bursts, longest_whole,
                                           pieces, split_note, whole_bursts)
from rfclassify.labels import LABELS

MAX_CHANNELS = 1024   # interleaved channels a recording may have
GENERATOR = "rfclassify"   # core:generator of the annotations `classify --annotate` writes
BAD_ANNOTATION = "bad_annotation"   # the reject reason of an annotation that cannot be read as a burst
_SIGMF_TYPE = re.compile(r"^(?P<kind>[cr])(?P<fmt>[fiu])(?P<bits>8|16|32|64)(?:_(?P<end>le|be))?$")


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
    base = p.with_suffix("") if p.suffix in (".sigmf-meta", ".sigmf-data") else p
    if not base.name:   # '' or '/': Path's with_name raised ValueError
        raise InputError(f"{str(path) or repr('')}: a directory, not a recording")
    return base.with_name(base.name + ".sigmf-meta"), base.with_name(base.name + ".sigmf-data")


def is_sigmf(path: str | Path) -> bool:
    return sigmf_paths(path)[0].is_file()


def is_sigmf_archive(path: str | Path) -> bool:
    p = Path(path)
    return p.suffix == ".sigmf" and p.is_file()


@dataclass(frozen=True)
class Dataset:
    """Where a recording's dataset lies: a file and the bytes of it that are the dataset
    (all of a .sigmf-data file; one member's in an archive)."""

    path: Path
    start: int
    size: int


def read_sigmf(path: str | Path, limit: int | None = None, reading: Reading = Reading()) -> list[FileBurst]:
    """The bursts of one SigMF recording (see the module docstring), at most `limit` of them,
    read as `reading` says (its full_band, cut and cutter); an annotation that cannot be read is
    a burst of UnreadSamples (file_bursts).

    Every annotation is checked, but only the bursts returned are converted from the file."""
    return list(itertools.islice(sigmf_bursts(path, reading), limit))


def sigmf_bursts(path: str | Path, reading: Reading = Reading()) -> Iterator[FileBurst]:
    """The bursts of one SigMF recording as read_sigmf gives them, each read from the file when
    it is asked for (a long recording is never in memory at once); the recording and every
    annotation are checked before this returns."""
    meta, meta_path, data_path = recording_metadata(path)
    try:
        dataset = Dataset(data_path, 0, data_path.stat().st_size)
    except OSError as exc:
        raise InputError(f"{data_path}: cannot read SigMF data ({exc})") from None
    return _recording_bursts(meta, meta_path, dataset, reading)


def recording_metadata(path: str | Path) -> tuple[dict, Path, Path]:
    """(metadata, its path, the data file's path) of the SigMF recording NAME, NAME.sigmf-meta
    or NAME.sigmf-data: the data file is the one core:dataset names, else NAME.sigmf-data."""
    meta_path, data_path = sigmf_paths(path)
    try:
        meta = _sigmf_meta(meta_path.read_bytes(), meta_path)
    except OSError as exc:
        raise InputError(f"{meta_path}: cannot read SigMF metadata ({exc})") from None
    return meta, meta_path, _named_dataset(meta["global"], meta_path) or data_path


def written_by_rfclassify(annotation: dict) -> bool:
    """Whether an annotation is one `rfclassify classify --annotate` wrote (core:generator
    GENERATOR, or GENERATOR and a space and more): a classification, not a burst to classify."""
    who = annotation.get("core:generator")
    return isinstance(who, str) and (who == GENERATOR or who.startswith(GENERATOR + " "))


def read_sigmf_archive(path: str | Path, reading: Reading = Reading()) -> list[Iterator[FileBurst]]:
    """The bursts of each recording in a SigMF archive (an uncompressed tar holding
    NAME.sigmf-meta / NAME.sigmf-data pairs), an iterator a recording (as sigmf_bursts), in the
    archive's order. The samples are memory-mapped inside the archive, never extracted, and read
    as their burst is asked for. Every recording is checked before this returns."""
    archive = Path(path)
    try:
        with tarfile.open(archive, "r:") as tar:
            members = tar.getmembers()
            # macOS's tar adds an AppleDouble "._NAME" beside each file: not a recording
            metas = [(m, tar.extractfile(m).read()) for m in members if m.isfile() and m.name.endswith(".sigmf-meta")
                     and not Path(m.name).name.startswith("._")]
    except tarfile.ReadError as exc:
        raise InputError(f"{archive}: not a SigMF archive (an uncompressed tar; {exc})") from None
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise InputError(f"{archive}: cannot read the SigMF archive ({exc})") from None
    if not metas:
        raise InputError(f"{archive}: a tar archive with no .sigmf-meta file")
    by_name = {m.name: m for m in members}
    recordings = []
    for member, raw in metas:
        where = Path(f"{archive}/{member.name}")
        meta = _sigmf_meta(raw, where)
        ncd = _named_dataset(meta["global"], Path(member.name))
        data_name = member.name[: -len(".sigmf-meta")] + ".sigmf-data" if ncd is None else ncd.as_posix()
        data = by_name.get(data_name)
        if data is None or not data.isfile() or data.issparse():
            raise InputError(f"{archive}: {data_name} is missing or not a plain file in the archive")
        recordings.append((meta, where, Dataset(archive, data.offset_data, data.size)))
    return [_recording_bursts(meta, where, dataset, reading) for meta, where, dataset in recordings]


def _sigmf_meta(raw: bytes, where: Path) -> dict:
    """The parsed metadata, with a 'global' object; InputError otherwise."""
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError(f"{where}: cannot read SigMF metadata ({exc})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("global"), dict):
        raise InputError(f"{where}: SigMF metadata has no 'global' object")
    return meta


def _named_dataset(glob: dict, meta_path: Path) -> Path | None:
    """The data file the metadata itself names: core:dataset, beside the metadata (a
    non-conforming dataset; it is the dataset when given, as the specification and the sigmf
    library have it), or None for NAME.sigmf-data. InputError for a metadata-only recording
    (it names none and has none) or a core:dataset that is a path."""
    if glob.get("core:metadata_only") is True:
        raise InputError(f"{meta_path}: a metadata-only SigMF recording (core:metadata_only): it holds no samples")
    name = glob.get("core:dataset")
    if name is None:
        return None
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name:
        raise InputError(f"{meta_path}: core:dataset must be a file name beside the metadata, got {quoted(name)}")
    return meta_path.with_name(name)


def _recording_bursts(meta: dict, meta_path: Path, dataset: Dataset, reading: Reading) -> Iterator[FileBurst]:
    """The bursts of one recording whose metadata is meta and whose samples are in dataset, each
    read when it is asked for (the recording and its annotations are checked before this
    returns); an annotation that gives its band is cut to it (rfclassify.dsp.channelize) unless
    reading.full_band. Without annotations the recording is taken whole (file_bursts.whole_bursts:
    in pieces of at most longest_whole() samples where it is longer) unless reading.cut is
    "energy". An annotation longer than that is classified in such pieces too, each with its
    label as truth and the annotation's burst number, and reading.note is told (once a
    recording, when the first is reached): `dataset import` splits a labelled burst into
    examples as ever (a burst keeps its modulation throughout), and no reader holds more."""
    glob = meta["global"]
    channels = _sigmf_int(glob, "core:num_channels", 1, meta_path)
    if not 1 <= channels <= MAX_CHANNELS:
        raise InputError(f"{meta_path}: core:num_channels must be in 1..{MAX_CHANNELS}, got {channels}")
    if "core:datatype" not in glob:
        raise InputError(f"{meta_path}: SigMF metadata has no core:datatype")
    datatype = glob["core:datatype"]
    if not isinstance(datatype, str):   # str() of it quoted 5 as '5' and named no file
        raise InputError(f"{meta_path}: core:datatype must be a SigMF datatype name such as cf32_le, "
                         f"got {quoted(datatype)}")
    try:
        component, is_complex = sigmf_dtype(datatype)
    except InputError as exc:
        raise InputError(f"{meta_path}: {exc}") from None
    rate_hz = _sigmf_rate(glob.get("core:sample_rate"), meta_path)
    first = _sigmf_int(glob, "core:offset", 0, meta_path)   # sample indices are absolute
    if first < 0:
        raise InputError(f"{meta_path}: core:offset must not be negative, got {first}")
    samples = SampleMap(dataset, component, is_complex, first, _sigmf_list(meta, "captures", meta_path),
                        _sigmf_int(glob, "core:trailing_bytes", 0, meta_path), meta_path, channels)
    each = range(channels) if channels > 1 else [None]   # a single channel's bursts carry no channel
    # (its place in the file's annotations, which errors name; the burst index is its place in time)
    entries = [(j, a) for j, a in enumerate(_sigmf_list(meta, "annotations", meta_path)) if isinstance(a, dict)
               and "core:sample_start" in a and not written_by_rfclassify(a)]
    annotations = [a for _, a in entries]
    if not annotations:
        if reading.cut == "energy":
            found = cut_notes(itertools.chain.from_iterable(
                energy_bursts(lambda s, n, c=c: samples.read(s, n, c), first, samples.n, str(meta_path), rate_hz,
                              reading.cutter, c) for c in each), samples.n * len(each), str(meta_path), reading)
        else:
            found = whole_bursts(samples.read, first, samples.n, str(meta_path), rate_hz, each)
        return (real_baseband(dataclasses.replace(b, capture_hz=samples.frequency_at(b.start_sample)), samples)
                for b in found)
    # Each annotation is checked here, its samples read below for the bursts returned. One that
    # cannot be read is that burst's reject (UnreadSamples), the others are still read.
    planned = []   # (start, truth, j, (count, band, capture_hz) or why the annotation is a reject)
    for j, a in entries:
        start = _whole(a["core:sample_start"])
        try:
            plan: tuple | str = _annotation_plan(a, j, start, first, samples, rate_hz, reading, dataset.path.name)
        except MessageError as exc:
            plan = exc.detail
        label = a.get("core:label")
        planned.append((-1 if start is None else start, label if label in LABELS else None, j, plan))
    planned.sort(key=lambda p: p[0])   # in time; one whose start is not a number first, in the file's order
    long = sum(1 for *_, plan in planned if not isinstance(plan, str) and plan[0] > longest_whole())

    def bursts() -> Iterator[FileBurst]:
        told = False
        for i, (start, truth, j, plan) in enumerate(planned):
            if isinstance(plan, str):   # one reject however many channels: one annotation is bad
                yield FileBurst(UnreadSamples(BAD_ANNOTATION, plan), str(meta_path), i, start, rate_hz, truth)
                continue
            count, band, capture_hz = plan
            split = pieces(start, count)
            if len(split) > 1 and not told and reading.note is not None:
                told = True
                reading.note(split_note(str(meta_path), f"annotation {j} ({start}+{count})", count)
                             + (f"; {long - 1} more annotations are too" if long > 1 else ""))
            for at, n in split:
                for c in each:
                    iq, rate = samples.read(at, n, c), rate_hz
                    if band is not None:
                        from rfclassify.dsp.channelize import channelize

                        lower, upper = band
                        iq, rate = channelize(iq, rate_hz, (lower + upper) / 2 - capture_hz, upper - lower)
                    yield real_baseband(FileBurst(iq, str(meta_path), i, at, rate, truth, band_hz=band, channel=c,
                                                  span=None if band is None else n, capture_hz=capture_hz), samples)

    return bursts()


def _annotation_plan(a: dict, j: int, start: int | None, first: int, samples: SampleMap, rate_hz: float | None,
                     reading: Reading, data_name: str) -> tuple[int, tuple[float, float] | None, float | None]:
    """(count, band, capture_hz) of annotation j (its place in the file's annotations), which
    starts at sample start (None: not a whole number) of the samples from first; MessageError(
    BAD_ANNOTATION) naming it when it cannot be read as a burst: it lies outside the recording,
    its start or count is not a whole number, or its band cannot be used."""
    if start is None:
        raise MessageError(BAD_ANNOTATION, f"annotation {j}: core:sample_start must be an integer, "
                                           f"got {quoted(a['core:sample_start'])}")
    end = first + samples.n
    count = _whole(a.get("core:sample_count", end - start))
    if count is None:
        raise MessageError(BAD_ANNOTATION, f"annotation {j}: core:sample_count must be an integer, "
                                           f"got {quoted(a['core:sample_count'])}")
    if start < first or count < 0 or start + count > end:
        raise MessageError(BAD_ANNOTATION, f"annotation {j} ({start}+{count}) lies outside the {samples.n} "
                                           f"samples of {data_name}"
                           + (f" (samples {first}..{end - 1}: core:offset)" if first else ""))
    capture_hz = samples.frequency_at(start)
    band = None if reading.full_band else _annotation_band(a, j, capture_hz, rate_hz)
    return count, band, capture_hz


def _annotation_band(a: dict, i: int, capture_hz: float | None, rate_hz: float | None) -> tuple[float, float] | None:
    """An annotation's (lower, upper) frequency edges in Hz when it gives both (None when it
    gives neither or one), checked against its capture; MessageError(BAD_ANNOTATION) when they
    cannot be used."""
    lower, upper = a.get("core:freq_lower_edge"), a.get("core:freq_upper_edge")
    if lower is None or upper is None:
        return None
    lo, hi = as_finite_float(lower), as_finite_float(upper)
    if lo is None or hi is None or not lo < hi:
        raise MessageError(BAD_ANNOTATION, f"annotation {i}: core:freq_lower_edge and core:freq_upper_edge must "
                                           f"be finite numbers of Hz, lower first; got {quoted(lower)} and "
                                           f"{quoted(upper)}")
    if capture_hz is None or rate_hz is None:
        missing = "core:sample_rate" if rate_hz is None else "core:frequency in its capture"
        raise MessageError(BAD_ANNOTATION, f"annotation {i} gives its band ({lo:g}..{hi:g} Hz) but the recording "
                                           f"has no {missing} to place it in the samples; add it, or classify "
                                           "the whole band (--full-band)")
    if abs((lo + hi) / 2 - capture_hz) > rate_hz / 2:
        raise MessageError(BAD_ANNOTATION, f"annotation {i}'s band ({lo:g}..{hi:g} Hz) is centred outside its "
                                           f"capture ({capture_hz - rate_hz / 2:g}..{capture_hz + rate_hz / 2:g} Hz)")
    return lo, hi


class SampleMap:
    """A recording's samples by absolute index, memory-mapped from its dataset.

    Each capture segment may be preceded by core:header_bytes that are not samples, and the
    dataset may end in core:trailing_bytes (a non-conforming dataset's framing); a conforming
    one is one run of samples. A burst that spans a header is joined from the runs either side."""

    def __init__(self, dataset: Dataset, component: np.dtype, is_complex: bool, first: int,
                 captures: list, trailing: int, meta_path: Path, channels: int = 1) -> None:
        self.is_complex, self.channels = is_complex, channels
        item = component.itemsize * (2 if is_complex else 1) * channels   # one sample of every channel
        if trailing < 0:
            raise InputError(f"{meta_path}: core:trailing_bytes must not be negative, got {trailing}")
        segments = []   # (absolute index of the first sample, header bytes before it)
        self._capture_starts: list[int] = []              # each capture's first sample ...
        self._capture_hz: list[float | None] = []        # ... and its core:frequency
        for i, cap in enumerate(captures or [{}]):
            if not isinstance(cap, dict):
                raise InputError(f"{meta_path}: captures entry {i} is not an object")
            if i > 0 and "core:sample_start" not in cap:
                raise InputError(f"{meta_path}: captures entry {i} has no core:sample_start")
            start = _sigmf_int(cap, "core:sample_start", first, meta_path)
            header = _sigmf_int(cap, "core:header_bytes", 0, meta_path)
            if header < 0 or start < (segments[-1][0] if segments else first):
                raise InputError(f"{meta_path}: captures entry {i} (core:sample_start {start}, core:header_bytes "
                                 f"{header}) is out of order or negative")
            segments.append((start, header))
            self._capture_starts.append(start if i else first)
            self._capture_hz.append(as_finite_float(cap.get("core:frequency")))
        segments[0] = (first, segments[0][1])   # samples before the first capture's start are still samples
        self.runs: list[tuple[int, np.ndarray]] = []   # (absolute index of its first sample, samples)
        pos = dataset.start
        end = dataset.start + dataset.size - trailing
        for k, (start, header) in enumerate(segments):
            pos += header
            if k + 1 < len(segments):
                n = segments[k + 1][0] - start
            elif pos <= end and (end - pos) % item == 0:
                n = (end - pos) // item
            else:
                raise InputError(f"{dataset.path}: {end - pos} bytes is not a whole number of {item}-byte samples")
            if pos + n * item > end:
                raise InputError(f"{dataset.path}: the captures need more than the dataset's {dataset.size} bytes")
            self.runs.append((start, _map(dataset.path, component, is_complex, pos, n, channels)))
            pos += n * item
        self.n = sum(r.shape[0] for _, r in self.runs)

    def frequency_at(self, index: int) -> float | None:
        """core:frequency (Hz) of the capture holding sample index, None when it gives none."""
        at = bisect.bisect_right(self._capture_starts, index) - 1
        return self._capture_hz[at] if at >= 0 else None

    def read(self, start: int, count: int, channel: int | None = None) -> np.ndarray:
        """Samples start..start+count (absolute indices) of one channel (None: a single-channel
        recording's) as complex64 (float32 for real types)."""
        pieces = [r[max(0, start - s):max(0, start + count - s)] for s, r in self.runs
                  if s < start + count and start < s + r.shape[0]]
        if not pieces:
            pieces = [self.runs[0][1][:0]]
        if self.channels > 1:
            pieces = [p[:, channel or 0] for p in pieces]
        return as_float(pieces[0] if len(pieces) == 1 else np.concatenate(pieces), self.is_complex)


def _map(path: Path, component: np.dtype, is_complex: bool, offset: int, n: int, channels: int = 1) -> np.ndarray:
    """n samples from byte offset of path, memory-mapped as (n, 2) components (complex) or (n,)
    (real); (n, channels, 2) or (n, channels) for interleaved channels."""
    shape = (n, 2) if is_complex else (n,)
    if channels > 1:
        shape = (n, channels, *shape[1:])
    if n == 0:
        return np.zeros(shape, dtype=component)
    return np.memmap(path, dtype=component, mode="r", offset=offset, shape=shape)


def _sigmf_int(obj: dict, key: str, default: int, meta_path: Path) -> int:
    """obj[key] as an int (default when absent; a float of integral value, as some writers
    put it, taken); InputError naming it when it is not one."""
    value = obj.get(key, default)
    whole = _whole(value)
    if whole is None:
        raise InputError(f"{meta_path}: {key} must be an integer, got {quoted(value)}")
    return whole


def _whole(value: object) -> int | None:
    """A sample index or count as an int (a float of integral value, as some writers put it,
    taken); None when it is not a whole number (a fraction, a string, a bool, NaN)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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


def as_float(samples: np.ndarray, is_complex: bool) -> np.ndarray:
    """complex64 (or float32 for real types); unsigned integers are centred on zero."""
    x = np.asarray(samples)
    # centred exactly: float32 first would round cu32 to steps of 256 (8 and 16 bits are exact in float32)
    if x.dtype.kind == "u" and x.dtype.itemsize == 8:
        x = (x ^ np.uint64(1 << 63)).view(np.int64)   # flipping the top bit subtracts 2**63
    elif x.dtype.kind == "u" and x.dtype.itemsize == 4:
        x = x.astype(np.int64) - 2 ** 31
    elif x.dtype.kind == "u":
        x = x.astype(np.float32) - float(2 ** (8 * x.dtype.itemsize - 1))
    # values past float32 (a cf64 file) become inf and their burst a non_finite reject, not a warning
    with np.errstate(over="ignore", invalid="ignore"):
        x = x.astype(np.float32)
        if not is_complex:
            return x
        return (x[:, 0] + 1j * x[:, 1]).astype(np.complex64)


BASEBAND_MARGIN = 64        # real samples read either side of a piece for the half-band filter's 41 taps
BASEBAND_PIECE = 1 << 20    # real samples made baseband at a time (even: every piece starts in step)


def real_baseband(burst: FileBurst, samples: SampleMap) -> FileBurst:
    """A burst of a real recording (rf32_le, ri16_le, ...) that no annotated band was cut for, as
    the complex baseband a complex receiver would have recorded: the positive half of the
    spectrum (0..rate/2, centred on rate/4) mixed to 0 Hz, low-passed and decimated by 2
    (rfclassify.dsp.channelize.real_to_baseband), the burst's mean taken out first (an ADC's
    offset, at 0 Hz, is the kept band's edge, where the filter passes half of it). Classified as
    real samples (Q = 0), the mirror image made nearly every burst BPSK. Its sample rate halves;
    start_sample and span stay the recording's own samples (as for a band cut); band_hz is the
    half kept, from its capture's core:frequency (0 where none). Read from the recording by
    piece with a margin either side, so a burst's edges are filtered as in the whole recording
    and memory stays one piece. Any other burst (complex, cut to a band, no samples) is
    returned as it is."""
    if samples.is_complex or burst.span is not None or isinstance(burst.iq, UnreadSamples):
        return burst
    from rfclassify.dsp.channelize import real_to_baseband

    first = samples.runs[0][0]
    start, count, end = burst.start_sample, burst.recording_samples, first + samples.n
    pieces = range(start, start + count, BASEBAND_PIECE)

    def read(a: int, b: int) -> np.ndarray:
        return samples.read(a, b - a, burst.channel)

    iq = np.empty((count + 1) // 2, np.complex64)   # sample k is the recording's start + 2k
    with np.errstate(invalid="ignore", over="ignore"):   # NaN or inf: a non_finite reject, not a warning
        offset = np.float32(sum(read(a, min(a + BASEBAND_PIECE, start + count)).sum(dtype=np.float64)
                                for a in pieces) / max(count, 1))
        for pos in pieces:
            n = min(BASEBAND_PIECE, start + count - pos)
            lo = max(first, pos - BASEBAND_MARGIN)
            lo += (pos - lo) % 2   # pos - lo even: the piece's samples fall on its output's
            made = real_to_baseband(read(lo, min(end, pos + n + BASEBAND_MARGIN)) - offset, lo)
            iq[(pos - start) // 2:(pos - start + n + 1) // 2] = made[(pos - lo) // 2:(pos - lo + n + 1) // 2]
    rate = burst.sample_rate_hz
    band = None if rate is None else ((burst.capture_hz or 0.0), (burst.capture_hz or 0.0) + rate / 2)
    return dataclasses.replace(burst, iq=iq, sample_rate_hz=None if rate is None else rate / 2, band_hz=band,
                               span=count)
