"""Native burst messages: round trips through encode_native, and every bad message becomes a Reject."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zmq

from rfclassify.serve.bursts import Burst, Reject, Truth
from rfclassify.serve.decoders import REASONS, IngestConfig, make_decoder
from rfclassify.serve.native import encode_native


def _iq(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64) * 0.3


def _one(out: list) -> Burst | Reject:
    assert len(out) == 1
    return out[0]


def test_cf32_round_trip_is_exact_and_zero_copy() -> None:
    dec = make_decoder("native")
    iq = _iq(1000)
    header = {"sample_rate": 1e6, "burst_id": "b7", "stream": "s1", "center_freq": 2.4e9,
              "time": 12.5, "meta": {"k": [1, 2]}, "label": "QPSK", "snr_db": 10}
    frames = encode_native(iq, header)
    b = _one(dec.decode(frames, 3.0))
    assert isinstance(b, Burst)
    np.testing.assert_array_equal(b.iq, iq)
    assert b.iq.dtype == np.complex64
    assert not b.iq.flags.owndata  # a view over the payload frame, not a copy
    assert (b.sample_rate_hz, b.burst_id, b.stream, b.center_freq_hz, b.time) == (1e6, "b7", "s1", 2.4e9, 12.5)
    assert b.meta == {"k": [1, 2]} and b.truth == Truth("QPSK", 10.0) and b.received_s == 3.0


@pytest.mark.parametrize("dtype,tol", [("ci16_le", 1 / 32768), ("ci8", 1 / 128), ("cu8", 1 / 128)])
def test_integer_dtypes_scale_to_floats(dtype: str, tol: float) -> None:
    iq = np.clip(_iq(500, 1).view(np.float32), -0.99, 0.99).view(np.complex64)  # inside full scale
    frames = encode_native(iq, {"sample_rate": 1e6}, dtype=dtype)
    b = _one(make_decoder("native").decode(frames, 0.0))
    assert isinstance(b, Burst) and b.iq.dtype == np.complex64
    np.testing.assert_allclose(b.iq, iq, atol=tol)
    # the scale is 1/32768 (1/128): integer 16384 (64; cu8 191.5, centred on 127.5) is 0.5
    half = {"ci16_le": np.array([16384, -16384], "<i2"), "ci8": np.array([64, -64], "i1"),
            "cu8": np.array([191, 64], "u1")}[dtype]
    hdr = json.dumps({"sample_rate": 1, "dtype": dtype}).encode()
    b = _one(make_decoder("native").decode([hdr, half.tobytes()], 0.0))
    expect = np.complex64(complex(63.5, -63.5) / 128) if dtype == "cu8" else np.complex64(0.5 - 0.5j)
    assert b.iq[0] == expect


def test_topic_frame_names_the_stream_and_truth_absent() -> None:
    frames = encode_native(_iq(64), {"sample_rate": 2e6}, topic="sensorA")
    assert len(frames) == 3
    b = _one(make_decoder("native").decode(frames, 0.0))
    assert isinstance(b, Burst) and b.stream == "sensorA" and b.truth is None and b.meta == {}


def test_zmq_frames_without_copy_are_accepted() -> None:
    ctx = zmq.Context.instance()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        port = a.bind_to_random_port("tcp://127.0.0.1")
        b.connect(f"tcp://127.0.0.1:{port}")
        iq = _iq(4096)
        b.send_multipart(encode_native(iq, {"sample_rate": 1e6}))
        assert a.poll(5000)
        frames = a.recv_multipart(copy=False)
        out = _one(make_decoder("native").decode(frames, 0.0))
        assert isinstance(out, Burst)
        np.testing.assert_array_equal(out.iq, iq)
    finally:
        a.close(0)
        b.close(0)


GOOD = json.dumps({"sample_rate": 1e6}).encode()
PAYLOAD = np.zeros(16, np.complex64).tobytes()


@pytest.mark.parametrize("frames,reason,needle", [
    ([PAYLOAD], "bad_frames", "1 frames"),
    ([b"t", GOOD, PAYLOAD, b"x"], "bad_frames", "4 frames"),
    ([b"{not json", PAYLOAD], "bad_json", ""),
    ([b"\xff\xfe", PAYLOAD], "bad_json", ""),
    ([b"[1, 2]", PAYLOAD], "bad_header", "object"),
    ([json.dumps({"dtype": "cf32_le"}).encode(), PAYLOAD], "bad_header", "sample_rate"),
    ([json.dumps({"sample_rate": -1}).encode(), PAYLOAD], "bad_header", "sample_rate"),
    ([json.dumps({"sample_rate": "fast"}).encode(), PAYLOAD], "bad_header", "sample_rate"),
    ([b'{"sample_rate": NaN}', PAYLOAD], "bad_header", "sample_rate"),
    ([json.dumps({"sample_rate": 1, "meta": [1]}).encode(), PAYLOAD], "bad_header", "meta"),
    ([json.dumps({"sample_rate": 1, "burst_id": True}).encode(), PAYLOAD], "bad_header", "burst_id"),
    ([json.dumps({"sample_rate": 1, "center_freq": "x"}).encode(), PAYLOAD], "bad_header", "center_freq"),
    ([b'{"sample_rate": 1, "time": Infinity}', PAYLOAD], "bad_header", "time"),
    ([json.dumps({"sample_rate": 1, "time": [1]}).encode(), PAYLOAD], "bad_header", "time"),
    ([json.dumps({"sample_rate": 1, "dtype": "cf64_le"}).encode(), PAYLOAD], "unknown_dtype", "cf64_le"),
    ([json.dumps({"sample_rate": 1, "dtype": 7}).encode(), PAYLOAD], "bad_header", "dtype"),
    ([GOOD, PAYLOAD[:-3]], "bad_payload_size", "multiple of 8"),
    ([json.dumps({"sample_rate": 1, "dtype": "ci16_le"}).encode(), b"\x00" * 6], "bad_payload_size", "multiple of 4"),
    ([GOOD, b""], "empty_payload", ""),
    ([b"[" * 50000, PAYLOAD], "bad_json", ""),
    # JSON integers past float range, for every numeric field (they once raised OverflowError)
    ([b'{"sample_rate": 1' + b"0" * 400 + b"}", PAYLOAD], "bad_header", "'sample_rate' must be a positive finite number"),
    ([b'{"sample_rate": 1, "snr_db": -1' + b"0" * 400 + b"}", PAYLOAD], "bad_header", "'snr_db' must be a finite number, got -1000"),
    ([b'{"sample_rate": 1, "center_freq": 1' + b"0" * 400 + b"}", PAYLOAD], "bad_header", "center_freq"),
    ([b'{"sample_rate": 1, "time": 1' + b"0" * 400 + b"}", PAYLOAD], "bad_header", "time"),
    ([b" " * 70000 + GOOD, PAYLOAD], "too_large", "header"),
])
def test_bad_messages_reject_and_decoder_keeps_working(frames, reason, needle) -> None:
    assert reason in REASONS
    dec = make_decoder("native", IngestConfig(stream="fallback"))
    r = _one(dec.decode(frames, 0.0))
    assert isinstance(r, Reject), r
    assert r.reason == reason and needle in r.detail
    ok = _one(dec.decode(encode_native(_iq(64), {"sample_rate": 1.0}), 0.0))
    assert isinstance(ok, Burst) and ok.stream == "fallback"


def test_reject_keeps_burst_id_and_stream_when_header_parsed() -> None:
    hdr = json.dumps({"sample_rate": 1, "burst_id": 42, "stream": "s9"}).encode()
    r = _one(make_decoder("native").decode([hdr, b"abc"], 0.0))
    assert isinstance(r, Reject) and (r.reason, r.burst_id, r.stream) == ("bad_payload_size", 42, "s9")


def test_100_mb_payload_is_too_large_without_decoding() -> None:
    big = bytearray(100 * 1024 * 1024)
    r = _one(make_decoder("native").decode([GOOD, big], 0.0))
    assert isinstance(r, Reject) and r.reason == "too_large" and str(len(big) + len(GOOD)) in r.detail


def test_random_bytes_never_raise() -> None:
    rng = np.random.default_rng(5)
    dec = make_decoder("native")
    for _ in range(300):
        frames = [rng.bytes(int(rng.integers(0, 40))) for _ in range(int(rng.integers(0, 5)))]
        out = dec.decode(frames, 0.0)
        assert len(out) == 1 and isinstance(out[0], (Burst, Reject))
