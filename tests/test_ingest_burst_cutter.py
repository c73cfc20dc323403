"""Burst cutter: energy detection finds known bursts, chunking never matters, tag cutting is exact."""

from __future__ import annotations

import numpy as np
import pytest

from rfclassify.serve.burst_cutter import (CutterConfig, EnergyCutter, StartEndCutter, StreamTag, TagCutter,
                                          block_power)

NOISE_POWER = 1e-3  # 30 dB below the bursts


def _stream(rng: np.random.Generator, lengths: list[int], gaps: list[int]) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Noise with unit-power QPSK-like bursts; returns the stream and the true (start, length)s."""
    parts, truth, pos = [], [], 0
    for length, gap in zip(lengths, gaps):
        parts.append(np.zeros(gap, np.complex64))
        pos += gap
        sym = np.exp(1j * (np.pi / 4 + np.pi / 2 * rng.integers(0, 4, length)))
        parts.append(sym.astype(np.complex64))
        truth.append((pos, length))
        pos += length
    parts.append(np.zeros(3000, np.complex64))
    x = np.concatenate(parts)
    noise = np.sqrt(NOISE_POWER / 2) * (rng.standard_normal(x.shape[0]) + 1j * rng.standard_normal(x.shape[0]))
    return (x + noise).astype(np.complex64), truth


def _feed(cutter, x: np.ndarray, chunks: list[int] | None = None) -> list:
    out, pos = [], 0
    for size in chunks or [x.shape[0]]:
        out += cutter.feed(x[pos:pos + size])
        pos += size
    out += cutter.feed(x[pos:])
    return out + cutter.flush()


LENGTHS = [500, 1200, 3000, 700, 5000, 256]
GAPS = [4000, 1500, 2600, 900, 3100, 1800]


def test_energy_finds_known_bursts() -> None:
    x, truth = _stream(np.random.default_rng(0), LENGTHS, GAPS)
    cfg = CutterConfig()
    segs = _feed(EnergyCutter(cfg), x)
    assert len(segs) == len(truth)
    tol = cfg.block_samples + cfg.pad_samples
    for seg, (start, length) in zip(segs, truth):
        assert abs(seg.start_sample - (start - cfg.pad_samples)) <= tol
        assert abs(seg.n_samples - (length + 2 * cfg.pad_samples)) <= 2 * tol
        np.testing.assert_array_equal(seg.iq, x[seg.start_sample:seg.start_sample + seg.n_samples])
        assert seg.iq.dtype == np.complex64


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_chunk_boundaries_do_not_change_results(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, _ = _stream(rng, LENGTHS, GAPS)
    whole = _feed(EnergyCutter(), x)
    chunks = list(rng.integers(1, 3000, 200))
    pieces = _feed(EnergyCutter(), x, chunks)
    assert [(s.start_sample, s.n_samples) for s in pieces] == [(s.start_sample, s.n_samples) for s in whole]
    for a, b in zip(pieces, whole):
        np.testing.assert_array_equal(a.iq, b.iq)


def test_hangover_merges_short_gaps_and_min_length_drops_blips() -> None:
    rng = np.random.default_rng(4)
    x, _ = _stream(rng, [1000, 1000, 40], [3000, 100, 3000])  # gap of 100 < hangover 256
    cutter = EnergyCutter(CutterConfig(block_samples=16))
    segs = _feed(cutter, x)
    assert len(segs) == 1 and 2000 <= segs[0].n_samples <= 2100 + 2 * 64
    assert cutter.dropped_short == 1  # the 40-sample blip


def test_long_bursts_are_split_at_max_length() -> None:
    x, (truth,) = _stream(np.random.default_rng(5), [10000], [3000])
    segs = _feed(EnergyCutter(CutterConfig(max_burst_samples=4096)), x)
    assert [s.n_samples for s in segs[:2]] == [4096, 4096]
    assert segs[1].start_sample == segs[0].start_sample + 4096
    assert sum(s.n_samples for s in segs) == pytest.approx(10000 + 64, abs=64)


def test_short_tail_of_a_split_burst_is_dropped() -> None:
    x, _ = _stream(np.random.default_rng(10), [8110], [3000])  # pieces from 2944: tail 11136..11168
    cutter = EnergyCutter(CutterConfig(max_burst_samples=4096))
    segs = _feed(cutter, x)
    assert [s.n_samples for s in segs] == [4096, 4096] and cutter.dropped_short == 1


def test_burst_open_at_end_is_closed_by_flush() -> None:
    x, _ = _stream(np.random.default_rng(6), [3000], [4000])
    x = x[:4000 + 1500]  # stream stops mid-burst
    cutter = EnergyCutter()
    assert cutter.feed(x) == []
    (seg,) = cutter.flush()
    assert seg.start_sample + seg.n_samples == x.shape[0] and seg.n_samples >= 1500


def test_digital_silence_gaps_use_the_floor_minimum() -> None:
    x = np.zeros(20000, np.complex64)
    x[5000:6000] = 0.01  # weak but far above digital zero
    segs = _feed(EnergyCutter(), x)
    assert len(segs) == 1 and abs(segs[0].start_sample - (5000 - 32)) <= 32


def test_tags_inside_and_rx_time_are_reported() -> None:
    x, truth = _stream(np.random.default_rng(7), [2000], [4000])
    cutter = EnergyCutter()
    cutter.add_tag(StreamTag(10, "rx_time", (100, 0.5)))
    cutter.add_tag(StreamTag(truth[0][0] + 5, "burst_id", "abc"))
    (seg,) = _feed(cutter, x)
    assert seg.rx_time == StreamTag(10, "rx_time", (100, 0.5))
    assert [t.key for t in seg.tags] == ["burst_id"]


def test_tag_cutter_is_exact_across_chunks() -> None:
    rng = np.random.default_rng(8)
    x = (rng.standard_normal(20000) + 1j * rng.standard_normal(20000)).astype(np.complex64)
    packets = [(100, 500), (2000, 1234), (5000, 64), (19000, 1000)]
    cutter = TagCutter("packet_len", 10000)
    out, pos = [], 0
    for size in rng.integers(50, 900, 100):
        chunk = x[pos:pos + size]
        for start, length in packets:
            if pos <= start < pos + chunk.shape[0]:
                assert cutter.add_tag(StreamTag(start, "packet_len", length)) is None
        out += cutter.feed(chunk)
        pos += chunk.shape[0]
        if pos >= x.shape[0]:
            break
    assert [(s.start_sample, s.n_samples) for s in out] == packets
    for seg in out:
        np.testing.assert_array_equal(seg.iq, x[seg.start_sample:seg.start_sample + seg.n_samples])


def test_tag_cutter_rejects_bad_lengths_and_flush_truncates() -> None:
    cutter = TagCutter("packet_len", 1000)
    assert "non-integer" in cutter.add_tag(StreamTag(0, "packet_len", "x"))
    assert "outside" in cutter.add_tag(StreamTag(0, "packet_len", 5000))
    assert "outside" in cutter.add_tag(StreamTag(0, "packet_len", 0))
    assert cutter.add_tag(StreamTag(10, "packet_len", 500)) is None
    assert cutter.feed(np.ones(100, np.complex64)) == []
    (seg,) = cutter.flush()
    assert seg.truncated and (seg.start_sample, seg.n_samples) == (10, 90)


def _feed_tagged(cutter, x: np.ndarray, tags: list[StreamTag], rng: np.random.Generator) -> list:
    """x in random chunks, each chunk's tags added before its samples (as gr-stream does)."""
    out, pos = [], 0
    while pos < x.shape[0]:
        chunk = x[pos:pos + int(rng.integers(1, 900))]
        for tag in tags:
            if pos <= tag.offset < pos + chunk.shape[0]:
                assert cutter.add_tag(tag) is None
        out += cutter.feed(chunk)
        pos += chunk.shape[0]
    return out


@pytest.mark.parametrize("seed", range(4))
def test_start_end_cutter_is_exact_across_chunks_with_squelch_tags(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(30000) + 1j * rng.standard_normal(30000)).astype(np.complex64)
    bursts = [(100, 500), (2000, 1234), (5000, 64), (9000, 2500)]
    tags = [StreamTag(a, "squelch_sob", None) for a, _ in bursts] + [StreamTag(a + n, "squelch_eob", None)
                                                                    for a, n in bursts]
    tags += [StreamTag(2100, "burst_id", 7), StreamTag(0, "rx_time", (5, 0.0))]
    cutter = StartEndCutter("squelch_sob", "squelch_eob", 1000)
    out = _feed_tagged(cutter, x, sorted(tags, key=lambda t: t.offset), rng)
    # 2500 samples at 9000 come as pieces of max_burst_samples; so does 1234 at 2000
    assert [(s.start_sample, s.n_samples) for s in out] == [
        (100, 500), (2000, 1000), (3000, 234), (5000, 64), (9000, 1000), (10000, 1000), (11000, 500)]
    for seg in out:
        np.testing.assert_array_equal(seg.iq, x[seg.start_sample:seg.start_sample + seg.n_samples])
    assert [t.key for t in out[1].tags] == ["burst_id"] and out[1].rx_time.offset == 0
    assert cutter.flush() == [] and cutter._buf.end - cutter._buf.start == 0   # nothing open, nothing held


def test_start_end_cutter_with_one_key_reads_the_value_and_keeps_going_past_oddities() -> None:
    rng = np.random.default_rng(5)
    x = np.arange(6000).astype(np.complex64)
    tags = [StreamTag(50, "burst", False),                            # an end with none open: ignored
            StreamTag(100, "burst", True), StreamTag(300, "burst", True),   # a start closes the open one
            StreamTag(400, "burst", False), StreamTag(5000, "burst", True)]
    cutter = StartEndCutter("burst", "burst", 10_000)
    out = _feed_tagged(cutter, x, tags, rng)
    assert [(s.start_sample, s.n_samples) for s in out] == [(100, 200), (300, 100)]
    (tail,) = cutter.flush()
    assert tail.truncated and (tail.start_sample, tail.n_samples) == (5000, 1000)
    assert "expected #t (start) or #f (end)" in cutter.add_tag(StreamTag(6000, "burst", 1))
    assert "already gone" in cutter.add_tag(StreamTag(10, "burst", True))


def test_reset_after_gap_reports_lost_burst() -> None:
    x, _ = _stream(np.random.default_rng(9), [3000], [4000])
    cutter = EnergyCutter()
    cutter.feed(x[:6000])
    assert cutter.reset(10**6) is True
    assert cutter.offset == 10**6
    assert cutter.reset(10**6 + 5) is False


@pytest.mark.parametrize("seed", range(8))
def test_a_block_has_the_same_power_whether_feed_or_flush_measures_it(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(32) + 1j * rng.standard_normal(32)).astype(np.complex64)
    by_feed = EnergyCutter(CutterConfig(block_samples=32, epoch_blocks=1, history_blocks=1))
    by_feed.feed(x)                              # one full block, decided at once
    by_flush = EnergyCutter(CutterConfig(block_samples=64, epoch_blocks=1, history_blocks=1))
    by_flush.feed(x)
    by_flush.flush()                             # the same samples as a partial last block
    # the detector keeps each decided block's power in its history (what the floor is taken from)
    assert by_feed._history[-1] == by_flush._history[-1] == block_power(x)
    assert block_power(x[None, :])[0] == block_power(x)


def _start_end_reference(n: int, edges: list[tuple[int, bool]], max_len: int) -> list[tuple[int, int]]:
    """The start/end rule applied to a whole stream of n samples at once: (start, length) pieces,
    the last one the burst still open at the end (what flush gives)."""
    out, open_at = [], None
    for offset, is_start in sorted(edges):
        if open_at is not None and offset >= open_at:
            while open_at + max_len < offset:       # pieces of max_len before the edge
                out.append((open_at, max_len))
                open_at += max_len
            if offset > open_at:
                out.append((open_at, offset - open_at))
            open_at = None
        if is_start:
            open_at = offset
    if open_at is not None:
        while open_at + max_len <= n:
            out.append((open_at, max_len))
            open_at += max_len
        if n > open_at:
            out.append((open_at, n - open_at))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_start_end_cutter_agrees_with_the_rule_applied_to_the_whole_stream(seed: int) -> None:
    """Random starts and ends (overlapping, stray, at the same offset), random chunkings and
    piece lengths: what feed() gives, in any chunking, is the rule applied at once."""
    rng = np.random.default_rng(seed)
    n = 50_000
    x = np.arange(n).astype(np.complex64)
    edges = [(int(o), bool(s)) for o, s in zip(rng.integers(0, n, 40), rng.random(40) < 0.5)]
    max_len = int(rng.integers(500, 20_000))
    cutter = StartEndCutter("sob", "eob", max_len)
    pos, got = 0, []
    while pos < n:
        chunk = x[pos:pos + int(rng.integers(1, 3000))]
        for offset, is_start in edges:
            if pos <= offset < pos + chunk.shape[0]:
                assert cutter.add_tag(StreamTag(offset, "sob" if is_start else "eob", None)) is None
        got += cutter.feed(chunk)
        pos += chunk.shape[0]
    pieces = [(s.start_sample, s.n_samples) for s in got]
    tail = cutter.flush()
    whole = _start_end_reference(n, edges, max_len)
    assert pieces + [(s.start_sample, s.n_samples) for s in tail] == whole
    for seg in got + tail:
        np.testing.assert_array_equal(seg.iq, x[seg.start_sample:seg.start_sample + seg.n_samples])
