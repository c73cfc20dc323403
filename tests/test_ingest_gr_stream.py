"""gr-stream decoding with frames laid out like gr-zeromq's (real GNU Radio: tests/test_gnuradio_*)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from rfclassify._exceptions import ConfigError
from rfclassify.dsp.dc_block import DcBlocker
from rfclassify.serve.burst_cutter import StreamTag
from rfclassify.serve.bursts import Burst, Reject, Truth
from rfclassify.serve.decoders import IngestConfig, make_decoder
from rfclassify.serve.gr_stream import has_tag_header, parse_tag_header
from rfclassify.serve.pmt import serialize


def tag_header(offset: int, tags: list[tuple[int, str, object]]) -> bytes:
    out = struct.pack("=HBQQ", 0x5FF0, 1, offset, len(tags))
    for off, key, value in tags:
        out += struct.pack("=Q", off) + serialize(key) + serialize(value) + serialize("src")
    return out


def _signal(seed: int = 0) -> tuple[np.ndarray, list[tuple[int, int]]]:
    rng = np.random.default_rng(seed)
    x = (0.01 * (rng.standard_normal(40000) + 1j * rng.standard_normal(40000))).astype(np.complex64)
    bursts = [(3000, 1000), (9000, 2500), (20000, 600), (30000, 4000)]
    for start, n in bursts:
        x[start:start + n] += np.exp(2j * np.pi * rng.random(n)).astype(np.complex64)
    return x, bursts


def _chunks(x: np.ndarray, size: int):
    for pos in range(0, x.shape[0], size):
        yield pos, x[pos:pos + size]


def test_plain_stream_with_key_finds_bursts() -> None:
    x, bursts = _signal()
    dec = make_decoder("gr-stream", IngestConfig(sample_rate_hz=1e6, stream="gr"))
    out = []
    for _, chunk in _chunks(x, 1500):
        out += dec.decode([b"key", chunk.tobytes()], 1.0)
    out += dec.flush(2.0)
    assert all(isinstance(b, Burst) for b in out)
    assert len(out) == len(bursts)
    for b, (start, n) in zip(out, bursts):
        assert abs(b.n_samples - (n + 64)) <= 96 and abs(b.meta["offset_samples"] - (start - 32)) <= 32
        assert (b.sample_rate_hz, b.stream) == (1e6, "gr")
    assert [b.burst_id for b in out] == [0, 1, 2, 3]


@pytest.mark.parametrize("label", ["OOK", "4ASK", "AM-DSB-WC"])
def test_bursts_with_a_mean_of_their_own_are_cut_once_each_at_high_snr(label) -> None:
    """20 bursts at 30 dB: the DC blocker took up part of each one's mean and handed it back as a
    decaying offset, which the energy detector cut into 36-47 bursts (some merged)."""
    from rfclassify.dsp.synth import ChannelConfig, synthesize

    rng = np.random.default_rng(7)
    clean = ChannelConfig(p_dc_offset=0.0, p_cfo=0.0, p_multipath=0.0, p_quantization=0.0)
    bursts = synthesize([label] * 20, 4096, rng, snr_db=np.full(20, 60.0), channel=clean).iq
    x = (0.0224 * (rng.standard_normal(490_000) + 1j * rng.standard_normal(490_000))).astype(np.complex64)
    for i, b in enumerate(bursts):   # unit power, 30 dB over the noise
        x[20_000 + i * 24_000:][:4096] += (b / np.sqrt(np.mean(np.abs(b) ** 2))).astype(np.complex64)
    dec = make_decoder("gr-stream", IngestConfig(sample_rate_hz=1e6))
    out = []
    for _, chunk in _chunks(x, 8192):
        out += dec.decode([chunk.tobytes()], 0.0)
    out += dec.flush(0.0)
    assert all(isinstance(b, Burst) for b in out)
    assert [round((b.meta["offset_samples"] - 20_000) / 24_000) for b in out] == list(range(20))
    assert all(4096 <= b.n_samples <= 4096 + 128 for b in out)


def test_a_tag_named_by_a_long_list_is_read() -> None:
    # its name is the key's text; printing a 5,000-item pair chain recursed (RecursionError)
    from rfclassify.serve.pmt import pmt_list

    data = tag_header(0, [(2, pmt_list(list(range(5000))), 7)])
    _, tags, used = parse_tag_header(memoryview(data))
    assert used == len(data) and tags[0].value == 7 and tags[0].key.startswith("Pair(car=0, cdr=Pair(car=1,")


def test_tag_header_parses_like_gnuradio_wrote_it() -> None:
    # bytes captured from a GNU Radio 3.10.5 pub_sink(pass_tags=True, key="kk"), first frame "kk"
    data = bytes.fromhex(
        "f05f0100000000000000000100000000000000030000000000000002000a7061636b65745f6c656e0300000004"
        "020003737263" + "0000803f00000040" * 10)
    offset, tags, used = parse_tag_header(memoryview(data))
    assert offset == 0 and [(t.offset, t.key, t.value) for t in tags] == [(3, "packet_len", 4)]
    assert np.array_equal(np.frombuffer(data[used:], np.complex64), np.full(10, 1 + 2j, np.complex64))


@pytest.mark.parametrize("dc_block_samples", [0, 65536])
def test_tag_cutting_is_exact_with_pass_tags(dc_block_samples: int) -> None:
    x, bursts = _signal(1)
    dec = make_decoder("gr-stream", IngestConfig(cut_mode="tags", pass_tags=True, dc_block_samples=dc_block_samples))
    out = []
    for pos, chunk in _chunks(x, 777):
        tags = [(s, "packet_len", n) for s, n in bursts if pos <= s < pos + chunk.shape[0]]
        tags += [(s + 1, "label", "QPSK") for s, _ in bursts if pos <= s + 1 < pos + chunk.shape[0]]
        out += dec.decode([tag_header(pos, tags) + chunk.tobytes()], 0.0)
    assert [(b.meta["offset_samples"], b.n_samples) for b in out] == bursts
    # the samples as sent, or the DC-blocked stream (the blocker is exact across messages)
    stream = DcBlocker(dc_block_samples).process(x) if dc_block_samples else x
    for b, (s, n) in zip(out, bursts):
        np.testing.assert_array_equal(b.iq, stream[s:s + n])
        assert b.truth == Truth("QPSK", None)


def test_the_receivers_dc_offset_is_removed_before_cutting() -> None:
    # a leak 30x the noise amplitude; bursts of unit amplitude with no mean of their own
    x, bursts = _signal(2)
    leak = np.complex64(0.3 - 0.2j)
    means = {}
    for tau in (0, IngestConfig().dc_block_samples):  # off, and the default (on from the first sample)
        dec = make_decoder("gr-stream", IngestConfig(dc_block_samples=tau))
        out = []
        for _, chunk in _chunks(x + leak, 1500):
            out += dec.decode([chunk.tobytes()], 1.0)
        out += dec.flush(2.0)
        assert out and all(isinstance(b, Burst) for b in out)
        means[tau] = [complex(b.iq.mean()) for b in out]
        if tau:  # the status shows the leak the blocker removes: |0.3 - 0.2j|^2 is -8.9 dB
            assert dec.stats()["receiver_dc_dbfs"] == pytest.approx(-8.9, abs=0.3)
        else:
            assert "receiver_dc_dbfs" not in dec.stats()
    # without the blocker every burst carries the leak; with it, the leak is gone
    assert len(means[0]) == len(bursts) and all(abs(m - leak) < 0.1 for m in means[0])
    on = means[IngestConfig().dc_block_samples]
    assert len(on) == len(bursts) and all(abs(m) < 0.1 for m in on)  # |leak| is 0.36; 600 phasors average ~0.04


def test_stream_gap_is_reported_and_decoding_continues() -> None:
    x, bursts = _signal(2)
    dec = make_decoder("gr-stream", IngestConfig(cut_mode="tags", pass_tags=True))
    out = []
    for pos, chunk in _chunks(x, 1000):
        if pos == 9000:
            continue  # the publisher dropped this frame (the packet starting here is lost)
        tags = [(s, "packet_len", n) for s, n in bursts if pos <= s < pos + chunk.shape[0]]
        out += dec.decode([tag_header(pos, tags) + chunk.tobytes()], 0.0)
    rejects = [r for r in out if isinstance(r, Reject)]
    assert [r.reason for r in rejects] == ["stream_gap"] and "1000 samples lost" in rejects[0].detail
    assert [b.meta["offset_samples"] for b in out if isinstance(b, Burst)] == [3000, 20000, 30000]
    assert dec.stats()["stream_gaps"] == 1


def test_joining_a_running_stream_is_not_a_gap() -> None:
    dec = make_decoder("gr-stream", IngestConfig(pass_tags=True))
    assert dec.decode([tag_header(123456, []) + np.zeros(100, np.complex64).tobytes()], 0.0) == []


def test_poll_timeout_closes_a_burst_when_the_stream_goes_quiet() -> None:
    x, _ = _signal(3)
    dec = make_decoder("gr-stream", IngestConfig(idle_flush_s=0.5))
    out = dec.decode([x[:3500].tobytes()], 10.0)
    assert out == [] and dec.poll_timeout(10.2) == []
    (b,) = dec.poll_timeout(10.6)
    assert isinstance(b, Burst) and 500 <= b.n_samples <= 600 and b.received_s == 10.6
    assert dec.poll_timeout(11.5) == []  # once per quiet period


@pytest.mark.parametrize("cfg,frames,reason", [
    (IngestConfig(), [b"a", b"b", b"c"], "bad_frames"),
    (IngestConfig(expect_key=True), [np.zeros(8, np.complex64).tobytes()], "bad_frames"),
    (IngestConfig(), [b"\x00" * 13], "bad_payload_size"),
    (IngestConfig(pass_tags=True), [b"\x00" * 64], "bad_tag_header"),
    # (auto would read this frame as samples: a tag count that cannot fit is no header)
    (IngestConfig(pass_tags=True), [struct.pack("=HBQQ", 0x5FF0, 1, 0, 2**40) + b"\x00" * 64], "bad_tag_header"),
    (IngestConfig(), [struct.pack("=HBQQ", 0x5FF0, 1, 0, 1) + struct.pack("=Q", 0) + b"\x02\xff\xff"], "bad_tag_header"),
    (IngestConfig(pass_tags=True), [b"\xf0\x5f\x01"], "bad_tag_header"),
    (IngestConfig(cut_mode="tags"), [tag_header(0, [(0, "packet_len", "long")]) + b"\x00" * 80], "bad_tag"),
    (IngestConfig(max_message_bytes=1024), [np.zeros(200, np.complex64).tobytes()], "too_large"),
])
def test_bad_frames_reject_then_recover(cfg, frames, reason) -> None:
    dec = make_decoder("gr-stream", cfg)
    out = dec.decode(frames, 0.0)
    assert [r.reason for r in out if isinstance(r, Reject)] == [reason], out
    x, bursts = _signal(4)
    # auto: the first frame decided whether the stream's frames carry a header (a tag cut always needs it)
    with_header = cfg.pass_tags or cfg.cut_mode != "energy" or has_tag_header(memoryview(frames[-1]))
    payload = (tag_header(0, []) if with_header else b"") + x[:100].tobytes()
    good = [b"k", payload] if cfg.expect_key else [payload]
    assert not [r for r in dec.decode(good, 0.0) if isinstance(r, Reject) and r.reason != "stream_gap"]


def test_random_bytes_never_raise() -> None:
    rng = np.random.default_rng(0)
    for pass_tags in (None, True):
        dec = make_decoder("gr-stream", IngestConfig(pass_tags=pass_tags))
        for _ in range(300):
            head = struct.pack("=HB", 0x5FF0, 1) if rng.random() < 0.5 else b""
            dec.decode([head + rng.bytes(int(rng.integers(0, 200)))], 0.0)
        dec.flush(0.0)


# -- bounds on one message's tag header and on the tags kept --------------------------------------
def _tiny_tags(n: int) -> bytes:
    """A tag header of n tags of one byte each (nil key, value, srcid): 11 bytes a tag."""
    return struct.pack("=HBQQ", 0x5FF0, 1, 0, n) + (struct.pack("=Q", 0) + b"\x06\x06\x06") * n


def test_a_header_of_more_tags_than_the_cap_is_refused_before_it_is_read() -> None:
    """Only the frame's size bounded the count: 6.1 million tiny tags (a 64 MiB frame) took 40 s
    and a gigabyte to read. The cap is checked on the announced count, before any tag is read."""
    from rfclassify.serve.gr_stream import MAX_TAGS_PER_MESSAGE

    samples = np.zeros(64, np.complex64).tobytes()
    dec = make_decoder("gr-stream", IngestConfig(pass_tags=True))
    assert dec.decode([_tiny_tags(MAX_TAGS_PER_MESSAGE) + samples], 0.0) == []   # at the cap: read
    (r,) = dec.decode([_tiny_tags(MAX_TAGS_PER_MESSAGE + 1) + samples], 0.0)
    assert r.reason == "bad_tag_header" and f"{MAX_TAGS_PER_MESSAGE + 1} tags in one message" in r.detail
    assert "MAX_TAGS_PER_MESSAGE=4096" in r.detail
    # a count announced far past the cap, with the bytes for it missing, gives the same answer
    with pytest.raises(Exception, match="tags in one message"):
        parse_tag_header(memoryview(struct.pack("=HBQQ", 0x5FF0, 1, 0, 6_100_000) + b"\x06" * 64))


def test_the_tags_of_one_header_share_one_budget_of_values() -> None:
    """Each tag's PMT had a 100,000-value budget of its own: 4096 tags could make 400 million
    values. 101 tags of 1,000 values are past the one budget the header now has."""
    from rfclassify.serve.gr_stream import MAX_HEADER_VALUES

    assert MAX_HEADER_VALUES == 100_000
    big = list(range(1000))
    dec = make_decoder("gr-stream", IngestConfig(pass_tags=True))
    samples = np.zeros(64, np.complex64).tobytes()
    (r,) = dec.decode([tag_header(0, [(0, f"k{i}", big) for i in range(101)]) + samples], 0.0)
    assert r.reason == "bad_tag_header" and "more than MAX_HEADER_VALUES=100000 values together" in r.detail
    # 95 of them fit, and the stream goes on from the frame that was dropped
    out = dec.decode([tag_header(64, [(64, f"k{i}", big) for i in range(95)]) + samples], 0.0)
    assert all(isinstance(o, Reject) and o.reason == "stream_gap" for o in out)


def test_tags_with_large_values_are_kept_as_summaries_so_memory_stays_flat() -> None:
    """The tag log held 4096 tags whatever their size: tags of 8 MB vectors grew the daemon to
    gigabytes. A large value is now kept as its summary (what the meta echo showed anyway)."""
    import tracemalloc

    dec = make_decoder("gr-stream", IngestConfig(pass_tags=True, sample_rate_hz=1e6))
    big = np.zeros(256 << 10, np.uint8)
    quiet = np.zeros(1024, np.complex64)
    tracemalloc.start()
    try:
        dec.decode([tag_header(0, []) + quiet.tobytes()], 0.0)
        before = tracemalloc.get_traced_memory()[0]
        for k in range(1, 41):   # 10 MiB of tag values in all
            dec.decode([tag_header(k * 1024, [(k * 1024, "chan_taps", big)]) + quiet.tobytes()], 0.0)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 1 << 20, grown
    # a burst over such a tag shows it as the meta echo always did
    x, _ = _signal(5)
    pos = 41 * 1024
    out = dec.decode([tag_header(pos, [(pos + 3100, "chan_taps", big)]) + x[:6000].tobytes()], 0.0) + dec.flush(0.0)
    (b,) = [o for o in out if isinstance(o, Burst)]
    assert {"offset": pos + 3100, "key": "chan_taps", "value": "<uint8 vector of 262144>"} in b.meta["tags"]


def test_the_tag_log_is_bounded_in_bytes_and_keeps_the_newest(monkeypatch) -> None:
    import rfclassify.serve.burst_cutter as bc

    monkeypatch.setattr(bc, "MAX_TAG_LOG_BYTES", 64 << 10)
    log = bc._TagLog()
    for k in range(200):   # each under the per-value limit: kept whole, until the budget is spent
        log.add(StreamTag(k, "taps", np.zeros(3000, np.uint8)))
        assert log.held_bytes <= 64 << 10
    held = [t.offset for t, _ in log.tags]
    assert held == list(range(200 - len(held), 200)) and 15 <= len(held) <= 21
    log.add(StreamTag(500, "x" * 100_000, "y" * 100_000))   # a key and a symbol of 100,000 characters
    tag = log.tags[-1][0]
    assert len(tag.key) == bc.MAX_TAG_KEY_CHARS + 3 and str(tag.value) == "<symbol of 100000 characters>"


# -- rx_rate / rx_freq tags (what a UHD source writes with rx_time) --------------------------------
def test_rx_rate_and_rx_freq_tags_set_each_bursts_rate_frequency_and_time() -> None:
    """The sender's own tags were ignored: rate and frequency came from the config only, and a
    burst away from its rx_time tag had no time without a configured rate."""
    x, bursts = _signal(6)
    dec = make_decoder("gr-stream", IngestConfig(pass_tags=True, sample_rate_hz=1e6, center_freq_hz=100e6))
    out = []
    for pos, chunk in _chunks(x, 1500):
        tags = []
        if pos == 0:
            tags = [(0, "rx_time", (1000, 0.5)), (0, "rx_rate", 2e6), (0, "rx_freq", 915e6)]
        if pos <= 15000 < pos + 1500:   # a new rate and frequency between the second and third bursts,
            t = 1000.5 + 15000 / 2e6     # with the rx_time UHD writes with them
            tags = [(15000, "rx_freq", 868e6), (15000, "rx_rate", 4_000_000), (15000, "rx_time", (1000, t - 1000))]
        out += dec.decode([tag_header(pos, tags) + chunk.tobytes()], 0.0)
    out += dec.flush(0.0)
    assert all(isinstance(b, Burst) for b in out) and len(out) == len(bursts)
    assert [(b.sample_rate_hz, b.center_freq_hz) for b in out] == [(2e6, 915e6), (2e6, 915e6), (4e6, 868e6),
                                                                   (4e6, 868e6)]
    for b in out:   # extrapolated from the last rx_time with the tagged rate, not the configured one
        start = b.meta["offset_samples"]
        expected = 1000.5 + start / 2e6 if start < 15000 else 1000.5 + 15000 / 2e6 + (start - 15000) / 4e6
        assert b.time == pytest.approx(expected, abs=1e-9)
    # without the tags the configured values hold, as before
    dec = make_decoder("gr-stream", IngestConfig(sample_rate_hz=1e6, center_freq_hz=100e6))
    out = [b for _, c in _chunks(x, 1500) for b in dec.decode([c.tobytes()], 0.0)] + dec.flush(0.0)
    assert {(b.sample_rate_hz, b.center_freq_hz) for b in out} == {(1e6, 100e6)}


@pytest.mark.parametrize("key,value", [("rx_rate", 0.0), ("rx_rate", -2e6), ("rx_rate", float("nan")),
                                       ("rx_rate", "fast"), ("rx_freq", float("inf")), ("rx_freq", (1, 2))])
def test_an_rx_rate_or_rx_freq_that_is_not_a_number_is_a_bad_tag(key, value) -> None:
    x, bursts = _signal(7)
    dec = make_decoder("gr-stream", IngestConfig(pass_tags=True, sample_rate_hz=1e6, center_freq_hz=100e6))
    out = dec.decode([tag_header(0, [(0, key, value)]) + x.tobytes()], 0.0) + dec.flush(0.0)
    (r,) = [o for o in out if isinstance(o, Reject)]
    assert r.reason == "bad_tag" and r.detail.startswith(f"{key} tag at 0 has value ") and "(Hz)" in r.detail
    assert [(b.sample_rate_hz, b.center_freq_hz) for b in out if isinstance(b, Burst)] == [(1e6, 100e6)] * len(bursts)


# -- frames without a tag header where the cut needs one; auto decided once -----------------------
@pytest.mark.parametrize("cut_mode", ["tags", "start_end"])
def test_a_tag_cut_refuses_frames_without_a_tag_header_and_says_what_to_set(cut_mode) -> None:
    """A sink without pass_tags=True gave a tag cut nothing at all, without a word."""
    x, bursts = _signal(8)
    dec = make_decoder("gr-stream", IngestConfig(cut_mode=cut_mode))   # pass_tags auto
    out = [o for _, c in _chunks(x, 8000) for o in dec.decode([c.tobytes()], 0.0)] + dec.flush(0.0)
    assert len(out) == 5 and all(isinstance(r, Reject) and r.reason == "bad_tag_header" for r in out)
    assert f"cut_mode {cut_mode} cuts at the stream's tags" in out[0].detail
    assert out[0].detail.endswith("set pass_tags=True on the flowgraph's zeromq sink")
    with pytest.raises(ConfigError, match=f"cut_mode {cut_mode} cuts at the stream's tags: pass_tags must be"):
        IngestConfig(cut_mode=cut_mode, pass_tags=False)   # no tag would ever reach the cut
    # in a stream with headers, the one frame without is refused and the others' bursts are cut
    dec = make_decoder("gr-stream", IngestConfig(cut_mode="tags"))
    out = []
    for pos, chunk in _chunks(x, 1000):
        tags = [(s, "packet_len", n) for s, n in bursts if pos <= s < pos + chunk.shape[0]]
        frame = chunk.tobytes() if pos == 15000 else tag_header(pos, tags) + chunk.tobytes()
        out += dec.decode([frame], 0.0)
    assert [r.reason for r in out if isinstance(r, Reject)] == ["bad_tag_header", "stream_gap"]
    assert [(b.meta["offset_samples"], b.n_samples) for b in out if isinstance(b, Burst)] == bursts


def test_auto_decides_on_the_first_frame_for_the_decoders_life() -> None:
    """Each frame was guessed on its own: plain samples that began with the header's magic and
    version (about one frame in 2**24) were taken for a header and the frame, a burst in it, lost."""
    rng = np.random.default_rng(9)
    x = (0.01 * (rng.standard_normal(16384) + 1j * rng.standard_normal(16384))).astype(np.complex64)
    x[9000:13000] += np.exp(2j * np.pi * rng.random(4000)).astype(np.complex64)
    x[8192] = complex(struct.unpack("<f", b"\xf0\x5f\x01\x3c")[0], x[8192].imag)   # the magic, at a frame's start
    frames = [x[:8192].tobytes(), x[8192:].tobytes()]
    assert has_tag_header(memoryview(frames[1]))
    dec = make_decoder("gr-stream", IngestConfig())
    out = [o for f in frames for o in dec.decode([f], 0.0)] + dec.flush(0.0)
    assert [type(o).__name__ for o in out] == ["Burst"] and out[0].n_samples >= 4000
    # the first frame too: the magic alone, with a tag count and offset that do not fit, is no header
    dec = make_decoder("gr-stream", IngestConfig())
    out = dec.decode([frames[1]], 0.0) + dec.flush(0.0)
    assert [type(o).__name__ for o in out] == ["Burst"]
    # a stream that began with headers keeps them: a frame without one is refused, not read as samples
    dec = make_decoder("gr-stream", IngestConfig())
    assert dec.decode([tag_header(0, []) + x[:8192].tobytes()], 0.0) == []
    (r,) = dec.decode([x[8200:].tobytes()], 0.0)
    assert r.reason == "bad_tag_header" and "pass_tags auto, and the stream's first clean frame had one" in r.detail


def _tagged_stream(x: np.ndarray, size: int, bursts: list[tuple[int, int]]) -> list[bytes]:
    """x as pub_sink(pass_tags=True) frames of `size` samples, a packet_len tag at each burst."""
    return [tag_header(pos, [(s, "packet_len", n) for s, n in bursts if pos <= s < pos + c.shape[0]]) + c.tobytes()
            for pos, c in _chunks(x, size)]


@pytest.mark.parametrize("corrupt", ["cut to 24 bytes", "cut to 40 bytes", "cut to 43 bytes", "garbled PMT",
                                     "garbled tag count"])
def test_auto_is_decided_by_a_clean_frame_not_by_a_corrupt_first_header(corrupt) -> None:
    """pass_tags auto latched "no header" on a first frame that was a header cut short or garbled:
    every good header frame after it was a bad_payload_size, or read as samples with the header's
    bytes in them. A corrupt frame now decides nothing, and the stream's bursts are all found."""
    x, bursts = _signal(10)
    frames = _tagged_stream(x, 2000, bursts)
    first = frames[0]
    assert struct.unpack_from("=HBQQ", first) == (0x5FF0, 1, 0, 0)
    first = tag_header(0, [(0, "rx_rate", 1e6), (0, "burst_id", "x")]) + first[19:]
    broken = {"cut to 24 bytes": first[:24], "cut to 40 bytes": first[:40], "cut to 43 bytes": first[:43],
              "garbled PMT": first[:37] + b"\xff" + first[38:],   # the rx_rate value's type byte
              "garbled tag count": first[:11] + struct.pack("=Q", 10**6) + first[19:]}[corrupt]
    dec = make_decoder("gr-stream", IngestConfig(sample_rate_hz=1e6))
    out = [o for f in [broken, *frames[1:]] for o in dec.decode([f], 0.0)] + dec.flush(0.0)
    rejects = [o for o in out if isinstance(o, Reject)]
    # one reject, for the corrupt frame: at once when it cannot be samples either, else once a
    # clean frame has shown the stream has headers (it was held until then, not read as samples)
    assert [r.reason for r in rejects] == ["bad_tag_header"], rejects
    assert "no clean tag header" in rejects[0].detail
    reference = make_decoder("gr-stream", IngestConfig(sample_rate_hz=1e6, pass_tags=True))
    expected = [o for f in frames[1:] for o in reference.decode([f], 0.0)] + reference.flush(0.0)
    assert [(b.meta["offset_samples"], b.n_samples) for b in out if isinstance(b, Burst)] == [
        (b.meta["offset_samples"], b.n_samples) for b in expected] and len(expected) == len(bursts)


def test_an_undecided_frame_that_is_neither_samples_nor_a_header_is_rejected_without_deciding() -> None:
    x, _ = _signal(11)
    for frame, reason in [(x[:100].tobytes() + b"\x00", "bad_payload_size"),                 # no magic
                          (tag_header(0, []) + x[:100].tobytes() + b"\x00", "bad_payload_size"),  # partial item
                          (tag_header(0, [(0, "burst_id", 1)])[:29], "bad_tag_header")]:      # cut short
        for stream_has_headers in (True, False):
            dec = make_decoder("gr-stream", IngestConfig())
            (r,) = dec.decode([frame], 0.0)
            assert r.reason == reason and "pass_tags auto is undecided until a clean frame" in r.detail, r
            good = (tag_header(0, []) if stream_has_headers else b"") + x[:200].tobytes()
            assert dec.decode([good], 0.0) == []
            assert dec.decode([(tag_header(200, []) if stream_has_headers else b"") + x[200:400].tobytes()], 0.0) == []


def test_a_frame_held_while_undecided_is_read_as_samples_when_the_stream_has_no_headers() -> None:
    """Plain samples that start with the magic (one frame in 2**24) as the stream's first frame
    are held, not lost: a plain frame after them decides "no header" and they are read first."""
    rng = np.random.default_rng(12)
    x = (0.01 * (rng.standard_normal(16384) + 1j * rng.standard_normal(16384))).astype(np.complex64)
    x[3000:7000] += np.exp(2j * np.pi * rng.random(4000)).astype(np.complex64)
    x[0] = complex(struct.unpack("<f", b"\xf0\x5f\x01\x3c")[0], x[0].imag)   # the magic, at the stream's start
    assert has_tag_header(memoryview(x[:8192].tobytes()))
    dec = make_decoder("gr-stream", IngestConfig())
    assert dec.decode([x[:8192].tobytes()], 0.0) == []   # held
    out = dec.decode([x[8192:].tobytes()], 0.0) + dec.flush(0.0)
    reference = make_decoder("gr-stream", IngestConfig(pass_tags=False))
    expected = reference.decode([x[:8192].tobytes()], 0.0) + reference.decode([x[8192:].tobytes()], 0.0)
    expected += reference.flush(0.0)
    assert len(out) == len(expected) == 1 and np.array_equal(out[0].iq, expected[0].iq)
    assert out[0].meta["offset_samples"] == expected[0].meta["offset_samples"]


def test_a_header_frame_in_a_stream_decided_without_headers_says_what_to_change() -> None:
    """Decided "no header" (or set false), a later header frame was a bad_payload_size with no hint."""
    x, _ = _signal(13)
    for pass_tags, hint in [(None, "the stream's first clean frame had none (pass_tags auto decides once)"),
                            (False, "set [input] pass_tags = true")]:
        dec = make_decoder("gr-stream", IngestConfig(pass_tags=pass_tags))
        assert dec.decode([x[:100].tobytes()], 0.0) == []
        (r,) = dec.decode([tag_header(100, [(120, "burst_id", 7)]) + x[100:300].tobytes()], 0.0)
        assert r.reason == "bad_payload_size" and hint in r.detail
        assert "it starts with a gr-zeromq tag header" in r.detail
