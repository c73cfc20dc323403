"""PMT deserialization: golden bytes written by GNU Radio 3.10.5, round trips, corrupt input."""

from __future__ import annotations

import numpy as np
import pytest

from rfclassify._exceptions import MessageError
from rfclassify.serve.pmt import Pair, deserialize, pmt_list, read_pmt, serialize

# Captured from /usr/bin/python3 with GNU Radio 3.10.5: pmt.serialize_str(...).hex()
GOLDEN = {
    # cons(dict{burst_id: 5, x: 1.5, u: uint64 2**40, t: #t}, init_c32vector(2, [1+2j, 3-4j]))
    "07090702000174000907020001750b0000010000000000090702000178043ff8000000000000090702000862"
    "757273745f69640300000005060a0a0000000201003f8000004000000040400000c0800000":
        Pair({"t": True, "u": 2**40, "x": 1.5, "burst_id": 5}, np.array([1 + 2j, 3 - 4j], np.complex64)),
    "0d0000010000000000": 2**40,
    "03fffffffd": -3,
    "053ff00000000000004000000000000000": 1 + 2j,
    "0c00000002030000000102000161": (1, "a"),
    "0a080000000301003f8000004000000040400000": np.array([1, 2, 3], np.float32),
    "0a00000000030100010203": np.array([1, 2, 3], np.uint8),
    "0a03000000010100fffe": np.array([-2], np.int16),
    "0a0b00000001010000000000000000003ff0000000000000": np.array([1j], np.complex128),
    "0a09000000000100": np.array([], np.float64),
    "080000000203000000010300000001": [1, 1],
    "06": None,
    "01": False,
    "0703000000010300000002": Pair(1, 2),
    "07030000000107030000000206": pmt_list([1, 2]),
    "0bffffffffffffffff": 2**64 - 1,
}


def _equal(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, Pair):
        return isinstance(b, Pair) and _equal(a.car, b.car) and _equal(a.cdr, b.cdr)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_equal, a, b))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("hexbytes", list(GOLDEN))
def test_golden_gnuradio_bytes(hexbytes: str) -> None:
    value = deserialize(bytes.fromhex(hexbytes))
    assert _equal(value, GOLDEN[hexbytes]), value


@pytest.mark.parametrize("hexbytes", [h for h in GOLDEN if not h.startswith("0709")])
def test_serialize_writes_gnuradio_bytes(hexbytes: str) -> None:
    # GNU Radio orders dict keys newest first: that one skipped
    assert serialize(GOLDEN[hexbytes]).hex() == hexbytes


def test_serialize_takes_each_integer_to_the_narrowest_pmt_that_holds_it() -> None:
    assert [serialize(v)[0] for v in (-2**31, 2**31, -2**63, 2**63, 2**64 - 1)] == [0x03, 0x0d, 0x0d, 0x0b, 0x0b]
    for v in (2**64, -2**63 - 1):
        with pytest.raises(TypeError, match="no PMT integer"):
            serialize(v)


def test_round_trip_nested() -> None:
    value = Pair({"rx_time": (5, 0.25), "a": pmt_list(["x", {"y": 2.5}]), "v": [None, True]},
                 np.arange(5, dtype=np.complex64) * (1 - 1j))
    assert _equal(deserialize(serialize(value)), value)


def test_long_list_and_dict_do_not_recurse() -> None:
    big = {f"k{i}": i for i in range(5000)}
    assert deserialize(serialize(big)) == big
    items = list(range(20000))
    out = deserialize(serialize(pmt_list(items)))
    n = 0
    while out is not None:
        assert out.car == n
        out, n = out.cdr, n + 1
    assert n == 20000


def test_pairs_compare_hash_and_print_along_long_lists() -> None:
    # the generated methods recursed along the cdr: RecursionError past ~1,000 items
    a, b = pmt_list(list(range(50_000))), pmt_list(list(range(50_000)))
    assert a == b and hash(a) == hash(b)
    assert a != pmt_list(list(range(49_999)) + [-1]) and a != pmt_list(list(range(50_001)))
    assert repr(pmt_list([1, "x"])) == "Pair(car=1, cdr=Pair(car='x', cdr=None))"
    assert len(repr(a)) > 50_000


def test_any_dict_key_gnu_radio_allows_is_read() -> None:
    long_key = pmt_list(list(range(50_000)))  # a message's worth of list as a key
    vector_key = (1, np.arange(3, dtype=np.float32))  # a tuple holding a vector: Python cannot hash it
    data = b"".join([b"\x09", serialize(Pair(long_key, 1)), b"\x09", serialize(Pair(vector_key, 2)), b"\x06"])
    out = deserialize(data)
    assert out[long_key] == 1
    assert out[repr(vector_key)] == 2 and len(out) == 2


def test_read_pmt_returns_offset_for_sequences() -> None:
    data = serialize("packet_len") + serialize(100) + serialize(None)
    key, pos = read_pmt(data)
    value, pos = read_pmt(data, pos)
    src, pos = read_pmt(data, pos)
    assert (key, value, src, pos) == ("packet_len", 100, None, len(data))


CORRUPT = {
    "uniform vector claims 2**32-1 c32 items": "0a0a" + "ffffffff" + "0100" + "00" * 16,
    "vector claims 2**31 items": "08" + "80000000" + "06",
    "symbol longer than the data": "02ffff616263",
    "truncated double": "043ff0",
    "unknown type byte": "7f",
    "unknown uniform item type": "0a2000000001010000",
    "empty input": "",
    "dict entry not a pair": "09030000000106",
    "trailing bytes": "0606",
    "deep nesting": "07" * 200 + "06" * 201,
    "pair without cdr": "0703000000",
}


@pytest.mark.parametrize("name", list(CORRUPT))
def test_corrupt_input_is_bad_pmt(name: str) -> None:
    with pytest.raises(MessageError) as info:
        deserialize(bytes.fromhex(CORRUPT[name]))
    assert info.value.reason == "bad_pmt"


def test_random_bytes_only_ever_raise_bad_pmt() -> None:
    rng = np.random.default_rng(1)
    for _ in range(2000):
        data = rng.bytes(int(rng.integers(0, 64)))
        try:
            deserialize(data)
        except MessageError as exc:
            assert exc.reason == "bad_pmt"


def test_value_count_is_bounded() -> None:
    data = serialize([None] * 1000)
    with pytest.raises(MessageError):
        deserialize(data, max_values=500)
