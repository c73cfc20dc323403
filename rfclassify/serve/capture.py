"""Bursts the daemon keeps on disk ([capture]): those whose result label the operator named
(by default `unknown`, what the model could not call), each a SigMF recording, in a folder
held under a limit of disk use, written by a thread of its own.

A recording is ``YYYYmmddTHHMMSS.ffffffZ_SEQ_LABEL.sigmf-meta`` + ``.sigmf-data``: the burst's
samples as ``cf32_le``; the global ``core:sample_rate`` when the burst had one; one capture
with ``core:frequency`` (its center frequency, when given) and ``core:datetime`` (when it was
received); and one annotation over the whole burst, made as ``classify --annotate`` makes
its own (``core:label``, ``core:comment``, ``core:generator`` "rfclassify VERSION MODEL") with
every field of its result record but the latencies as ``rfclassify:FIELD`` (``burst_id``,
``stream``, ``meta``, ``truth`` included). ``rfclassify classify FOLDER/*.sigmf-meta`` reads
them again, each whole: the reader skips our annotation, so a newer model gives its own answer.

The inference thread only offers a burst (a put that never waits): when the writer is
QUEUE_BURSTS behind, or the burst alone would take more than max_bytes, it is skipped and counted.
After each write the oldest recordings of ours (in the order written; at start, by name, which
sorts by time) are deleted until the folder's recordings fit max_bytes; files that are not
ours are never touched. A recording counts what its two files take on disk (st_blocks * 512,
whole blocks: at least 4 KiB each on ext4), not their sizes: counted by size, 64-sample bursts
(512 bytes of samples, about 1.4 KB of metadata) filled a 10 MiB cap with 39.5 MB of disk.
Where the file system reports no blocks (st_blocks 0 or absent) a file counts its size. A
write that fails (disk full, folder gone) is counted, logged and shown in `status`;
classification goes on.
"""

from __future__ import annotations

import collections
import datetime
import json
import logging
import os
import queue
import re
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from rfclassify._exceptions import ConfigError
from rfclassify._paths import nearest_existing, writable_folder
from rfclassify.serve.bursts import Burst
from rfclassify.serve.config import CaptureConfig, capture_labels

log = logging.getLogger(__name__)

QUEUE_BURSTS = 64          # bursts waiting for the writer before more are skipped
#: and their samples' bytes: 64 bursts of 64 MiB (the largest message) held 4 GiB outside the
#: daemon's memory bound while a slow disk wrote (sixty-sixth session)
QUEUE_BYTES = 64 * 2**20
_NAME = re.compile(r"^\d{8}T\d{6}\.\d{6}Z_\d+_[A-Za-z0-9_-]+$")   # a recording of ours (its stem)
_SKIPPED_FIELDS = ("latency_ms",)    # the rest of a result record goes into the annotation
_END = object()


class BurstCapture:
    """Keeps the bursts whose result label cfg.labels names as SigMF recordings in cfg.dir."""

    def __init__(self, cfg: CaptureConfig, model_id: str) -> None:
        from rfclassify.engine.sigmf_annotations import generator

        self.dir = Path(cfg.dir)
        self.labels = frozenset(capture_labels(cfg.labels))
        self.max_bytes = cfg.max_bytes
        self._generator = generator(model_id)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            probe = self.dir / f".rfclassify-write-test-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
            for left in self.dir.glob(".*.tmp"):   # a write a stop cut short
                if _NAME.match(left.name[1:-len(".tmp")]):
                    left.unlink()
            found = sorted(p for p in self.dir.glob("*.sigmf-meta") if _NAME.match(p.name[: -len(".sigmf-meta")]))
        except OSError as exc:
            raise ConfigError(f"capture.dir: cannot write bursts to {self.dir} ({exc.strerror or exc})") from None
        self._block_bytes = _block_bytes(self.dir)   # what a file's size rounds up to on disk (estimates)
        # the recordings already there count toward max_bytes, oldest first
        self._kept: collections.deque[tuple[str, int]] = collections.deque(
            (p.name[: -len(".sigmf-meta")], _disk_bytes(p) + _disk_bytes(p.with_suffix(".sigmf-data")))
            for p in found)
        self.bytes = sum(n for _, n in self._kept)
        self.kept = self.skipped = self.failed = self.deleted = 0
        self.last_error = ""
        self._seq = 0
        self._queue: queue.Queue[Any] = queue.Queue(QUEUE_BURSTS)
        self._queued_bytes = 0             # samples of the bursts in _queue
        self._queued_lock = threading.Lock()
        self._thread = threading.Thread(target=self._write_loop, name="capture", daemon=True)
        self._thread.start()

    def wants(self, label: str) -> bool:
        return "*" in self.labels or label in self.labels

    def offer(self, burst: Burst, record: dict[str, Any]) -> None:
        """Queue the burst for writing when its label is one to keep (never waits; skipped and
        counted when the writer is behind)."""
        if not self.wants(str(record.get("label"))):
            return
        if self._on_disk(burst.n_samples * 8) > self.max_bytes:   # it alone would fill the folder
            self.skipped += 1
            return
        received = time.time() - (time.monotonic() - burst.received_s) if burst.received_s else time.time()
        nbytes = burst.n_samples * 8
        with self._queued_lock:
            if self._queued_bytes + nbytes > QUEUE_BYTES:
                self.skipped += 1
                return
            self._queued_bytes += nbytes
        try:
            self._queue.put_nowait((burst, record, received))
        except queue.Full:
            with self._queued_lock:
                self._queued_bytes -= nbytes
            self.skipped += 1

    def close(self, timeout_s: float = 2.0) -> None:
        """Write what is queued (for at most timeout_s), then stop the writer."""
        try:
            self._queue.put(_END, timeout=timeout_s)
        except queue.Full:
            pass
        self._thread.join(timeout_s)

    def snapshot(self) -> dict[str, Any]:
        """`status`'s capture object (docs/daemon.md)."""
        return {"dir": str(self.dir), "labels": sorted(self.labels), "kept": self.kept, "skipped": self.skipped,
                "failed": self.failed, "deleted": self.deleted, "recordings": len(self._kept),
                "bytes": self.bytes, "max_bytes": self.max_bytes, "last_error": self.last_error}

    def _on_disk(self, nbytes: int) -> int:
        """About what a file of nbytes takes on disk: whole blocks (checked before writing; what is
        counted is measured after)."""
        return -(-nbytes // self._block_bytes) * self._block_bytes

    def _write_loop(self) -> None:
        while (item := self._queue.get()) is not _END:
            burst, record, received = item
            try:
                self._write(burst, record, received)
            except Exception as exc:  # noqa: BLE001 - a full disk must not stop classification
                self.failed += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                if self.failed <= 10 or self.failed % 1000 == 0:
                    log.error("capture: could not keep a burst (%d so far): %s", self.failed, self.last_error)
            finally:
                with self._queued_lock:
                    self._queued_bytes -= burst.n_samples * 8

    def _write(self, burst: Burst, record: dict[str, Any], received: float) -> None:
        iq = np.ascontiguousarray(burst.iq, dtype="<c8")
        when = datetime.datetime.fromtimestamp(received, datetime.timezone.utc)
        label = re.sub(r"[^A-Za-z0-9_-]", "_", str(record.get("label")))
        self._seq += 1
        stem = f"{when:%Y%m%dT%H%M%S.%fZ}_{self._seq}_{label}"
        meta = _metadata(burst, record, when, self._generator)
        text = json.dumps(meta, indent=2, allow_nan=False) + "\n"
        if self._on_disk(iq.nbytes) + self._on_disk(len(text.encode("utf-8"))) > self.max_bytes:
            # with its metadata it alone would fill the folder: kept, it stayed over max_bytes
            # with everything else deleted (sixty-sixth session)
            self.skipped += 1
            return
        data_path, meta_path = self.dir / f"{stem}.sigmf-data", self.dir / f"{stem}.sigmf-meta"
        tmp = self.dir / f".{stem}.tmp"
        try:   # the data first, so that a metadata file always has its data
            iq.tofile(tmp)
            os.replace(tmp, data_path)
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, meta_path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            data_path.unlink(missing_ok=True)
            raise
        on_disk = _disk_bytes(meta_path) + _disk_bytes(data_path)
        if on_disk > self.max_bytes:   # alone over max_bytes, measured (the estimate was short): not kept
            self._delete(stem)
            self.skipped += 1
            return
        self._kept.append((stem, on_disk))
        self.bytes += on_disk
        self.kept += 1
        while self.bytes > self.max_bytes and len(self._kept) > 1:
            old, nbytes = self._kept.popleft()
            self._delete(old)
            self.bytes -= nbytes
            self.deleted += 1

    def _delete(self, stem: str) -> None:
        for suffix in (".sigmf-meta", ".sigmf-data"):   # the metadata first: no recording without data
            (self.dir / f"{stem}{suffix}").unlink(missing_ok=True)


def check_folder(folder: str) -> None:
    """ConfigError unless the capture folder could be made and written, without making it
    (`serve --check-config`): it is a writable folder, or the nearest part of its path that
    exists is one."""
    path = nearest_existing(Path(folder).absolute())
    if not writable_folder(path):
        raise ConfigError(f"capture.dir: cannot write bursts to {folder} ({path} is "
                          f"{'not a folder' if not path.is_dir() else 'not writable'})")


def _metadata(burst: Burst, record: dict[str, Any], when: datetime.datetime, who: str) -> dict[str, Any]:
    """The SigMF metadata of one kept burst (the module docstring says what it holds)."""
    from rfclassify.engine.sigmf_annotations import EXTENSION, SIGMF_VERSION, band_edges, comment, extension
    from rfclassify.serve.results import RESULT_TOPIC, encode

    fields = json.loads(encode(RESULT_TOPIC, record)[1])   # strict JSON, as the record was published
    glob: dict[str, Any] = {"core:datatype": "cf32_le", "core:version": SIGMF_VERSION,
                            "core:recorder": "rfclassify serve", "core:extensions": [extension()]}
    if burst.sample_rate_hz:
        glob["core:sample_rate"] = float(burst.sample_rate_hz)
    capture: dict[str, Any] = {"core:sample_start": 0, "core:datetime": when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
    if burst.center_freq_hz is not None:
        capture["core:frequency"] = float(burst.center_freq_hz)
    label = fields["label"]
    best = (fields.get("top") or [{}])[0].get("label")
    annotation: dict[str, Any] = {"core:sample_start": 0, "core:sample_count": burst.n_samples,
                                  "core:generator": who, "core:label": label,
                                  "core:comment": comment(label, fields["confidence"], best, fields.get("snr_db")),
                                  **band_edges(burst.center_freq_hz, burst.sample_rate_hz)}
    annotation.update({f"{EXTENSION}:{k}": v for k, v in fields.items() if k not in _SKIPPED_FIELDS})
    return {"global": glob, "captures": [capture], "annotations": [annotation]}


def _disk_bytes(path: Path) -> int:
    """What the file takes on disk: st_blocks * 512 (whole blocks), else its size (a file system
    that reports no blocks, or none yet); 0 when it is gone."""
    try:
        st = path.stat()
    except OSError:
        return 0
    blocks = getattr(st, "st_blocks", 0)
    return blocks * 512 if blocks else st.st_size


def _block_bytes(folder: Path) -> int:
    """The folder's file system block (a file's size rounds up to it on disk); 1 where unknown."""
    try:
        return max(os.statvfs(folder).f_frsize, 1)
    except (AttributeError, OSError):   # no statvfs (Windows)
        return 1
