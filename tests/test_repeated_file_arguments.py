"""`rfclassify classify` and `dataset import` given one recording more than once: a shell glob's
NAME.sigmf-meta and NAME.sigmf-data, a path and ./path, a link to it, or (`captures/*` after
`classify --annotate`) the metadata --annotate wrote beside it. Before the seventy-first session
each naming was read: every burst classified, or imported into a training set, twice."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import numpy as np
import pytest

from rfclassify.cli import main
from rfclassify.data.reader import DatasetReader
from test_engine_files_raw import BURSTS, _recording, _wav

sigmf = pytest.importorskip("sigmf", reason="the sigmf library is in the test extra: pip install -e '.[test]'")
from sigmf import SigMFFile  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[1] / "models"
CPU = ["--model-dir", str(SHIPPED), "--device", "cpu"]
SPANS = [(100, 1000, "QPSK"), (2000, 800, "GMSK"), (3500, 700, "FM"), (4500, 400, "BPSK")]


def _sigmf(folder: Path, name: str, spans=SPANS, dataset: str | None = None) -> None:
    """A recording the sigmf library writes, NAME.sigmf-meta + NAME.sigmf-data (or, with
    dataset, metadata of that data file beside it), a person's labels on spans."""
    data = folder / (dataset or f"{name}.sigmf-data")
    if not data.exists():
        rng = np.random.default_rng(3)
        (rng.standard_normal(5000) + 1j * rng.standard_normal(5000)).astype(np.complex64).tofile(data)
    rec = SigMFFile(data_file=str(data), global_info={sigmf.DATATYPE_KEY: "cf32_le", sigmf.SAMPLE_RATE_KEY: 1e6,
                                                      sigmf.VERSION_KEY: "1.2.0"})
    rec.add_capture(0, metadata={sigmf.FREQUENCY_KEY: 915e6})
    for start, count, label in spans:
        rec.add_annotation(start, count, metadata={sigmf.LABEL_KEY: label})
    rec.tofile(str(folder / name))
    if dataset:   # the library names the data file in core:dataset only on request: as a person writes it
        meta = json.loads((folder / f"{name}.sigmf-meta").read_text())
        meta["global"]["core:dataset"] = dataset
        (folder / f"{name}.sigmf-meta").write_text(json.dumps(meta))


def _dataset(path: Path) -> None:
    assert main(["dataset", "generate", "--out", str(path), "--classes", "BPSK,QPSK", "--per-cell", "3",
                 "--snr=20", "--lengths", "256"]) == 0


def _star(folder: Path) -> list[str]:
    """folder/* as the shell expands it."""
    return sorted(glob.glob(str(folder / "*")))


def _classified(capsys, *args: str) -> tuple[list[dict], str]:
    assert main(["classify", "--json", *CPU, *args]) == 0
    out, err = capsys.readouterr()
    return [json.loads(line) for line in out.splitlines()], err


def test_classify_reads_each_recording_once_however_often_it_is_named(tmp_path, capsys, monkeypatch):
    """rec.* (the pair), a dataset by its path, ./path, a symbolic link and a hard link: 4 bursts
    of the recording and 6 of the dataset, not 8 and 24; one line on stderr names what was left."""
    _sigmf(tmp_path, "rec")
    _dataset(tmp_path / "a.h5")
    (tmp_path / "link.h5").symlink_to("a.h5")
    os.link(tmp_path / "a.h5", tmp_path / "hard.h5")
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)
    records, err = _classified(capsys, "rec.sigmf-data", "rec.sigmf-meta", "a.h5", "./a.h5", "link.h5",
                               str(tmp_path / "hard.h5"), "rec")
    assert [(r["file"], r["start_sample"]) for r in records[:4]] == [("rec.sigmf-meta", s) for s, _, _ in SPANS]
    assert [r["file"] for r in records[4:]] == ["a.h5"] * 6
    dropped = [line for line in err.splitlines() if line.startswith("dropped")]
    assert dropped == [f"dropped 5 repeated file argument(s), each recording read once: rec.sigmf-meta (the same "
                       f"recording as rec.sigmf-data), ./a.h5 (the same recording as a.h5), link.h5 (the same "
                       f"recording as a.h5), {tmp_path / 'hard.h5'} (the same recording as a.h5), rec (the same "
                       f"recording as rec.sigmf-data)"]
    assert "10 classified" in err


def test_dataset_import_takes_each_recording_once(tmp_path, capsys):
    """rec.* imported 8 bursts "from 2 file(s)", a.h5 a.h5 ./a.h5 three copies of each example.
    Another person's labels of the same data file (its own metadata) stay a recording of their own."""
    _sigmf(tmp_path, "rec")
    _sigmf(tmp_path, "second", spans=[(1000, 2000, "8PSK")], dataset="rec.sigmf-data")
    _dataset(tmp_path / "a.h5")
    capsys.readouterr()
    out = tmp_path / "out.h5"
    assert main(["dataset", "import", "--out", str(out), *glob.glob(str(tmp_path / "rec.*")),
                 str(tmp_path / "second.sigmf-meta"), str(tmp_path / "a.h5"), str(tmp_path / "a.h5"),
                 f"{tmp_path}/./a.h5"]) == 0
    printed, err = capsys.readouterr()
    assert f"wrote {out}: 11 bursts from 3 file(s)" in printed
    assert err.startswith("dropped 3 repeated file argument(s)") and err.count("\n") == 1
    with DatasetReader(out) as ds:
        assert sorted(str(n) for n in ds.label_names) == sorted(["QPSK", "GMSK", "FM", "BPSK", "8PSK",
                                                                 *["BPSK", "QPSK"] * 3])
        assert len(ds.attrs.extra["sources"]) == 3


def test_a_glob_after_annotate_classifies_each_recording_once_as_before(tmp_path, capsys):
    """captures/* after `classify --annotate captures/*` also names NAME.rfclassify.sigmf-meta
    and its link NAME.rfclassify.sigmf-data: the same samples and annotations (ours are skipped).
    The recording is read whatever the order (the glob gives ours first: read in its place, a
    WAV's annotated metadata is one whole burst, not the energy cut's three), and annotating again
    writes each burst once."""
    cap = tmp_path / "captures"
    cap.mkdir()
    _sigmf(cap, "rec")
    _wav(cap / "air.wav", _recording(), 2_000_000, "int16")
    first, _ = _classified(capsys, "--annotate", *_star(cap))
    assert sorted(p.name for p in cap.iterdir()) == ["air.rfclassify.sigmf-meta", "air.wav",
                                                     "rec.rfclassify.sigmf-data", "rec.rfclassify.sigmf-meta",
                                                     "rec.sigmf-data", "rec.sigmf-meta"]
    again, err = _classified(capsys, *_star(cap))
    assert [Path(r["file"]).name for r in again] == ["air.wav"] * len(BURSTS) + ["rec.sigmf-meta"] * len(SPANS)
    assert [(r["start_sample"], r["label"]) for r in again] == [(r["start_sample"], r["label"]) for r in first]
    assert "air.rfclassify.sigmf-meta (annotations --annotate wrote of " in err
    assert "rec.rfclassify.sigmf-meta (annotations --annotate wrote of " in err
    _classified(capsys, "--annotate", *_star(cap))
    ours = json.loads((cap / "rec.rfclassify.sigmf-meta").read_text())["annotations"]
    assert len(ours) == 2 * len(SPANS)   # the person's four and one of ours each


def test_metadata_a_person_labelled_after_annotate_is_imported_in_place_of_its_recording(tmp_path, capsys):
    """The labelling `dataset import` asks of a WAV: --annotate, check the labels, take
    core:generator out; or a label added to a SigMF recording's annotated metadata. captures/*
    then names each recording and that metadata, which marks its bursts and more: the recording
    is left out (a WAV was refused as labelling nothing; a SigMF recording's labels came twice)."""
    cap = tmp_path / "captures"
    cap.mkdir()
    _wav(cap / "air.wav", _recording(), 2_000_000, "int16")
    _sigmf(cap, "rec")
    _classified(capsys, "--annotate", *_star(cap))
    for name, label in (("air", "FM"), ("rec", None)):
        labelled = cap / f"{name}.rfclassify.sigmf-meta"
        meta = json.loads(labelled.read_text())
        if label:
            for a in meta["annotations"]:
                del a["core:generator"]
                a["core:label"] = label
        else:
            meta["annotations"].append({"core:sample_start": 4920, "core:sample_count": 80, "core:label": "OOK"})
        labelled.write_text(json.dumps(meta))
    out = tmp_path / "air.h5"
    # --full-band: the annotations give the capture's band, and a WAV's capture no core:frequency
    assert main(["dataset", "import", "--out", str(out), "--full-band", *_star(cap)]) == 0
    printed, err = capsys.readouterr()
    assert f"wrote {out}: {len(BURSTS) + len(SPANS) + 1} bursts from 2 file(s)" in printed   # + the OOK added
    assert f"{cap / 'air.wav'} (the data of {cap / 'air.rfclassify.sigmf-meta'})" in err
    assert f"{cap / 'rec.sigmf-meta'} (its bursts all marked in {cap / 'rec.rfclassify.sigmf-data'})" in err
