"""After idle_flush_s without input, poll_timeout closes the open burst in every gr-stream cut mode.

It closed only the energy cutter's: behind a power squelch (cut_mode "start_end") or length tags
("tags"), a burst still on the air when the flowgraph stopped stayed open however long the stream
was quiet, and a restarted flowgraph (offsets back at 0) abandoned it ("open burst lost"): 3 of 4
bursts of a real squelch flowgraph, the fourth never published.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import pytest

import test_gnuradio_ingest as gr_harness
from rfclassify.serve.bursts import Burst, Reject
from rfclassify.serve.decoders import IngestConfig, make_decoder
from rfclassify.serve.gr_stream import parse_tag_header
from rfclassify.serve.pmt import serialize

flowgraph, serve = gr_harness.flowgraph, gr_harness.serve   # the fixtures
needs_gnuradio = pytest.mark.skipif(bool(gr_harness._MISSING), reason=gr_harness._MISSING or "GNU Radio present")


def _header(offset: int, tags: Sequence[tuple[int, str, object]] = ()) -> bytes:
    out = struct.pack("=HBQQ", 0x5FF0, 1, offset, len(tags))
    for off, key, value in tags:
        out += struct.pack("=Q", off) + serialize(key) + serialize(value) + serialize("src")
    return out


def _stopped_inside_a_burst(start_tags: list[tuple[int, str, object]]) -> list[list[bytes]]:
    """6000 samples in 1000-sample frames, a burst from 2500 to the end (the flowgraph stopped)."""
    rng = np.random.default_rng(2)
    x = (0.01 * (rng.standard_normal(6000) + 1j * rng.standard_normal(6000))).astype(np.complex64)
    x[2500:] += np.exp(2j * np.pi * rng.random(3500)).astype(np.complex64)
    return [[_header(pos, start_tags if pos == 2000 else []) + x[pos:pos + 1000].tobytes()]
            for pos in range(0, 6000, 1000)]


@pytest.mark.parametrize("cfg,start_tags", [
    (IngestConfig(cut_mode="start_end"), [(2500, "squelch_sob", True)]),                   # no squelch_eob came
    (IngestConfig(cut_mode="start_end", start_tag="burst", end_tag="burst"), [(2500, "burst", True)]),
    (IngestConfig(cut_mode="tags"), [(2500, "packet_len", 5000), (2500, "burst_id", 9)]),  # 3500 of 5000 came
])
def test_a_tagged_burst_open_when_the_stream_stops_is_closed_truncated_by_the_idle_poll(cfg, start_tags) -> None:
    dec = make_decoder("gr-stream", cfg)
    msgs = _stopped_inside_a_burst(start_tags)
    assert [o for m in msgs for o in dec.decode(m, 10.0)] == []
    assert dec.poll_timeout(10.0 + cfg.idle_flush_s / 2) == []    # not quiet long enough yet
    (b,) = dec.poll_timeout(10.0 + cfg.idle_flush_s)
    assert isinstance(b, Burst) and (b.meta["offset_samples"], b.n_samples) == (2500, 3500)
    assert b.meta["truncated"] is True and b.received_s == 10.0 + cfg.idle_flush_s
    assert b.burst_id == (9 if cfg.cut_mode == "tags" else 0)
    assert dec.poll_timeout(100.0) == []                               # once per quiet period
    # the flowgraph restarts: its offsets go back, and no burst was open to lose
    (gap,) = dec.decode(msgs[0], 200.0)
    assert isinstance(gap, Reject) and gap.reason == "stream_gap" and "open burst lost" not in gap.detail
    assert dec.flush(201.0) == []


def _stream_end(msgs: list[list[bytes]]) -> int:
    offset, _tags, used = parse_tag_header(memoryview(msgs[-1][-1]))
    return offset + (len(msgs[-1][-1]) - used) // 8


@pytest.mark.parametrize("marker,cfg", [
    ("squelch", IngestConfig(cut_mode="start_end")),   # analog.pwr_squelch_cc's squelch_sob, no squelch_eob
    ("", IngestConfig(cut_mode="tags")),               # the last packet_len promises 500 samples more
], ids=["squelch", "length_tags"])
@pytest.mark.gnuradio
@needs_gnuradio
def test_a_real_flowgraph_stopped_inside_its_last_burst_gets_it_closed(flowgraph, marker, cfg) -> None:
    fg = flowgraph("--sink", "stream", "--mod", "qpsk", "--pass-tags", "--noise", "0.05", "--seed", "6",
                   "--bursts", "4", "--end-inside-last", "500", *(["--marker", marker] if marker else []))
    msgs, truth = gr_harness.receive_all(fg), fg.truth()
    dec = make_decoder("gr-stream", cfg)
    out = [o for m in msgs for o in dec.decode(m, 10.0)]
    assert not any(isinstance(o, Reject) for o in out) and [b.burst_id for b in out] == [0, 1, 2]
    assert dec.poll_timeout(10.0 + cfg.idle_flush_s / 2) == []
    (b,) = dec.poll_timeout(10.0 + cfg.idle_flush_s)
    last = truth[-1]
    # the squelch opens a sample or two early (channel_model's interpolator), length tags exactly
    assert abs(b.meta["offset_samples"] - last["offset"]) <= (4 if marker else 0)
    assert b.meta["offset_samples"] + b.n_samples == _stream_end(msgs) and b.meta["truncated"] is True
    assert last["length"] - 520 <= b.n_samples < last["length"] and b.burst_id == 3
    gap = dec.decode(msgs[0], 200.0)[0]   # restarted (its first message may hold bursts too)
    assert gap.reason == "stream_gap" and "open burst lost" not in gap.detail


@pytest.mark.gnuradio
@needs_gnuradio
def test_the_daemon_publishes_the_burst_a_stopped_squelch_flowgraph_left_open(flowgraph, serve) -> None:
    """`rfclassify serve` with cut_mode start_end, left running: every burst is published, the last
    (truncated) after idle_flush_s; before, it waited for the daemon's shutdown, or a restart lost it."""
    fg = flowgraph("--sink", "stream", "--mod", "qpsk", "--noise", "0.03", "--seed", "11", "--bursts", "6",
                   "--pass-tags", "--marker", "squelch", "--end-inside-last", "500")
    output, _control = serve(fg.endpoint, "gr-stream", '[input]\ncut_mode = "start_end"\n')
    results, rejects = gr_harness._collect(output, fg, expected=6)
    truth = fg.truth()
    assert rejects == [] and sorted(r["burst_id"] for r in results) == [t["burst_id"] for t in truth]
    last = next(r for r in results if r["burst_id"] == truth[-1]["burst_id"])
    assert last["meta"]["truncated"] is True and last["n_samples"] < truth[-1]["length"]
    assert not any(r["meta"].get("truncated") for r in results if r is not last)
