"""[capture]: the daemon keeps the bursts whose result label the operator named as SigMF
recordings in a folder held under a byte limit; read back with the official `sigmf` library
and with `rfclassify classify`."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import numpy as np
import pytest

from rfclassify._exceptions import ConfigError
from rfclassify.cli import main
from rfclassify.engine.results import ClassificationResult
from rfclassify.serve import capture as capture_module
from rfclassify.serve.bursts import Burst, Truth
from rfclassify.serve.capture import BurstCapture
from rfclassify.serve.config import CaptureConfig, config_from_dict
from rfclassify.serve.results import result_record

# what close() may wait for the writer: its 2 s default can cut, on a slow disk, the writes a test counts
CLOSE_S = 30.0

sigmf = pytest.importorskip("sigmf", reason="the sigmf library is in the test extra: pip install -e '.[test]'")
from sigmf import sigmffile  # noqa: E402

MiB = 1024 * 1024


def _burst(n: int, seed: int, **kw) -> Burst:
    rng = np.random.default_rng(seed)
    iq = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
    return Burst(iq, received_s=time.monotonic(), **kw)


def _record(burst: Burst, label: str, p: float = 0.4) -> dict:
    best = "8PSK" if label == "unknown" else label
    result = ClassificationResult(True, label, p, ((best, p), ("QPSK", 0.2)), 7.5, burst.n_samples, 1024, 1)
    return result_record(burst, result, backend="onnxruntime", precision="fp32", model_id="m-1",
                         queue_ms=1.0, infer_ms=2.0, total_ms=3.0)


def _kept(folder) -> list:
    return sorted(folder.glob("*.sigmf-meta"))


def test_a_kept_burst_is_a_sigmf_recording_the_library_reads(tmp_path):
    cap = BurstCapture(CaptureConfig(dir=str(tmp_path / "kept"), labels="unknown"), "m-1")
    burst = _burst(3000, 1, sample_rate_hz=2e6, burst_id="b-7", stream="rx0", center_freq_hz=433.92e6,
                   meta={"gain": 30}, truth=Truth("16QAM", 12.0))
    cap.offer(burst, _record(burst, "unknown"))
    other = _burst(500, 2)
    cap.offer(other, _record(other, "QPSK", 0.9))   # not a label to keep
    cap.close(CLOSE_S)
    (meta_path,) = _kept(tmp_path / "kept")
    assert meta_path.name.endswith("_1_unknown.sigmf-meta")
    rec = sigmffile.fromfile(str(meta_path))
    rec.validate()
    np.testing.assert_array_equal(np.asarray(rec.read_samples()), burst.iq)
    assert rec.get_global_field(sigmf.SAMPLE_RATE_KEY) == 2e6
    assert rec.get_captures()[0]["core:frequency"] == 433.92e6
    (a,) = rec.get_annotations()
    assert (a["core:sample_start"], a["core:sample_count"], a["core:label"]) == (0, 3000, "unknown")
    assert (a["core:freq_lower_edge"], a["core:freq_upper_edge"]) == (432.92e6, 434.92e6)
    assert a["core:comment"] == "unknown (confidence 0.40, best guess 8PSK), SNR 7.5 dB"
    assert a["core:generator"] == "rfclassify 0.1.0 m-1"
    assert a["rfclassify:burst_id"] == "b-7" and a["rfclassify:stream"] == "rx0"
    assert a["rfclassify:meta"] == {"gain": 30} and a["rfclassify:truth"] == {"label": "16QAM", "snr_db": 12.0}
    assert "rfclassify:latency_ms" not in a
    assert cap.snapshot() | {"bytes": 0} == {
        "dir": str(tmp_path / "kept"), "labels": ["unknown"], "kept": 1, "skipped": 0, "failed": 0, "deleted": 0,
        "recordings": 1, "bytes": 0, "max_bytes": 1024 * MiB, "last_error": ""}
    assert cap.snapshot()["bytes"] == sum(p.stat().st_blocks * 512 or p.stat().st_size   # disk use, whole blocks
                                          for p in (meta_path, meta_path.with_suffix(".sigmf-data")))


def test_classify_reads_a_kept_burst_whole_and_gives_its_own_answer(tiny_model_dir, tmp_path, capsys):
    cap = BurstCapture(CaptureConfig(dir=str(tmp_path), labels="*"), "m-1")
    burst = _burst(2000, 3, sample_rate_hz=1e6)
    cap.offer(burst, _record(burst, "QPSK", 0.99))
    cap.close(CLOSE_S)
    (meta_path,) = _kept(tmp_path)
    assert main(["classify", str(meta_path), "--json", "--model-dir", str(tiny_model_dir), "--device", "cpu"]) == 0
    (record,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert record["n_samples"] == 2000 and record["model"] == "tiny-random" and "truth" not in record


def test_the_oldest_recordings_go_when_the_folder_is_full_and_others_files_stay(tmp_path):
    (tmp_path / "notes.sigmf-meta").write_text("{}")       # not ours: never counted or deleted
    (tmp_path / "20200101T000000.000000Z_1_mine.txt").write_text("x")
    cap = BurstCapture(CaptureConfig(dir=str(tmp_path), labels="unknown", max_bytes=MiB), "m-1")
    bursts = [_burst(40_000, seed) for seed in range(6)]   # 320,000 bytes of samples each
    for b in bursts:
        cap.offer(b, _record(b, "unknown"))
        time.sleep(0.01)   # distinct names in time order
    cap.close(CLOSE_S)
    kept = _kept(tmp_path)
    ours = [p for p in kept if p.name != "notes.sigmf-meta"]
    assert len(ours) == 3 and cap.deleted == 3 and cap.kept == 6 and cap.bytes <= MiB
    for p in ours:   # the newest three, each with its data
        data = np.fromfile(p.with_suffix(".sigmf-data"), np.complex64)
        assert any(np.array_equal(data, b.iq) for b in bursts[3:])
    assert (tmp_path / "notes.sigmf-meta").exists() and (tmp_path / "20200101T000000.000000Z_1_mine.txt").exists()
    assert sorted(p.name for p in tmp_path.glob("*.sigmf-data")) == sorted(
        p.name.replace("-meta", "-data") for p in ours)

    again = BurstCapture(CaptureConfig(dir=str(tmp_path), labels="unknown", max_bytes=MiB), "m-1")
    assert again.snapshot()["recordings"] == 3 and again.bytes == cap.bytes   # a restart counts what is there
    b = _burst(40_000, 9)
    again.offer(b, _record(b, "unknown"))
    again.close(CLOSE_S)
    assert again.deleted == 1 and not ours[0].exists() and ours[1].exists()


def _hold_the_writer(monkeypatch) -> threading.Event:
    """The writer waits (a slow disk) until the event returned is set."""
    gate = threading.Event()
    real = BurstCapture._write

    def slow(self, *args):
        gate.wait(10)
        real(self, *args)
    monkeypatch.setattr(BurstCapture, "_write", slow)
    return gate


def test_a_writer_that_falls_behind_skips_bursts_and_counts_them(tmp_path, monkeypatch):
    gate = _hold_the_writer(monkeypatch)
    cap = BurstCapture(CaptureConfig(dir=str(tmp_path), labels="*"), "m-1")
    bursts = [_burst(100, seed) for seed in range(capture_module.QUEUE_BURSTS + 10)]
    for b in bursts:
        cap.offer(b, _record(b, "FM", 0.9))
    gate.set()
    cap.close(CLOSE_S)
    assert cap.skipped in (9, 10) and cap.kept + cap.skipped == len(bursts)   # the writer held one
    assert len(_kept(tmp_path)) == cap.kept
    huge = _burst(MiB // 8 + 1, 0)                        # alone larger than max_bytes
    small = BurstCapture(CaptureConfig(dir=str(tmp_path / "s"), labels="*", max_bytes=MiB), "m-1")
    small.offer(huge, _record(huge, "FM"))
    small.close(CLOSE_S)
    assert small.skipped == 1 and small.kept == 0


def test_the_queue_is_bounded_in_bytes_and_the_folder_by_data_and_metadata(tmp_path, monkeypatch):
    """64 queued bursts of any size were held while a slow disk wrote (4 GiB of 64 MiB messages
    outside the memory bound), and a burst whose samples alone fit max_bytes but not with its
    metadata was kept, the folder left over the limit (sixty-sixth session)."""
    gate = _hold_the_writer(monkeypatch)
    monkeypatch.setattr(capture_module, "QUEUE_BYTES", 4 * MiB)
    cap = BurstCapture(CaptureConfig(dir=str(tmp_path / "q"), labels="*"), "m-1")
    bursts = [_burst(MiB // 8, seed) for seed in range(10)]          # 1 MiB of samples each
    for b in bursts:
        cap.offer(b, _record(b, "FM", 0.9))
    gate.set()
    cap.close(CLOSE_S)
    assert cap.kept == 4 and cap.skipped == 6      # four MiB queued at most, not ten
    monkeypatch.undo()                               # the writer as it is, at its own pace
    fits = _burst(MiB // 8 - 16, 0)                 # its samples fit 1 MiB; with its metadata not
    tight = BurstCapture(CaptureConfig(dir=str(tmp_path / "t"), labels="*", max_bytes=MiB), "m-1")
    tight.offer(fits, _record(fits, "FM"))
    tight.close(CLOSE_S)
    assert tight.skipped == 1 and tight.kept == 0 and tight.bytes <= MiB and not _kept(tmp_path / "t")


def test_a_write_that_fails_is_counted_and_the_writer_goes_on(tmp_path):
    folder = tmp_path / "kept"
    cap = BurstCapture(CaptureConfig(dir=str(folder), labels="*"), "m-1")
    folder.rmdir()                                          # the folder taken away under the daemon
    b = _burst(100, 1)
    cap.offer(b, _record(b, "FM"))
    deadline = time.monotonic() + 10
    while cap.failed == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cap.failed == 1 and "FileNotFoundError" in cap.last_error
    folder.mkdir()
    cap.offer(b, _record(b, "FM"))
    cap.close(CLOSE_S)
    assert cap.kept == 1 and len(_kept(folder)) == 1


def test_a_folder_that_cannot_be_written_and_unknown_labels_are_config_errors(tmp_path, tiny_model_dir, capsys):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="capture.dir: cannot write bursts to .*file/kept"):
        BurstCapture(CaptureConfig(dir=str(tmp_path / "file" / "kept")), "m-1")
    config = tmp_path / "rfclassify.toml"   # --check-config finds it too, and makes no folder
    config.write_text(f'[capture]\ndir = "{tmp_path / "file" / "kept" / "deeper"}"\n')
    assert main(["serve", "--config", str(config), "--check-config", "--model-dir", str(tiny_model_dir)]) == 2
    assert f"{tmp_path / 'file'} is not a folder" in capsys.readouterr().err
    config.write_text(f'[capture]\ndir = "{tmp_path / "new" / "kept"}"\n')
    assert main(["serve", "--config", str(config), "--check-config", "--model-dir", str(tiny_model_dir)]) == 0
    assert not (tmp_path / "new").exists()
    with pytest.raises(ConfigError, match=r"capture.labels: .*got 'unknown, QSPK'"):
        config_from_dict({"capture": {"dir": "/x", "labels": "unknown, QSPK"}})
    with pytest.raises(ConfigError, match=r"capture.labels: .*got ' , '"):
        config_from_dict({"capture": {"dir": "/x", "labels": " , "}})
    assert config_from_dict({"capture": {"dir": "/x", "labels": "*"}}).capture.labels == "*"
    assert config_from_dict({"capture": {"labels": "anything"}}).capture.dir == ""   # off: not read
    with pytest.raises(ConfigError, match="capture.max_bytes: must be in"):
        config_from_dict({"capture": {"dir": "/x", "max_bytes": 10}})


def test_the_daemon_keeps_the_bursts_it_was_asked_for(tiny_model_dir, tmp_path, serving):
    from rfclassify.serve.demo import local_config
    from rfclassify.serve.metrics import render_metrics
    from rfclassify.serve.native import encode_native
    from rfclassify.serve.status_view import render_status

    folder = tmp_path / "kept"
    config = dataclasses.replace(local_config(tmp_path, model_dir=str(tiny_model_dir), backend="onnxruntime"),
                                 capture=CaptureConfig(dir=str(folder), labels="*"))
    sent = {f"c-{i}": _burst(1024 + 100 * i, i).iq for i in range(12)}
    with serving(config) as (d, push, collector):
        for burst_id, iq in sent.items():
            push.send_multipart(encode_native(iq, {"sample_rate": 1e6, "burst_id": burst_id}))
        assert collector.wait_for(len(sent), 30), f"{collector.count()} of {len(sent)}"
        deadline = time.monotonic() + 10
        while d.capture.kept < len(sent) and time.monotonic() < deadline:
            time.sleep(0.02)
        status = d.status()
        collector.stop()
    assert status["capture"]["kept"] == len(sent) and status["capture"]["failed"] == 0
    assert f"capture     * -> {folder}: {len(sent)} kept, 0 skipped; {len(sent)} recordings" in render_status(status)
    assert f'rfclassify_capture_bursts_total{{outcome="kept"}} {len(sent)}' in render_metrics(status, {})
    labels = {r["burst_id"]: r["label"] for r in collector.results}
    for meta_path in _kept(folder):
        rec = sigmffile.fromfile(str(meta_path))
        (a,) = rec.get_annotations()
        burst_id = a["rfclassify:burst_id"]
        np.testing.assert_array_equal(np.asarray(rec.read_samples()), sent.pop(burst_id))
        assert a["core:label"] == labels[burst_id] and meta_path.name.endswith(f"_{labels[burst_id]}.sigmf-meta")
    assert sent == {}
