"""The daemon's memory bound in bytes (docs/daemon.md, "Memory bound"): past the ingest queue
(queues.infer_max_bytes), on the output (output.max_record_bytes), and the heap handed back
after a peak (heap_trim.HeapTrim). Inference is held back on an Event, not slowed by a sleep, so
big bursts arrive faster than it whatever the machine's speed; what is asserted is the
pipeline's own bytes, counted from the arrays it holds, not RSS.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rfclassify.serve.batching import BucketBatcher
from rfclassify.serve.config import MiB, QueueConfig
from rfclassify.serve.demo import ResultCollector, local_config
from rfclassify.serve.native import encode_native
from rfclassify.serve.pipeline import EngineAdapter

from held_daemon import WAIT_S, hold_inference, serving, tiny_engine, until

pytest.importorskip("onnxruntime")

BIG_SAMPLES = 1 << 17          # 1 MiB of complex64: the largest bucket's 16 windows, capped


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> EngineAdapter:
    return tiny_engine(tiny_model_dir, tmp_path_factory)


def _big_bursts(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [(rng.standard_normal(BIG_SAMPLES) + 1j * rng.standard_normal(BIG_SAMPLES)).astype(np.complex64)
            for _ in range(n)]


def _bytes_past_ingest(p: Any) -> int:
    """What the batcher, the infer queue and the batch inference runs hold, counted from their
    arrays (raw samples and windows), not from the pipeline's own accounting."""
    def size(pending: Any) -> int:
        return pending.burst.iq.nbytes + pending.windows.windows.nbytes

    held = sum(size(x) for items in list(p.batcher._pending.values()) for x in items)
    with p.infer_q._cond:
        queued = [item for item, _ in p.infer_q._items]
    running = p._running
    for batch in queued + ([running] if running is not None else []):
        held += sum(size(x) for x in getattr(batch, "items", ()))
    return held


def test_big_bursts_faster_than_inference_hold_at_most_the_byte_bounds(engine, tmp_path, monkeypatch):
    """1 MiB bursts against a 4 MiB ingest queue with inference held: past the ingest queue at
    most infer_max_bytes (its default: ingest_max_bytes) plus the one burst let in last, and
    the pipeline's infer_bytes says so. Before, the batches were bounded in windows alone:
    10.5 MiB held here against 5.5 (the review's 64 MiB bursts: 2.6 GB RSS)."""
    limit = 4 * MiB
    cfg = local_config(tmp_path)
    cfg = replace(cfg, queues=replace(QueueConfig(), ingest_max_bytes=limit, overload="drop_oldest"))
    peaks: list[int] = []
    real_add = BucketBatcher.add

    def add(self, item, now):
        out = real_add(self, item, now)
        peaks.append(_bytes_past_ingest(d.pipeline))     # where bytes enter the stages past ingest
        return out
    gate = hold_inference(monkeypatch)
    monkeypatch.setattr(BucketBatcher, "add", add)
    bursts = _big_bursts(24)
    one_burst = bursts[0].nbytes + 16 * 4096 * 8         # its samples and at most 16 windows
    with serving(engine, cfg) as (d, push):
        p = d.pipeline
        for i, iq in enumerate(bursts):
            push.send_multipart(encode_native(iq, {"sample_rate": 1e6, "burst_id": i}))
        until(lambda: d.stats.received == len(bursts) and gate.entered.is_set())
        # let the batcher take all it will: it stops once nothing it does changes what it holds
        until(lambda: (n := len(peaks)) > 0 and (time.sleep(0.5) or len(peaks) == n))
        assert max(peaks) <= limit + one_burst, f"{max(peaks) / MiB:.1f} MiB past the ingest queue"
        assert p.ingest_q.nbytes <= limit
        held = _bytes_past_ingest(p)
        # the pipeline's own count: the same arrays plus each message's header
        assert held <= p.queue_depths()["infer_bytes"] <= held + 1024 * len(bursts)
        assert d.stats.drops("ingest") > 0                # the overload went where the docs say
        gate.open()
        until(lambda: d.stats.classified + d.stats.drops("ingest") == len(bursts))
        until(lambda: p.queue_depths()["infer_bytes"] == 0)


def test_a_spent_byte_budget_sends_the_held_batch_at_once(engine, tmp_path):
    """A batch that cannot grow (no burst may join it while infer_max_bytes is spent) goes now,
    not after its max_wait_ms (here a minute)."""
    cfg = local_config(tmp_path, max_wait_ms=60_000)
    cfg = replace(cfg, queues=replace(QueueConfig(), infer_max_bytes=MiB // 2, overload="block"))
    with serving(engine, cfg) as (d, push):
        for i, iq in enumerate(_big_bursts(2)):
            push.send_multipart(encode_native(iq, {"sample_rate": 1e6, "burst_id": i}))
        deadline = time.monotonic() + 20
        while d.stats.classified < 2:
            assert time.monotonic() < deadline, f"{d.stats.classified} of 2 classified in 20 s"
            time.sleep(0.01)


def test_normal_bursts_never_reach_the_byte_budget_and_batch_as_before(engine, tmp_path, monkeypatch):
    """1,024-sample bursts with inference held: full max_batch batches, the budget far off."""
    sizes: list[int] = []
    gate = hold_inference(monkeypatch)
    real = EngineAdapter.infer_batch

    def counted(self, batch):
        sizes.append(batch.n_windows)
        return real(self, batch)
    monkeypatch.setattr(EngineAdapter, "infer_batch", counted)
    rng = np.random.default_rng(1)
    iq = (rng.standard_normal((321, 1024)) + 1j * rng.standard_normal((321, 1024))).astype(np.complex64)
    with serving(engine, local_config(tmp_path)) as (d, push):
        push.send_multipart(encode_native(iq[0], {"sample_rate": 1e6, "burst_id": 0}))
        assert gate.entered.wait(WAIT_S)
        for i in range(1, len(iq)):
            push.send_multipart(encode_native(iq[i], {"sample_rate": 1e6, "burst_id": i}))
        until(lambda: d.stats.received == len(iq) and len(d.pipeline.infer_q) == 4)
        assert d.pipeline.queue_depths()["infer_bytes"] < d.config.queues.infer_bytes_limit // 4
        gate.open()
        until(lambda: d.stats.classified == len(iq))
    assert sizes[:5] == [1, 64, 64, 64, 64], sizes


def _encode(topic: bytes, record: dict[str, Any]) -> list[bytes]:
    from rfclassify.serve.results import encode
    return encode(topic, record)


def test_fit_record_cuts_what_a_sender_made_large():
    from rfclassify.serve.publish import fit_record

    small = {"burst_id": 1, "stream": "s", "label": "BPSK", "meta": {"gain": 3}}
    assert fit_record(b"result", small, _encode, 8192) == (_encode(b"result", small), False)
    big = {**small, "meta": {"pad": "m" * 60_000}}
    frames, cut = fit_record(b"result", big, _encode, 8192)
    assert cut and sum(map(len, frames)) <= 8192
    record = json.loads(frames[1])
    assert record["meta"] is None and record["burst_id"] == 1
    assert record["meta_cut"] == {"record_bytes": sum(map(len, _encode(b"result", big))), "max_record_bytes": 8192}
    reject = {"burst_id": 2, "stream": None, "reason": "bad_header", "detail": "x" * 50_000}
    frames, cut = fit_record(b"reject", reject, _encode, 8192)
    assert cut and sum(map(len, frames)) <= 8192 and json.loads(frames[1])["reason"] == "bad_header"
    # an echoed stream name larger than the limit: nothing to cut that makes it fit
    assert fit_record(b"result", {**small, "stream": "s" * 20_000}, _encode, 8192) == (None, True)


def test_the_default_record_limit_cuts_no_meta_a_native_header_can_carry():
    """DESIGN.md's contract echoes `meta`: the largest header (64 KiB), even of characters JSON
    escapes to six bytes each, goes out whole under the default max_record_bytes."""
    from rfclassify.serve.config import OutputConfig
    from rfclassify.serve.native import MAX_HEADER_BYTES
    from rfclassify.serve.publish import fit_record

    meta = {"note": "\u00e9" * (MAX_HEADER_BYTES // 2 - 64)}   # 2 UTF-8 bytes in the header, 6 escaped
    assert len(json.dumps({"meta": meta}, ensure_ascii=False).encode()) <= MAX_HEADER_BYTES
    record = {"burst_id": "b" * 64, "stream": "s" * 64, "label": "BPSK", "top": [{"label": "BPSK", "p": 1.0}] * 8,
              "meta": meta}
    frames, cut = fit_record(b"result", record, _encode, OutputConfig().max_record_bytes)
    assert not cut and json.loads(frames[1])["meta"] == meta


def test_records_with_a_large_meta_go_out_within_max_record_bytes(engine, tmp_path):
    """61 KiB of echoed meta made 61 KiB records, 10,000 of which a subscriber that stopped
    reading held (the review: RSS 275 -> 834 MB). Now each record is at most max_record_bytes,
    so such a subscriber holds at most sndhwm x max_record_bytes, and the cut is counted."""
    cfg = local_config(tmp_path)
    cfg = replace(cfg, output=replace(cfg.output, max_record_bytes=8192))   # the default keeps native metas whole
    rng = np.random.default_rng(2)
    iq = (rng.standard_normal((3, 1024)) + 1j * rng.standard_normal((3, 1024))).astype(np.complex64)
    with serving(engine, cfg) as (d, push):
        c = ResultCollector(d.pipeline.output_endpoint).start()
        try:
            for i in range(3):
                meta = {"pad": "m" * (61 * 1024)} if i else {"gain_db": 30}
                push.send_multipart(encode_native(iq[i], {"sample_rate": 1e6, "burst_id": i, "meta": meta}))
            assert c.wait_for(3, WAIT_S)
        finally:
            c.stop()
        status = d.status()
    by_id = {r["burst_id"]: r for r in c.results}
    assert by_id[0]["meta"] == {"gain_db": 30} and "meta_cut" not in by_id[0]
    max_bytes = cfg.output.max_record_bytes
    for i in (1, 2):
        assert by_id[i]["meta"] is None and by_id[i]["meta_cut"]["max_record_bytes"] == max_bytes
        assert len(json.dumps(by_id[i], separators=(",", ":"))) <= max_bytes
    assert status["output"]["records_cut"] == 2


def test_should_trim_after_a_peak_once_the_bytes_are_freed():
    from rfclassify.serve.heap_trim import TRIM_AFTER_BYTES, TRIM_EVERY_S, should_trim

    big = 2 * TRIM_AFTER_BYTES
    assert should_trim(big, 0, TRIM_EVERY_S)
    assert should_trim(big, big // 4, TRIM_EVERY_S)
    assert not should_trim(big, big // 4 + 1, TRIM_EVERY_S)          # still held: not idle
    assert not should_trim(TRIM_AFTER_BYTES - 1, 0, TRIM_EVERY_S)     # no peak worth a trim
    assert not should_trim(big, 0, TRIM_EVERY_S - 0.1)                # rate limit


def test_heap_trim_trims_once_per_peak_and_never_without_glibc():
    from rfclassify.serve.heap_trim import TRIM_AFTER_BYTES, TRIM_EVERY_S, HeapTrim

    now = [0.0]
    rss = [100 * MiB]
    calls: list[int] = []

    def trim(pad: int) -> int:
        calls.append(pad)
        rss[0] = 100 * MiB                      # what the heap gave back
        return 1
    t = HeapTrim(trim, clock=lambda: now[0], rss=lambda: rss[0])
    now[0] = TRIM_EVERY_S
    assert not t.poll(held_bytes=0, peak_bytes=MiB)                  # nothing happened
    assert not t.poll(held_bytes=2 * TRIM_AFTER_BYTES, peak_bytes=2 * TRIM_AFTER_BYTES)   # busy
    assert t.poll(held_bytes=0, peak_bytes=0) and calls == [0]       # the peak remembered, now idle
    now[0] += 1
    assert not t.poll(held_bytes=0, peak_bytes=4 * TRIM_AFTER_BYTES)  # rate-limited
    now[0] += TRIM_EVERY_S
    assert t.poll(held_bytes=0, peak_bytes=0) and len(calls) == 2
    now[0] += TRIM_EVERY_S
    assert not t.poll(held_bytes=0, peak_bytes=0)                    # no new peak: no trim
    rss[0] += 2 * TRIM_AFTER_BYTES                                   # memory the queues never counted
    assert t.poll(held_bytes=0, peak_bytes=0) and len(calls) == 3
    now[0] += TRIM_EVERY_S
    assert not HeapTrim(None, clock=lambda: now[0], rss=lambda: 0).poll(0, 4 * TRIM_AFTER_BYTES)


def test_malloc_trim_is_glibcs_and_none_elsewhere():
    import platform

    from rfclassify.serve.heap_trim import malloc_trim

    trim = malloc_trim()
    if platform.libc_ver()[0] != "glibc":
        assert trim is None
        return
    assert trim is not None and trim(0) in (0, 1)
