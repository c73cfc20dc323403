"""`rfclassify dataset import`: the labelled bursts of recordings (field data) as an rfclassify
HDF5 dataset, read back with DatasetReader and classified from it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rfclassify._exceptions import InputError
from rfclassify.cli import main
from rfclassify.data.import_recordings import import_recordings
from rfclassify.data.reader import DatasetReader
from rfclassify.labels import LABELS

SPANS = [  # (start, count, label, generator): what a person labelled in a recording of 30,000 samples
    (100, 1000, "QPSK", None),
    (1500, 800, "wifi", None),                    # not a label the model classifies
    (2500, 40, "FM", None),                       # too short for the schema
    (3000, 20_000, "16QAM", None),                # longer than 8,192: three pieces
    (24_000, 2000, "GMSK", "rfclassify 0.1.0 m"),  # our own result: not a truth
    (27_000, 2000, None, None),                   # no label
]


def _recording(folder) -> np.ndarray:
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(30_000) + 1j * rng.standard_normal(30_000)).astype(np.complex64)
    x.tofile(folder / "field.sigmf-data")
    annotations = []
    for start, count, label, who in SPANS:
        a = {"core:sample_start": start, "core:sample_count": count}
        a.update({"core:label": label} if label else {})
        a.update({"core:generator": who} if who else {})
        annotations.append(a)
    meta = {"global": {"core:datatype": "cf32_le", "core:sample_rate": 1e6, "core:version": "1.2.0"},
            "captures": [{"core:sample_start": 0}], "annotations": annotations}
    (folder / "field.sigmf-meta").write_text(json.dumps(meta))
    return x


def test_labelled_bursts_become_examples_and_the_rest_is_counted(tmp_path):
    x = _recording(tmp_path)
    report = import_recordings([str(tmp_path / "field")], tmp_path / "field.h5")
    assert report.n_examples == 4 and report.split == 1
    assert report.per_label == {"QPSK": 1, "16QAM": 3}
    assert report.skipped == {"no label the model classifies": 2, "shorter than 64 samples": 1}
    with DatasetReader(tmp_path / "field.h5") as ds:
        iq = ds.read(np.arange(len(ds)))
        assert [str(n) for n in ds.label_names] == ["QPSK", "16QAM", "16QAM", "16QAM"]
        assert np.isnan(ds.snr_db).all()
        np.testing.assert_array_equal(iq[0], x[100:1100])
        assert [p.size for p in iq[1:]] == [6667, 6667, 6666]
        np.testing.assert_array_equal(np.concatenate(iq[1:]), x[3000:23_000])   # consecutive pieces
        assert ds.attrs.classes == ("QPSK", "16QAM") and ds.attrs.source == "import"
        assert ds.attrs.extra["sources"] == [str(tmp_path / "field")]


def test_a_dataset_imported_again_keeps_its_truth_and_drops_foreign_labels(tmp_path):
    from rfclassify.data import schema
    from rfclassify.dsp.synth import PARAM_DTYPE

    attrs = schema.DatasetAttrs(source="synth", seed=0, generator="test", classes=("BPSK", "WIFI"),
                                snr_grid_db=(5.0,), channel={"clean": {}}, lengths={"rule": "test"},
                                labels=(*LABELS, "WIFI"))
    rng = np.random.default_rng(0)
    bursts = [(rng.standard_normal(n) + 0j).astype(np.complex64) for n in (300, 400)]
    with schema.DatasetWriter(tmp_path / "synth.h5", attrs, PARAM_DTYPE) as w:
        w.append(bursts, np.array([LABELS.index("BPSK"), len(LABELS)]), np.array([5.0, 7.0]),
                 np.zeros(2, PARAM_DTYPE))
        w.commit()
    report = import_recordings([str(tmp_path / "synth.h5")], tmp_path / "again.h5")
    assert report.per_label == {"BPSK": 1} and report.skipped == {"no label the model classifies": 1}
    with DatasetReader(tmp_path / "again.h5") as ds:
        assert list(ds.snr_db) == [5.0] and [str(n) for n in ds.label_names] == ["BPSK"]
        np.testing.assert_array_equal(ds.read(np.arange(1))[0], bursts[0])


def test_nothing_to_import_is_one_error_and_leaves_no_file(tmp_path):
    np.zeros(5000, np.complex64).tofile(tmp_path / "quiet.sigmf-data")
    (tmp_path / "quiet.sigmf-meta").write_text(json.dumps({"global": {"core:datatype": "cf32_le"}}))
    with pytest.raises(InputError, match="no burst to import: 1 with no label the model classifies"):
        import_recordings([str(tmp_path / "quiet")], tmp_path / "none.h5")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quiet.sigmf-data", "quiet.sigmf-meta"]


def test_the_command_writes_the_dataset_and_classify_scores_it(tiny_model_dir, tmp_path, capsys):
    _recording(tmp_path)
    out = tmp_path / "field.h5"
    assert main(["dataset", "import", str(tmp_path / "field"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}: 4 bursts from 1 file(s)" in printed and "16QAM 3, QPSK 1" in printed
    assert "1 long burst(s) split into pieces" in printed
    assert "skipped 2 with no label the model classifies, 1 shorter than 64 samples" in printed
    with DatasetReader(out) as ds:
        assert ds.attrs.command_line.startswith(f"rfclassify dataset import {tmp_path / 'field'} --cut auto")
    assert main(["dataset", "import", str(tmp_path / "field"), "--out", str(out)]) == 2   # exists: --force
    assert "use --force" in capsys.readouterr().err
    assert main(["classify", str(out), "--json", "--model-dir", str(tiny_model_dir), "--device", "cpu"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["truth"]["label"] for r in records] == ["QPSK", "16QAM", "16QAM", "16QAM"]
