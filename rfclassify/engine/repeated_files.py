"""Which of the files given to `rfclassify classify` and `dataset import` name a recording
already given, so that each recording is read once (distinct_recordings).

A shell glob names a SigMF recording twice (``captures/*``: NAME.sigmf-data and
NAME.sigmf-meta), and each naming was read: every burst classified, or imported into a training
set, twice. The rule: arguments whose samples are the same file (the same st_dev and st_ino: a
path and ``./path``, a symbolic link, a hard link; a SigMF recording's data file, whichever of
NAME, NAME.sigmf-meta and NAME.sigmf-data names it) are one recording where the bursts one
marks are all among those another marks: its SigMF annotations (those rfclassify wrote left
out, as the reader skips them) a subset of the other's. A file read without metadata (a WAV or
raw recording, an HDF5 dataset, a NumPy array, an archive) marks none. Two different SigMF
metadata files are compared only where one is the metadata ``classify --annotate`` wrote of the
other (NAME.rfclassify.sigmf-meta beside NAME.sigmf-meta, our extension declared): two people's
labels of one data file stay two recordings, even where one's are all among the other's. Of
equal ones the kept is a recording before the metadata --annotate wrote of it, then SigMF
metadata before its data file read alone, then the first given. So:

* ``captures/*`` after ``classify --annotate captures/*`` names each recording again through
  NAME.rfclassify.sigmf-meta and its link NAME.rfclassify.sigmf-data: the recording is kept,
  whatever the order (a glob gives ours first: read in place of a WAV or raw recording, it is
  one whole burst where the energy cut gave several);
* that metadata, once a person has added labels to it (``dataset import``'s labelling of a WAV
  or raw recording), marks more than the recording: it is kept and the recording left out;
* a WAV or raw file and SigMF metadata given that describes it (core:dataset): the metadata.

A ``.sigmf`` archive and the pair extracted from it are not matched: only comparing every byte
of their data would show them the same.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rfclassify._exceptions import InputError
from rfclassify.engine.file_bursts import Reading

_FileId = tuple[int, int]   # st_dev, st_ino


@dataclass(frozen=True)
class Repeat:
    """A file argument left out (argument), the argument kept that names its recording (of), and
    how they are one (why)."""

    argument: str
    of: str
    why: str      # "the same recording as", "annotations --annotate wrote of", "the data of", ...


@dataclass(frozen=True)
class Distinct:
    """The file arguments to read (in the order given, one a recording) and those left out."""

    files: list[str]
    repeats: list[Repeat]

    def note(self, shown: int = 10) -> str:
        """One line naming the arguments left out ("" where none was): 'dropped 2 repeated file
        argument(s), each recording read once: rec.sigmf-meta (the same recording as
        rec.sigmf-data), ./a.h5 (the same recording as a.h5)'."""
        if not self.repeats:
            return ""
        named = [f"{r.argument} (again)" if r.argument == r.of else f"{r.argument} ({r.why} {r.of})"
                 for r in self.repeats[:shown]]
        more = f"; and {len(self.repeats) - shown} more" if len(self.repeats) > shown else ""
        return (f"dropped {len(self.repeats)} repeated file argument(s), each recording read once: "
                f"{', '.join(named)}{more}")


@dataclass
class _Recording:
    """What one argument names: its samples (the data file's identity; None where it cannot be
    read, for the reader's check to name), the SigMF metadata that marks its bursts (identity and
    contents; None for a file read without metadata)."""

    position: int
    argument: str
    samples: _FileId | None = None
    description: _FileId | None = None
    meta: dict[str, Any] | None = field(default=None, repr=False)
    annotated: bool = False      # metadata `classify --annotate` wrote
    original: _FileId | None = None   # annotated: the metadata it was written of (NAME.sigmf-meta beside it)

    @functools.cached_property
    def marks(self) -> frozenset[str]:
        """Its annotations but rfclassify's, as canonical JSON (--annotate writes a non-finite
        number as its name); read only where two arguments share samples."""
        return frozenset() if self.meta is None else _annotations(self.meta)

    def beats(self, other: _Recording) -> bool:
        """Whether other is a repeat of this (the module docstring's rule)."""
        if self is other or self.samples != other.samples:
            return False
        if None not in (self.description, other.description) and self.description != other.description \
                and other.description != self.original and self.description != other.original:
            return False   # two metadata files, neither written by --annotate of the other: two people's
        if not other.marks <= self.marks:
            return False
        return other.marks != self.marks or self._rank() < other._rank()

    def _rank(self) -> tuple[bool, bool, int]:
        return self.annotated, self.description is None, self.position


def distinct_recordings(files: list[str], reading: Reading = Reading()) -> Distinct:
    """The arguments of files that name distinct recordings, in their order, and the others as
    Repeats, each naming a kept argument (the module docstring says when two are one). Never
    raises: a file that cannot be read is kept, for the reader's check to name."""
    found = [_recording(i, arg, reading) for i, arg in enumerate(files)]
    by_samples: dict[_FileId, list[_Recording]] = {}
    for rec in found:
        if rec.samples is not None:
            by_samples.setdefault(rec.samples, []).append(rec)
    # beating is transitive: a recording beaten is beaten by one of those that are not
    unbeaten = {key: [r for r in group if not any(o.beats(r) for o in group)] for key, group in by_samples.items()}
    kept: list[str] = []
    repeats: list[Repeat] = []
    for rec in found:
        rivals = unbeaten[rec.samples] if rec.samples is not None else []
        of = next((o for o in rivals if o.beats(rec)), None)
        if of is None:
            kept.append(rec.argument)
        else:
            repeats.append(Repeat(rec.argument, of.argument, _why(rec, of)))
    return Distinct(kept, repeats)


def _why(rec: _Recording, of: _Recording) -> str:
    if rec.description == of.description and rec.marks == of.marks:
        return "the same recording as"
    if rec.description is None:
        return "the data of"
    if rec.annotated and rec.marks == of.marks:
        return "annotations --annotate wrote of"
    return "its bursts all marked in"


def _recording(position: int, argument: str, reading: Reading) -> _Recording:
    from rfclassify.engine.files import recording_format
    from rfclassify.engine.sigmf import recording_metadata
    from rfclassify.engine.sigmf_annotations import SUFFIX, written_by_annotate

    try:
        kind, p = recording_format(argument, reading)
        if kind != "sigmf":
            return _Recording(position, argument, _file_id(p))
        meta, meta_path, data_path = recording_metadata(p)
    except InputError:   # the reader's check says what is wrong, in its words
        return _Recording(position, argument)
    samples, description = _file_id(data_path), _file_id(meta_path)
    if samples is None or description is None:
        return _Recording(position, argument)
    if not (meta_path.name.endswith(SUFFIX) and written_by_annotate(meta)):
        return _Recording(position, argument, samples, description, meta)
    original = meta_path.with_name(meta_path.name[: -len(SUFFIX)] + ".sigmf-meta")
    return _Recording(position, argument, samples, description, meta, annotated=True, original=_file_id(original))


def _annotations(meta: dict[str, Any]) -> frozenset[str]:
    from rfclassify.engine.sigmf import written_by_rfclassify
    from rfclassify.serve.results import strict_json

    annotations = meta.get("annotations")
    if not isinstance(annotations, list):
        return frozenset()
    return frozenset(json.dumps(strict_json(a), sort_keys=True) for a in annotations
                     if not (isinstance(a, dict) and written_by_rfclassify(a)))


def _file_id(path: Path) -> _FileId | None:
    """The identity of the file at path (a link followed), None where it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino
