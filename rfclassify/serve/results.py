"""The published records: `result` and `reject`, with exactly the fields of DESIGN.md.

    result: burst_id, stream, label, confidence, top [{label, p}], snr_db, n_samples, bucket,
            windows, backend, precision, model, latency_ms {queue, infer, total},
            center_freq, time, meta, truth {label, snr_db}
    reject: burst_id (null if unknown), stream, reason, detail

Echoed fields are always present (null when the input did not carry them), so consumers
can index them without checking.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rfclassify._numbers import as_finite_float
from rfclassify.serve.bursts import Burst, Reject

RESULT_TOPIC = b"result"
REJECT_TOPIC = b"reject"


def _finite_or_none(x: Any) -> float | None:
    if x is None:
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def result_record(burst: Burst, result: Any, *, backend: str, precision: str, model_id: str,
                  queue_ms: float, infer_ms: float, total_ms: float) -> dict[str, Any]:
    """The `result` record for one classified burst (result: a ClassificationResult)."""
    truth = None
    if burst.truth is not None:
        truth = {"label": burst.truth.label, "snr_db": _finite_or_none(burst.truth.snr_db)}
    fields = result.to_dict()     # label, confidence, top, snr_db, n_samples, bucket, windows
    fields["snr_db"] = _finite_or_none(fields["snr_db"])     # NaN is not JSON
    return {
        "burst_id": burst.burst_id,
        "stream": burst.stream,
        **fields,
        "backend": backend,
        "precision": precision,
        "model": model_id,
        "latency_ms": {"queue": round(queue_ms, 3), "infer": round(infer_ms, 3),
                       "total": round(total_ms, 3)},
        "center_freq": burst.center_freq_hz,
        "time": burst.time,
        "meta": burst.meta,
        "truth": truth,
    }


def reject_record(reject: Reject) -> dict[str, Any]:
    """The `reject` record for a message or burst that could not be classified."""
    return {"burst_id": reject.burst_id, "stream": reject.stream,
            "reason": reject.reason, "detail": reject.detail}


_MAX_ECHO_DEPTH = 64     # nesting kept of an echoed value that cannot be encoded as it is


def encode(topic: bytes, record: dict[str, Any]) -> list[bytes]:
    """The two frames sent on the output socket, the record as strict JSON. An echoed value
    that JSON cannot hold as it is (a NaN or infinity in a native header's `meta`, which
    Python's parser accepts; nesting deeper than the encoder can go on this thread) is sent
    as strict_json makes it, rather than as invalid JSON or not at all. The echoed `meta` is
    cut at _MAX_ECHO_DEPTH levels whatever this Python's encoder could do: 3.12's goes deeper
    than 3.11's, and a consumer's parser may not."""
    try:
        if _nests_past(record.get("meta"), 1):
            raise ValueError("meta nests too deep")
        text = json.dumps(record, separators=(",", ":"), default=str, allow_nan=False)
    except (ValueError, RecursionError):
        text = json.dumps(strict_json(record), separators=(",", ":"), default=str, allow_nan=False)
    return [topic, text.encode()]


def encode_pmt(topic: bytes, record: dict[str, Any]) -> list[bytes]:
    """The one frame sent on an output of format "gr-pmt": the record, as `encode` makes it
    strict, with "topic": "result" | "reject" added, as a serialized PMT dict (keys and strings
    symbols, lists vectors, null nil), what GNU Radio's zeromq.sub_msg_source hands a flowgraph."""
    from rfclassify.serve.pmt import serialize

    strict = json.loads(encode(topic, record)[1])
    return [serialize(_pmt_ready({"topic": topic.decode(), **strict}))]


_PMT_SYMBOL_BYTES = 65535   # a serialized symbol's length is 16 bits


def _pmt_ready(value: Any) -> Any:
    """value with what a PMT cannot hold made what it can: an integer past int64/uint64 a
    double, or its digits as a string past a double's range too (a 400-digit burst_id raised
    OverflowError and ended the inference thread before the sixty-sixth session), a string (or
    key) longer than a symbol's 65,535 UTF-8 bytes cut, ending in "..."."""
    if isinstance(value, dict):
        return {_pmt_ready(k): _pmt_ready(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_pmt_ready(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and not -2 ** 63 <= value < 2 ** 64:
        as_double = as_finite_float(value)
        return _pmt_ready(_digits(value)) if as_double is None else as_double
    if isinstance(value, str) and len(value) > _PMT_SYMBOL_BYTES // 4 and len(value.encode()) > _PMT_SYMBOL_BYTES:
        return value.encode()[:_PMT_SYMBOL_BYTES - 3].decode(errors="ignore") + "..."
    return value


def _digits(value: int) -> str:
    try:
        return str(value)
    except ValueError:     # past Python's digit limit for int -> str
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"


def _nests_past(value: Any, depth: int) -> bool:
    """Whether `value`, found at `depth` of a record, holds a list or object at _MAX_ECHO_DEPTH
    or deeper (where strict_json cuts); it looks no deeper than that."""
    if not isinstance(value, (dict, list, tuple)):
        return False
    if depth >= _MAX_ECHO_DEPTH:
        return True
    return any(_nests_past(v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))


def strict_json(value: Any, depth: int = 0) -> Any:
    """value with each non-finite float as its name ("nan", "inf", "-inf", as GNU Radio PDU
    metadata is echoed) and anything nested deeper than _MAX_ECHO_DEPTH as "...": something
    json.dumps(allow_nan=False) encodes whatever the stack depth."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (dict, list, tuple)):
        if depth >= _MAX_ECHO_DEPTH:
            return "..."
        if isinstance(value, dict):
            return {k: strict_json(v, depth + 1) for k, v in value.items()}
        return [strict_json(v, depth + 1) for v in value]
    return value
