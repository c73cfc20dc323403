"""The burst a file reader returns (FileBurst), how the readers are asked to read (Reading), and
how a recording that marks no bursts is cut into them: as the daemon's gr-stream input cuts a
stream (its DC blocker, then its energy detector)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from rfclassify._exceptions import InputError
from rfclassify.serve.config import DC_BLOCK_SAMPLES, CutterConfig

CUTS = ("auto", "energy", "whole")


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
    band_hz: tuple[float, float] | None = None   # the annotated band the samples were cut to (SigMF)
    channel: int | None = None                   # which of a multi-channel recording's channels
    span: int | None = None                      # recording samples it covers, iq decimated (band cut)
    capture_hz: float | None = None              # its SigMF capture's core:frequency, where given

    @property
    def recording_samples(self) -> int:
        """How many of the recording's samples the burst covers, from start_sample."""
        return len(self.iq) if self.span is None else self.span


@dataclass(frozen=True)
class Reading:
    """How recordings are read into bursts (what `rfclassify classify`'s options say).

    cut: how a recording without annotations is cut (CUTS: "energy" finds its bursts with the
    daemon's energy detector, set by cutter; "whole" makes it one burst; "auto" cuts raw and WAV
    recordings by energy and takes a SigMF recording whole). full_band: SigMF annotations that
    give their band are not cut to it. raw: the SigMF datatype of a file that is no known
    format; sample_rate_hz: its rate."""

    cut: str = "auto"
    full_band: bool = False
    raw: str | None = None
    sample_rate_hz: float | None = None
    cutter: CutterConfig = field(default_factory=CutterConfig)

    def __post_init__(self) -> None:
        if self.cut not in CUTS:
            raise InputError(f"cut must be one of {', '.join(CUTS)}, got {self.cut!r}")


READ_SAMPLES = 1 << 20   # samples read and cut at a time


def energy_bursts(read: Callable[[int, int], np.ndarray], first: int, n: int, source: str,
                  rate_hz: float | None, cutter: CutterConfig, channel: int | None = None) -> Iterator[FileBurst]:
    """The bursts the daemon's gr-stream input would find in samples first..first+n (read(start,
    count) gives them): its DC blocker, then its energy detector set by cutter
    (rfclassify.serve.burst_cutter)."""
    from rfclassify.dsp.dc_block import DcBlocker
    from rfclassify.serve.burst_cutter import EnergyCutter

    detector, dc = EnergyCutter(cutter, start_offset=first), DcBlocker(DC_BLOCK_SAMPLES)
    index, end = 0, first + n
    for pos in range(first, end + 1, READ_SAMPLES):
        last = pos + READ_SAMPLES > end
        x = read(pos, min(READ_SAMPLES, end - pos)).astype(np.complex64, copy=False)
        segments = detector.feed(dc.process(x)) + (detector.flush() if last else [])
        for seg in segments:
            yield FileBurst(seg.iq, source, index, seg.start_sample, rate_hz, channel=channel)
            index += 1


def unmarked_bursts(read: Callable[[int, int], np.ndarray], n: int, source: str, rate_hz: float | None,
                    reading: Reading, chunk: int, limit: int | None) -> Iterator[list[FileBurst]]:
    """Chunks of the bursts of a recording of n samples that marks none (raw, WAV): the whole of
    it when reading.cut is "whole", else what energy_bursts finds; at most limit (0: none)."""
    if limit == 0:
        return
    if reading.cut == "whole":
        yield [FileBurst(read(0, n), source, 0, 0, rate_hz)]
        return
    yield from chunked(energy_bursts(read, 0, n, source, rate_hz, reading.cutter), chunk, limit)


def chunked(bursts: Iterator[FileBurst], chunk: int, limit: int | None) -> Iterator[list[FileBurst]]:
    """Lists of at most chunk bursts, at most limit in all."""
    while found := list(itertools.islice(bursts, chunk if limit is None else min(chunk, limit))):
        yield found
        if limit is not None:
            limit -= len(found)
            if limit == 0:
                return
