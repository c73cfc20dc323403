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


def encode(topic: bytes, record: dict[str, Any]) -> list[bytes]:
    """The two frames sent on the output socket."""
    return [topic, json.dumps(record, separators=(",", ":"), default=str).encode()]
