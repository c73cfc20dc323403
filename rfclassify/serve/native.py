"""The native burst message: `[header, payload]` or `[topic, header, payload]`.

header: UTF-8 JSON object. `sample_rate` (Hz, required, positive), `dtype` (SigMF name,
default cf32_le), optional `burst_id` (string or integer), `stream`, `center_freq` (Hz),
`time` (number or string), `meta` (object, echoed), `label` / `snr_db` (ground truth).
Unknown keys are ignored so senders may add fields. payload: interleaved I/Q in `dtype`;
cf32_le is used in place (zero-copy, a read-only array over the frame), ci16_le and ci8 are
scaled to floats by 1/32768 and 1/128, and cu8 (the unsigned bytes an RTL-SDR delivers, zero
at 127.5) is centred and scaled by 1/128. A 3-frame message's topic names the stream when the
header does not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rfclassify._exceptions import MessageError, quoted
from rfclassify._numbers import as_finite_float
from rfclassify.serve.bursts import Burst, Reject, truth_or_none
from rfclassify.serve.decoders import Decoder, frame_view, frames_too_large

# SigMF name -> (numpy dtype of one real component, scale to float, the raw value of 0.0):
# float = (raw - zero) * scale
DTYPES: dict[str, tuple[str, float, float]] = {
    "cf32_le": ("<f4", 1.0, 0.0),
    "ci16_le": ("<i2", 1.0 / 32768.0, 0.0),
    "ci8": ("i1", 1.0 / 128.0, 0.0),
    "cu8": ("u1", 1.0 / 128.0, 127.5),
}
DEFAULT_DTYPE = "cf32_le"
MAX_HEADER_BYTES = 65536


def _number(header: Mapping[str, Any], key: str, *, required: bool = False,
            positive: bool = False) -> float | None:
    value = header.get(key)
    if value is None:
        if required:
            raise MessageError("bad_header", f"'{key}' is required")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MessageError("bad_header", f"'{key}' must be a number, got {type(value).__name__}")
    number = as_finite_float(value)
    if number is None or (positive and number <= 0):
        raise MessageError("bad_header", f"'{key}' must be a {'positive ' if positive else ''}finite number, "
                                         f"got {quoted(value)}")
    return number


def _typed(header: Mapping[str, Any], key: str, kinds: tuple[type, ...], what: str) -> Any:
    value = header.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise MessageError("bad_header", f"'{key}' must be {what}, got {type(value).__name__}")
    return value


def parse_header(raw: memoryview) -> dict[str, Any]:
    """Decode and type-check a header frame; MessageError names the offending field."""
    if raw.nbytes > MAX_HEADER_BYTES:
        raise MessageError("too_large", f"header of {raw.nbytes} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        header = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MessageError("bad_json", f"header is not UTF-8 JSON: {exc}") from None
    if not isinstance(header, dict):
        raise MessageError("bad_header", f"header must be a JSON object, got {type(header).__name__}")
    dtype = header.get("dtype", DEFAULT_DTYPE)
    if not isinstance(dtype, str):
        raise MessageError("bad_header", f"'dtype' must be a string, got {type(dtype).__name__}")
    if dtype not in DTYPES:
        raise MessageError("unknown_dtype", f"dtype {dtype!r}; supported: {', '.join(DTYPES)}")
    meta = _typed(header, "meta", (dict,), "an object")
    label = _typed(header, "label", (str,), "a string")
    snr_db = _number(header, "snr_db")
    return {
        "dtype": dtype,
        "sample_rate_hz": _number(header, "sample_rate", required=True, positive=True),
        "burst_id": _typed(header, "burst_id", (str, int), "a string or an integer"),
        "stream": _typed(header, "stream", (str,), "a string"),
        "center_freq_hz": _number(header, "center_freq"),
        "time": header.get("time") if isinstance(header.get("time"), str) else _number(header, "time"),
        "meta": meta or {},
        "truth": truth_or_none(label, snr_db),
    }


def payload_to_iq(payload: memoryview, dtype: str) -> np.ndarray:
    """Interleaved I/Q bytes -> 1-D complex64 (a view for cf32_le on little-endian hosts)."""
    component, scale, zero = DTYPES[dtype]
    size = np.dtype(component).itemsize * 2
    if payload.nbytes == 0:
        raise MessageError("empty_payload", "payload has no samples")
    if payload.nbytes % size:
        raise MessageError("bad_payload_size",
                          f"{payload.nbytes} bytes is not a multiple of {size} ({dtype} sample size)")
    if dtype == "cf32_le":
        iq = np.frombuffer(payload, dtype="<c8")
        return iq if iq.dtype.isnative else iq.astype(np.complex64)
    floats = np.frombuffer(payload, dtype=component).astype(np.float32)
    if zero:
        floats -= np.float32(zero)
    floats *= np.float32(scale)
    return floats.view(np.complex64)


def _topic_stream(topic: memoryview) -> str | None:
    try:
        text = bytes(topic[:256]).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text or None


class NativeDecoder(Decoder):
    """Decodes native burst messages; one message is one burst (or one reject)."""

    input_format = "native"

    def decode(self, frames: Sequence[Any], received_s: float) -> list[Burst | Reject]:
        if len(frames) not in (2, 3):
            return [Reject("bad_frames", f"expected [header, payload] or [topic, header, payload], got {len(frames)} frames")]
        too_large = frames_too_large(frames, self.config.max_message_bytes)
        views = [frame_view(f) for f in frames]
        topic_stream = _topic_stream(views[0]) if len(views) == 3 else None
        if too_large is not None:
            return [Reject(too_large.reason, too_large.detail, stream=topic_stream or self.config.stream)]
        header: dict[str, Any] = {}
        try:
            header = parse_header(views[-2])
            iq = payload_to_iq(views[-1], header["dtype"])
        except MessageError as exc:
            stream = header.get("stream") or topic_stream or self.config.stream
            return [Reject(exc.reason, exc.detail, header.get("burst_id"), stream)]
        return [Burst(
            iq=iq,
            sample_rate_hz=header["sample_rate_hz"],
            burst_id=header["burst_id"],
            stream=header["stream"] or topic_stream or self.config.stream,
            center_freq_hz=header["center_freq_hz"],
            time=header["time"],
            meta=header["meta"],
            truth=header["truth"],
            received_s=received_s,
        )]


def encode_native(iq: np.ndarray, header_fields: Mapping[str, Any], dtype: str = DEFAULT_DTYPE,
                  topic: str | bytes | None = None) -> list[bytes]:
    """Frames of one native message: header_fields (wire names, e.g. sample_rate) plus dtype.

    ci16_le / ci8 / cu8 scale by 32768 / 128 / 128 (cu8 centred on 127.5) and clip to the
    integer range, the inverse of decoding.
    """
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; supported: {', '.join(DTYPES)}")
    x = np.asarray(iq, dtype=np.complex64).reshape(-1)
    component, scale, zero = DTYPES[dtype]
    if dtype == "cf32_le":
        payload = x.astype("<c8", copy=False).tobytes()
    else:
        info = np.iinfo(np.dtype(component))
        ints = np.clip(np.rint(x.view(np.float32) / scale + zero), info.min, info.max)
        payload = ints.astype(component).tobytes()
    header = dict(header_fields)
    header["dtype"] = dtype
    frames = [json.dumps(header, separators=(",", ":")).encode("utf-8"), payload]
    if topic is not None:
        frames.insert(0, topic.encode("utf-8") if isinstance(topic, str) else bytes(topic))
    return frames
