"""An empty gr-stream data frame is an `empty_payload` and decides nothing: taken for "whole items
without the tag header's magic", one stray empty message latched pass_tags auto to "no headers"
for the daemon's run, and every frame of a real pub_sink / push_sink(pass_tags=True) after it was
a bad_payload_size (0 of 8 bursts)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import pytest
import zmq

import test_gnuradio_ingest as gr_harness
from rfclassify.serve.bursts import Burst, Reject
from rfclassify.serve.decoders import IngestConfig, make_decoder
from rfclassify.serve.pmt import serialize

flowgraph = gr_harness.flowgraph   # the fixture: tests/gr/burst_source.py as a subprocess


def _header(offset: int, tags: Sequence[tuple[int, str, object]] = ()) -> bytes:
    out = struct.pack("=HBQQ", 0x5FF0, 1, offset, len(tags))
    for off, key, value in tags:
        out += struct.pack("=Q", off) + serialize(key) + serialize(value) + serialize("src")
    return out


def _stream(with_headers: bool) -> list[list[bytes]]:
    """A 3000-sample burst in noise, in 1000-sample frames, tagged packet_len at its start."""
    rng = np.random.default_rng(1)
    x = (0.01 * (rng.standard_normal(8000) + 1j * rng.standard_normal(8000))).astype(np.complex64)
    x[2500:5500] += np.exp(2j * np.pi * rng.random(3000)).astype(np.complex64)
    frames = []
    for pos in range(0, 8000, 1000):
        tags = [(2500, "packet_len", 3000)] if pos == 2000 else []
        frames.append([(_header(pos, tags) if with_headers else b"") + x[pos:pos + 1000].tobytes()])
    return frames


def _run(cfg: IngestConfig, msgs: list[list[bytes]]) -> list[Burst | Reject]:
    dec = make_decoder("gr-stream", cfg)
    return [o for m in msgs for o in dec.decode(m, 1.0)] + dec.flush(2.0)


def _cuts(out: list[Burst | Reject]) -> list[tuple[int, int]]:
    return [(b.meta["offset_samples"], b.n_samples) for b in out if isinstance(b, Burst)]


@pytest.mark.parametrize("with_headers", [True, False])
@pytest.mark.parametrize("stray", [[b""], [b"sdr1", b""]])
def test_an_empty_first_frame_leaves_pass_tags_auto_to_the_stream(with_headers, stray) -> None:
    msgs = _stream(with_headers)
    reference = _run(IngestConfig(sample_rate_hz=1e6), msgs)
    assert len(_cuts(reference)) == 1 and not any(isinstance(o, Reject) for o in reference)
    out = _run(IngestConfig(sample_rate_hz=1e6), [stray, *msgs])
    assert [(o.reason, o.detail) for o in out if isinstance(o, Reject)] == [
        ("empty_payload", "empty data frame: no tag header and no samples")]
    assert _cuts(out) == _cuts(reference)


@pytest.mark.parametrize("cfg,with_headers", [
    (IngestConfig(pass_tags=True), True),            # was a bad_tag_header: "set pass_tags=True on the sink"
    (IngestConfig(pass_tags=False), False),          # was nothing at all
    (IngestConfig(), True),                          # auto, decided by the first frame
    (IngestConfig(cut_mode="tags"), True),
])
def test_an_empty_frame_inside_a_stream_is_an_empty_payload_and_changes_nothing(cfg, with_headers) -> None:
    msgs = _stream(with_headers)
    reference = _run(cfg, msgs)
    out = _run(cfg, [*msgs[:3], [b""], *msgs[3:]])
    assert [o.reason for o in out if isinstance(o, Reject)] == ["empty_payload"]
    assert _cuts(out) == _cuts(reference) and len(_cuts(out)) == 1


@pytest.mark.gnuradio
@pytest.mark.skipif(bool(gr_harness._MISSING), reason=gr_harness._MISSING or "GNU Radio present")
@pytest.mark.parametrize("sink,stray", [
    (["--sink", "push"], [b""]),                          # push_sink(pass_tags=True) -> PULL
    (["--key", "sdr1"], [b"sdr1", b""]),                  # pub_sink(pass_tags=True) with a key
])
def test_an_empty_message_before_a_real_tagged_stream_costs_one_reject(flowgraph, sink, stray) -> None:
    fg = flowgraph("--mod", "bpsk", "--pass-tags", "--noise", "0.05", "--seed", "3", *sink)
    msgs = gr_harness.receive_all(fg, kind=zmq.PULL if "push" in sink else zmq.SUB)
    truth = fg.truth()
    reference = _run(IngestConfig(sample_rate_hz=1e6), msgs)
    assert [b.burst_id for b in reference] == [t["burst_id"] for t in truth]   # no rejects, every burst
    out = _run(IngestConfig(sample_rate_hz=1e6), [stray, *msgs])
    assert [o.reason for o in out if isinstance(o, Reject)] == ["empty_payload"]
    assert [(b.meta["offset_samples"], b.n_samples, b.burst_id) for b in out if isinstance(b, Burst)] == [
        (b.meta["offset_samples"], b.n_samples, b.burst_id) for b in reference]
