"""gr-stream cutters against garbage offsets: a reject for the message or tag, nothing kept for
good, and the bursts around it still cut (a daemon runs unattended for months)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from rfclassify.serve.burst_cutter import CutterConfig, StartEndCutter, StreamTag, TagCutter
from rfclassify.serve.bursts import Burst, Reject
from rfclassify.serve.decoders import IngestConfig, make_decoder
from rfclassify.serve.pmt import serialize


def tag_header(offset: int, tags: list[tuple[int, str, object]]) -> bytes:
    out = struct.pack("=HBQQ", 0x5FF0, 1, offset, len(tags))
    for off, key, value in tags:
        out += struct.pack("=Q", off) + serialize(key) + serialize(value) + serialize("src")
    return out


def _chunk(rng: np.random.Generator, n: int = 4096, burst_at: int | None = 1000) -> np.ndarray:
    """Quiet noise with a unit-power burst of 1000 samples at burst_at."""
    x = (0.01 * (rng.standard_normal(n) + 1j * rng.standard_normal(n))).astype(np.complex64)
    if burst_at is not None:
        x[burst_at:burst_at + 1000] += np.exp(2j * np.pi * rng.random(1000)).astype(np.complex64)
    return x


class _Sender:
    """Sends chunks with tag headers at consecutive offsets, as a pub_sink(pass_tags=True) does."""

    def __init__(self, config: IngestConfig) -> None:
        self.dec = make_decoder("gr-stream", config)
        self.pos = 0

    def send(self, x: np.ndarray, tags=(), offset: int | None = None) -> list[Burst | Reject]:
        out = self.dec.decode([tag_header(self.pos if offset is None else offset, list(tags)) + x.tobytes()], 0.0)
        if offset is None:
            self.pos += x.shape[0]
        return out


def _rejects(out) -> list[str]:
    return [o.reason for o in out if isinstance(o, Reject)]


def _bursts(out) -> list[Burst]:
    return [o for o in out if isinstance(o, Burst)]


@pytest.mark.parametrize("cut_mode,vlen,offset", [
    ("energy", 1, 2**64 - 1000), ("energy", 1, 2**63), ("energy", 4, 2**61),
    ("tags", 1, 2**64 - 1000), ("start_end", 1, 2**63)])
def test_a_header_offset_past_what_the_cutters_hold_is_a_bad_tag_header(cut_mode, vlen, offset) -> None:
    """The energy cutter's int64 block arithmetic overflowed (OverflowError, an internal_error for
    good); the other modes took it as a gap and moved the stream there."""
    rng = np.random.default_rng(0)
    s = _Sender(IngestConfig(pass_tags=True, cut_mode=cut_mode, vlen=vlen, sample_rate_hz=1e6))
    items = 4096 // vlen
    s.send(_chunk(rng), [(0, "packet_len", 1000), (1000, "squelch_sob", True), (2000, "squelch_eob", True)])
    out = s.send(_chunk(rng), offset=offset)
    assert _rejects(out) == ["bad_tag_header"] and not _bursts(out)
    # the stream goes on where it was (the dropped message's samples are a gap, as they should be)
    out = []
    for k in range(2, 6):
        at = k * 4096
        tags = [(at // vlen, "packet_len", 1000), (at // vlen, "squelch_sob", True),
                ((at + 1000) // vlen, "squelch_eob", True)]
        out += s.send(_chunk(rng, burst_at=0), tags, offset=k * items)
    assert _rejects(out) == ["stream_gap"]
    assert len(_bursts(out)) >= 3


def test_length_tags_far_ahead_are_refused_and_nothing_piles_up() -> None:
    rng = np.random.default_rng(1)
    s = _Sender(IngestConfig(pass_tags=True, cut_mode="tags", cutter=CutterConfig(max_burst_samples=4096)))
    garbage = [(2**62 + k, "packet_len", 100) for k in range(500)] + [(2**64 - 1, "packet_len", 100)]
    out = s.send(_chunk(rng), garbage)
    assert _rejects(out) == ["bad_tag"] * 501
    assert s.dec._cutter._pending == []
    # real packets around it are still cut, exactly
    out = s.send(_chunk(rng), [(s.pos + 1000, "packet_len", 1000)]) + s.send(_chunk(rng))
    assert [(b.meta["offset_samples"], b.n_samples) for b in out] == [(5096, 1000)]


def test_length_tags_inside_a_message_longer_than_a_burst_are_kept() -> None:
    # the horizon counts from the end of the message the tag came in, not the samples before it
    rng = np.random.default_rng(2)
    s = _Sender(IngestConfig(pass_tags=True, cut_mode="tags", cutter=CutterConfig(max_burst_samples=1000)))
    out = s.send(_chunk(rng, 20000), [(15000, "packet_len", 1000), (19500, "packet_len", 1000)])
    out += s.send(_chunk(rng, 1000, burst_at=None), [(25000, "packet_len", 10)])   # 4000 past this message: refused
    cut = [(b.meta["offset_samples"], b.n_samples) for b in out if isinstance(b, Burst)]
    assert cut == [(15000, 1000), (19500, 1000)]
    assert _rejects(out) == ["bad_tag"]


def test_the_tag_cutter_caps_its_waiting_packets() -> None:
    cutter = TagCutter("packet_len", 10_000)
    for k in range(TagCutter.MAX_PENDING):
        assert cutter.add_tag(StreamTag(k, "packet_len", 1)) is None
    assert "wait for their samples" in cutter.add_tag(StreamTag(5000, "packet_len", 1))
    assert len(cutter._pending) == TagCutter.MAX_PENDING
    assert len(cutter.feed(np.zeros(TagCutter.MAX_PENDING + 1, np.complex64))) == TagCutter.MAX_PENDING
    assert cutter.add_tag(StreamTag(5000, "packet_len", 1)) is None   # room again


def test_start_end_tags_far_ahead_do_not_block_the_cutter() -> None:
    """4096 far-ahead starts filled the waiting edges for good: every later real squelch tag was
    refused and no burst was cut again."""
    rng = np.random.default_rng(3)
    s = _Sender(IngestConfig(pass_tags=True, cut_mode="start_end", sample_rate_hz=1e6))
    out = s.send(_chunk(rng), [(100, "squelch_sob", True), (1100, "squelch_eob", True)])
    assert [(b.meta["offset_samples"], b.n_samples) for b in _bursts(out)] == [(100, 1000)]
    out = s.send(_chunk(rng), [(2**62 + k, "squelch_sob", True) for k in range(StartEndCutter.MAX_PENDING)])
    assert _rejects(out) == ["bad_tag"] * StartEndCutter.MAX_PENDING and not _bursts(out)
    out = []
    for _ in range(3):
        out += s.send(_chunk(rng), [(s.pos + 100, "squelch_sob", True), (s.pos + 1100, "squelch_eob", True)])
    assert _rejects(out) == []
    assert [(b.meta["offset_samples"], b.n_samples) for b in out] == [(8292, 1000), (12388, 1000), (16484, 1000)]


def test_an_rx_time_far_ahead_is_refused_and_later_bursts_keep_their_time() -> None:
    rng = np.random.default_rng(4)
    s = _Sender(IngestConfig(pass_tags=True, sample_rate_hz=1e6))
    out = s.send(_chunk(rng), [(0, "rx_time", (1000, 0.0))]) + s.send(_chunk(rng))
    out += s.send(_chunk(rng), [(2**62, "rx_time", (0, 0.0))])
    assert _rejects(out) == ["bad_tag"]
    for _ in range(4):
        out += s.send(_chunk(rng))
    times = [(b.meta["offset_samples"], b.time) for b in _bursts(out)]
    assert len(times) >= 5
    for start, t in times:
        assert t == pytest.approx(1000 + start / 1e6, abs=1e-9)


def test_a_burst_cut_after_a_newer_rx_time_arrives_keeps_the_one_before_it() -> None:
    """A second rx_time (UHD writes one after an overflow) at 9000 came in the message that closed
    a burst at ~7100: the burst got no time at all."""
    rng = np.random.default_rng(5)
    s = _Sender(IngestConfig(pass_tags=True, sample_rate_hz=1e6))
    out = s.send(_chunk(rng, 8192, burst_at=7100), [(0, "rx_time", (1000, 0.0))])
    out += s.send(_chunk(rng, 8192, burst_at=2000), [(9000, "rx_time", (2000, 0.0))])
    out += s.dec.flush(0.0)
    (first, second) = _bursts(out)
    assert abs(first.meta["offset_samples"] - 7068) <= 32 and second.meta["offset_samples"] > 9000
    assert first.time == pytest.approx(1000 + first.meta["offset_samples"] / 1e6, abs=1e-9)
    assert second.time == pytest.approx(2000 + (second.meta["offset_samples"] - 9000) / 1e6, abs=1e-9)


def test_rx_time_tags_are_bounded_and_a_restart_forgets_the_old_ones() -> None:
    rng = np.random.default_rng(6)
    s = _Sender(IngestConfig(pass_tags=True, sample_rate_hz=1e6))
    for k in range(200):
        s.send(_chunk(rng, burst_at=None), [(s.pos, "rx_time", (k, 0.0))])
    assert len(s.dec._cutter._tags.rx_times) <= 16
    # a flowgraph restart: offsets start over, and the new run's rx_time is the reference, not the
    # old run's tags at offsets the new stream passes again
    s = _Sender(IngestConfig(pass_tags=True, sample_rate_hz=1e6))
    for k in range(3):
        s.send(_chunk(rng, burst_at=None), [(s.pos, "rx_time", (k, 0.0))])
    s.pos = 0
    out = s.send(_chunk(rng, 8192, burst_at=7000), [(0, "rx_time", (5000, 0.0))])
    out += s.dec.flush(0.0)
    assert _rejects(out) == ["stream_gap"]
    (b,) = _bursts(out)
    assert b.time == pytest.approx(5000 + b.meta["offset_samples"] / 1e6, abs=1e-9)
