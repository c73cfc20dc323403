"""Labelled bursts of recordings into an rfclassify HDF5 dataset (`rfclassify dataset import`),
so that field data is trained on (`train --data`, with `--init-from` a shipped model) and
evaluated (`evaluate`) as the synthetic sets are.

A burst is imported when its file gives it a truth label the model classifies: a SigMF
annotation's ``core:label`` (written by a person or a labelling tool: the annotations
rfclassify writes are results, which the reader skips), or an rfclassify dataset's label. A
WAV, raw or NumPy file labels nothing and is refused before any file is read (UNLABELLED): one
label for every burst an energy cut finds would be a guess (it finds every emitter and blip
above the floor), where a SigMF annotation labels each burst one by one. The
bursts are read as `rfclassify classify` reads them (rfclassify.engine.files, a Reading: an
annotated band is cut out, WAV and raw files are cut by energy, ...). Its SNR is the file's
truth where it has one (an rfclassify dataset), else unknown (NaN: no SNR loss in training,
outside every SNR bin in evaluation). A burst its reader gives no samples for (a SigMF
annotation that cannot be read: outside the samples, a start or count that is not a whole
number, a band that cannot be used; an HDF5 burst in a damaged chunk or past the longest read;
a stretch of NaN samples an energy cut found) is skipped and named in the report by its
reason, the file's other bursts imported; a burst shorter than the schema's
MIN_BURST_SAMPLES is skipped; one longer than MAX_BURST_SAMPLES is split into near-equal
consecutive pieces, each an example (a burst keeps its modulation throughout). The
synthesizer's parameters are unknown (NaN / -1) for every example; extra["sources"] lists the
files read.
"""

from __future__ import annotations

import os
import shlex
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from rfclassify._exceptions import InputError
from rfclassify.data import schema
from rfclassify.engine.file_bursts import Reading, unread
from rfclassify.engine.sigmf import BAD_ANNOTATION
from rfclassify.labels import LABELS, label_index

CHANNEL = {"recorded": {"description": "as recorded: the channel of the air and the receiver"}}
#: the formats that carry no label, refused before anything is read (each burst of theirs was
#: read, cut and skipped as unlabelled before the seventy-first session)
UNLABELLED = {"wav": "a WAV IQ recording", "raw": "a raw recording", "npy": "a NumPy array"}
_LABEL_IT = ("; label its bursts in SigMF first: `rfclassify classify --annotate` writes NAME.rfclassify.sigmf-meta "
             "beside it, whose core:label you check and core:generator you take out (rfclassify's annotations are "
             "results, not truth), then import that")


@dataclass
class ImportReport:
    """What `import_recordings` wrote, and what it left out and why."""

    path: Path
    files: list[str] = field(default_factory=list)          # the files read: one a recording (repeated_files)
    n_examples: int = 0
    per_label: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)   # why -> bursts
    split: int = 0                                          # bursts split into pieces
    not_read: dict[str, list[str]] = field(default_factory=dict)   # reject reason -> "FILE: detail" of each
    elapsed_s: float = 0.0


def import_recordings(files: list[str], out: str | os.PathLike[str], reading: Reading = Reading(),
                      force: bool = False, command_line: str = "",
                      note: Callable[[str], None] | None = None) -> ImportReport:
    """Writes the labelled bursts of `files` to the dataset `out` (the module docstring says
    which and how); every file is checked before the first burst is read. A recording named
    more than once (rec.sigmf-meta and rec.sigmf-data, a.h5 and ./a.h5: engine.repeated_files)
    is read once, and note, where given, told the line naming the files left out."""
    from rfclassify.data.generate import check_output
    from rfclassify.data.gnuradio_source import params_by_name
    from rfclassify.engine.files import iter_file_bursts, recording_format
    from rfclassify.engine.repeated_files import distinct_recordings

    distinct = distinct_recordings(files, reading)   # each naming was imported: its bursts twice in the set
    if distinct.repeats and note is not None:
        note(distinct.note())
    files = distinct.files
    for name in files:   # before any is read: a WAV of gigabytes was read and cut for "no burst to import"
        kind, p = recording_format(name, reading)
        if kind in UNLABELLED:
            raise InputError(f"{p}: {UNLABELLED[kind]} labels no burst, and import takes only labelled ones (a "
                             "SigMF annotation's core:label, an rfclassify dataset's label)"
                             + ("" if kind == "npy" else _LABEL_IT))
    path = check_output(out, force)
    for name in files:
        next(iter_file_bursts(name, limit=0, reading=reading), None)
    start = time.perf_counter()
    report = ImportReport(path, files)

    def attrs(classes: tuple[str, ...]) -> schema.DatasetAttrs:
        return schema.DatasetAttrs(
            source="import", seed=None, generator="rfclassify dataset import", classes=classes, snr_grid_db=(),
            channel=CHANNEL, lengths={"rule": "as recorded", "split_above_samples": schema.MAX_BURST_SAMPLES},
            command_line=command_line or shlex.join(["rfclassify", "dataset", "import", *files]),
            created_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            extra={"sources": [str(Path(f)) for f in files]})

    from rfclassify.dsp.synth import PARAM_DTYPE

    from rfclassify._signals import DeferredInterrupt

    # a signal is taken between chunks: raised inside h5py it could be swallowed (a weakref
    # callback) and the import went on to write its file, SIGTERM and all
    with DeferredInterrupt() as interrupt, schema.DatasetWriter(path, attrs(()), PARAM_DTYPE) as writer:
        for name in files:
            for chunk in iter_file_bursts(name, reading=reading):
                interrupt.check()
                iq, labels, snr = [], [], []
                for burst in chunk:
                    bad = unread(burst)   # a SigMF annotation or HDF5 burst that cannot be read
                    if bad is not None:
                        report.not_read.setdefault(bad.reason, []).append(f"{burst.source}: {bad.detail}")
                        continue
                    why = _skip_reason(burst.truth_label, burst.iq)
                    if why:
                        report.skipped[why] += 1
                        continue
                    pieces = -(-burst.iq.size // schema.MAX_BURST_SAMPLES)
                    report.split += pieces > 1
                    for piece in np.array_split(burst.iq, pieces):
                        iq.append(piece)
                        labels.append(label_index(burst.truth_label))
                        snr.append(np.nan if burst.truth_snr_db is None else burst.truth_snr_db)
                        report.per_label[burst.truth_label] += 1
                writer.append(iq, np.array(labels, np.int16), np.array(snr, np.float32),
                              params_by_name({}, len(iq)))
        for reason, details in report.not_read.items():
            report.skipped[_unread_text(reason, details)] = len(details)
        report.n_examples = writer.n_examples
        if not report.n_examples:   # leaving the block removes the partial file
            raise InputError(f"no burst to import: {skipped_text(report.skipped) or 'the files hold none'}")
        interrupt.check()
        writer.commit(attrs(tuple(name for name in LABELS if name in report.per_label)))
    report.elapsed_s = time.perf_counter() - start
    return report


def _unread_text(reason: str, details: list[str], shown: int = 3) -> str:
    """The skipped-bursts entry of the bursts whose reader gave no samples for one reason (a
    UnreadSamples' reason: the reject classify gives them), naming the first few: 'an
    annotation that cannot be read (rec.sigmf-meta: annotation 4 (2658+100) lies outside ...;
    and 2 more)'."""
    what = f"samples that cannot be read ({reason})"
    if reason == BAD_ANNOTATION:
        what = "an annotation that cannot be read"
    more = f"; and {len(details) - shown} more" if len(details) > shown else ""
    return f"{what} ({'; '.join(details[:shown])}{more})"


def _skip_reason(truth: str | None, iq: np.ndarray) -> str:
    """Why a burst is not imported ('' when it is): classify rejects a burst with a NaN or an
    infinity (non_finite), and training or evaluating on one gives NaN (imported before the
    sixty-sixth session)."""
    if truth not in LABELS:
        return "no label the model classifies"
    if iq.size < schema.MIN_BURST_SAMPLES:
        return f"shorter than {schema.MIN_BURST_SAMPLES} samples"
    if not np.all(np.isfinite(iq)):
        return "non-finite samples (NaN or infinity)"
    return ""


def skipped_text(skipped: Counter[str]) -> str:
    """'12 with no label the model classifies, 1 shorter than 64 samples'."""
    return ", ".join(f"{n} {why if why.startswith('shorter') else 'with ' + why}" for why, n in skipped.most_common())
