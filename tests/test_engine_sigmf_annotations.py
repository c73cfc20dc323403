"""`rfclassify classify --annotate`: each recording's classifications as SigMF annotations in
NAME.rfclassify.sigmf-meta beside its data, read back with the official `sigmf` library."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from rfclassify._exceptions import InputError
from rfclassify.cli import main
from rfclassify.engine.file_bursts import Reading
from rfclassify.engine.files import recording_format
from rfclassify.engine.sigmf import read_sigmf
from rfclassify.engine.sigmf_annotations import annotation_target
from test_engine_files_raw import BURSTS, _recording, _wav
from test_engine_files_sigmf import ANNOTATIONS, _library_recording, _wideband

sigmf = pytest.importorskip("sigmf", reason="the sigmf library is in the test extra: pip install -e '.[test]'")
from sigmf import SigMFFile, sigmffile  # noqa: E402


def _classify(model_dir, *args: str) -> int:
    return main(["classify", *args, "--json", "--model-dir", str(model_dir), "--device", "cpu"])


def _records(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _digest(*paths) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]


def _ours(meta_path) -> list[dict]:
    annotations = json.loads(meta_path.read_text())["annotations"]
    return [a for a in annotations if a.get("core:generator", "").startswith("rfclassify ")]


def _agrees(annotation: dict, record: dict) -> bool:
    """An annotation says what classify's JSON record of the same burst says."""
    return (annotation["core:sample_start"] == record["start_sample"]
            and annotation.get("core:label") == record.get("label")
            and all(annotation[f"rfclassify:{k}"] == record[k]
                    for k in ("label", "confidence", "top", "snr_db", "n_samples", "bucket", "windows")))


def test_a_raw_recording_is_annotated_beside_it_and_the_sigmf_library_opens_it(tiny_model_dir, tmp_path, capsys):
    x = _recording(seed=5)
    x.tofile(tmp_path / "cap.cf32")
    before = _digest(tmp_path / "cap.cf32")
    assert _classify(tiny_model_dir, str(tmp_path / "cap.cf32"), "--raw", "cf32_le", "--sample-rate", "2e6",
                     "--annotate") == 0
    records = _records(capsys)
    out = tmp_path / "cap.rfclassify.sigmf-meta"
    rec = sigmffile.fromfile(str(out), skip_checksum=True)
    rec.validate()
    np.testing.assert_array_equal(np.asarray(rec.read_samples()), x)   # the user's own samples, named
    assert rec.get_global_field(sigmf.SAMPLE_RATE_KEY) == 2e6 and rec.get_global_field("core:dataset") is None
    link = tmp_path / "cap.rfclassify.sigmf-data"   # a conforming pair, for readers that pair by name
    assert link.is_symlink() and str(link.readlink()) == "cap.cf32"
    annotations = rec.get_annotations()
    assert len(annotations) == len(records) == len(BURSTS)
    for a, r, (start, length) in zip(annotations, records, BURSTS, strict=True):
        assert _agrees(a, r)
        assert a["core:sample_start"] <= start and a["core:sample_start"] + a["core:sample_count"] >= start + length
        assert a["core:generator"] == f"rfclassify 0.1.0 {r['model']}"
        assert a["core:comment"].startswith(f"{r['label']} (confidence {r['confidence']:.2f}")
        # no capture frequency: the band at baseband, so that viewers draw the box
        assert (a["core:freq_lower_edge"], a["core:freq_upper_edge"]) == (-1e6, 1e6)
    assert _digest(tmp_path / "cap.cf32") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [   # no temp file
        "cap.cf32", "cap.rfclassify.sigmf-data", "cap.rfclassify.sigmf-meta"]


def test_without_links_the_metadata_names_the_data_itself(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """A file system with neither symbolic nor hard links (FAT): a non-conforming dataset."""
    import os

    def refuse(*args):
        raise OSError(1, "Operation not permitted")
    monkeypatch.setattr(os, "symlink", refuse)
    monkeypatch.setattr(os, "link", refuse)
    x = _recording(seed=5)
    x.tofile(tmp_path / "cap.cf32")
    assert _classify(tiny_model_dir, str(tmp_path / "cap.cf32"), "--raw", "cf32_le", "--annotate") == 0
    assert "a link to the data" not in capsys.readouterr().err
    rec = sigmffile.fromfile(str(tmp_path / "cap.rfclassify.sigmf-meta"), skip_checksum=True)
    assert rec.get_global_field("core:dataset") == "cap.cf32"
    np.testing.assert_array_equal(np.asarray(rec.read_samples()), x)
    assert not (tmp_path / "cap.rfclassify.sigmf-data").exists()


@pytest.mark.parametrize("kind", ["int16", "uint8", "float32"])
def test_a_wav_recording_is_described_with_its_header_and_trailing_bytes(tiny_model_dir, tmp_path, capsys, kind):
    path = tmp_path / "sdr.wav"
    _wav(path, _recording(seed=6), 2_048_000, kind, extra_chunk=b"\0" * 16)
    trailer = b"LIST" + (12).to_bytes(4, "little") + b"INFOISFT\0\0\0\0"   # a chunk after the samples
    raw = path.read_bytes() + trailer
    path.write_bytes(raw[:4] + (len(raw) - 8).to_bytes(4, "little") + raw[8:])
    assert _classify(tiny_model_dir, str(path), "--annotate") == 0
    records = _records(capsys)
    meta = json.loads((tmp_path / "sdr.rfclassify.sigmf-meta").read_text())
    assert meta["global"]["core:datatype"] == {"int16": "ci16_le", "uint8": "cu8", "float32": "cf32_le"}[kind]
    assert meta["global"]["core:trailing_bytes"] == len(trailer)
    assert meta["global"]["core:sample_rate"] == 2_048_000
    assert meta["global"]["core:dataset"] == "sdr.wav"   # no link: a name-paired reader would read the header
    assert not (tmp_path / "sdr.rfclassify.sigmf-data").exists()
    import warnings

    from scipy.io import wavfile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", wavfile.WavFileWarning)   # the vendor chunk
        _, samples = wavfile.read(path)
    rec = sigmffile.fromfile(str(tmp_path / "sdr.rfclassify.sigmf-meta"), skip_checksum=True, autoscale=False)
    np.testing.assert_array_equal(np.asarray(rec.read_samples()), samples[:, 0] + 1j * samples[:, 1].astype(float))
    assert [_agrees(a, r) for a, r in zip(rec.get_annotations(), records, strict=True)] == [True] * len(BURSTS)


def test_a_sigmf_recording_keeps_its_annotations_and_annotating_again_replaces_ours(
        tiny_model_dir, tmp_path, capsys):
    _library_recording(tmp_path, "rec", "ci16_le")
    before = _digest(tmp_path / "rec.sigmf-meta", tmp_path / "rec.sigmf-data")
    assert _classify(tiny_model_dir, str(tmp_path / "rec"), "--annotate") == 0
    records = _records(capsys)
    out = tmp_path / "rec.rfclassify.sigmf-meta"
    original = json.loads((tmp_path / "rec.sigmf-meta").read_text())
    written = json.loads(out.read_text())
    assert written["captures"] == original["captures"]
    assert "core:dataset" not in written["global"]
    assert str((tmp_path / "rec.rfclassify.sigmf-data").readlink()) == "rec.sigmf-data"
    theirs = [a for a in written["annotations"] if "core:generator" not in a or "rfclassify" not in a["core:generator"]]
    assert theirs == original["annotations"]
    ours = _ours(out)
    assert [(a["core:sample_start"], a["core:sample_count"]) for a in ours] == [(s, n) for s, n, _ in ANNOTATIONS]
    assert all(_agrees(a, r) for a, r in zip(ours, records, strict=True))
    assert {(a["core:freq_lower_edge"], a["core:freq_upper_edge"]) for a in ours} == {(914e6, 916e6)}
    starts = [a["core:sample_start"] for a in written["annotations"]]
    assert starts == sorted(starts)   # the specification's order
    sigmffile.fromfile(str(out)).validate()
    assert _digest(tmp_path / "rec.sigmf-meta", tmp_path / "rec.sigmf-data") == before

    # read back, our annotations are results, not bursts: the truth is still the recording's
    assert [(b.start_sample, b.truth_label) for b in read_sigmf(out)] == [(s, t) for s, _, t in ANNOTATIONS]
    assert _classify(tiny_model_dir, str(out), "--annotate") == 0   # our file annotated again: replaced
    assert len(_records(capsys)) == len(ANNOTATIONS)
    again = json.loads(out.read_text())
    assert len(again["annotations"]) == 2 * len(ANNOTATIONS)
    assert [e["name"] for e in again["global"]["core:extensions"]] == ["rfclassify"]


def test_a_recording_given_twice_is_annotated_once(tiny_model_dir, tmp_path, capsys):
    """The same recording named twice, or by its data and its metadata, is classified and
    annotated once: before the sixty-sixth session each naming added its annotations again."""
    _library_recording(tmp_path, "rec", "ci16_le")
    rec = str(tmp_path / "rec")
    assert _classify(tiny_model_dir, rec, rec, rec + ".sigmf-meta", "--annotate") == 0
    err = capsys.readouterr().err
    assert f"dropped 2 repeated file argument(s), each recording read once: {rec} (again), {rec}.sigmf-meta (the " \
           f"same recording as {rec})" in err
    ours = _ours(tmp_path / "rec.rfclassify.sigmf-meta")
    assert [(a["core:sample_start"], a["core:sample_count"]) for a in ours] == [(s, n) for s, n, _ in ANNOTATIONS]


def test_a_wav_annotated_after_a_raw_file_of_its_name_drops_the_raw_files_link(tiny_model_dir, tmp_path, capsys):
    """rec.cf32 annotated makes rec.rfclassify.sigmf-data, a link to it; rec.wav annotated next
    replaces the metadata with a WAV's (framed: no link), and the link goes too. Before the
    sixty-sixth session it stayed, and a viewer pairing by name read rec.cf32's samples under
    rec.wav's annotations. A file of that name rfclassify did not make is refused."""
    x = _recording(seed=5)
    x.tofile(tmp_path / "rec.cf32")
    _wav(tmp_path / "rec.wav", x, 2_000_000, "int16")
    link = tmp_path / "rec.rfclassify.sigmf-data"
    assert _classify(tiny_model_dir, str(tmp_path / "rec.cf32"), "--raw", "cf32_le", "--annotate") == 0
    assert link.is_symlink()
    assert _classify(tiny_model_dir, str(tmp_path / "rec.wav"), "--annotate") == 0
    capsys.readouterr()
    written = json.loads((tmp_path / "rec.rfclassify.sigmf-meta").read_text())
    assert written["global"]["core:dataset"] == "rec.wav" and written["captures"][0]["core:header_bytes"] == 44
    assert not link.is_symlink() and not link.exists()
    link.write_bytes(b"someone else's")
    with pytest.raises(InputError, match="a viewer pairing files by name would read it"):
        annotation_target(tmp_path / "rec.wav")


def test_an_annotated_band_keeps_its_span_and_edges(tiny_model_dir, tmp_path, capsys):
    band = {"core:freq_lower_edge": 2.40145e9, "core:freq_upper_edge": 2.40155e9}
    _wideband(tmp_path, [{"core:sample_start": 0, "core:sample_count": 40_000, **band}])
    assert _classify(tiny_model_dir, str(tmp_path / "wide"), "--annotate") == 0
    (record,) = _records(capsys)
    (ours,) = _ours(tmp_path / "wide.rfclassify.sigmf-meta")
    assert record["n_samples"] == 2000   # decimated 20x to the band ...
    assert ours["core:sample_count"] == 40_000 and ours["rfclassify:n_samples"] == 2000   # ... spanning 40,000
    assert (ours["core:freq_lower_edge"], ours["core:freq_upper_edge"]) == (2.40145e9, 2.40155e9)


def test_each_channel_of_a_multichannel_recording_is_its_own_annotation(tiny_model_dir, tmp_path, capsys):
    rng = np.random.default_rng(1)
    rng.standard_normal((3000, 2, 2)).astype(np.float32).tofile(tmp_path / "two.sigmf-data")
    rec = SigMFFile(data_file=str(tmp_path / "two.sigmf-data"),
                    global_info={sigmf.DATATYPE_KEY: "cf32_le", sigmf.NUM_CHANNELS_KEY: 2, sigmf.VERSION_KEY: "1.2.0"})
    rec.add_capture(0)
    rec.add_annotation(100, 1000)
    rec.tofile(str(tmp_path / "two"))
    assert _classify(tiny_model_dir, str(tmp_path / "two"), "--annotate") == 0
    records = _records(capsys)
    ours = _ours(tmp_path / "two.rfclassify.sigmf-meta")
    assert [a["rfclassify:channel"] for a in ours] == [r["channel"] for r in records] == [0, 1]


def test_a_rejected_burst_is_annotated_without_a_label(tiny_model_dir, tmp_path, capsys):
    np.ones(10, np.complex64).tofile(tmp_path / "short.cf32")
    assert _classify(tiny_model_dir, str(tmp_path / "short.cf32"), "--raw", "cf32_le", "--cut", "whole",
                     "--annotate") == 0
    (record,) = _records(capsys)
    (ours,) = _ours(tmp_path / "short.rfclassify.sigmf-meta")
    assert "core:label" not in ours and ours["rfclassify:reason"] == record["reason"] == "too_short"
    assert "core:freq_lower_edge" not in ours   # no rate given: no band to draw
    assert ours["core:comment"] == "not classified: too_short" and ours["core:sample_count"] == 10


def test_what_cannot_be_annotated_is_refused_before_anything_is_classified(tiny_model_dir, tmp_path, capsys):
    import h5py

    _library_recording(tmp_path, "rec", "cf32_le")   # also writes rec.sigmf, an archive
    with pytest.raises(InputError, match="extract it"):
        annotation_target(tmp_path / "rec.sigmf")
    h5py.File(tmp_path / "d.h5", "w").close()
    with pytest.raises(InputError, match="an rfclassify HDF5 dataset, not a recording"):
        annotation_target(tmp_path / "d.h5")
    import struct

    fmt = struct.pack("<HHIIHH", 1, 2, 48_000, 48_000 * 6, 6, 24)   # PCM, I and Q of 24 bits
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", 600) + bytes(600)
    (tmp_path / "deep.wav").write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    assert recording_format(tmp_path / "deep.wav")[0] == "wav"   # read as a WAV, but ...
    with pytest.raises(InputError, match="24-bit WAV.*no SigMF datatype"):
        annotation_target(tmp_path / "deep.wav")

    _recording(seed=7).tofile(tmp_path / "cap")
    (tmp_path / "cap.rfclassify.sigmf-meta").write_text('{"global": {}}')   # a file someone else wrote
    assert _classify(tiny_model_dir, str(tmp_path / "cap"), "--raw", "cf32_le", "--annotate") == 2
    assert "cap.rfclassify.sigmf-meta: exists and rfclassify did not write it" in capsys.readouterr().err
    assert (tmp_path / "cap.rfclassify.sigmf-meta").read_text() == '{"global": {}}'

    _wav(tmp_path / "rec.wav", _recording(seed=8), 48_000, "int16")   # rec.wav and rec would share one file
    assert _classify(tiny_model_dir, str(tmp_path / "rec"), str(tmp_path / "rec.wav"), "--annotate") == 2
    captured = capsys.readouterr()
    assert "would go to" in captured.err and "rec.rfclassify.sigmf-meta" in captured.err and captured.out == ""
    assert not (tmp_path / "rec.rfclassify.sigmf-meta").exists()
    annotation_target(tmp_path / "rec.wav", Reading())   # alone, it can be annotated

    (tmp_path / "rec.rfclassify.sigmf-data").write_bytes(b"someone's")   # where the link would go
    with pytest.raises(InputError, match="rec.rfclassify.sigmf-data: exists and is not rec.sigmf-data"):
        annotation_target(tmp_path / "rec")
    (tmp_path / "rec.rfclassify.sigmf-data").unlink()
    (tmp_path / "rec.rfclassify.sigmf-data").symlink_to("gone.sigmf-data")   # a link to nothing
    with pytest.raises(InputError, match="exists and is not rec.sigmf-data"):
        annotation_target(tmp_path / "rec")
    (tmp_path / "rec.rfclassify.sigmf-data").unlink()
    meta = json.loads((tmp_path / "rec.sigmf-meta").read_text())
    meta["global"]["core:extensions"] = {"name": "x"}
    (tmp_path / "rec.sigmf-meta").write_text(json.dumps(meta))
    with pytest.raises(InputError, match="core:extensions must be a list"):
        annotation_target(tmp_path / "rec")


def test_each_annotation_takes_the_band_of_its_own_capture(tiny_model_dir, tmp_path, capsys):
    rng = np.random.default_rng(2)
    rng.standard_normal((4000, 2)).astype(np.float32).tofile(tmp_path / "hop.sigmf-data")
    meta = {"global": {"core:datatype": "cf32_le", "core:sample_rate": 1e6, "core:version": "1.2.0"},
            "captures": [{"core:sample_start": 0, "core:frequency": 100e6},
                         {"core:sample_start": 2000, "core:frequency": 200e6}],
            "annotations": [{"core:sample_start": 100, "core:sample_count": 1000},
                            {"core:sample_start": 2500, "core:sample_count": 1000}]}
    (tmp_path / "hop.sigmf-meta").write_text(json.dumps(meta))
    assert _classify(tiny_model_dir, str(tmp_path / "hop"), "--annotate") == 0
    capsys.readouterr()
    ours = _ours(tmp_path / "hop.rfclassify.sigmf-meta")
    assert [(a["core:freq_lower_edge"], a["core:freq_upper_edge"]) for a in ours] == [
        (99.5e6, 100.5e6), (199.5e6, 200.5e6)]
