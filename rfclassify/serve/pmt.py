"""GNU Radio PMT (polymorphic type) serialization, the subset gr-zeromq puts on the wire.

Byte format (gnuradio-runtime/lib/pmt/pmt_serialize.cc, checked against GNU Radio 3.10.5):
one type byte, then big-endian fields.

    0x00 #t   0x01 #f   0x06 nil (also the end of a list or dict)
    0x02 symbol        u16 length, bytes (UTF-8)
    0x03 int32         0x0d int64        0x0b uint64        0x04 double     0x05 complex (2 doubles)
    0x07 pair          car, then cdr; a list is a chain of pairs (a cdr of 0x07 continues it)
    0x09 dict          car = a (key . value) pair, cdr = the rest of the dict (0x09 ...) or nil
    0x08 vector        u32 count, items          0x0c tuple    u32 count, items
    0x0a uniform vec.  u8 item type, u32 count, u8 npad, npad bytes, count items (big-endian)
                       item types 0 u8, 1 s8, 2 u16, 3 s16, 4 u32, 5 s32, 6 u64, 7 s64,
                       8 f32, 9 f64, 10 c32 (>c8), 11 c64 (>c16)

Python values: #t/#f -> bool, nil -> None, symbol -> str, numbers -> int/float/complex,
pair -> Pair(car, cdr) (a list is Pair(a, Pair(b, None))), dict -> dict, vector -> list,
tuple -> tuple, uniform vector -> 1-D native-endian numpy array; a dict key Python cannot
hash (a vector, or a tuple holding one) is kept as its repr text; keys Python's == calls equal
(#f, 0 and -0.0) are one key, the last read keeps its value. Nothing here trusts a
length: every count is checked against the bytes left, nesting depth and the number of
values are bounded, so a corrupt message raises MessageError('bad_pmt'), never MemoryError;
a dict with more than MAX_KEYS_PER_HASH different keys of one Python hash (numbers' hashes
are easy to make collide) is one too, so reading it costs time in proportion to its size.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from rfclassify._exceptions import MessageError

MAX_DEPTH = 32
MAX_VALUES = 100_000
# different keys of one dict that share a Python hash (no metadata has more than a pair, such as -1 and -2)
MAX_KEYS_PER_HASH = 8

UNIFORM_TYPES: dict[int, str] = {
    0: "u1", 1: "i1", 2: ">u2", 3: ">i2", 4: ">u4", 5: ">i4", 6: ">u8", 7: ">i8",
    8: ">f4", 9: ">f8", 10: ">c8", 11: ">c16",
}
_UNIFORM_CODE = {np.dtype(v).newbyteorder("=") if np.dtype(v).itemsize > 1 else np.dtype(v): k
                 for k, v in UNIFORM_TYPES.items()}


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Pair:
    """A PMT pair (cons cell); lists are chains of pairs ending in None.

    Equality, hash and repr walk the cdr chain in a loop, as the reader does: a list of
    100,000 items is one message's worth, far past Python's recursion limit (the generated
    methods recursed and raised RecursionError on such a key or tag name).
    """

    car: Any
    cdr: Any

    def _chain(self) -> tuple[list[Any], Any]:
        """(the cars along the chain, the final cdr)."""
        cars, tail = [], self
        while isinstance(tail, Pair):
            cars.append(tail.car)
            tail = tail.cdr
        return cars, tail

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Pair):
            return NotImplemented
        a: Any = self
        b: Any = other
        while isinstance(a, Pair) and isinstance(b, Pair):
            if a is b:
                return True
            if (a.car,) != (b.car,):  # compared as the generated method's tuples compared them
                return False
            a, b = a.cdr, b.cdr
        return bool((a,) == (b,))

    def __hash__(self) -> int:
        cars, tail = self._chain()
        h = hash(tail)
        for car in reversed(cars):
            h = hash((car, h))
        return h

    def __repr__(self) -> str:
        cars, tail = self._chain()
        return "".join(f"Pair(car={car!r}, cdr=" for car in cars) + repr(tail) + ")" * len(cars)


def _dict(entries: list[Any]) -> dict[Any, Any]:
    """A PMT dict's (key . value) entries as a Python dict, the last value of equal keys kept.

    Numbers hash to themselves (mod 2**61 - 1), so keys sharing one hash cost nothing to make,
    and a dict compares each new key with every key of its hash: 33,000 complex keys of one
    hash (a 668 KB PDU) took 7 to 8 s of CPU. Past MAX_KEYS_PER_HASH distinct keys of one hash the
    dict is refused, so each key is compared with at most that many.
    """
    out: dict[Any, Any] = {}
    per_hash: dict[bytes, int] = {}   # by the hash's bytes, which hash as strings do: not chosen by a sender
    for entry in entries:
        if not isinstance(entry, Pair):
            raise _bad("a dict entry is not a (key . value) pair")
        key = entry.car
        try:
            h = hash(key)
        except TypeError:  # GNU Radio allows any PMT as a key: a vector, or a tuple holding one
            key = repr(key)
            h = hash(key)
        if key not in out:
            slot = h.to_bytes(8, "little", signed=True)
            n = per_hash.get(slot, 0)
            if n >= MAX_KEYS_PER_HASH:
                raise _bad(f"a dict has more than MAX_KEYS_PER_HASH={MAX_KEYS_PER_HASH} different keys of one "
                           f"Python hash (such as {key!r:.60}): a hash flood")
            per_hash[slot] = n + 1
        out[key] = entry.cdr
    return out


def vector_summary(value: np.ndarray) -> str:
    """What a uniform vector too long to echo is shown as (in a burst's meta, in the tag log)."""
    return f"<{value.dtype.name} vector of {value.shape[0]}>"


def _bad(detail: str) -> MessageError:
    return MessageError("bad_pmt", detail)


class PmtReader:
    """Reads PMTs one after another from a buffer, all of them under one budget of max_values
    values (a gr-zeromq tag header's PMTs share one: a read_pmt call each had a budget each).
    `pos` is where the next PMT starts; a caller may move it past bytes of its own."""

    def __init__(self, data: Any, pos: int = 0, *, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES) -> None:
        self.buf = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
        self.pos = pos
        self.max_depth = max_depth
        self.values_left = max_values

    def read(self) -> Any:
        """The next PMT; MessageError('bad_pmt'), detail "too many values" once the budget is spent."""
        return self.value(0)

    def take(self, n: int) -> int:
        """Reserve n bytes, returning where they start."""
        start = self.pos
        if n < 0 or start + n > len(self.buf):
            raise _bad(f"needs {n} bytes at offset {start}, only {len(self.buf) - start} left")
        self.pos = start + n
        return start

    def unpack(self, fmt: str) -> Any:
        start = self.take(struct.calcsize(fmt))
        return struct.unpack_from(fmt, self.buf, start)[0]

    def value(self, depth: int) -> Any:
        if depth > self.max_depth:
            raise _bad(f"nesting deeper than {self.max_depth}")
        self.values_left -= 1
        if self.values_left < 0:
            raise _bad("too many values")
        tag = self.unpack(">B")
        if tag in (0x00, 0x01):
            return tag == 0x00
        if tag == 0x06:
            return None
        if tag == 0x02:
            n = self.unpack(">H")
            start = self.take(n)
            try:
                return bytes(self.buf[start:start + n]).decode("utf-8")
            except UnicodeDecodeError:
                return bytes(self.buf[start:start + n]).decode("latin-1")
        if tag == 0x03:
            return self.unpack(">i")
        if tag == 0x0d:
            return self.unpack(">q")
        if tag == 0x0b:
            return self.unpack(">Q")
        if tag == 0x04:
            return self.unpack(">d")
        if tag == 0x05:
            re_ = self.unpack(">d")
            return complex(re_, self.unpack(">d"))
        if tag in (0x07, 0x09):
            return self.chain(tag, depth)
        if tag in (0x08, 0x0c):
            n = self.unpack(">I")
            if n > len(self.buf) - self.pos:  # every item takes at least one byte
                raise _bad(f"{n} items announced, {len(self.buf) - self.pos} bytes left")
            items = [self.value(depth + 1) for _ in range(n)]
            return items if tag == 0x08 else tuple(items)
        if tag == 0x0a:
            return self.uniform()
        raise _bad(f"unknown type byte 0x{tag:02x} at offset {self.pos - 1}")

    def chain(self, tag: int, depth: int) -> Any:
        """A pair or dict chain, read iteratively (the cdr continues it), like GNU Radio's parse_pair."""
        cars = []
        while True:
            cars.append(self.value(depth + 1))
            if self.unpack(">B") == tag:
                continue
            self.pos -= 1
            last = self.value(depth + 1)
            break
        if tag == 0x09:
            out = _dict(cars)
            if last is not None:
                raise _bad("a dict does not end in nil")
            return out
        for car in reversed(cars):
            last = Pair(car, last)
        return last

    def uniform(self) -> np.ndarray:
        code = self.unpack(">B")
        n = self.unpack(">I")
        npad = self.unpack(">B")
        self.take(npad)
        if code not in UNIFORM_TYPES:
            raise _bad(f"unknown uniform vector item type {code}")
        dtype = np.dtype(UNIFORM_TYPES[code])
        start = self.take(n * dtype.itemsize)
        arr = np.frombuffer(self.buf, dtype=dtype, count=n, offset=start)
        return arr.astype(dtype.newbyteorder("="))  # a native-endian copy


def read_pmt(data: Any, offset: int = 0, *, max_depth: int = MAX_DEPTH,
             max_values: int = MAX_VALUES) -> tuple[Any, int]:
    """Deserialize one PMT starting at offset; returns (value, offset after it). MessageError('bad_pmt')."""
    reader = PmtReader(data, offset, max_depth=max_depth, max_values=max_values)
    return reader.read(), reader.pos


def deserialize(data: Any, **limits: int) -> Any:
    """Deserialize exactly one PMT filling all of data (trailing bytes are an error)."""
    value, end = read_pmt(data, 0, **limits)
    if end != len(memoryview(data).cast("B")):
        raise _bad(f"{len(memoryview(data).cast('B')) - end} trailing bytes after the PMT")
    return value


def pmt_list(items: list[Any]) -> Pair | None:
    """A PMT list (chain of pairs) holding items."""
    out: Pair | None = None
    for item in reversed(items):
        out = Pair(item, out)
    return out


def serialize(value: Any) -> bytes:
    """The PMT bytes GNU Radio would write for value (the inverse of deserialize).

    str -> symbol, int -> int32 (int64 outside its range, uint64 past that), float -> double, dict -> dict,
    Pair -> pair, list -> vector, tuple -> tuple, numpy 1-D array -> uniform vector.
    """
    out = bytearray()
    _write(value, out)
    return bytes(out)


def _write(v: Any, out: bytearray) -> None:
    if v is True or v is False:
        out.append(0x00 if v else 0x01)
    elif v is None:
        out.append(0x06)
    elif isinstance(v, str):
        raw = v.encode("utf-8")
        out += struct.pack(">BH", 0x02, len(raw)) + raw
    elif isinstance(v, (int, np.integer)):
        v = int(v)
        if -2**31 <= v < 2**31:
            out += struct.pack(">Bi", 0x03, v)
        elif -2**63 <= v < 2**63:
            out += struct.pack(">Bq", 0x0d, v)
        elif 0 <= v < 2**64:
            out += struct.pack(">BQ", 0x0b, v)
        else:
            raise TypeError(f"no PMT integer holds {v}")
    elif isinstance(v, (float, np.floating)):
        out += struct.pack(">Bd", 0x04, float(v))
    elif isinstance(v, (complex, np.complexfloating)):
        out += struct.pack(">Bdd", 0x05, v.real, v.imag)
    elif isinstance(v, Pair):
        while isinstance(v, Pair):  # along the cdr without recursion: lists may be long
            out.append(0x07)
            _write(v.car, out)
            v = v.cdr
        _write(v, out)
    elif isinstance(v, dict):
        for key, item in v.items():
            out.append(0x09)
            _write(Pair(key, item), out)
        out.append(0x06)
    elif isinstance(v, (list, tuple)):
        out += struct.pack(">BI", 0x08 if isinstance(v, list) else 0x0c, len(v))
        for item in v:
            _write(item, out)
    elif isinstance(v, np.ndarray) and v.ndim == 1:
        native = v.dtype.newbyteorder("=") if v.dtype.itemsize > 1 else v.dtype
        code = _UNIFORM_CODE.get(native)
        if code is None:
            raise TypeError(f"no PMT uniform vector for dtype {v.dtype}")
        out += struct.pack(">BBIBB", 0x0a, code, v.shape[0], 1, 0)
        out += v.astype(UNIFORM_TYPES[code], copy=False).tobytes()
    else:
        raise TypeError(f"cannot serialize {type(v).__name__} as a PMT")
