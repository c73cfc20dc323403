"""`rfclassify classify FILE…`: classify the bursts of SigMF, HDF5, WAV IQ, NumPy or raw recordings.

Prints a table (one row a burst) and, when the files carry labels, the accuracy; with
--json, one JSON object per line instead (the result fields of the daemon's records plus
file, burst, start_sample and truth), and the summary goes to stderr. With --annotate, each
recording's results are also written as SigMF annotations beside it
(rfclassify.engine.sigmf_annotations).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from rfclassify._argtypes import count
from rfclassify.commands._reading import add_reading_arguments, reading_from_args
from rfclassify.engine.options import add_model_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="SigMF recording (NAME, NAME.sigmf-meta or NAME.sigmf-data), SigMF archive (NAME.sigmf), "
                             "HDF5 dataset, WAV IQ recording, NumPy .npy array, or (with --raw) raw samples")
    add_model_arguments(parser)
    parser.add_argument("--json", action="store_true", help="JSON lines on stdout instead of a table")
    parser.add_argument("--top", type=count(), default=3, metavar="K", help="top-K labels per burst (default 3)")
    parser.add_argument("--limit", type=count(), default=None, metavar="N", help="at most N bursts per file")
    parser.add_argument("--quiet", action="store_true", help="no per-burst rows, only the summary")
    add_reading_arguments(parser)
    parser.add_argument("--annotate", action="store_true",
                        help="write each recording's classifications as SigMF annotations to "
                             "NAME.rfclassify.sigmf-meta beside its data (SigMF, WAV and raw recordings; "
                             "the recording itself is not changed)")


def run(args: argparse.Namespace) -> int:
    from rfclassify.engine import sigmf_annotations
    from rfclassify.engine.classifier import Classifier
    from rfclassify.engine.file_bursts import unread
    from rfclassify.engine.files import iter_file_bursts
    from rfclassify.engine.repeated_files import distinct_recordings

    # Open and check every file first (limit 0: no burst read), so a bad one fails before
    # minutes of work on the others. An energy cut that finds nothing in a recording, or cuts a
    # signal on throughout into fragments, says so on stderr (file_bursts.cut_notes: a
    # continuous QPSK recording was "0 classified", exit 0, and nothing said), as does a marked
    # burst classified in pieces (file_bursts.split_note).
    # A recording named twice (rec.sigmf-meta and rec.sigmf-data of a glob, a.h5 and ./a.h5)
    # is classified once, with a line on stderr (repeated_files): each naming was classified.
    reading = dataclasses.replace(reading_from_args(args), note=_note)
    distinct = distinct_recordings(args.files, reading)
    if distinct.repeats:
        _note(distinct.note())
    targets = {}
    files = distinct.files
    for path in distinct.files:
        next(iter_file_bursts(path, limit=0, reading=reading), None)
        if args.annotate:
            targets[path] = sigmf_annotations.annotation_target(path, reading)
    if targets:
        sigmf_annotations.check_distinct(targets)
        # two recordings given that annotate into one file (metadata --annotate wrote whose
        # annotations a person changed, beside the recording it was written of) are classified
        # and annotated once: each wrote its annotations into that file, the second over the first
        first: dict[Path, str] = {}
        files = []
        for path in distinct.files:
            where = targets[path].path.resolve()
            if where in first:
                print(f"{path}: the same recording as {first[where]}, annotated once", file=sys.stderr)
                continue
            first[where] = path
            files.append(path)
    with Classifier.load(args.model_dir, args.backend, args.precision, args.device,
                         top_k=args.top, threads=args.threads) as clf:
        tally = _Tally(tuple(clf.labels))
        header = (f"model {clf.model_id}: {clf.backend} {clf.precision} on {clf.device}")
        print(header, file=sys.stderr if args.json else sys.stdout)
        if not args.json and not args.quiet:
            print(_ROW.format("file", "burst", "start", "samples", "label", "conf", "snr_dB",
                              "bucket", "win", "truth"))
        who = sigmf_annotations.generator(clf.model_id) if targets else ""
        for path in files:
            target = targets.get(path)
            damaged = _Damaged(path)
            for chunk in iter_file_bursts(path, limit=args.limit, reading=reading):
                results = clf.classify([b.iq for b in chunk], sample_rate=chunk[0].sample_rate_hz)
                for burst, result in zip(chunk, results, strict=True):
                    if not result.ok and unread(burst) is not None:   # no samples: say how many it covers
                        result = dataclasses.replace(result, n_samples=burst.recording_samples)
                        damaged.add(result)
                    tally.add(burst, result)
                    if target is not None:
                        target.add(burst, result, who)
                    if args.json:
                        print(json.dumps(_record(burst, result, clf)))
                    elif not args.quiet:
                        print(_row(burst, result).rstrip())
            damaged.report()
            if target is not None:
                written = target.write()
                print(f"annotated {len(target.annotations)} bursts: {written}"
                      + (f" (and {target.link.name}, a link to the data)" if target.link else ""),
                      file=sys.stderr if args.json else sys.stdout)
    print(tally.summary(), file=sys.stderr if args.json else sys.stdout)
    return 0


_ROW = "{:<24} {:>5} {:>9} {:>8} {:<10} {:>6} {:>7} {:>6} {:>3}  {}"


def _note(line: str) -> None:
    print(line, file=sys.stderr)


def _row(burst: Any, r: Any) -> str:
    name = burst.source.rsplit("/", 1)[-1] + ("" if burst.channel is None else f" ch{burst.channel}")
    name = name[-24:]
    truth = burst.truth_label or ""
    if not r.ok:
        return _ROW.format(name, burst.index, burst.start_sample, r.n_samples,
                           f"[{r.reject_reason}]", "", "", "", "", truth)
    return _ROW.format(name, burst.index, burst.start_sample, r.n_samples, r.label,
                       f"{r.confidence:.3f}", f"{r.snr_db:.1f}", r.bucket, r.windows, truth)


def _record(burst: Any, r: Any, clf: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"file": burst.source, "burst": burst.index, "start_sample": burst.start_sample,
                           "ok": r.ok, **r.to_dict()}
    if burst.channel is not None:
        rec["channel"] = burst.channel
    if r.ok:
        rec.update(backend=clf.backend, precision=clf.precision, model=clf.model_id)
    if burst.sample_rate_hz is not None:
        rec["sample_rate"] = burst.sample_rate_hz
    if burst.band_hz is not None:
        rec["band_hz"] = list(burst.band_hz)
    if burst.truth_label is not None or burst.truth_snr_db is not None:
        rec["truth"] = {"label": burst.truth_label, "snr_db": burst.truth_snr_db}
    return rec


class _Damaged:
    """The bursts of one file its reader could not read (a damaged chunk of an HDF5 dataset, a
    length past what is read), for one line on stderr naming the file: with --quiet the summary
    counted them (unreadable N) but named neither file nor burst."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.counts: Counter[str] = Counter()
        self.first = ""

    def add(self, r: Any) -> None:
        """The reject of a burst its reader gave no samples for (file_bursts.unread)."""
        from rfclassify.data.reader import TOO_LONG, UNREADABLE

        if r.reject_reason in (UNREADABLE, TOO_LONG):
            self.counts[r.reject_reason] += 1
            self.first = self.first or r.reject_detail

    def report(self) -> None:
        if self.counts:
            n, reasons = sum(self.counts.values()), ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
            print(f"{self.path}: {n} burst(s) could not be read, counted rejected ({reasons}); the first: "
                  f"{self.first}", file=sys.stderr)


class _Tally:
    """Counts for the summary line: classified, rejected by reason, accuracy where truth exists."""

    def __init__(self, labels: tuple[str, ...]) -> None:
        self.labels = frozenset(labels)
        self.classified = 0
        self.rejected: Counter[str] = Counter()
        self.not_scored: Counter[str] = Counter()   # truths the model does not classify (a SigMF "wifi")
        self.with_truth = 0
        self.correct = 0
        self.best_guess_correct = 0
        self.unknown = 0

    def add(self, burst: Any, r: Any) -> None:
        if not r.ok:
            self.rejected[r.reject_reason] += 1
            return
        self.classified += 1
        if burst.truth_label is not None and burst.truth_label not in self.labels:
            self.not_scored[burst.truth_label] += 1     # counted wrong before: no answer could be right
        elif burst.truth_label is not None:
            self.with_truth += 1
            self.correct += int(r.label == burst.truth_label)
            self.best_guess_correct += int(r.best_guess == burst.truth_label)
            self.unknown += int(r.best_guess != r.label)

    def summary(self) -> str:
        parts = [f"{self.classified} classified"]
        if self.rejected:
            reasons = ", ".join(f"{k} {v}" for k, v in sorted(self.rejected.items()))
            parts.append(f"{sum(self.rejected.values())} rejected ({reasons})")
        if self.with_truth:
            acc = 100.0 * self.correct / self.with_truth
            best = 100.0 * self.best_guess_correct / self.with_truth
            parts.append(f"accuracy {acc:.1f}% on {self.with_truth} labelled bursts "
                         f"({self.unknown} reported unknown, counted wrong; "
                         f"best guess right {best:.1f}%)")
        if self.not_scored:
            names = sorted(self.not_scored)
            parts.append(f"{sum(self.not_scored.values())} not scored (labelled {', '.join(names[:6])}"
                         f"{', ...' if len(names) > 6 else ''}: not a label this model classifies)")
        return "; ".join(parts)
