"""gr-stream decoding with frames laid out like gr-zeromq's (real GNU Radio: tests/test_gnuradio_*)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from rfclassify.dsp.dc_block import DcBlocker
from rfclassify.serve.bursts import Burst, Reject, Truth
from rfclassify.serve.decoders import IngestConfig, make_decoder
from rfclassify.serve.gr_stream import parse_tag_header
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
    (IngestConfig(), [struct.pack("=HBQQ", 0x5FF0, 1, 0, 2**40) + b"\x00" * 64], "bad_tag_header"),
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
    payload = (tag_header(0, []) if cfg.pass_tags else b"") + x[:100].tobytes()
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
