"""GNU Radio PDUs from zeromq.pub_msg_sink: one frame = serialize(pair(meta_dict, c32vector)).

Metadata keys that become Burst fields: `burst_id` (else `pdu_num`, the count GNU Radio's
`pdu.tags_to_pdu` blocks write), `stream`, `sample_rate` or `rx_rate` (Hz, the first present;
a value that is not a positive number gives the configured sample_rate_hz, as no key does),
`center_freq`, `freq` or `rx_freq` (Hz, the first present; one that is not a finite number
gives the configured center_freq_hz), `time` or `rx_time` (GNU Radio's (uint64 seconds, double
fraction) tuple becomes seconds as a float), and ground truth `label` / `snr_db`. rx_rate,
rx_freq and rx_time are what a UHD source tags and `pdu.tagged_stream_to_pdu` carries over.
Every other key goes to `meta` as a JSON-safe value. A c64 vector is accepted and narrowed to
complex64; other vector types are rejected (bad_pdu).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rfclassify._exceptions import MessageError
from rfclassify._numbers import as_finite_float
from rfclassify.serve.bursts import Burst, Reject, truth_or_none
from rfclassify.serve.decoders import Decoder, frame_view, frames_too_large
from rfclassify.serve.pmt import Pair, deserialize, vector_summary

MAX_META_ITEMS = 256  # longer vectors in metadata are summarized, not echoed


def to_jsonable(value: Any, depth: int = 0) -> Any:
    """A PMT value as something json.dumps accepts (strict JSON: non-finite floats become strings)."""
    if depth > 16:
        return "..."
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, complex):
        return [to_jsonable(value.real), to_jsonable(value.imag)]
    if isinstance(value, np.ndarray):
        if value.shape[0] > MAX_META_ITEMS:
            return vector_summary(value)
        return [to_jsonable(v.item(), depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): to_jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, Pair):
        items, tail = [], value
        while isinstance(tail, Pair) and len(items) < MAX_META_ITEMS:
            items.append(to_jsonable(tail.car, depth + 1))
            tail = tail.cdr
        return items if tail is None else items + [to_jsonable(tail, depth + 1)]
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, depth + 1) for v in value[:MAX_META_ITEMS]]
    return str(value)


def pmt_time(value: Any) -> float | str | None:
    """rx_time (secs, frac) tuple, a number or a string -> Burst.time; None if unusable."""
    if isinstance(value, tuple) and len(value) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return as_finite_float(float(value[0]) + float(value[1]))
    if isinstance(value, str):
        return value
    return as_finite_float(value)


def _first(meta: dict[Any, Any], *keys: str) -> Any:
    """The value of the first of keys in meta; None when none is."""
    for key in keys:
        if key in meta:
            return meta[key]
    return None


class GrPduDecoder(Decoder):
    """Decodes PDUs published by GNU Radio's zeromq.pub_msg_sink; one PDU is one burst."""

    input_format = "gr-pdu"

    def decode(self, frames: Sequence[Any], received_s: float) -> list[Burst | Reject]:
        # pub_msg_sink sends one frame; tolerate a topic frame that a relay may add
        if len(frames) not in (1, 2):
            return [Reject("bad_frames", f"expected one PDU frame (or topic + PDU), got {len(frames)} frames",
                           stream=self.config.stream)]
        too_large = frames_too_large(frames, self.config.max_message_bytes)
        if too_large is not None:
            return [Reject(too_large.reason, too_large.detail, stream=self.config.stream)]
        meta: dict[Any, Any] = {}
        try:
            pdu = deserialize(frame_view(frames[-1]))
            if not isinstance(pdu, Pair):
                raise MessageError("bad_pdu", f"expected pair(meta, vector), got {type(pdu).__name__}")
            meta = pdu.car if isinstance(pdu.car, dict) else {}
            if pdu.car is not None and not isinstance(pdu.car, dict):
                raise MessageError("bad_pdu", f"PDU metadata must be a dict, got {type(pdu.car).__name__}")
            iq = self._samples(pdu.cdr)
        except MessageError as exc:
            return [Reject(exc.reason, exc.detail, self._burst_id(meta), self._stream(meta))]
        return [self._burst(iq, meta, received_s)]

    @staticmethod
    def _samples(vec: Any) -> np.ndarray:
        if not isinstance(vec, np.ndarray):
            raise MessageError("bad_pdu", f"PDU data must be a uniform vector, got {type(vec).__name__}")
        if vec.dtype.kind != "c":
            raise MessageError("bad_pdu", f"PDU data must be a complex (c32) vector, got {vec.dtype.name}")
        if vec.shape[0] == 0:
            raise MessageError("empty_payload", "PDU vector has no samples")
        return vec.astype(np.complex64, copy=False)

    @staticmethod
    def _burst_id(meta: dict[Any, Any]) -> str | int | None:
        for key in ("burst_id", "pdu_num"):
            v = meta.get(key)
            if isinstance(v, (str, int)) and not isinstance(v, bool):
                return v
        return None

    def _stream(self, meta: dict[Any, Any]) -> str | None:
        v = meta.get("stream")
        return v if isinstance(v, str) else self.config.stream

    def _burst(self, iq: np.ndarray, meta: dict[Any, Any], received_s: float) -> Burst:
        known = {"burst_id", "stream", "sample_rate", "rx_rate", "center_freq", "freq", "rx_freq", "time",
                 "rx_time", "label", "snr_db"}
        label = meta.get("label") if isinstance(meta.get("label"), str) else None
        snr_db = as_finite_float(meta.get("snr_db"))
        # the first key present decides, and the metadata wins over the config when its value is usable
        center = as_finite_float(_first(meta, "center_freq", "freq", "rx_freq"))
        rate = as_finite_float(_first(meta, "sample_rate", "rx_rate"))
        return Burst(
            iq=iq,
            sample_rate_hz=rate if rate and rate > 0 else self.config.sample_rate_hz,
            burst_id=self._burst_id(meta),
            stream=self._stream(meta),
            center_freq_hz=center if center is not None else self.config.center_freq_hz,
            time=pmt_time(meta.get("time", meta.get("rx_time"))),
            meta={str(k): to_jsonable(v) for k, v in meta.items() if k not in known},
            truth=truth_or_none(label, snr_db),
            received_s=received_s,
        )
