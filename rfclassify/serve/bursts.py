"""What ingest hands to the pipeline: a decoded burst, or a rejection of a message.

Every input format (native messages, GNU Radio streams, GNU Radio PDUs) decodes into these
two values, so nothing downstream knows where a burst came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Truth:
    """Ground truth carried by a simulator or test source, echoed as `truth` in results."""

    label: str | None = None
    snr_db: float | None = None


def truth_or_none(label: str | None, snr_db: float | None) -> Truth | None:
    """Truth(label, snr_db), or None when the input carried neither."""
    return Truth(label, snr_db) if label is not None or snr_db is not None else None


@dataclass(frozen=True)
class Burst:
    """One decoded burst of complex baseband samples plus the metadata echoed in its result."""

    iq: np.ndarray                      # 1-D complex64
    sample_rate_hz: float | None = None
    burst_id: str | int | None = None
    stream: str | None = None
    center_freq_hz: float | None = None
    time: float | str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    truth: Truth | None = None
    received_s: float = 0.0             # time.monotonic() when the message arrived

    @property
    def n_samples(self) -> int:
        return int(self.iq.shape[0])


@dataclass(frozen=True)
class Reject:
    """A message (or part of one) that could not become a burst; published on topic `reject`."""

    reason: str                         # short code, e.g. bad_json, unknown_dtype, too_short
    detail: str
    burst_id: str | int | None = None
    stream: str | None = None
