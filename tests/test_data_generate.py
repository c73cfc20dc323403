"""`dataset generate`: balance, lengths, determinism across worker counts, and one-line errors."""

from __future__ import annotations

import sys

import h5py
import numpy as np
import pytest

from rfclassify._exceptions import InputError
from rfclassify.cli import main
from rfclassify.data import schema
from rfclassify.data.generate import GenerateSpec, generate_dataset, plan_chunks
from rfclassify.data.reader import DatasetReader
from rfclassify.labels import LABELS

TINY = ["--classes", "BPSK,FM,NOISE", "--snr", "0,10", "--per-cell", "6", "--chunk", "4"]


def _gen(tmp_path, name, *extra):
    out = tmp_path / name
    assert main(["dataset", "generate", "--out", str(out), "--seed", "5", *TINY, *extra]) == 0
    return out


def test_balanced_over_class_and_snr_with_lengths_in_bounds(tmp_path, capsys):
    out = _gen(tmp_path, "a.h5", "--length-min", "64", "--length-max", "300")
    assert "bursts/s" in capsys.readouterr().out
    with DatasetReader(out) as ds:
        assert len(ds) == 3 * 2 * 6
        for name in ("BPSK", "FM", "NOISE"):
            for snr in (0.0, 10.0):
                sel = (ds.label_names == name) & (ds.snr_db == snr)
                assert sel.sum() == 6, (name, snr)
        assert ds.lengths.min() >= 64 and ds.lengths.max() <= 300
        assert len(np.unique(ds.lengths)) > 1  # lengths vary between chunks
        assert ds.attrs.seed == 5 and ds.attrs.source == "synth"
        assert "--per-cell 6" in ds.attrs.command_line
        for x, n in zip(ds.read(range(len(ds))), ds.lengths):
            assert x.shape == (n,) and np.isfinite(x).all()


def test_length_list_and_channel_presets_are_balanced_per_class(tmp_path):
    out = _gen(tmp_path, "b.h5", "--lengths", "128,1024,300", "--channel", "full,clean")
    with DatasetReader(out) as ds:
        assert set(ds.lengths.tolist()) == {128, 300, 1024}
        assert ds.channel_names == ("full", "clean")
        for name in ("BPSK", "FM", "NOISE"):
            sel = ds.label_names == name  # 12 examples: 4 per length, 6 per preset
            assert sorted(np.unique(ds.lengths[sel], return_counts=True)[1].tolist()) == [4, 4, 4]
            assert np.bincount(ds.channel_index[sel], minlength=2).tolist() == [6, 6]
        # the clean preset has no carrier offset; the full chain usually has one
        cfo = ds.params["cfo_cyc_per_sample"]
        clean = (ds.channel_index == 1) & (ds.label_names != "NOISE")
        assert np.all(np.nan_to_num(cfo[clean]) == 0)
        full = (ds.channel_index == 0) & (ds.label_names != "NOISE")
        assert np.any(np.nan_to_num(cfo[full]) != 0)


def test_same_seed_same_file_whatever_the_worker_count(tmp_path):
    spec = GenerateSpec(classes=("QPSK", "AM-DSB-SC", "GFSK"), snr_grid_db=(-4.0, 12.0), per_cell=5,
                        length_min_samples=64, length_max_samples=512, seed=11, chunk_examples=4)
    assert len(plan_chunks(spec)) > 4
    one = generate_dataset(spec, tmp_path / "w1.h5", workers=1, command_line="x").path
    two = generate_dataset(spec, tmp_path / "w2.h5", workers=2, command_line="x").path
    with h5py.File(one, "r") as f1, h5py.File(two, "r") as f2:
        for name in (schema.IQ, *schema.PER_EXAMPLE):
            assert f1[name][()].tobytes() == f2[name][()].tobytes(), name
    other = generate_dataset(GenerateSpec(**{**spec.__dict__, "seed": 12}), tmp_path / "s12.h5").path
    with h5py.File(one, "r") as f1, h5py.File(other, "r") as f3:
        assert f1[schema.IQ].shape != f3[schema.IQ].shape or \
            f1[schema.IQ][()].tobytes() != f3[schema.IQ][()].tobytes()



@pytest.mark.skipif(sys.platform != "linux", reason="the fork server is the Linux start method (spawn elsewhere)")
def test_workers_never_fork_the_threaded_parent(tmp_path, monkeypatch):
    # numpy's BLAS pool (and any caller's thread) makes this process multi-threaded: a fork of it
    # may deadlock the child and Python 3.12 warns of it; the workers come from a fork server
    import os

    def refuse(*args):
        raise AssertionError("os.fork in the parent")

    monkeypatch.setattr(os, "fork", refuse)
    spec = GenerateSpec(classes=("QPSK", "GFSK"), snr_grid_db=(10.0,), per_cell=8, lengths_samples=(256,),
                        seed=3, chunk_examples=4)
    out = generate_dataset(spec, tmp_path / "w2.h5", workers=2, command_line="x")
    assert out.n_examples == 16 and out.workers == 2


@pytest.mark.parametrize("argv, needle", [
    (["--classes", "QPSK,NOPE"], "unknown label 'NOPE'"),
    (["--snr-min", "10", "--snr-max", "0"], "SNR grid is empty"),
    (["--snr", ","], "--snr is empty"),
    # a grid built for ever, and an SNR that became an infinite noise scale in the synthesizer
    (["--snr-step", "1e-300"], "the SNR grid would hold 5e+301 values; at most 10000"),
    (["--snr=1e300"], "SNR values must be at most 10000 numbers in -200..200 dB"),
    # an OverflowError traceback, exit 1: the point count was inf (sixty-seventh session)
    (["--snr-min", "0", "--snr-max", "10", "--snr-step", "1e-320"], "the SNR grid would hold inf values"),
    (["--snr-min=-1e308", "--snr-max", "1e308"], "--snr-min and --snr-max must lie in -200..200 dB"),
    (["--snr-min=-300", "--snr-max", "0", "--snr-step", "100"], "--snr-min and --snr-max must lie in -200..200 dB"),
    (["--length-min", "1"], "burst lengths must be"),
    (["--lengths", "128,-5"], "burst lengths must be"),
    (["--length-min", "4096", "--length-max", "1024"], "above --length-max"),
    (["--channel", "moon"], "unknown channel preset"),
    # refused as they are parsed (SystemExit 2): 10 ** 30 workers, seed or length once ended in
    # an OverflowError, a TypeError from HDF5 or one from numpy's log
    (["--per-cell", "0"], "--per-cell: must be in 1..2147483647, got 0"),
    (["--workers", "0"], "--workers: must be in 1..1024, got 0"),
    (["--workers", str(10 ** 30)], "--workers: must be in 1..1024"),
    (["--seed", str(10 ** 30)], "--seed: must be in 0..9223372036854775807"),
    (["--length-max", str(10 ** 30), "--lengths", "256"], "--length-max: must be in 1..2147483647"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, capsys, argv, needle):
    try:
        code = main(["dataset", "generate", "--out", str(tmp_path / "x.h5"), *argv])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert needle in err
    assert not (tmp_path / "x.h5").exists()


def test_existing_file_needs_force(tmp_path, capsys):
    out = _gen(tmp_path, "c.h5")
    capsys.readouterr()
    code = main(["dataset", "generate", "--out", str(out), *TINY])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--force" in err
    assert main(["dataset", "generate", "--out", str(out), "--force", *TINY]) == 0



def test_force_never_puts_a_dataset_in_place_of_a_pipe_or_device(tmp_path, capsys):
    # the writer renames its finished file onto --out: `--out /dev/null --force` as root left a
    # regular file where /dev/null was (a FIFO stands in for the device here)
    import os
    import stat

    from rfclassify.data.schema import DatasetAttrs, DatasetWriter

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    assert main(["dataset", "generate", "--out", str(pipe), "--force", *TINY]) == 2
    err = capsys.readouterr().err
    assert err == f"rfclassify dataset: error: {pipe} is not a regular file (a device, pipe or socket); " \
                  "a dataset is written only to a new file or in place of one\n"
    with pytest.raises(InputError, match="not a regular file"):
        DatasetWriter(pipe, DatasetAttrs.__new__(DatasetAttrs), np.dtype([("sps", np.float32)]))
    assert stat.S_ISFIFO(os.stat(pipe).st_mode) and not (tmp_path / "pipe.partial").exists()


def test_default_spec_covers_every_label():
    spec = GenerateSpec(per_cell=1)
    assert spec.classes == LABELS and spec.snr_grid_db[0] == -20 and spec.snr_grid_db[-1] == 30


def test_all_presets_means_full_clean_and_every_family():
    from rfclassify.dsp.channel import FAMILIES

    spec = GenerateSpec(per_cell=1, channels=("all",))
    assert spec.channels == ("full", "clean", *FAMILIES)


def test_ctrl_c_stops_between_chunks_and_leaves_no_file(tmp_path):
    import os
    import signal

    spec = GenerateSpec(classes=("QPSK",), snr_grid_db=(0.0,), per_cell=12, lengths_samples=(64,),
                        chunk_examples=4)
    written = []

    def progress(n):
        written.append(n)
        if len(written) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # handled by generate: stop at the next chunk

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        generate_dataset(spec, tmp_path / "x.h5", on_progress=progress, command_line="x")
    assert written == [4]
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGINT) is before  # restored
