"""Counters, latency histograms and percentiles of a running daemon (thread-safe, stdlib only).

Every stage records into one `DaemonStats`; the control socket and the Prometheus endpoint
read consistent snapshots of it. Percentiles come from a ring of the most recent latencies
(so they describe now, not the whole uptime), or, for a benchmark's measuring window
(`reset_latency(whole_window=True)`), from every latency of the window (a uniform sample past
WINDOW_SAMPLE); the Prometheus histograms are cumulative.
"""

from __future__ import annotations

import array
import bisect
import math
import random
import threading
import time
from collections import Counter, deque
from typing import Any

# Upper bounds (seconds) of the cumulative latency histogram buckets, Prometheus style.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
LATENCY_STAGES = ("queue", "infer", "total")
SNR_EDGES_DB: tuple[float, ...] = (0.0, 10.0, 20.0)   # live accuracy is also kept per SNR band


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of an ascending list; None when empty."""
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100.0 * len(sorted_values)) - 1))
    return sorted_values[k]


#: the most recent latencies a stage's status percentiles are over
RECENT = 4096
#: a measuring window's percentiles are over all its latencies up to this many a stage (8 bytes
#: each: 2 MB; 73 s of a GPU's 3,600 bursts/s), over a uniform sample of this many past it
WINDOW_SAMPLE = 1 << 18


class WindowSample:
    """Every value up to `size`, then a uniform sample of `size` of all the values seen
    (reservoir sampling, Algorithm R, drawing from `rng`): percentiles over a whole measuring
    window at any rate, in bounded memory."""

    def __init__(self, size: int, rng: random.Random) -> None:
        self.size = size
        self.seen = 0
        self.values = array.array("d")
        self._rng = rng

    def append(self, value: float) -> None:
        self.seen += 1
        if len(self.values) < self.size:
            self.values.append(value)
        else:
            j = self._rng.randrange(self.seen)
            if j < self.size:
                self.values[j] = value

    def __iter__(self) -> Any:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


class LatencyHistogram:
    """Cumulative bucket counts plus, for percentiles, a ring of the `ring` most recent values
    or, given `window`, a WindowSample of every value since it was made (not locked)."""

    def __init__(self, ring: int = RECENT, window: WindowSample | None = None) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_S) + 1)   # last slot: +Inf
        self.total_s = 0.0
        self.n = 0
        self.recent: deque[float] | WindowSample = deque(maxlen=ring) if window is None else window

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self.total_s += seconds
        self.n += 1
        self.recent.append(seconds)

    def percentiles_ms(self) -> dict[str, float | None]:
        vals = sorted(self.recent)
        return {f"p{q}": (None if (v := percentile(vals, q)) is None else round(v * 1e3, 3))
                for q in (50, 90, 99)}

    def coverage(self) -> tuple[int, int]:
        """(how many values the percentiles are over, how many were observed)."""
        return len(self.recent), self.n


def snr_band(snr_db: float) -> str:
    """The SNR band name of a ground-truth SNR: '<0', '0..10', '10..20' or '>=20'."""
    i = bisect.bisect_right(SNR_EDGES_DB, snr_db)
    if i == 0:
        return f"<{SNR_EDGES_DB[0]:g}"
    if i == len(SNR_EDGES_DB):
        return f">={SNR_EDGES_DB[-1]:g}"
    return f"{SNR_EDGES_DB[i - 1]:g}..{SNR_EDGES_DB[i]:g}"


#: ground-truth labels counted one by one; the rest share OTHER_TRUTH. A sender's label is any
#: string: one that varied grew the table (and every status reply and scrape, sorted under the
#: lock) without bound before the sixty-sixth session. The model's labels are 28.
MAX_TRUTH_CLASSES = 64
OTHER_TRUTH = "(other labels)"

SNR_BANDS: tuple[str, ...] = tuple(snr_band(x) for x in (SNR_EDGES_DB[0] - 1,) + SNR_EDGES_DB)

#: the shortest span throughput divides by: the first bursts' answers within a few milliseconds
#: of their arrival would otherwise read as thousands a second
MIN_THROUGHPUT_SPAN_S = 1.0


class DaemonStats:
    """Everything `rfclassify status` and /metrics report about the pipeline."""

    def __init__(self, throughput_window_s: float = 10.0) -> None:
        self._lock = threading.Lock()
        self.started_monotonic = time.monotonic()
        self.started_wall = time.time()
        self.messages = 0
        self.received = 0
        self.classified = 0
        self.published = 0
        self.rejected: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.per_class: Counter[str] = Counter()
        self.latency = {stage: LatencyHistogram() for stage in LATENCY_STAGES}
        self._drop_seconds: deque[list[int]] = deque(maxlen=3600)   # [whole second, drops]
        # when each burst of the throughput window was classified: older ones are let go as
        # new ones come (a ring of 100,000 kept every one for hours at a few bursts a second:
        # 3 MB of a soak's growth, benchmarks/soak_daemon.py); the bound caps a burst of traffic
        self._done_times: deque[float] = deque(maxlen=100_000)
        self._window_s = throughput_window_s
        # when the first burst arrived (or was classified): throughput's span starts there, not
        # at the stats' creation, before the model's load
        self._first_burst_s: float | None = None
        # live accuracy against echoed ground truth: (correct, total) per key
        self.truth_total = 0
        self.truth_correct = 0
        self.truth_best_guess_correct = 0     # top-1 right, whether or not it was called unknown
        self.truth_by_class: dict[str, list[int]] = {}
        self.truth_by_snr: dict[str, list[int]] = {}

    # -- recording (called from stage threads) --------------------------------------------
    def add_message(self) -> None:
        with self._lock:
            self.messages += 1

    def add_received(self, n: int = 1) -> None:
        with self._lock:
            self.received += n
            if self._first_burst_s is None:
                self._first_burst_s = time.monotonic()

    def add_reject(self, reason: str) -> None:
        with self._lock:
            self.rejected[reason] += 1

    def add_drop(self, stage: str, n: int = 1) -> None:
        sec = int(time.monotonic())
        with self._lock:
            self.dropped[stage] += n
            if self._drop_seconds and self._drop_seconds[-1][0] == sec:
                self._drop_seconds[-1][1] += n
            else:
                self._drop_seconds.append([sec, n])

    def drops(self, stage: str) -> int:
        """Bursts or records dropped at `stage` so far."""
        with self._lock:
            return self.dropped[stage]

    def add_published(self, n: int = 1) -> None:
        with self._lock:
            self.published += n

    def add_result(self, label: str, queue_s: float, infer_s: float, total_s: float,
                   truth_label: str | None = None, truth_snr_db: float | None = None,
                   best_guess: str | None = None) -> None:
        now = time.monotonic()
        with self._lock:
            self.classified += 1
            self.per_class[label] += 1
            self.latency["queue"].observe(queue_s)
            self.latency["infer"].observe(infer_s)
            self.latency["total"].observe(total_s)
            self._done_times.append(now)
            if self._first_burst_s is None:
                self._first_burst_s = now
            while self._done_times[0] < now - self._window_s:
                self._done_times.popleft()
            if truth_label is not None:
                ok = int(label == truth_label)
                guessed = int((best_guess or label) == truth_label)
                self.truth_total += 1
                self.truth_correct += ok
                self.truth_best_guess_correct += guessed
                if truth_label not in self.truth_by_class and len(self.truth_by_class) >= MAX_TRUTH_CLASSES:
                    truth_label = OTHER_TRUTH
                c = self.truth_by_class.setdefault(truth_label, [0, 0, 0])   # right, bursts, best guess right
                c[0] += ok
                c[1] += 1
                c[2] += guessed
                if truth_snr_db is not None:
                    s = self.truth_by_snr.setdefault(snr_band(truth_snr_db), [0, 0])
                    s[0] += ok
                    s[1] += 1

    def reset_latency(self, whole_window: bool = False, seed: int = 0) -> None:
        """Forget latencies so far (benchmarks measure a window after warm-up); with
        whole_window the percentiles are over every latency from now on (WindowSample, its
        sample past WINDOW_SAMPLE drawn with `seed`), not the most recent RECENT: at a GPU's
        2,000-3,600 bursts/s those were the last second or two of a 5-second window."""
        with self._lock:
            self.latency = {stage: LatencyHistogram(window=WindowSample(WINDOW_SAMPLE, random.Random(seed + i))
                                                    if whole_window else None)
                            for i, stage in enumerate(LATENCY_STAGES)}

    def latency_coverage(self) -> dict[str, tuple[int, int]]:
        """Per stage: how many latencies its percentiles are over, and how many it observed
        since the last reset_latency (LatencyHistogram.coverage)."""
        with self._lock:
            return {stage: h.coverage() for stage, h in self.latency.items()}

    # -- reading ---------------------------------------------------------------------------
    def recent_drops(self, window_s: float) -> int:
        cutoff = time.monotonic() - window_s
        with self._lock:
            return sum(n for sec, n in self._drop_seconds if sec + 1 > cutoff)

    def throughput(self) -> float:
        """Bursts classified per second over the last throughput_window_s, or since the first
        burst arrived where that is shorter (at least MIN_THROUGHPUT_SPAN_S); 0 before one.
        Counted from the stats' creation, as before, the span took in the model's load (about
        10 s on a CPU), and the demo read 5/s where 50 bursts a second were classified."""
        now = time.monotonic()
        with self._lock:
            if self._first_burst_s is None:
                return 0.0
            span = min(self._window_s, max(now - self._first_burst_s, MIN_THROUGHPUT_SPAN_S))
            idx = bisect.bisect_right(self._done_times, now - span)     # (now - span, now]: one end only
            n = len(self._done_times) - idx
        return n / span

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready copy of the counters, latencies and accuracy."""
        tput = self.throughput()
        with self._lock:
            acc = None
            if self.truth_total:
                acc = {
                    "overall": round(self.truth_correct / self.truth_total, 4),
                    "best_guess": round(self.truth_best_guess_correct / self.truth_total, 4),
                    "n": self.truth_total,
                    "per_class": {k: {"accuracy": round(v[0] / v[1], 4), "n": v[1],
                                      "best_guess": round(v[2] / v[1], 4)}
                                  for k, v in sorted(self.truth_by_class.items())},
                    "per_snr_db": {k: {"accuracy": round(v[0] / v[1], 4), "n": v[1]}
                                   for k in SNR_BANDS if (v := self.truth_by_snr.get(k))},
                }
            return {
                "counters": {
                    "messages": self.messages,
                    "received": self.received,
                    "classified": self.classified,
                    "published": self.published,
                    "rejected": dict(self.rejected),
                    "rejected_total": sum(self.rejected.values()),
                    "dropped": dict(self.dropped),
                    "dropped_total": sum(self.dropped.values()),
                },
                "latency_ms": {s: h.percentiles_ms() for s, h in self.latency.items()},
                "throughput_bursts_per_s": round(tput, 2),
                "per_class": dict(self.per_class.most_common()),
                "accuracy": acc,
            }

    def histograms(self) -> dict[str, tuple[list[int], float, int]]:
        """Per stage: (bucket counts incl. +Inf, sum of seconds, count), for /metrics."""
        with self._lock:
            return {s: (list(h.counts), h.total_s, h.n) for s, h in self.latency.items()}
