"""Length tags whose packets overlap (a broken or hostile flowgraph) must not multiply memory: each
waiting packet was copied out whole once its samples came, so 256 overlapping tags of a million
samples turned 8 MiB of samples into 256 bursts holding 2 GiB in one decode (the seventieth
session's long-running review)."""

from __future__ import annotations

import struct

import numpy as np

from rfclassify.serve.burst_cutter import CutterConfig, StreamTag, TagCutter
from rfclassify.serve.bursts import Burst, Reject
from rfclassify.serve.decoders import IngestConfig, make_decoder
from rfclassify.serve.pmt import serialize


def _frame(offset: int, tags: list[tuple[int, str, object]], x: np.ndarray) -> bytes:
    out = struct.pack("=HBQQ", 0x5FF0, 1, offset, len(tags))
    for at, key, value in tags:
        out += struct.pack("=Q", at) + serialize(key) + serialize(value) + serialize("src")
    return out + x.tobytes()


def test_overlapping_length_tags_are_bad_tags_and_the_bursts_hold_no_more_than_was_fed() -> None:
    length, k = 4096, 64
    dec = make_decoder("gr-stream", IngestConfig(cut_mode="tags", pass_tags=True, dc_block_samples=0,
                                                 cutter=CutterConfig(max_burst_samples=length)))
    x = (np.arange(length + k) % 1000).astype(np.complex64)
    out = dec.decode([_frame(0, [(i, "packet_len", length) for i in range(k)], x[:1])], 0.0)
    pos = 1
    while pos < x.shape[0]:   # the rest in frames of 1000 samples
        out += dec.decode([_frame(pos, [], x[pos:pos + 1000])], 0.0)
        pos += 1000
    bursts = [o for o in out if isinstance(o, Burst)]
    rejects = [o for o in out if isinstance(o, Reject)]
    assert sum(b.n_samples for b in bursts) <= x.shape[0]          # was k * length: 64 times the samples
    assert [(b.meta["offset_samples"], b.n_samples) for b in bursts] == [(0, length)]   # the first packet kept
    np.testing.assert_array_equal(bursts[0].iq, x[:length])
    assert [r.reason for r in rejects] == ["bad_tag"] * (k - 1)
    assert "overlaps the packet [0, 4096) already waiting" in rejects[0].detail


def test_packets_that_touch_or_come_out_of_order_are_cut_and_overlapping_ones_refused() -> None:
    cutter = TagCutter("packet_len", 1000)
    for start, length in [(100, 50), (150, 50), (400, 100), (300, 100), (200, 100)]:   # touching, any order
        assert cutter.add_tag(StreamTag(start, "packet_len", length)) is None
    for start, length in [(100, 50), (149, 1), (120, 10), (50, 51), (250, 100), (0, 1000), (499, 5)]:
        problem = cutter.add_tag(StreamTag(start, "packet_len", length))
        assert problem is not None and "overlaps the packet" in problem, (start, length)
    assert cutter.add_tag(StreamTag(50, "packet_len", 50)) is None   # ends where the first starts
    x = np.arange(600).astype(np.complex64)
    out = cutter.feed(x)
    assert [(s.start_sample, s.n_samples) for s in out] == [
        (50, 50), (100, 50), (150, 50), (200, 100), (300, 100), (400, 100)]
    for seg in out:
        np.testing.assert_array_equal(seg.iq, x[seg.start_sample:seg.start_sample + seg.n_samples])


def test_random_length_tags_never_give_more_samples_than_were_fed() -> None:
    rng = np.random.default_rng(5)
    cutter = TagCutter("packet_len", 2000)
    fed = returned = 0
    cut: list[tuple[int, int]] = []
    for _ in range(200):
        n = int(rng.integers(1, 700))
        for _ in range(int(rng.integers(0, 20))):
            cutter.add_tag(StreamTag(fed + int(rng.integers(-500, n + 1500)), "packet_len", int(rng.integers(1, 2000))))
        out = cutter.feed(np.ones(n, np.complex64))
        fed += n
        returned += sum(s.n_samples for s in out)
        cut += [(s.start_sample, s.start_sample + s.n_samples) for s in out]
    cut += [(s.start_sample, s.start_sample + s.n_samples) for s in cutter.flush()]
    assert returned <= fed
    cut.sort()
    assert all(end <= start for (_, end), (start, _) in zip(cut, cut[1:]))   # the bursts are disjoint
