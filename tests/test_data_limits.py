"""Datasets at the edges of what a user or a damaged file can hand them (sixty-sixth session's
review): each case was a traceback, a wrong file or wrong training before."""

from __future__ import annotations

import json
import shlex

import h5py
import numpy as np
import pytest

from rfclassify._exceptions import InputError
from rfclassify.cli import main
from rfclassify.data.reader import DatasetReader
from rfclassify.labels import LABEL_TO_INDEX, LABELS


def _generate(out, *args: str) -> None:
    assert main(["dataset", "generate", "--out", str(out), "--force", "--lengths", "128", *args]) == 0


def test_an_out_that_cannot_be_written_is_one_line_and_exit_2(capsys):
    # h5py's OSError names no file, so the CLI called it an internal error (exit 1) with HDF5's text
    assert main(["dataset", "generate", "--out", "/proc/rfclassify-test.h5", "--classes", "QPSK",
                 "--snr=10", "--per-cell", "2", "--lengths", "128"]) == 2
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if "error" in ln]
    assert "Traceback" not in err and len(errors) == 1 and "cannot be written" in errors[0], err


@pytest.mark.parametrize("damage", ["heap", "compound name"])
def test_a_damaged_dataset_is_one_line_not_a_traceback(tmp_path, capsys, damage):
    _generate(tmp_path / "ok.h5", "--classes", "QPSK", "--snr=10", "--per-cell", "2")
    raw = bytearray((tmp_path / "ok.h5").read_bytes())
    if damage == "heap":        # h5py's RuntimeError
        i = raw.index(b"HEAP")
        raw[i:i + 4] = b"XEAP"
    else:                       # a /params member name that is not UTF-8: UnicodeDecodeError
        raw[raw.rindex(b"iq_phase_imbalance_deg") + 1] = 0xFF
    (tmp_path / "bad.h5").write_bytes(bytes(raw))
    capsys.readouterr()
    assert main(["dataset", "inspect", str(tmp_path / "bad.h5")]) == 2
    err = capsys.readouterr().err
    assert "corrupt dataset" in err and "Traceback" not in err and err.count("\n") == 1


def test_bursts_stored_out_of_example_order_read_whole(tmp_path):
    # read() merged neighbouring examples into one sample range and gave both empty bursts
    _generate(tmp_path / "d.h5", "--classes", "QPSK", "--snr=10", "--per-cell", "2")
    with DatasetReader(tmp_path / "d.h5") as ds:
        first, second = ds.read([0])[0], ds.read([1])[0]
    with h5py.File(tmp_path / "d.h5", "a") as f:        # the same bursts, stored the other way round
        f["iq"][...] = np.concatenate([second, first])
        f["offset"][...] = np.array([128, 0])
    with DatasetReader(tmp_path / "d.h5") as ds:
        both = ds.read([0, 1])
        batch = next(ds.iter_batches(2))
    np.testing.assert_array_equal(both[0], first)
    np.testing.assert_array_equal(both[1], second)
    assert batch.iq.shape == (2, 128) and np.all(np.abs(batch.iq).sum(axis=1) > 0)


def test_import_skips_bursts_with_nan_or_infinity(tmp_path, capsys):
    x = (np.random.default_rng(0).standard_normal((3000, 2)) * 0.5).astype(np.float32)
    x[100] = np.nan
    x[2100] = np.inf
    x.tofile(tmp_path / "rec.sigmf-data")
    annotations = [{"core:sample_start": s, "core:sample_count": 800, "core:label": "QPSK"} for s in (0, 1000, 2000)]
    (tmp_path / "rec.sigmf-meta").write_text(json.dumps(
        {"global": {"core:datatype": "cf32_le", "core:version": "1.2.0", "core:sample_rate": 1e6},
         "captures": [{"core:sample_start": 0}], "annotations": annotations}))
    assert main(["dataset", "import", str(tmp_path / "rec.sigmf-meta"), "--out", str(tmp_path / "d.h5")]) == 0
    assert "2 with non-finite samples (NaN or infinity)" in capsys.readouterr().out
    with DatasetReader(tmp_path / "d.h5") as ds:
        assert len(ds) == 1 and np.all(np.isfinite(ds.read([0])[0]))


def test_the_recorded_command_makes_the_same_file_with_a_negative_snr(tmp_path):
    # it recorded "--snr -10,0", which argparse reads as an option and refuses
    _generate(tmp_path / "a.h5", "--classes", "QPSK", "--snr=-10,0", "--per-cell", "2")
    with DatasetReader(tmp_path / "a.h5") as ds:
        words = shlex.split(ds.attrs.command_line)
        before = ds.read(range(len(ds)))
    assert "--snr=-10.0,0.0" in words or any(w.startswith("--snr=-") for w in words), words
    assert main(words[1:]) == 0
    with DatasetReader(tmp_path / "a.h5") as ds:
        for a, b in zip(before, ds.read(range(len(ds))), strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_cell_named_twice_is_refused(capsys):
    from rfclassify.data.gnuradio_source import GnuRadioSpec

    assert main(["dataset", "generate", "--out", "/tmp/never.h5", "--classes", "QPSK", "--snr=10,10",
                 "--per-cell", "3", "--lengths", "128"]) == 2
    assert "duplicate value in the SNR grid" in capsys.readouterr().err
    with pytest.raises(InputError, match="duplicate class"):
        GnuRadioSpec(classes=("QPSK", "QPSK"))
    with pytest.raises(InputError, match="duplicate value in the SNR grid"):
        GnuRadioSpec(classes=("QPSK",), snr_grid_db=(10.0, 10.0))


def test_training_maps_a_files_labels_to_the_networks(tmp_path):
    # the file's label_index counts its own labels list; train --data used it as the network's
    from rfclassify.model.training_data import DataRecipe, hdf5_batches

    path = tmp_path / "d.h5"
    _generate(path, "--classes", "QPSK,FM", "--snr=20", "--per-cell", "4")
    other = ("FM",) + tuple(n for n in LABELS if n != "FM")
    with h5py.File(path, "a") as f:     # a consistent file whose labels come in another order
        names = [LABELS[i] for i in f["label_index"][()]]
        f["label_index"][...] = np.array([other.index(n) for n in names], np.int16)
        f.attrs["labels"] = json.dumps(list(other))
    batch = next(hdf5_batches(str(path), DataRecipe(batch_size=8, buckets_samples=(128,)), 0))
    assert {LABELS[i] for i in batch["label"]} == {"QPSK", "FM"}
    with h5py.File(path, "a") as f:
        f.attrs["labels"] = json.dumps(["NOT-A-LABEL", *other[1:]])
    with pytest.raises(Exception, match="labels the model does not classify: NOT-A-LABEL"):
        next(hdf5_batches(str(path), DataRecipe(batch_size=8, buckets_samples=(128,)), 0))
    assert LABEL_TO_INDEX["FM"] != 0
