"""A PMT dict whose keys share one Python hash: numbers hash to themselves (mod 2**61 - 1), so a
sender makes such keys for free, and a Python dict compares each new key with every key of its
hash. 33,000 complex keys complex(1000003 k, -k) (one 668 KB PDU) took 7 s of CPU to read, and
five such PDUs held a daemon's ingest for 49 s. Past MAX_KEYS_PER_HASH such keys the dict is now a
bad_pmt; below it every dict reads as before."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

import numpy as np
import pytest

from rfclassify._exceptions import MessageError
from rfclassify.serve import pmt
from rfclassify.serve.bursts import Burst, Reject
from rfclassify.serve.decoders import IngestConfig, make_decoder
from rfclassify.serve.pmt import Pair, deserialize, pmt_list, serialize


def _colliding(k: int) -> complex:
    """Keys of one hash, 0: hash(re) + 1000003 * hash(im) cancels (from 2 on: hash(-1.0) is -2)."""
    return complex(1000003 * (k + 2), -(k + 2))


def _dict_bytes(keys: list, value: object = 1) -> bytes:
    """A PMT dict of keys, written entry by entry (a Python dict of them would be slow to build too)."""
    entry = serialize(value)
    return b"".join(b"\x09\x07" + serialize(k) + entry for k in keys) + b"\x06"


def _pdu(meta: bytes, n: int = 256) -> bytes:
    return b"\x07" + meta + serialize(np.ones(n, np.complex64))


KEY_KINDS: dict[str, Callable[[int], object]] = {
    "complex": _colliding,
    "tuple": lambda k: (_colliding(k),),              # a tuple's hash is its items'
    "list": lambda k: pmt_list([_colliding(k), 1]),   # so is a Pair chain's
}


@pytest.mark.parametrize("kind", list(KEY_KINDS))
def test_a_dict_of_many_keys_of_one_hash_is_a_bad_pmt(kind) -> None:
    keys = [KEY_KINDS[kind](k) for k in range(3000)]
    assert len({hash(k) for k in keys}) == 1
    with pytest.raises(MessageError) as info:
        deserialize(_dict_bytes(keys))
    assert info.value.reason == "bad_pmt"
    assert "keys of one Python hash" in info.value.detail and "hash flood" in info.value.detail


def test_up_to_the_limit_keys_of_one_hash_read_and_echo_as_before() -> None:
    limit = pmt.MAX_KEYS_PER_HASH
    keys = [_colliding(k) for k in range(limit)]
    assert deserialize(_dict_bytes(keys + keys[:3], 2)) == {k: 2 for k in keys}   # repeated keys are no new ones
    with pytest.raises(MessageError, match="hash flood"):
        deserialize(_dict_bytes(keys + [_colliding(limit)]))
    # what a PDU's metadata echoes is unchanged: symbols as they are, other keys as their text; -1 and
    # -2 share a hash and stay apart, #f, 0 and -0.0 are one key (Python's ==), the last value kept
    meta = b"".join(b"\x09" + serialize(Pair(k, v)) for k, v in [
        ("burst_id", 7), ("gain", 1.5), (-1, "a"), (-2, "b"), (False, "f"), (0, "zero"), (-0.0, "z")]) + b"\x06"
    (b,) = make_decoder("gr-pdu", IngestConfig(sample_rate_hz=1e6)).decode([_pdu(meta)], 0.0)
    assert isinstance(b, Burst) and b.burst_id == 7
    assert b.meta == {"gain": 1.5, "-1": "a", "-2": "b", "False": "z"}


def test_reading_keys_of_one_hash_costs_no_more_than_reading_distinct_keys() -> None:
    """In proportion to the message, whatever the keys: the same decoder, the same number of keys."""
    n = 20_000
    flood = _pdu(_dict_bytes([_colliding(k) for k in range(n)]))
    control = _pdu(_dict_bytes([complex(k, k) for k in range(n)]))
    assert len(flood) == len(control)
    dec = make_decoder("gr-pdu", IngestConfig(sample_rate_hz=1e6))

    def cpu_s(message: bytes) -> float:
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            dec.decode([message], 0.0)
            best = min(best, time.process_time() - t0)
        return best

    # before: about 40x the control's time at 20,000 keys (and growing with the square of the count)
    assert cpu_s(flood) <= 5 * cpu_s(control) + 0.01


def test_a_pdu_of_colliding_keys_is_rejected_and_the_next_one_decodes() -> None:
    dec = make_decoder("gr-pdu", IngestConfig(sample_rate_hz=1e6))
    (r,) = dec.decode([_pdu(_dict_bytes([_colliding(k) for k in range(3000)]))], 0.0)
    assert isinstance(r, Reject) and r.reason == "bad_pmt" and "hash flood" in r.detail
    (ok,) = dec.decode([serialize(Pair({"burst_id": 3}, np.ones(64, np.complex64)))], 0.0)
    assert isinstance(ok, Burst) and ok.burst_id == 3


def test_a_stream_tag_of_colliding_keys_is_a_bad_tag_header() -> None:
    """Tag headers are read by the same PmtReader: a tag's value (or key) may be such a dict."""
    flood = _dict_bytes([_colliding(k) for k in range(3000)])
    samples = np.zeros(64, np.complex64).tobytes()
    dec = make_decoder("gr-stream", IngestConfig(sample_rate_hz=1e6, pass_tags=True))
    for key, value in ((serialize("meta"), flood), (flood, serialize(1))):
        header = struct.pack("=HBQQ", 0x5FF0, 1, 0, 1) + struct.pack("=Q", 0) + key + value + serialize("src")
        (r,) = dec.decode([header + samples], 0.0)
        assert isinstance(r, Reject) and r.reason == "bad_tag_header" and "hash flood" in r.detail, r
