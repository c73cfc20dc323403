"""Mutation fuzzing of the three decoders: valid messages with their header fields swapped
for awkward values and their bytes flipped, cut and spliced. Whatever comes in, a decoder
returns bursts and rejects (it never raises), and every record the daemon would publish for
them is strict JSON. Seeded, so a failure reproduces."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from rfclassify._exceptions import MessageError
from rfclassify.dsp.windows import BucketPolicy, burst_to_windows
from rfclassify.serve.bursts import Burst, Reject
from rfclassify.serve.decoders import IngestConfig, make_decoder
from rfclassify.serve.pmt import Pair, serialize
from rfclassify.serve.results import encode, reject_record

# values a sender might put in any field: wrong types, non-finite floats, integers past float range
AWKWARD = [None, True, 0, -1, 2 ** 70, 10 ** 400, -10 ** 400, 1e308, float("nan"), float("inf"), -0.0, 1e-320,
           "", "x" * 300, [], {}, [1, [2, [3]]], {"a": {"b": float("nan")}}]
FIELDS = ("sample_rate", "burst_id", "stream", "center_freq", "time", "meta", "label", "snr_db", "dtype", "extra")


def _strict(frame: bytes) -> object:
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")
    return json.loads(frame, parse_constant=refuse)


def _mutated(data: bytes, rng: np.random.Generator) -> bytes:
    b = bytearray(data)
    for _ in range(int(rng.integers(1, 6))):
        op, at = int(rng.integers(0, 5)), int(rng.integers(0, len(b) + 1))
        if op == 0 and at < len(b):
            b[at] ^= 1 << int(rng.integers(0, 8))
        elif op == 1 and at < len(b):
            b[at] = int(rng.integers(0, 256))
        elif op == 2:
            b[at:at] = rng.bytes(int(rng.integers(1, 9)))
        elif op == 3:
            del b[at:at + int(rng.integers(1, 9))]
        else:
            del b[at:]
    return bytes(b)


def _fields(rng: np.random.Generator) -> dict:
    fields = {"sample_rate": 1e6, "burst_id": 7, "stream": "s", "center_freq": 1e8, "time": 1.5, "meta": {"k": 1},
              "label": "QPSK", "snr_db": 5.0}
    for key in FIELDS:
        if rng.random() < 0.3:
            fields[key] = AWKWARD[int(rng.integers(0, len(AWKWARD)))]
    return fields


def _native(rng: np.random.Generator, iq: np.ndarray) -> list[bytes]:
    fields = _fields(rng)
    header = json.dumps(fields).encode()        # Python writes NaN and Infinity, as a careless sender would
    frames = [header, iq[:int(rng.integers(1, iq.size))].tobytes()]
    frames = [_mutated(f, rng) if rng.random() < 0.3 else f for f in frames]
    return [b"topic", *frames] if rng.random() < 0.2 else frames


def _pdu(rng: np.random.Generator, iq: np.ndarray) -> list[bytes]:
    meta = {k: v for k, v in _fields(rng).items() if not isinstance(v, (list, dict)) and not (
        isinstance(v, int) and not -2 ** 63 <= v < 2 ** 64)}           # what a PMT can hold
    if rng.random() < 0.3:
        meta["rx_time"] = (int(rng.integers(0, 2 ** 40)), float(rng.choice([0.5, np.nan, np.inf])))
    frame = serialize(Pair(meta, iq[:int(rng.integers(0, iq.size))]))
    return [_mutated(frame, rng) if rng.random() < 0.6 else frame]


def _stream(rng: np.random.Generator, iq: np.ndarray) -> list[bytes]:
    data = iq[:int(rng.integers(0, iq.size))].tobytes()
    if rng.random() < 0.5:
        offset = int(rng.integers(0, 10 ** 6))
        tags = [(int(rng.integers(0, 10 ** 6)), "packet_len", int(rng.integers(-5, 5000))),
                (int(rng.integers(0, 10 ** 6)), "burst", bool(rng.integers(0, 2)) if rng.random() < 0.9 else 3),
                (offset, "rx_time", (5, float(rng.choice([0.25, np.nan])))),
                (offset, "snr_db", float(rng.choice([1.0, np.nan, np.inf])))]
        head = struct.pack("=HBQQ", 0x5FF0, 1, offset, len(tags))
        for at, key, value in tags:
            head += struct.pack("=Q", at) + serialize(key) + serialize(value) + serialize("src")
        data = head + data
    data = _mutated(data, rng) if rng.random() < 0.5 else data
    return [b"key", data] if rng.random() < 0.5 else [data]


def _published(outputs: list[Burst | Reject]) -> None:
    """Each output as the daemon would publish it (a burst's echoed fields; a reject record),
    checked to be strict JSON."""
    for out in outputs:
        if isinstance(out, Reject):
            _strict(encode(b"reject", reject_record(out))[1])
            continue
        try:
            burst_to_windows(out.iq, BucketPolicy())
        except MessageError:
            continue
        echoed = {"burst_id": out.burst_id, "stream": out.stream, "center_freq": out.center_freq_hz,
                  "time": out.time, "meta": out.meta,
                  "truth": None if out.truth is None else {"label": out.truth.label, "snr_db": out.truth.snr_db}}
        _strict(encode(b"result", echoed)[1])


@pytest.mark.parametrize("fmt,config,make", [
    ("native", {}, _native),
    ("gr-pdu", {"sample_rate_hz": 1e6}, _pdu),
    ("gr-stream", {"sample_rate_hz": 1e6, "cut_mode": "energy"}, _stream),
    ("gr-stream", {"sample_rate_hz": 1e6, "cut_mode": "tags", "pass_tags": True}, _stream),
    ("gr-stream", {"sample_rate_hz": 1e6, "cut_mode": "start_end", "start_tag": "burst", "end_tag": "burst",
                   "pass_tags": True}, _stream),
])
def test_mutated_messages_never_raise_and_publish_strict_json(fmt, config, make) -> None:
    rng = np.random.default_rng(20261206)
    iq = (rng.standard_normal(700) + 1j * rng.standard_normal(700)).astype(np.complex64)
    decoder = make_decoder(fmt, IngestConfig(**config))
    for n in range(6000):
        frames = make(rng, iq)
        _published(decoder.decode(frames, float(n)))
    _published(decoder.flush(6000.0))


def test_a_daemon_fed_mutated_messages_answers_each_once_in_strict_json(tiny_model_dir, tmp_path, serving) -> None:
    """The same native messages through a running daemon: each is answered once (a result or
    a reject), every published record is strict JSON, and the daemon stays up."""
    import time

    import zmq

    from rfclassify.serve.demo import local_config

    rng = np.random.default_rng(20261207)
    iq = (rng.standard_normal(700) + 1j * rng.standard_normal(700)).astype(np.complex64)
    n = 300
    with serving(local_config(tmp_path, model_dir=str(tiny_model_dir), backend="onnxruntime")) as (d, push, c):
        raw = zmq.Context.instance().socket(zmq.SUB)
        raw.setsockopt(zmq.SUBSCRIBE, b"")
        raw.setsockopt(zmq.RCVHWM, 0)
        raw.setsockopt(zmq.RCVTIMEO, 30000)
        raw.connect(d.pipeline.output_endpoint)
        time.sleep(1.0)             # the subscription reaches the PUB socket (slow joiner)
        try:
            for _ in range(n):
                push.send_multipart(_native(rng, iq))
            assert c.wait_for(n, 60), f"{c.count()} of {n} answered"
            records = [raw.recv_multipart()[1] for _ in range(n)]
        finally:
            raw.close(0)
        c.stop()
        status = d.status()
    for record in records:
        _strict(record)
    counters = status["counters"]
    assert status["health"] != "failed" and counters["messages"] == n
    assert len(c.results) + len(c.rejects) == n and counters["classified"] == len(c.results) > 0
    assert len(c.rejects) == counters["rejected_total"] > 0
