"""The SigMF metadata `rfclassify classify --annotate` writes beside a recording: the recording
as it lies on disk, with one annotation for each burst classified.

The file is ``NAME.rfclassify.sigmf-meta`` in the data file's folder, and neither the data nor
the user's metadata is changed. Where the data file holds samples alone, a symbolic link to it
(a hard link where there are none) named ``NAME.rfclassify.sigmf-data`` makes a conforming
pair, which readers that pair NAME.sigmf-meta with NAME.sigmf-data and ignore
``core:dataset`` (inspectrum, IQEngine) open too. Otherwise (a WAV file's header, a framed
non-conforming dataset, no links) the file names the data in ``core:dataset`` (the
specification's non-conforming dataset, which must sit beside its data), which the ``sigmf``
library reads.

For a SigMF recording the metadata is the recording's own, its annotations kept; for a WAV file
its datatype, rate and the header and trailing bytes around the samples; for a raw file the
``--raw`` datatype and ``--sample-rate``. An annotation of ours carries ``core:sample_start``
and ``core:sample_count`` in the recording's samples; the band it was cut to, or else its
capture's whole band when the rate is known (band_edges); ``core:label`` (``unknown`` below
the open-set threshold; none for a rejected burst); ``core:comment`` for a person;
``core:generator`` ``"rfclassify VERSION MODEL"``; and each field of the result record
(DESIGN.md) as ``rfclassify:FIELD``, with ``rfclassify:channel`` for a multi-channel
recording. The reader skips annotations with that generator, so a recording annotated again
has its earlier classifications replaced, not classified. A file of that name that rfclassify
did not write is never replaced.
"""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rfclassify._atomic import write_atomic
from rfclassify._exceptions import InputError
from rfclassify.engine.file_bursts import FileBurst, Reading, unread
from rfclassify.engine.files import recording_format, wav_layout
from rfclassify.engine.sigmf import BAD_ANNOTATION, GENERATOR, recording_metadata, written_by_rfclassify

SUFFIX = ".rfclassify.sigmf-meta"
EXTENSION = "rfclassify"     # our namespace, declared in core:extensions
SIGMF_VERSION = "1.2.0"      # core:version of the metadata written for raw and WAV files


@dataclass
class Target:
    """Where one recording's annotations go (path) and the metadata they join (meta: the
    recording's, without annotations of ours)."""

    path: Path
    meta: dict[str, Any]
    link: Path | None = None     # NAME.rfclassify.sigmf-data to make, for readers that pair by name
    stale_link: Path | None = None   # one made for an earlier recording of this name, to remove
    annotations: list[dict[str, Any]] = field(default_factory=list)

    def add(self, burst: FileBurst, result: Any, generator: str) -> None:
        """One annotation for a classified (or rejected) burst; none for a burst whose own
        annotation could not be read (a bad_annotation reject): it has no samples to place one
        on, and the user's annotation stays in the metadata as it was."""
        bad = unread(burst)
        if bad is None or bad.reason != BAD_ANNOTATION:
            self.annotations.append(annotation(burst, result, generator))

    def write(self) -> Path:
        """Writes the metadata with the annotations added (sorted by core:sample_start, as the
        specification asks), in one rename; the path written."""
        from rfclassify.serve.results import strict_json

        glob = dict(self.meta["global"])
        if self.link is not None and not self.link.exists():
            self.link = _link(self.link, glob["core:dataset"])
        if self.link is not None:   # a conforming pair now: the link is the dataset
            del glob["core:dataset"]
        meta = {**self.meta, "global": glob}
        meta["annotations"] = sorted([*self.meta.get("annotations", []), *self.annotations], key=_start)
        written = write_atomic(self.path, json.dumps(strict_json(meta), indent=2, allow_nan=False) + "\n")
        if self.stale_link is not None:
            self.stale_link.unlink(missing_ok=True)
        return written


def annotation_target(path: str | Path, reading: Reading = Reading()) -> Target:
    """The Target for the recording at path read as `reading` says; InputError for what cannot
    be annotated (an archive: no metadata can sit beside its data; an HDF5 dataset; a 24-bit
    WAV) and for a file of the target's name that rfclassify did not write."""
    kind, p = recording_format(path, reading)
    if kind == "archive":
        raise InputError(f"{p}: --annotate writes metadata beside a recording's data, which an archive holds "
                         "inside it; extract it (tar -xf) and annotate the recording")
    if kind in ("hdf5", "npy"):
        what = "an rfclassify HDF5 dataset" if kind == "hdf5" else "a NumPy array"
        raise InputError(f"{p}: {what}, not a recording; --annotate takes SigMF, WAV and raw recordings")
    if kind == "sigmf":
        meta, meta_path, data_path = recording_metadata(p)
        meta = copy.deepcopy(meta)
        glob = meta["global"]
        glob.setdefault("core:dataset", data_path.name)
        meta.setdefault("captures", [])
        annotations = meta.get("annotations") or []
        meta["annotations"] = [a for a in annotations if not (isinstance(a, dict) and written_by_rfclassify(a))]
        stem = meta_path.name[: -len(".sigmf-meta")]
    else:
        glob = {"core:datatype": reading.raw, "core:version": SIGMF_VERSION, "core:dataset": p.name}
        capture: dict[str, Any] = {"core:sample_start": 0}
        rate_hz = reading.sample_rate_hz
        if kind == "wav":
            glob["core:datatype"], rate_hz, capture["core:header_bytes"], trailing = wav_layout(p)
            if trailing:
                glob["core:trailing_bytes"] = trailing
        if rate_hz is not None:
            glob["core:sample_rate"] = rate_hz
        meta = {"global": glob, "captures": [capture], "annotations": []}
        stem, meta_path = p.stem, p
    extensions = glob.get("core:extensions", [])
    if not isinstance(extensions, list):
        raise InputError(f"{meta_path}: core:extensions must be a list, got {type(extensions).__name__}")
    glob["core:extensions"] = [e for e in extensions if not (isinstance(e, dict) and e.get("name") == EXTENSION)]
    glob["core:extensions"].append(extension())
    stem = stem.removesuffix(".rfclassify")   # our own file annotated again: the same file
    target = Target(meta_path.with_name(stem + SUFFIX), meta)
    if not os.access(target.path.parent, os.W_OK):   # found before the classifying, not after it
        raise InputError(f"{target.path.parent}: cannot write {target.path.name} there (no permission)")
    _check_replaceable(target.path, p)
    paired = target.path.with_name(target.path.name.removesuffix(".sigmf-meta") + ".sigmf-data")
    data = target.path.with_name(glob["core:dataset"])
    if not _framed(meta):   # samples from the first byte to the last: a name-paired reader reads them right
        target.link = paired
        if (paired.is_symlink() or paired.exists()) and not (paired.exists() and paired.samefile(data)):
            raise InputError(f"{paired}: exists and is not {data.name}; move it away to annotate {p}")
    elif paired.is_symlink():   # made for an unframed recording of this name (rec.cf32, now rec.wav):
        target.stale_link = paired   # a viewer pairing by name would read its samples as these
    elif paired.exists():
        raise InputError(f"{paired}: a viewer pairing files by name would read it as {data.name}'s samples "
                         f"under these annotations; move it away to annotate {p}")
    return target


def extension() -> dict[str, Any]:
    """Our entry in core:extensions: the rfclassify: keys, optional to a reader."""
    return {"name": EXTENSION, "version": _version(), "optional": True}


def comment(label: str, confidence: float, best_guess: str | None, snr_db: float | None) -> str:
    """core:comment of an annotation of ours: "unknown (confidence 0.41, best guess 8PSK), SNR 9.0 dB"."""
    guess = "" if best_guess in (None, label) else f", best guess {best_guess}"
    return f"{label} (confidence {confidence:.2f}{guess})" + ("" if snr_db is None else f", SNR {snr_db:.1f} dB")


def band_edges(center_hz: float | None, rate_hz: float | None) -> dict[str, float]:
    """core:freq_lower_edge / core:freq_upper_edge of a burst that fills its capture's band:
    the center frequency (0, baseband, where the capture gives none, as the specification has
    it) +- half the sample rate; none without a rate. Viewers (inspectrum, IQEngine) draw an
    annotation without edges as a box of no height at 0 Hz."""
    if not rate_hz:
        return {}
    center = center_hz or 0.0
    return {"core:freq_lower_edge": center - rate_hz / 2, "core:freq_upper_edge": center + rate_hz / 2}


def generator(model_id: str) -> str:
    """core:generator of our annotations: "rfclassify VERSION MODEL" (written_by_rfclassify
    knows it by its first word)."""
    return f"{GENERATOR} {_version()} {model_id}"


def annotation(burst: FileBurst, result: Any, who: str) -> dict[str, Any]:
    """The SigMF annotation of one burst's result (the module docstring lists its keys)."""
    a: dict[str, Any] = {"core:sample_start": burst.start_sample, "core:sample_count": burst.recording_samples,
                         "core:generator": who}
    if burst.band_hz is not None:
        a["core:freq_lower_edge"], a["core:freq_upper_edge"] = burst.band_hz
    else:
        a.update(band_edges(burst.capture_hz, burst.sample_rate_hz))
    if result.ok:
        a["core:label"] = result.label
        a["core:comment"] = comment(result.label, result.confidence, result.best_guess, result.snr_db)
    else:
        a["core:comment"] = f"not classified: {result.reject_reason}"
    a.update({f"{EXTENSION}:{k}": v for k, v in result.to_dict().items()})
    if burst.channel is not None:
        a[f"{EXTENSION}:channel"] = burst.channel
    return a


def check_distinct(targets: dict[str, Target]) -> None:
    """InputError when two different recordings would be annotated in one file (rec.cf32 and
    rec.wav both give rec.rfclassify.sigmf-meta)."""
    seen: dict[Path, str] = {}
    for path, target in targets.items():
        where = target.path.resolve()
        data = (target.path.parent / target.meta["global"]["core:dataset"]).resolve()
        if where in seen and seen[where] != str(data):
            raise InputError(f"{path}: its annotations would go to {target.path}, as those of another recording "
                             f"given ({seen[where]}); rename one, or annotate them in separate folders")
        seen[where] = str(data)


def _check_replaceable(out: Path, recording: Path) -> None:
    """InputError unless out is absent or a file --annotate wrote (our extension declared)."""
    try:
        raw = out.read_bytes()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"{out}: cannot read the file --annotate would replace ({exc})") from None
    try:
        ours = written_by_annotate(json.loads(raw.decode("utf-8")))
    except (UnicodeDecodeError, ValueError, RecursionError):
        ours = False
    if not ours:
        raise InputError(f"{out}: exists and rfclassify did not write it; move it away to annotate {recording}")


def written_by_annotate(meta: Any) -> bool:
    """Whether SigMF metadata (parsed) is a file --annotate wrote: our extension declared."""
    try:
        return any(isinstance(e, dict) and e.get("name") == EXTENSION for e in meta["global"]["core:extensions"])
    except (KeyError, TypeError):
        return False


def _framed(meta: dict[str, Any]) -> bool:
    """Whether the dataset holds bytes that are not samples (header or trailing bytes: a WAV
    file's chunks, a non-conforming dataset's framing), which a reader that ignores them would
    read as samples."""
    captures = meta.get("captures") or []
    return bool(meta["global"].get("core:trailing_bytes")) or any(
        isinstance(c, dict) and c.get("core:header_bytes") for c in captures)


def _link(link: Path, data_name: str) -> Path | None:
    """link made a symbolic link to the data file beside it (a hard link where the file system
    has no symbolic links); None where neither can be made (the metadata still names the data)."""
    for make in (os.symlink, lambda name, at: os.link(at.with_name(name), at)):
        try:
            make(data_name, link)
            return link
        except OSError:
            continue
    return None


def _start(annotation: Any) -> float:
    """An annotation's core:sample_start to sort by (-1 for an entry without a number there,
    NaN and infinities included: the user's, kept in place ahead of the rest)."""
    start = annotation.get("core:sample_start") if isinstance(annotation, dict) else None
    if isinstance(start, float) and not math.isfinite(start):
        return -1   # NaN (Python's json reads it) compares false both ways, which left sorted()'s order arbitrary
    return start if isinstance(start, (int, float)) and not isinstance(start, bool) else -1


def _version() -> str:
    from rfclassify import __version__

    return __version__
