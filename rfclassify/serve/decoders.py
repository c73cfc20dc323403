"""The ingest interface the daemon calls: one decoder per input format, bytes in, bursts out.

    decoder = make_decoder("native" | "gr-stream" | "gr-pdu", IngestConfig(...))
    decoder.decode(frames, received_s)   -> list[Burst | Reject]   one ZeroMQ multipart message
    decoder.poll_timeout(now_s)          -> list[Burst | Reject]   call when no message came for a while
    decoder.flush(received_s)            -> list[Burst | Reject]   end of stream: close what is open
    decoder.stats()                      -> dict[str, float]       counters that are not rejects (and levels)

Decoders never raise for bad input: a bad message becomes a `Reject` with a short reason
code (listed in REASONS and docs/ingest.md) and the decoder keeps working for the next one.
A decoder is not thread-safe; the thread that owns the input socket owns its decoder.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rfclassify._exceptions import ConfigError
from rfclassify.serve.bursts import Burst, Reject
from rfclassify.serve.config import CUT_MODES, DC_BLOCK_SAMPLES, INPUT_FORMATS, CutterConfig, MiB

# Every reason code a decoder can put in a Reject (windows.py adds too_short, non_finite,
# zero_power and bad_shape later in the pipeline).
REASONS: dict[str, str] = {
    "bad_frames": "wrong number of frames in the multipart message",
    "too_large": "message, header or burst larger than the configured limit",
    "bad_json": "native header is not UTF-8 JSON",
    "bad_header": "native header is not an object, or a field has the wrong type or value",
    "unknown_dtype": "native header names a sample type we do not decode",
    "bad_payload_size": "payload length is not a whole number of samples",
    "empty_payload": "no samples in the message",
    "bad_pmt": "GNU Radio PMT bytes could not be parsed",
    "bad_pdu": "PMT parsed, but is not pair(dict, complex vector)",
    "bad_tag_header": "gr-zeromq tag header (pass_tags) is corrupt or too large, or missing where "
                      "the stream has them or the cut needs them",
    "bad_tag": "a stream tag is unusable: a length tag's value (tags mode), a start/end tag's "
               "value (start_end mode with one key), an rx_rate or rx_freq value, a tag past "
               "max_burst_samples beyond its message, or a length/start/end tag for samples "
               "already gone or past the waiting limit",
    "stream_gap": "gr-zeromq stream skipped samples (publisher dropped data); open burst lost",
}


@dataclass(frozen=True, kw_only=True)
class IngestConfig:
    """How ingest decodes and cuts input; validated when made.

    max_message_bytes  total bytes of one multipart message; larger -> Reject too_large
                       (checked on frame lengths, before anything is copied).
    sample_rate_hz     rate of GNU Radio streams/PDUs that carry none; None = unknown. A PDU's
                       `sample_rate` or `rx_rate`, a stream's `rx_rate` tag, wins; native
                       headers carry their own.
    stream             stream (sensor) name put on bursts that carry none.
    center_freq_hz     centre frequency put on GNU Radio bursts that carry none (a PDU's
                       `center_freq` / `freq` / `rx_freq`, a stream's `rx_freq` tag).
    expect_key         gr-stream: True = every message is [key, data]; False = [data];
                       None = decide per message by frame count.
    pass_tags          gr-stream: True = every data frame starts with a tag header;
                       False = never; None = the first clean frame decides (a whole tag header
                       and items, or whole items without the magic), for the decoder's life (True
                       with cut_mode "tags" / "start_end", which need the tags; False is refused there).
    cut_mode           gr-stream: "energy" (energy detector), "tags" (cut at `tag_key`
                       tags, whose value is the burst length in samples) or "start_end"
                       (a burst from a `start_tag` tag to an `end_tag` tag).
    tag_key            the length tag's key (GNU Radio's tagged-stream default is packet_len).
    start_tag, end_tag the start and end tags' keys (GNU Radio's power squelch writes
                       squelch_sob / squelch_eob; burst_tagger one key, burst, valued #t / #f).
    idle_flush_s       poll_timeout closes an open burst after this long without input.
    dc_block_samples   gr-stream: time constant of the stream's DC blocker (rfclassify.dsp.dc_block),
                       applied before cutting; 0 = off.
    vlen               gr-stream: gr_complex samples per item (the sink's vlen; 1 for a plain stream).
    cutter             energy detector and burst length limits (burst_cutter.CutterConfig).
    """

    max_message_bytes: int = 64 * MiB
    sample_rate_hz: float | None = None
    stream: str | None = None
    center_freq_hz: float | None = None
    expect_key: bool | None = None
    pass_tags: bool | None = None
    cut_mode: str = "energy"
    tag_key: str = "packet_len"
    start_tag: str = "squelch_sob"
    end_tag: str = "squelch_eob"
    idle_flush_s: float = 0.5
    dc_block_samples: int = DC_BLOCK_SAMPLES
    vlen: int = 1
    cutter: CutterConfig = field(default_factory=CutterConfig)

    def __post_init__(self) -> None:
        if int(self.max_message_bytes) < 64:
            raise ConfigError(f"max_message_bytes must be >= 64, got {self.max_message_bytes}")
        if self.sample_rate_hz is not None and not (
                math.isfinite(self.sample_rate_hz) and self.sample_rate_hz > 0):
            raise ConfigError(f"sample_rate_hz must be a positive number, got {self.sample_rate_hz}")
        if self.center_freq_hz is not None and not math.isfinite(self.center_freq_hz):
            raise ConfigError(f"center_freq_hz must be a finite number, got {self.center_freq_hz}")
        if self.cut_mode not in CUT_MODES:
            raise ConfigError(f"cut_mode must be one of {', '.join(CUT_MODES)}, got {self.cut_mode!r}")
        if self.cut_mode != "energy" and self.pass_tags is False:   # the cut would never see a tag
            raise ConfigError(f"cut_mode {self.cut_mode} cuts at the stream's tags: pass_tags must be "
                              "True or None (auto), not False")
        # each key only where its mode reads it, as the daemon's config checks them ("" elsewhere is unused)
        if self.cut_mode == "tags" and not self.tag_key:
            raise ConfigError("tag_key must not be empty with cut_mode tags")
        if self.cut_mode == "start_end" and not (self.start_tag and self.end_tag):
            raise ConfigError("start_tag and end_tag must not be empty with cut_mode start_end")
        if not self.idle_flush_s > 0:
            raise ConfigError(f"idle_flush_s must be > 0, got {self.idle_flush_s}")
        if not 1 <= int(self.vlen) <= 1 << 20:
            raise ConfigError(f"vlen must be in 1..{1 << 20}, got {self.vlen}")
        if int(self.dc_block_samples) < 0:
            raise ConfigError(f"dc_block_samples must be >= 0 (0 = off), got {self.dc_block_samples}")


class Decoder(ABC):
    """Turns ZeroMQ multipart messages of one input format into bursts and rejects."""

    input_format: str = ""

    def __init__(self, config: IngestConfig) -> None:
        self.config = config
        self._counters: dict[str, int] = {}

    @abstractmethod
    def decode(self, frames: Sequence[Any], received_s: float) -> list[Burst | Reject]:
        """Decode one multipart message (frames: bytes, memoryview or zmq.Frame)."""

    def poll_timeout(self, now_s: float) -> list[Burst | Reject]:
        """Called when the socket has been quiet; stream decoders close an open burst here."""
        return []

    def flush(self, received_s: float) -> list[Burst | Reject]:
        """End of input: emit whatever is still buffered."""
        return []

    def stats(self) -> dict[str, float]:
        """Counters that are not rejects (e.g. short energy blips the cutter discarded), and levels
        a decoder measures (gr-stream: the receiver's DC offset)."""
        return dict(self._counters)

    def _count(self, name: str, n: int = 1) -> None:
        self._counters[name] = self._counters.get(name, 0) + n


def frame_view(frame: Any) -> memoryview:
    """A flat byte view of a frame without copying (bytes, bytearray, memoryview, zmq.Frame)."""
    view = memoryview(frame)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return view


def frames_too_large(frames: Sequence[Any], limit: int) -> Reject | None:
    """Reject('too_large') when the frames together exceed limit bytes (lengths only, no copy)."""
    total = sum(frame_view(f).nbytes for f in frames)
    if total > limit:
        return Reject("too_large", f"message of {total} bytes exceeds max_message_bytes={limit}")
    return None


def make_decoder(input_format: str, config: IngestConfig | None = None) -> Decoder:
    """The decoder for input_format ('native', 'gr-stream' or 'gr-pdu')."""
    config = config or IngestConfig()
    if input_format == "native":
        from rfclassify.serve.native import NativeDecoder

        return NativeDecoder(config)
    if input_format == "gr-stream":
        from rfclassify.serve.gr_stream import GrStreamDecoder

        return GrStreamDecoder(config)
    if input_format == "gr-pdu":
        from rfclassify.serve.gr_pdu import GrPduDecoder

        return GrPduDecoder(config)
    raise ConfigError(f"unknown input format {input_format!r}; choose one of {', '.join(INPUT_FORMATS)}")
