"""GNU Radio sample streams from zeromq.pub_sink / push_sink (gr_complex items), cut into bursts.

Each message is `[data]`, or `[key, data]` when the sink has a key. data is raw native-endian
complex64 items; with pass_tags=True it starts with a tag header (gr-zeromq tag_headers.cc,
native endian, packed):

    u16 magic 0x5FF0, u8 version 1, u64 offset (of the frame's first item), u64 ntags,
    ntags x (u64 offset, PMT key, PMT value, PMT srcid)

A sink of vectors (`vlen` > 1 gr_complex a item, after `blocks.stream_to_vector`) is read as
its samples in order: set `vlen` to match, since the tag header counts items, not samples (a
tag's place is then known to the item: GNU Radio itself rounds it so when it vectorizes).

Message boundaries follow GNU Radio's scheduler, not bursts, so the stream is reassembled and
cut by burst_cutter (energy detector, `packet_len`-style length tags, or start/end tags such as
GNU Radio's power squelch writes), after a slow DC blocker (rfclassify.dsp.dc_block;
`dc_block_samples`, 0 = off) has removed the receiver's DC offset, which a model that keeps
each burst's mean would otherwise see. With a tag header the
offsets tell us when the publisher dropped data (ZeroMQ PUB drops at its high-water mark):
the open burst is abandoned and a `stream_gap` reject says how many samples were lost.
`idle_flush_s` without a message closes the open burst in every cut mode (a start/end burst or
length-tag packet truncated to what arrived, `meta.truncated`): behind a flowgraph that stopped
with a burst on the air, only the energy cutter's was closed, and the next run's offsets, back
at 0, abandoned it.
A header offset at or past 2**62 samples is a `bad_tag_header` (no stream gets there; the
energy cutter's offsets are int64), and a tag more than `max_burst_samples` past its message's
end a `bad_tag`: garbage offsets, which would otherwise move the stream or wait for good.
A header of more than MAX_TAGS_PER_MESSAGE tags, or whose PMTs hold more than
MAX_HEADER_VALUES values together, is a `bad_tag_header` too, found before (tag count) or while
(values) it is read: only the frame's size bounded them, and a 64 MiB frame of six million tiny
tags took 40 s and a gigabyte to read.

Whether frames start with a tag header: `pass_tags` True or False says so; None (auto) lets the
stream's first clean frame decide, for the decoder's life: a whole tag header followed by whole
items says True, whole items that do not start with the magic say False; an empty data frame (no
header, no samples) says nothing and is an `empty_payload`. A guess made per frame took plain
samples that happened to start with the magic (about one frame in 2**24) for a header and lost
them; a first frame that was a corrupt header (cut short, garbled), or an empty one, latched
False, and every good header frame after it was a `bad_payload_size`. Until a clean frame
decides, a frame that starts with the magic but is no clean header decides nothing: when it is
whole items and its offset and tag count could not be a header's (plain samples that start with
the magic, or a header cut short) it is held, read as samples once a clean frame says the stream
has no headers (or at its end) and dropped as a `bad_tag_header` if it has; else it is rejected
at once (`bad_tag_header`, or `bad_payload_size` for a partial item) with a detail that says the
mode is still open. With `cut_mode` "tags" or "start_end" auto means True: the cut needs the
tags, and a frame without a header is a `bad_tag_header` that says to set pass_tags=True on the
sink.

UHD sources tag `rx_rate` (Hz) and `rx_freq` (Hz) with `rx_time`: a burst takes its sample rate
and centre frequency from the last of each at or before its first sample (else the first inside
it), else the configured ones, and its time is extrapolated from rx_time with that rate. Such a
tag whose value is not a positive (rx_rate) or finite (rx_freq) number is a `bad_tag`.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from rfclassify._exceptions import MessageError, quoted
from rfclassify._numbers import as_finite_float
from rfclassify.dsp.dc_block import DcBlocker
from rfclassify.serve.burst_cutter import EnergyCutter, Segment, StartEndCutter, StreamTag, TagCutter
from rfclassify.serve.bursts import Burst, Reject, truth_or_none
from rfclassify.serve.decoders import Decoder, IngestConfig, frame_view, frames_too_large
from rfclassify.serve.gr_pdu import pmt_time, to_jsonable
from rfclassify.serve.pmt import MAX_VALUES, PmtReader

TAG_MAGIC = 0x5FF0
TAG_VERSION = 1
_HEADER = struct.Struct("=HBQQ")   # packed, native endian: 19 bytes
_OFFSET = struct.Struct("=Q")
_MIN_TAG_BYTES = _OFFSET.size + 3   # an offset and three one-byte PMTs
ITEM_BYTES = 8                      # gr_complex
# stream offsets in samples stay below this: the energy cutter's block offsets are int64
MAX_OFFSET = 1 << 62
MAX_TAGS_IN_META = 16
# one message's tag header: at most this many tags (GNU Radio's blocks write a few per buffer; a
# tag on every item of a full buffer is past any flowgraph we know) ...
MAX_TAGS_PER_MESSAGE = 4096
# ... and their PMTs (key, value, srcid) at most this many values together, as one PDU's may
MAX_HEADER_VALUES = MAX_VALUES
TAG_CUT_MODES = ("tags", "start_end")   # cut modes that need the stream's tags
_UNDECIDED = "; pass_tags auto is undecided until a clean frame (a tag header and whole items, or whole items alone)"


def has_tag_header(view: memoryview) -> bool:
    """True when data starts with gr-zeromq's tag header magic and version."""
    return view.nbytes >= _HEADER.size and _starts_with_magic(view)


def _starts_with_magic(view: memoryview) -> bool:
    return view.nbytes >= 3 and struct.unpack_from("=HB", view, 0) == (TAG_MAGIC, TAG_VERSION)


def _plausible_header(view: memoryview, vlen: int) -> bool:
    """A tag header by its magic and version, and an offset and a tag count that fit: plain samples
    start with the magic one frame in 2**24, and then almost never have both."""
    if not has_tag_header(view):
        return False
    _magic, _version, offset, ntags = _HEADER.unpack_from(view, 0)
    return offset * vlen < MAX_OFFSET and ntags <= (view.nbytes - _HEADER.size) // _MIN_TAG_BYTES


def parse_tag_header(view: memoryview, vlen: int = 1) -> tuple[int, list[StreamTag], int]:
    """(offset of the first sample, tags at sample offsets, bytes the header takes), for items of
    vlen samples; MessageError('bad_tag_header')."""
    if view.nbytes < _HEADER.size:
        raise MessageError("bad_tag_header", f"{view.nbytes} bytes is shorter than a tag header")
    magic, version, offset, ntags = _HEADER.unpack_from(view, 0)
    if magic != TAG_MAGIC or version != TAG_VERSION:
        raise MessageError("bad_tag_header", f"magic 0x{magic:04x} version {version}, expected 0x{TAG_MAGIC:04x} version {TAG_VERSION}")
    if offset * vlen >= MAX_OFFSET:
        # no stream gets that far: a garbage offset, which the stream must not jump to
        raise MessageError("bad_tag_header", f"offset {offset} items of {vlen} samples is past {MAX_OFFSET} samples")
    if ntags > MAX_TAGS_PER_MESSAGE:
        raise MessageError("bad_tag_header", f"{ntags} tags in one message, more than MAX_TAGS_PER_MESSAGE="
                                             f"{MAX_TAGS_PER_MESSAGE}")
    if ntags > (view.nbytes - _HEADER.size) // _MIN_TAG_BYTES:
        raise MessageError("bad_tag_header", f"{ntags} tags announced in {view.nbytes - _HEADER.size} bytes")
    reader = PmtReader(view, _HEADER.size, max_values=MAX_HEADER_VALUES)   # one budget for all the tags
    tags = []
    try:
        for _ in range(ntags):
            if reader.pos + _OFFSET.size > view.nbytes:
                raise MessageError("bad_tag_header", "tag header ends inside a tag")
            (tag_offset,) = _OFFSET.unpack_from(view, reader.pos)
            reader.pos += _OFFSET.size
            key = reader.read()
            value = reader.read()
            reader.read()   # srcid
            tags.append(StreamTag(tag_offset * vlen, key if isinstance(key, str) else str(key), value))
    except MessageError as exc:
        if exc.reason == "bad_tag_header":
            raise
        if reader.values_left < 0:
            raise MessageError("bad_tag_header", f"the tags' PMTs hold more than MAX_HEADER_VALUES="
                                                 f"{MAX_HEADER_VALUES} values together") from None
        raise MessageError("bad_tag_header", f"tag PMT: {exc.detail}") from None
    return offset * vlen, tags, reader.pos


class GrStreamDecoder(Decoder):
    """Reassembles a GNU Radio complex stream and cuts it into bursts."""

    input_format = "gr-stream"

    def __init__(self, config: IngestConfig) -> None:
        super().__init__(config)
        if config.cut_mode == "tags":
            self._cutter: EnergyCutter | TagCutter | StartEndCutter = TagCutter(
                config.tag_key, config.cutter.max_burst_samples)
        elif config.cut_mode == "start_end":
            self._cutter = StartEndCutter(config.start_tag, config.end_tag, config.cutter.max_burst_samples)
        else:
            self._cutter = EnergyCutter(config.cutter)
        # kept across stream gaps: the receiver's DC does not change when the publisher drops data
        self._dc = DcBlocker(config.dc_block_samples) if config.dc_block_samples else None
        self._started = False
        # whether frames start with a tag header; None until the first frame decides (auto). A
        # tag-driven cut needs the header: auto is True there
        self._pass_tags = config.pass_tags
        if self._pass_tags is None and config.cut_mode in TAG_CUT_MODES:
            self._pass_tags = True
        # auto, undecided: a frame that starts with the magic and is no clean header, kept (bytes, why)
        # until a clean frame says whether it was samples or a broken header
        self._held: tuple[bytes, str] | None = None
        self._last_rx_s: float | None = None
        self._idle_flushed = True
        self._next_id = 0

    def decode(self, frames: Sequence[Any], received_s: float) -> list[Burst | Reject]:
        self._last_rx_s, self._idle_flushed = received_s, False
        expected = {None: (1, 2), True: (2,), False: (1,)}[self.config.expect_key]
        if len(frames) not in expected:
            return [self._reject("bad_frames", f"expected {' or '.join(map(str, expected))} frames "
                                 f"([key,] data), got {len(frames)}")]
        too_large = frames_too_large(frames, self.config.max_message_bytes)
        if too_large is not None:
            return [self._reject(too_large.reason, too_large.detail)]
        data = frame_view(frames[-1])
        if not data.nbytes:
            # neither a header nor samples: it tells pass_tags auto nothing (taken for "whole items
            # without the magic", one latched "no headers" for the daemon's run)
            return [self._reject("empty_payload", "empty data frame: no tag header and no samples")]
        out: list[Burst | Reject] = []
        tags: list[StreamTag] = []
        item_bytes = ITEM_BYTES * self.config.vlen
        header: tuple[int, list[StreamTag], int] | None = None
        if self._pass_tags is None:   # auto: the first clean frame's answer holds for the decoder's life
            undecided = self._undecided_frame(data, item_bytes)
            if isinstance(undecided, list):   # rejected or held: nothing decided
                return undecided
            header = undecided
            out += self._release_held(received_s)
        elif self._pass_tags:
            if not _starts_with_magic(data):
                return [self._reject("bad_tag_header", self._no_header(data))]
            try:   # the header counts items of vlen samples; the cutters count samples
                header = parse_tag_header(data, self.config.vlen)
            except MessageError as exc:
                return [self._reject(exc.reason, exc.detail)]
        if header is not None:
            offset, tags, used = header
            data = data[used:]
            out += self._align(offset)
        if data.nbytes % item_bytes:
            # a partial item cannot be placed in the stream: drop the frame and restart there
            lost = self._cutter.reset(self._cutter.offset + data.nbytes // ITEM_BYTES)
            detail = f"{data.nbytes} bytes is not a whole number of {item_bytes}-byte items" + self._header_hint(data)
            return out + [self._reject("bad_payload_size", detail + ("; open burst lost" if lost else ""))]
        self._started = True
        end = self._cutter.offset + data.nbytes // ITEM_BYTES
        for tag in tags:
            problem = self._too_far_ahead(tag, end) or _bad_rx_value(tag) or self._cutter.add_tag(tag)
            if problem:
                out.append(self._reject("bad_tag", problem))
        return out + self._feed(data, received_s)

    def _feed(self, data: memoryview, received_s: float) -> list[Burst | Reject]:
        """Whole items of samples, after any tag header, through the DC blocker into the cutter."""
        samples = np.frombuffer(data, dtype=np.complex64)
        if self._dc is not None:
            samples = self._dc.process(samples)
        return self._bursts(self._cutter.feed(samples), received_s)

    def poll_timeout(self, now_s: float) -> list[Burst | Reject]:
        """After idle_flush_s without input (the stream went quiet, or its flowgraph stopped), close the
        open burst as flush does: an energy burst as decided so far, a start/end burst or length-tag
        packet still waiting for its end truncated to what arrived. Once per quiet period."""
        if self._idle_flushed or self._last_rx_s is None or now_s - self._last_rx_s < self.config.idle_flush_s:
            return []
        self._idle_flushed = True
        return self._bursts(self._cutter.flush(), now_s)

    def flush(self, received_s: float) -> list[Burst | Reject]:
        self._idle_flushed = True
        return self._release_held(received_s) + self._bursts(self._cutter.flush(), received_s)

    def stats(self) -> dict[str, float]:
        out = super().stats()
        if isinstance(self._cutter, EnergyCutter):
            out["cutter_short_dropped"] = self._cutter.dropped_short
        if self._dc is not None and self._dc.dc != 0:
            # power of the DC the blocker removes, dB re full scale 1.0: an operator can see a leaky front end
            out["receiver_dc_dbfs"] = round(10.0 * math.log10(abs(self._dc.dc) ** 2 + 1e-30), 1)
        return out

    def _reject(self, reason: str, detail: str) -> Reject:
        return Reject(reason, detail, stream=self.config.stream)

    def _undecided_frame(self, data: memoryview,
                         item_bytes: int) -> tuple[int, list[StreamTag], int] | None | list[Reject]:
        """pass_tags auto before a clean frame has decided: the frame's tag header (the stream has
        them), None (it has none: read the frame as samples) or what to return for a frame that
        decides nothing. A corrupt first header latched "no header", and each good header frame
        after it was a bad_payload_size."""
        whole = data.nbytes % item_bytes == 0
        if not _starts_with_magic(data):
            if whole:
                self._pass_tags = False
                return None
            return [self._reject("bad_payload_size", f"{data.nbytes} bytes is not a whole number of {item_bytes}-byte "
                                                     f"items and starts with no tag header{_UNDECIDED}")]
        try:
            header = parse_tag_header(data, self.config.vlen)
        except MessageError as exc:
            if whole and not _plausible_header(data, self.config.vlen):
                # plain samples that start with the magic (one frame in 2**24), or a header broken
                # past telling: held until a clean frame says which (read as samples, this frame
                # would put a broken header's bytes into the DC blocker and the noise floor)
                out = [self._held_reject(self._held, "a later frame started with the magic too")] if self._held else []
                self._held = (bytes(data), exc.detail)
                return out
            items = "" if whole else f", nor whole {item_bytes}-byte items ({data.nbytes} bytes)"
            return [self._reject("bad_tag_header", f"frame starts with the tag header's magic but is no clean tag "
                                                   f"header ({exc.detail}){items}{_UNDECIDED}")]
        if (data.nbytes - header[2]) % item_bytes:
            return [self._reject("bad_payload_size", f"{data.nbytes - header[2]} bytes after a {header[2]}-byte tag "
                                                     f"header is not a whole number of {item_bytes}-byte items"
                                                     f"{_UNDECIDED}")]
        self._pass_tags = True
        return header

    def _release_held(self, received_s: float) -> list[Burst | Reject]:
        """The frame held while auto was undecided, once a clean frame has decided (or the stream
        ends undecided: then it is read as the samples it most likely is)."""
        held, self._held = self._held, None
        if held is None:
            return []
        if self._pass_tags:
            return [self._held_reject(held, "the stream's first clean frame had one")]
        self._started = True
        return self._feed(memoryview(held[0]), received_s)

    def _held_reject(self, held: tuple[bytes, str], why: str) -> Reject:
        return self._reject("bad_tag_header", f"a {len(held[0])}-byte frame starts with the tag header's magic but "
                                              f"is no clean tag header ({held[1]}), and was held while pass_tags auto "
                                              f"was undecided; dropped: {why}")

    def _header_hint(self, data: memoryview) -> str:
        """For a frame read as samples that is not whole items: if it holds a tag header, what to change."""
        if self._pass_tags is not False or not _plausible_header(data, self.config.vlen):
            return ""
        if self.config.pass_tags is False:
            return ("; it starts with a gr-zeromq tag header: the sink has pass_tags=True, so set [input] "
                    "pass_tags = true")
        return ("; it starts with a gr-zeromq tag header, and the stream's first clean frame had none (pass_tags "
                "auto decides once): restart the daemon after changing the sink's pass_tags")

    def _no_header(self, data: memoryview) -> str:
        """Why a frame without a tag header is refused, and what the operator should do."""
        first = bytes(data[:3]).hex() or "nothing"
        if self.config.cut_mode in TAG_CUT_MODES:
            why = f"cut_mode {self.config.cut_mode} cuts at the stream's tags"
        elif self.config.pass_tags:
            why = "pass_tags is true"
        else:
            why = "pass_tags auto, and the stream's first clean frame had one"
        return (f"frame starts {first}, not a gr-zeromq tag header ({why}): set pass_tags=True on the "
                f"flowgraph's zeromq sink")

    def _too_far_ahead(self, tag: StreamTag, end: int) -> str | None:
        """A tag more than max_burst_samples past its message's end has a garbage offset: kept, it
        would wait for samples that never come (a length or start/end tag blocking the cutter)."""
        limit = self.config.cutter.max_burst_samples
        if tag.offset - end > limit:
            return (f"{tag.key} tag at {tag.offset} lies more than max_burst_samples={limit} past the "
                    f"message's end at {end}")
        return None

    def _align(self, offset: int) -> list[Reject]:
        """Follow the publisher's item offset; a jump means samples were lost."""
        expected = self._cutter.offset
        if offset == expected:
            return []
        lost = self._cutter.reset(offset)
        if not self._started:
            return []  # joined a running stream
        self._count("stream_gaps")
        what = f"{offset - expected} samples lost" if offset > expected else "offset went back (flowgraph restarted?)"
        return [self._reject("stream_gap", f"expected offset {expected}, got {offset}: {what}"
                             + ("; open burst lost" if lost else ""))]

    def _bursts(self, segments: list[Segment], received_s: float) -> list[Burst | Reject]:
        return [self._burst(seg, received_s) for seg in segments]

    def _burst(self, seg: Segment, received_s: float) -> Burst:
        cfg = self.config
        by_key = {t.key: t.value for t in seg.tags}
        burst_id = by_key.get("burst_id")
        if isinstance(burst_id, bool) or not isinstance(burst_id, (str, int)):
            burst_id = self._next_id
        self._next_id += 1
        label = by_key.get("label") if isinstance(by_key.get("label"), str) else None
        snr_db = as_finite_float(by_key.get("snr_db"))
        meta: dict[str, Any] = {"offset_samples": seg.start_sample}
        if seg.truncated:
            meta["truncated"] = True
        if seg.tags:
            meta["tags"] = [{"offset": t.offset, "key": t.key, "value": to_jsonable(t.value)}
                            for t in seg.tags[:MAX_TAGS_IN_META]]
        rate = cfg.sample_rate_hz if seg.rx_rate is None else as_finite_float(seg.rx_rate.value)
        center = cfg.center_freq_hz if seg.rx_freq is None else as_finite_float(seg.rx_freq.value)
        return Burst(
            iq=seg.iq,
            sample_rate_hz=rate,
            burst_id=burst_id,
            stream=cfg.stream,
            center_freq_hz=center,
            time=self._time(seg, rate),
            meta=meta,
            truth=truth_or_none(label, snr_db),
            received_s=received_s,
        )

    @staticmethod
    def _time(seg: Segment, sample_rate_hz: float | None) -> float | str | None:
        """The burst's start time from the last rx_time tag (needs the sample rate to extrapolate)."""
        if seg.rx_time is None:
            return None
        t0 = pmt_time(seg.rx_time.value)
        if not isinstance(t0, (int, float)):
            return t0
        if seg.rx_time.offset == seg.start_sample:
            return float(t0)
        if sample_rate_hz:
            return float(t0) + (seg.start_sample - seg.rx_time.offset) / sample_rate_hz
        return None


def _bad_rx_value(tag: StreamTag) -> str | None:
    """An rx_rate that is not a positive number of Hz, or an rx_freq that is not a finite one."""
    if tag.key not in ("rx_rate", "rx_freq"):
        return None
    number = as_finite_float(tag.value)
    if number is not None and (number > 0 or tag.key == "rx_freq"):
        return None
    want = "a positive number (Hz)" if tag.key == "rx_rate" else "a finite number (Hz)"
    return f"{tag.key} tag at {tag.offset} has value {quoted(tag.value)}; expected {want}"
