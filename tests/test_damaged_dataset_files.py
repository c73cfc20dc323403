"""Files that are damaged, lie about their sizes or are not files at all (the CLI file review):
a bad part of a file is counted and reported, and the rest of it and the other files are read;
each case ended the whole run, or said the wrong thing, before."""

from __future__ import annotations

import hashlib
import json
import os

import h5py
import numpy as np
import pytest

from rfclassify._exceptions import InputError
from rfclassify.cli import main
from rfclassify.data.reader import MAX_READ_SAMPLES, DatasetReader
from rfclassify.engine.file_bursts import UnreadSamples

CHUNK = 512   # samples of a /iq chunk in the files made here: 16 bursts of 256 span eight


def _generate(path) -> None:
    assert main(["dataset", "generate", "--out", str(path), "--force", "--classes", "BPSK,QPSK", "--snr=20",
                 "--per-cell", "8", "--lengths", "256", "--seed", "1", "--channel", "clean"]) == 0


def _rewrite(src, dst, iq_samples: int | None = None, lengths: np.ndarray | None = None,
             offsets: np.ndarray | None = None) -> None:
    """dst: src's dataset with /iq in gzip chunks of CHUNK samples, claiming iq_samples samples
    (the rest never written: a sparse file), and other lengths or offsets where given."""
    with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
        g.attrs.update(dict(f.attrs))
        for name in f:
            if name != "iq":
                g.create_dataset(name, data=f[name][()])
        for name, values in (("length", lengths), ("offset", offsets)):
            if values is not None:
                del g[name]
                g.create_dataset(name, data=values)
        iq = f["iq"][()]
        g.create_dataset("iq", shape=(iq_samples or iq.size,), dtype=np.complex64, chunks=(CHUNK,),
                         compression="gzip")
        g["iq"][:iq.size] = iq


def _damage_chunk(path, k: int) -> None:
    """Garble the compressed bytes of /iq's chunk k (bit rot, a bad copy)."""
    with h5py.File(path, "r") as f:
        info = f["iq"].id.get_chunk_info_by_coord((k * CHUNK,))
    raw = bytearray(path.read_bytes())
    for i in range(info.byte_offset + 8, info.byte_offset + info.size - 8):
        raw[i] ^= 0xA5
    path.write_bytes(bytes(raw))
    with h5py.File(path, "r") as f, pytest.raises(OSError):   # the damage is one h5py cannot read past
        f["iq"][k * CHUNK:(k + 1) * CHUNK]


def _classify(model_dir, *args: str) -> int:
    return main(["classify", *args, "--json", "--model-dir", str(model_dir), "--device", "cpu"])


def _records(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


@pytest.fixture(name="made")
def _made(tmp_path):
    _generate(tmp_path / "good.h5")
    return tmp_path


def test_a_damaged_chunk_rejects_its_bursts_and_the_rest_is_classified(tiny_model_dir, made, capsys):
    # h5py's "Can't synchronously read data (filter returned failure during read)" ended the run,
    # exit 1, naming no file: the file's other bursts and the files after it were never classified
    _rewrite(made / "good.h5", made / "bad.h5")
    _damage_chunk(made / "bad.h5", 3)
    with DatasetReader(made / "bad.h5") as ds:
        ends = ds.offsets + ds.lengths
        hit = set(np.flatnonzero((ds.offsets < 4 * CHUNK) & (ends > 3 * CHUNK)).tolist())
        n = len(ds)
        got = ds.read_or_reject(np.arange(n))
        assert {i for i, b in enumerate(got) if isinstance(b, UnreadSamples)} == hit and len(hit) == 2
        assert all(got[i].reason == "unreadable" for i in hit)
        with pytest.raises(InputError, match=r"bad\.h5: burst \d+: its samples .* cannot be read"):
            ds.read(sorted(hit))      # calibration: one line naming file and burst
        # an InputError too until the seventy-first session (tests/test_damaged_hdf5.py): now the
        # damaged samples are hashed as their range
        with DatasetReader(made / "good.h5") as good:
            assert ds.samples_sha256() != good.samples_sha256()
    capsys.readouterr()
    assert _classify(tiny_model_dir, str(made / "bad.h5"), str(made / "good.h5")) == 0
    out, err = capsys.readouterr()
    records = _records(out)
    assert len(records) == 2 * n
    bad = [r for r in records if not r["ok"]]
    assert {r["burst"] for r in bad} == hit and all(r["file"].endswith("bad.h5") for r in bad)
    assert {r["reason"] for r in bad} == {"unreadable"} and all(r["n_samples"] == 256 for r in bad)
    assert sum(r["file"].endswith("good.h5") and r["ok"] for r in records) == n
    assert "bad.h5: 2 burst(s) could not be read, counted rejected (unreadable 2)" in err
    assert f"{n - 2 + n} classified; 2 rejected (unreadable 2)" in err and "Traceback" not in err


def test_a_burst_claiming_more_samples_than_are_read_is_rejected_and_the_rest_read(tiny_model_dir, made, capsys):
    # burst 5 claims 2**40 samples of a sparse /iq that holds them: the reader allocated them all,
    # "not enough memory", exit 1, neither file nor burst named, the rest of the run lost
    with DatasetReader(made / "good.h5") as ds:
        n, total = len(ds), int(ds.lengths.sum())
        lengths, offsets = ds.lengths.astype(np.int64), ds.offsets.copy()
    lengths[5], offsets[5] = 2 ** 40, total
    _rewrite(made / "good.h5", made / "huge.h5", iq_samples=total + 2 ** 40, lengths=lengths, offsets=offsets)
    with DatasetReader(made / "huge.h5") as ds:
        got = ds.read_or_reject([4, 5, 6])
        assert got[1] == UnreadSamples("too_long", f"burst 5 claims {2 ** 40:,} samples, past the longest read, "
                                                   f"{MAX_READ_SAMPLES:,} (the daemon's max_burst_samples)")
        assert got[0].size == got[2].size == 256
        with pytest.raises(InputError, match=r"huge\.h5: burst 5 claims"):
            ds.read([5])
    capsys.readouterr()
    assert _classify(tiny_model_dir, str(made / "huge.h5"), str(made / "good.h5")) == 0
    out, err = capsys.readouterr()
    records = _records(out)
    assert len(records) == 2 * n and [r["burst"] for r in records if not r["ok"]] == [5]
    (bad,) = [r for r in records if not r["ok"]]
    assert bad["reason"] == "too_long" and bad["n_samples"] == 2 ** 40 and bad["file"].endswith("huge.h5")
    assert "huge.h5: 1 burst(s) could not be read, counted rejected (too_long 1)" in err
    # dataset import reads through the same reader: the burst is left out, the rest imported
    assert main(["dataset", "import", str(made / "huge.h5"), str(made / "good.h5"),
                 "--out", str(made / "imported.h5")]) == 0
    with DatasetReader(made / "imported.h5") as ds:
        assert len(ds) == 2 * n - 1


def test_hdf5_bursts_are_read_a_bounded_number_of_samples_at_a_time():
    from rfclassify.engine.files import HDF5_CHUNK_SAMPLES, _hdf5_chunks

    # 4096 bursts of a million samples each were one read of 32 GiB
    lengths = np.full(40, MAX_READ_SAMPLES, np.int64)
    lengths[3] = 2 ** 40          # too long to be read: counts as none
    chunks = list(_hdf5_chunks(lengths, 4096))
    assert np.array_equal(np.concatenate(chunks), np.arange(40))
    per = HDF5_CHUNK_SAMPLES // MAX_READ_SAMPLES
    assert [c.size for c in chunks] == [per + 1, per, 40 - 2 * per - 1]
    assert [c.size for c in _hdf5_chunks(np.full(10, 256, np.int64), 4)] == [4, 4, 2]


def test_the_samples_digest_covers_what_the_bursts_use_not_a_claimed_iq(tiny_model_dir, made, capsys):
    # evaluate hashed the whole claimed /iq (2**34 samples of a sparse file: minutes of zeros)
    with h5py.File(made / "good.h5", "r") as f:
        whole = hashlib.sha256(f["iq"][()].tobytes()).hexdigest()
        total = f["iq"].shape[0]
    with DatasetReader(made / "good.h5") as ds:
        assert ds.samples_sha256() == whole      # a file rfclassify writes: the digest recorded before
    _rewrite(made / "good.h5", made / "sparse.h5", iq_samples=total + 2 ** 24)
    with DatasetReader(made / "sparse.h5") as ds:
        assert ds.samples_sha256() == ds.samples_sha256(chunk=1000) == whole
    capsys.readouterr()
    assert main(["evaluate", str(made / "sparse.h5"), "--model-dir", str(tiny_model_dir), "--out",
                 str(made / "ev"), "--no-plots", "--no-refiner"]) == 0
    assert json.loads((made / "ev" / "evaluation.json").read_text())["dataset"]["samples_sha256"] == whole


def test_inspect_draws_a_sheet_of_a_dataset_with_a_nan_an_empty_and_an_unreadable_burst(made, capsys):
    # numpy's RuntimeWarnings ("Mean of empty slice", "invalid value encountered in divide") with
    # their source lines; with warnings as errors, no sheet
    pytest.importorskip("matplotlib")
    with DatasetReader(made / "good.h5") as ds:
        lengths = ds.lengths.astype(np.int64)
        first_qpsk = int(np.flatnonzero(ds.label_names == "QPSK")[0])
    lengths[0] = 0
    _rewrite(made / "good.h5", made / "odd.h5", lengths=lengths)
    with h5py.File(made / "odd.h5", "r+") as f:
        o = int(f["offset"][1])
        f["iq"][o + 5] = np.nan
    _damage_chunk(made / "odd.h5", first_qpsk * 256 // CHUNK)
    capsys.readouterr()
    assert main(["dataset", "inspect", str(made / "odd.h5"), "--png", str(made / "sheet.png")]) == 0
    out, err = capsys.readouterr()
    assert err == "" and f"sheet: {made / 'sheet.png'}" in out
    assert (made / "sheet.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_raw_recording_of_nan_or_infinity_is_a_non_finite_reject(tiny_model_dir, tmp_path, capsys, value):
    # all NaN: "0 classified", nothing counted; a NaN stretch in the noise vanished where one of
    # infinities was a burst and a reject
    np.full(100_000, value, np.complex64).tofile(tmp_path / "all.cf32")
    rng = np.random.default_rng(4)
    x = ((rng.standard_normal(200_000) + 1j * rng.standard_normal(200_000)) * 0.01).astype(np.complex64)
    x[50_000:60_000] = value        # a stretch in the noise
    x[150_000] = value              # one sample: too short a blip for the energy detector
    x.tofile(tmp_path / "mixed.cf32")
    capsys.readouterr()
    assert _classify(tiny_model_dir, str(tmp_path / "all.cf32"), "--raw", "cf32_le") == 0
    (whole,) = _records(capsys.readouterr().out)
    assert whole["reason"] == "non_finite" and whole["start_sample"] == 0 and whole["n_samples"] == 100_000
    assert _classify(tiny_model_dir, str(tmp_path / "mixed.cf32"), "--raw", "cf32_le") == 0
    records = _records(capsys.readouterr().out)
    rejected = [(r["start_sample"], r["start_sample"] + r["n_samples"]) for r in records if not r["ok"]]
    assert all(r["reason"] == "non_finite" for r in records if not r["ok"])
    assert len(rejected) == 2
    assert rejected[0][0] <= 50_000 and rejected[0][1] >= 60_000 and rejected[0][1] - rejected[0][0] < 11_000
    assert rejected[1][0] <= 150_000 < rejected[1][1]
    assert [r["burst"] for r in records] == list(range(len(records)))


def test_a_pipe_a_fifo_and_a_folder_are_named_for_what_they_are(tmp_path, capsys):
    # each was "no such file"
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir.sigmf-meta").mkdir()
    (tmp_path / "folder").mkdir()
    cases = [(["classify", str(tmp_path / "fifo"), "--raw", "cf32_le"], "fifo: a pipe (FIFO), not a file"),
             (["classify", str(tmp_path / "dir")], "dir: no such file, and dir.sigmf-meta is a directory"),
             (["dataset", "inspect", str(tmp_path / "folder")], "folder: a directory, not a file"),
             (["dataset", "inspect", str(tmp_path / "fifo")], "fifo: a pipe (FIFO), not a file"),
             (["evaluate", str(tmp_path / "folder"), "--no-plots"], "folder: a directory, not a file"),
             (["classify", str(tmp_path / "nothing")], "nothing: no such file (nor nothing.sigmf-meta)"),
             (["dataset", "inspect", str(tmp_path / "nothing.h5")], "nothing.h5: no such dataset file")]
    for argv, said in cases:
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, (argv, err)
