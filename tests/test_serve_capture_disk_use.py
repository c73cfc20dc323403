"""[capture] max_bytes bounds what the recordings take on disk, not their files' sizes: counted by
size, 64-sample bursts (two files of whole 4 KiB blocks each on ext4) filled a 10 MiB cap with
39.5 MB of disk (the seventieth session's long-running review)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from rfclassify.engine.results import ClassificationResult
from rfclassify.serve.bursts import Burst
from rfclassify.serve.capture import BurstCapture
from rfclassify.serve.config import CaptureConfig
from rfclassify.serve.results import result_record

MiB = 1024 * 1024


def _burst(n: int, seed: int) -> Burst:
    rng = np.random.default_rng(seed)
    iq = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
    return Burst(iq, sample_rate_hz=1e6, burst_id=seed, received_s=time.monotonic())


def _record(burst: Burst) -> dict:
    result = ClassificationResult(True, "FM", 0.9, (("FM", 0.9), ("AM-DSB-WC", 0.05)), 7.5, burst.n_samples, 1024, 1)
    return result_record(burst, result, backend="onnxruntime", precision="fp32", model_id="m-1",
                         queue_ms=1.0, infer_ms=2.0, total_ms=3.0)


def _on_disk(folder) -> int:
    """What the recordings in folder take on disk, as du counts files."""
    return sum(p.stat().st_blocks * 512 for p in folder.iterdir() if p.name.endswith((".sigmf-meta", ".sigmf-data")))


def _wait_for_writer(cap: BurstCapture, done: int) -> None:
    deadline = time.monotonic() + 30.0
    while cap.kept + cap.skipped + cap.failed < done and time.monotonic() < deadline:
        time.sleep(0.005)


@pytest.fixture()
def folder(tmp_path):
    probe = tmp_path / "probe"
    probe.write_bytes(b"x")
    blocks = getattr(probe.stat(), "st_blocks", 0)
    probe.unlink()
    if not blocks:
        pytest.skip("the tmp file system reports st_blocks 0: disk use cannot be measured there")
    return tmp_path / "kept"


def test_many_small_recordings_stay_within_max_bytes_of_disk_and_a_restart_counts_disk_use(folder) -> None:
    cap = BurstCapture(CaptureConfig(dir=str(folder), labels="*", max_bytes=MiB), "m-1")
    n = 400   # 512 bytes of samples and about 1.4 KB of metadata each: 1 MiB by size held ~550 recordings
    for k in range(n):
        b = _burst(64, k)
        cap.offer(b, _record(b))
        if k % 32 == 31:
            _wait_for_writer(cap, k + 1)   # the writer keeps up: nothing is skipped for being behind
    cap.close(30.0)
    used = _on_disk(folder)
    assert used <= MiB                             # was 3.2 MiB here: two whole blocks a recording
    assert cap.kept == n and cap.skipped == 0 and cap.failed == 0 and cap.deleted > 0
    assert cap.snapshot()["bytes"] == used         # status's bytes is disk use
    assert cap.snapshot()["recordings"] == len(list(folder.glob("*.sigmf-meta")))
    again = BurstCapture(CaptureConfig(dir=str(folder), labels="*", max_bytes=MiB), "m-1")
    assert again.bytes == used                     # the start-up scan counts disk use too
    again.close(30.0)


def test_a_recording_that_would_fill_the_folder_on_disk_is_skipped(folder) -> None:
    """Samples 2 KiB short of max_bytes and 1.4 KB of metadata fit by size; on disk (whole blocks)
    they do not, and kept they would hold the folder over max_bytes with everything else deleted."""
    cap = BurstCapture(CaptureConfig(dir=str(folder), labels="*", max_bytes=MiB), "m-1")
    b = _burst(MiB // 8 - 256, 0)   # 2 KiB short of the cap: the metadata's whole block does not fit
    cap.offer(b, _record(b))
    cap.close(30.0)
    assert cap.skipped == 1 and cap.kept == 0 and _on_disk(folder) == 0
