"""The energy cutter on a stream that begins inside a burst (a flowgraph or daemon started while a
signal is on the air, or a recording that starts mid-transmission).

The first epoch was decided with only its own blocks in the history: all of them the burst, the
floor came out at the burst's power and no block was on until noise made up 10 % of the
history. A burst on over [0, 3000) was cut as 1,024 samples from 2,016; one over [0, 6000) or
[0, 20000) was not found at all; nothing said so.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import test_gnuradio_ingest as gr_harness
from rfclassify.serve.burst_cutter import EnergyCutter
from rfclassify.serve.config import CutterConfig
from rfclassify.serve.decoders import IngestConfig
from rfclassify.serve.gr_stream import parse_tag_header

flowgraph = gr_harness.flowgraph   # the fixture

PAD, BLOCK = 32, 32   # CutterConfig defaults
NOISE_V = 0.03        # noise per component; the bursts have unit power (about 27 dB above it)


def _noise(rng: np.random.Generator, n: int) -> np.ndarray:
    return (NOISE_V * (rng.standard_normal(n) + 1j * rng.standard_normal(n))).astype(np.complex64)


def _stream(rng: np.random.Generator, n: int, bursts: list[tuple[int, int]]) -> np.ndarray:
    """Noise of n samples with unit-power random-phase bursts at (start, length)."""
    x = _noise(rng, n)
    for start, length in bursts:
        x[start:start + length] += np.exp(2j * np.pi * rng.random(length)).astype(np.complex64)
    return x


def _cut(cutter: EnergyCutter, x: np.ndarray, rng: np.random.Generator | None = None,
         watch: list[int] | None = None) -> list[tuple[int, int, bool]]:
    """(start, end, truncated) of the bursts cut from x, fed in random chunks (or 4096s);
    watch collects how many samples the cutter held after each feed."""
    out, pos = [], 0
    while pos < x.shape[0]:
        size = int(rng.integers(1, 9000)) if rng is not None else 4096
        out += cutter.feed(x[pos:pos + size])
        pos += size
        if watch is not None:
            watch.append(cutter._buf.end - cutter._buf.start)
    out += cutter.flush()
    for seg in out:
        np.testing.assert_array_equal(seg.iq, x[seg.start_sample:seg.start_sample + seg.n_samples])
    return [(s.start_sample, s.start_sample + s.n_samples, s.truncated) for s in out]


def _is_cut_of(cut: tuple[int, int, bool], start: int, length: int) -> bool:
    """cut is the burst at (start, length) as the detector cuts it: its blocks (edges resolved to
    one, aligned to the stream's first sample) and the padding, not truncated."""
    a, b, truncated = cut
    end = start + length
    return not truncated and start - PAD - BLOCK < a <= start - PAD and end + PAD <= b < end + PAD + BLOCK


@pytest.mark.parametrize("first", [3000, 6000, 20000, 100_000])
def test_a_burst_on_the_air_when_the_stream_starts_is_cut_whole_and_marked_truncated(first: int) -> None:
    later = [(first + 5000, 3000), (first + 13000, 700)]
    x = _stream(np.random.default_rng(first), first + 20000, [(0, first)] + later)
    cuts = _cut(EnergyCutter(), x, np.random.default_rng(1))
    assert cuts and cuts[0][0] == 0 and cuts[0][2] is True   # from the stream's first sample, flagged
    assert first + PAD <= cuts[0][1] < first + PAD + BLOCK
    # the bursts after it are cut as after a quiet start (the first burst's samples noise)
    quiet_start = np.concatenate([_noise(np.random.default_rng(7), first), x[first:]])
    assert cuts[1:] == _cut(EnergyCutter(), quiet_start)
    assert len(cuts) == 3 and all(_is_cut_of(cut, s, n) for cut, (s, n) in zip(cuts[1:], later))


def test_a_burst_in_digital_silence_from_the_first_sample_is_cut_whole_and_so_are_the_next() -> None:
    """Zeros between bursts (a simulation, a squelch that outputs zeros) with the stream starting
    in a burst: the zeros after it are the stream's floor (floor_min), as they are for one that
    starts with zeros; a long stretch of them (dropout-long) does not change that."""
    x = np.zeros(200_000, np.complex64)
    bursts = [(0, 3000), (8000, 1000), (14000, 2000), (180_000, 2000)]
    for start, length in bursts:
        x[start:start + length] = 0.01 * np.exp(2j * np.pi * np.random.default_rng(start).random(length))
    first, *rest = _cut(EnergyCutter(), x, np.random.default_rng(2))
    assert first == (0, 3000 + 8 + PAD, True)   # to the end of its last block (3008), and the padding
    assert len(rest) == 3 and all(_is_cut_of(cut, s, n) for cut, (s, n) in zip(rest, bursts[1:]))


def test_a_burst_on_at_the_first_sample_after_a_stream_gap_is_marked_truncated() -> None:
    rng = np.random.default_rng(3)
    cutter = EnergyCutter()
    (cut,) = _cut(cutter, _stream(rng, 20000, [(5000, 2000)]))
    assert _is_cut_of(cut, 5000, 2000)
    cutter.reset(10**6)   # samples lost: the stream goes on inside a burst
    x = _stream(rng, 12000, [(0, 4000)])
    segs = cutter.feed(x) + cutter.flush()
    assert [(s.start_sample, s.n_samples, s.truncated) for s in segs] == [(10**6, 4000 + PAD, True)]


def test_the_cold_start_holds_at_most_max_burst_samples_and_then_decides_as_it_stands() -> None:
    """What is held waiting for quiet blocks is bounded: a burst on from the start that ends
    early enough for the quiet after it to make up floor_percentile % of the history within
    max_burst_samples is found whole; one on for longer is taken for the channel's floor, as a
    channel busy from the start always was."""
    cfg = CutterConfig(max_burst_samples=65536)
    limit = cfg.max_burst_samples + cfg.epoch_blocks * cfg.block_samples + 4096   # + an epoch + a feed
    x = _stream(np.random.default_rng(4), 200_000, [(0, 50016), (100_000, 3000)])
    held: list[int] = []
    first, second = _cut(EnergyCutter(cfg), x, watch=held)
    assert first == (0, 50016 + PAD, True) and _is_cut_of(second, 100_000, 3000) and max(held) <= limit
    x = _stream(np.random.default_rng(5), 300_000, [(0, 150_000), (200_000, 3000)])
    held.clear()
    (only,) = _cut(EnergyCutter(cfg), x, watch=held)
    assert _is_cut_of(only, 200_000, 3000) and max(held) <= limit


@pytest.mark.gnuradio
@pytest.mark.skipif(bool(gr_harness._MISSING), reason=gr_harness._MISSING or "GNU Radio present")
def test_a_real_gnuradio_stream_joined_inside_a_burst_gives_it_whole_from_the_join(flowgraph) -> None:
    """The gr-stream decoder (DC blocker, then the cutter) on what GNU Radio's pub_sink sent,
    joined at a message that starts inside a burst, as a daemon started while the flowgraph runs
    joins it: the burst is cut from the first sample received, truncated, and each later one as
    usual."""
    # long bursts, so that some message starts well inside one; gaps long enough that the channel
    # is idle more than floor_percentile % of the time (the floor's assumption)
    fg = flowgraph("--sink", "stream", "--mod", "qpsk", "--pass-tags", "--noise", "0.05", "--seed", "21",
                   "--bursts", "4", "--min-len", "30000", "--max-len", "40000", "--gap", "20000")
    msgs, truth = gr_harness.receive_all(fg), fg.truth()
    offsets = [parse_tag_header(memoryview(m[-1]))[0] for m in msgs]
    # the first message that starts at least 200 samples into a burst, with 5,000 of it to come
    k, burst = next((k, t) for k, o in enumerate(offsets) for t in truth
                    if t["offset"] + 200 <= o <= t["offset"] + t["length"] - 5000)
    out = gr_harness._bursts(gr_harness._decode("gr-stream", IngestConfig(sample_rate_hz=1e6), msgs[k:]))
    first = out[0]
    assert first.meta["offset_samples"] == offsets[k] and first.meta["truncated"] is True
    end = burst["offset"] + burst["length"]
    assert end <= offsets[k] + first.n_samples <= end + PAD + BLOCK + 16
    after = [t for t in truth if t["offset"] > burst["offset"]]
    assert len(out) == 1 + len(after)
    for b, t in zip(out[1:], after, strict=True):   # as test_gnuradio_ingest checks every burst
        start = b.meta["offset_samples"]
        assert "truncated" not in b.meta and start <= t["offset"] and start + b.n_samples >= t["offset"] + t["length"]
        assert b.n_samples <= t["length"] + 2 * PAD + 2 * BLOCK + 16
    json.dumps([b.meta for b in out])   # the flag is plain JSON in the result's meta


def test_classify_a_raw_recording_that_starts_inside_a_burst_finds_it_whole(tiny_model_dir, tmp_path, capsys) -> None:
    """`rfclassify classify --raw`: the DC blocker and the energy cutter as a user runs them."""
    from rfclassify.cli import main

    x = _stream(np.random.default_rng(8), 60000, [(0, 20000), (30016, 4000)])
    path = tmp_path / "mid_transmission.cf32"
    x.tofile(path)
    assert main(["classify", str(path), "--raw", "cf32_le", "--sample-rate", "1e6", "--json", "--device", "cpu",
                 "--model-dir", str(tiny_model_dir)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["start_sample"], r["n_samples"]) for r in records] == [(0, 20000 + PAD), (30016 - PAD, 4000 + 2 * PAD)]
