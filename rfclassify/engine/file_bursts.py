"""The burst a file reader returns (FileBurst), how the readers are asked to read (Reading), and
how a recording that marks no bursts is cut into them: as the daemon's gr-stream input cuts a
stream (its DC blocker, then its energy detector), or taken whole, in pieces of at most
longest_whole() samples where it is longer (memory stays bounded whatever the file's length).

A burst a reader finds but cannot give samples for (a damaged HDF5 chunk, a length past what
is read, a stretch of NaN samples no cut burst holds) has UnreadSamples as its iq: the
classifier makes it a reject of that reason, and the bursts around it are read as ever."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from rfclassify._exceptions import InputError, MessageError
from rfclassify.serve.config import DC_BLOCK_SAMPLES, CutterConfig

CUTS = ("auto", "energy", "whole")


@dataclass(frozen=True)
class UnreadSamples:
    """The samples of a burst a reader found but cannot give: none. Made an array, as
    Classifier.classify makes each burst one, it raises MessageError(reason, detail), so the
    burst is that reject, counted and reported as any other (before, a damaged chunk or a
    length of 2**33 samples in an HDF5 dataset ended the whole run with h5py's or numpy's text,
    naming neither file nor burst); unread() tells such a burst. The one such value of every
    reader, DatasetReader.read_or_reject's too (its own twin, reader.Unreadable, until the
    seventy-first session)."""

    reason: str   # a reject code: unreadable, too_long (rfclassify.data.reader), non_finite, bad_annotation
    detail: str   # which burst, and why, for a person
    size: ClassVar[int] = 0

    def __len__(self) -> int:
        return 0

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        raise MessageError(self.reason, self.detail)


@dataclass(frozen=True)
class FileBurst:
    """One burst read from a file, with where it came from and its truth when the file has it."""

    iq: np.ndarray                       # 1-D complex (or real for real SigMF types), or UnreadSamples
    source: str                          # the file
    index: int                           # burst number within the file
    start_sample: int                    # offset in the recording / dataset
    sample_rate_hz: float | None = None
    truth_label: str | None = None
    truth_snr_db: float | None = None
    band_hz: tuple[float, float] | None = None   # the annotated band the samples were cut to (SigMF)
    channel: int | None = None                   # which of a multi-channel recording's channels
    span: int | None = None                      # recording samples it covers, iq decimated (band cut)
    capture_hz: float | None = None              # its SigMF capture's core:frequency, where given

    @property
    def recording_samples(self) -> int:
        """How many of the recording's samples the burst covers, from start_sample."""
        return len(self.iq) if self.span is None else self.span


def unread(burst: FileBurst) -> UnreadSamples | None:
    """The UnreadSamples of a burst its reader could not give samples for; None for one with samples."""
    return burst.iq if isinstance(burst.iq, UnreadSamples) else None


@dataclass(frozen=True)
class Reading:
    """How recordings are read into bursts (what `rfclassify classify`'s options say).

    cut: how a recording without annotations is cut (CUTS: "energy" finds its bursts with the
    daemon's energy detector, set by cutter; "whole" takes it whole: one burst, or consecutive
    pieces of at most longest_whole() samples (whole_bursts); "auto" cuts raw and WAV
    recordings by energy and takes a SigMF recording whole). full_band: SigMF annotations that
    give their band are not cut to it. raw: the SigMF datatype of a file that is no known
    format; sample_rate_hz: its rate. note: where given, told a line for a person on how a
    recording was read: an energy cut that looks wrong for it (cut_notes), a burst it marks
    (an annotation, a NumPy row) classified in pieces (split_note)."""

    cut: str = "auto"
    full_band: bool = False
    raw: str | None = None
    sample_rate_hz: float | None = None
    cutter: CutterConfig = field(default_factory=CutterConfig)
    note: Callable[[str], None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.cut not in CUTS:
            raise InputError(f"cut must be one of {', '.join(CUTS)}, got {self.cut!r}")


READ_SAMPLES = 1 << 20   # samples read and cut at a time


def longest_whole() -> int:
    """The longest burst a file reader gives to be classified whole: the HDF5 reader's
    MAX_READ_SAMPLES, the daemon's default max_burst_samples (2**20). Classifier.classify holds
    several times a burst's size while it normalizes it (a 256 MB recording taken as one burst
    peaked at 2.4 GiB), and one label for millions of samples says little. Read when asked:
    rfclassify.data.reader imports this module."""
    from rfclassify.data import reader

    return reader.MAX_READ_SAMPLES


def pieces(first: int, n: int) -> list[tuple[int, int]]:
    """(start, count) of the pieces samples first..first+n are classified in: all of them as one
    where they are at most longest_whole(), else consecutive pieces of near-equal length of at
    most that many (no short tail left to be rejected too_short)."""
    k = max(1, -(-n // longest_whole()))
    return [(first + n * i // k, n * (i + 1) // k - n * i // k) for i in range(k)]


def whole_bursts(read: Callable[[int, int, int | None], np.ndarray], first: int, n: int, source: str,
                 rate_hz: float | None, channels: Sequence[int | None] = (None,)) -> Iterator[FileBurst]:
    """Samples first..first+n (read(start, count, channel) gives them) taken whole: one burst of
    each channel, or, past longest_whole() samples, each of their pieces() a burst of each
    channel, numbered 0, 1, ... with its own start_sample; read one at a time as they are asked
    for. Before the seventy-first session any length was one burst (a 512 MB recording, 4.8 GB
    of memory and one label for three bursts)."""
    for i, (start, count) in enumerate(pieces(first, n)):
        for c in channels:
            yield FileBurst(read(start, count, c), source, i, start, rate_hz, channel=c)


def split_note(source: str, what: str, count: int) -> str:
    """The line for reading.note when a marked burst (an annotation, a row) is longer than
    longest_whole(): it is classified in pieces, each a result of its own."""
    cap = longest_whole()
    return (f"{source}: {what} spans {count:,} samples, more than the longest burst classified whole ({cap:,}), "
            f"so is classified in {len(pieces(0, count))} consecutive pieces, each a result of its own")


def cut_notes(bursts: Iterator[FileBurst], n: int, source: str, reading: Reading) -> Iterator[FileBurst]:
    """The bursts an energy cut found in a recording of n samples (of all its channels), then,
    once all are given, a line to reading.note where the cut looks wrong for it: it found no
    burst (a signal on throughout is the noise floor it is measured against: a continuous QPSK
    recording was "0 classified" and nothing said), or more bursts than --cut whole gives
    pieces that cover more than half of it (a continuous FM recording: 736 fragments, 78 %)."""
    count = covered = 0
    for burst in bursts:
        count += 1
        covered += burst.recording_samples
        yield burst
    if reading.note is None or n == 0:
        return
    cap = longest_whole()
    advice = (f"if it holds one signal on throughout, --cut whole classifies the recording in pieces of "
              f"at most {cap:,} samples")
    if count == 0:
        reading.note(f"{source}: the energy cut found no burst in its {n:,} samples (it finds them above the "
                     f"floor of the recording's quietest {reading.cutter.floor_percentile:g} %, which a signal on "
                     f"throughout sets itself); {advice}")
    elif 2 * covered > n and count > -(-n // cap):
        reading.note(f"{source}: the energy cut found {count:,} bursts covering {100 * covered / n:.0f} % of "
                     f"its {n:,} samples; {advice}")


def energy_bursts(read: Callable[[int, int], np.ndarray], first: int, n: int, source: str,
                  rate_hz: float | None, cutter: CutterConfig, channel: int | None = None) -> Iterator[FileBurst]:
    """The bursts the daemon's gr-stream input would find in samples first..first+n (read(start,
    count) gives them): its DC blocker, then its energy detector set by cutter
    (rfclassify.serve.burst_cutter).

    NaN and infinite samples always end up in a burst that is rejected non_finite: the detector
    measures each as an infinity (a block with a NaN was never "on", so a stretch of NaN in the
    noise vanished, where one of infinities was a burst and a reject), and a stretch that no
    burst holds (one too short for min_burst_samples, or in a recording so full of them that
    the noise floor is infinite: an all-NaN file gave "0 classified" and counted nothing) is a
    burst of its own, with UnreadSamples, stretches closer than hangover_samples one burst."""
    from rfclassify.dsp.dc_block import DcBlocker
    from rfclassify.serve.burst_cutter import EnergyCutter

    detector, dc = EnergyCutter(cutter, start_offset=first), DcBlocker(DC_BLOCK_SAMPLES)
    stray = _NonFinite(cutter.hangover_samples)
    index, end = 0, first + n

    def alone(stretches: list[tuple[int, int]]) -> Iterator[FileBurst]:
        nonlocal index
        for a, b in stretches:
            why = UnreadSamples("non_finite", f"samples {a}..{b - 1} hold NaN or infinite values")
            yield FileBurst(why, source, index, a, rate_hz, channel=channel, span=b - a)
            index += 1

    for pos in range(first, end + 1, READ_SAMPLES):
        last = pos + READ_SAMPLES > end
        x = read(pos, min(READ_SAMPLES, end - pos)).astype(np.complex64, copy=False)
        bad = ~np.isfinite(x)
        if bad.any():
            stray.add(pos, bad)
            x = np.where(bad, np.complex64(np.inf), x)
        segments = detector.feed(dc.process(x)) + (detector.flush() if last else [])
        for seg in segments:
            yield from alone(stray.outside(seg.start_sample, seg.start_sample + len(seg.iq)))
            yield FileBurst(seg.iq, source, index, seg.start_sample, rate_hz, channel=channel)
            index += 1
    yield from alone(stray.outside(end, end))


class _NonFinite:
    """The stretches [start, stop) of a recording's NaN or infinite samples not yet in a burst,
    in order; stretches at most `join` samples apart are one (a NaN every few samples is one
    reject, not thousands)."""

    def __init__(self, join: int) -> None:
        self.join = join
        self.stretches: list[tuple[int, int]] = []

    def add(self, pos: int, bad: np.ndarray) -> None:
        """The non-finite samples of the samples from pos (bad: a mask of them)."""
        edges = np.flatnonzero(np.diff(np.concatenate(([False], bad, [False])).astype(np.int8)))
        for a, b in zip(edges[0::2].tolist(), edges[1::2].tolist()):
            if self.stretches and pos + a - self.stretches[-1][1] <= self.join:
                self.stretches[-1] = (self.stretches[-1][0], pos + b)
            else:
                self.stretches.append((pos + a, pos + b))

    def outside(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The stretches, or their parts, before start that no burst holds, given that the cut's
        next burst is [start, stop) (its bursts come in order): those go, and so do the parts the
        burst holds; what lies past stop stays."""
        out = []
        while self.stretches and self.stretches[0][0] < max(stop, start + 1):
            a, b = self.stretches.pop(0)
            if a < start:
                out.append((a, min(b, start)))
            if b > stop:
                self.stretches.insert(0, (max(a, stop), b))
                break
        return out


def unmarked_bursts(read: Callable[[int, int], np.ndarray], n: int, source: str, rate_hz: float | None,
                    reading: Reading, chunk: int, limit: int | None) -> Iterator[list[FileBurst]]:
    """Chunks of the bursts of a recording of n samples that marks none (raw, WAV, a NumPy
    recording): whole_bursts when reading.cut is "whole", else what energy_bursts finds
    (cut_notes telling reading.note where that looks wrong); at most limit (0: none)."""
    if reading.cut == "whole":
        bursts = whole_bursts(lambda start, count, _: read(start, count), 0, n, source, rate_hz)
    else:
        bursts = cut_notes(energy_bursts(read, 0, n, source, rate_hz, reading.cutter), n, source, reading)
    yield from chunked(bursts, chunk, limit)


def chunked(bursts: Iterator[FileBurst], chunk: int, limit: int | None) -> Iterator[list[FileBurst]]:
    """Lists of at most chunk bursts and, unless a list is one burst, longest_whole() samples
    (Classifier.classify normalizes a list's bursts together: 4096 bursts of a million samples
    were 32 GiB), at most limit in all; the bursts are read as the lists are asked for."""
    if limit == 0:
        return
    cap, found, held = longest_whole(), [], 0
    for burst in bursts:
        if found and held + len(burst.iq) > cap:
            yield found
            found, held = [], 0
        found.append(burst)
        held += len(burst.iq)
        limit = None if limit is None else limit - 1
        if len(found) == chunk or limit == 0:
            yield found
            found, held = [], 0
            if limit == 0:
                return
    if found:
        yield found
