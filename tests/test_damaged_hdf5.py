"""Damaged compressed chunks of a dataset's /iq (bit rot on an SD card, a bad copy): `evaluate` and
`train --data` leave out the bursts stored in them, count and say so, and stop with one line only
where nothing (evaluate) or too much (train) is left. Before the seventy-first session either
command ended at the first such burst: evaluate before it classified any, train mid-run with
nothing written."""

from __future__ import annotations

import hashlib
import json

import h5py
import numpy as np
import pytest

from rfclassify.cli import main
from rfclassify.data.reader import DatasetReader
from rfclassify.model import training_data as td

CHUNK = 1024     # samples of a /iq chunk in the files made here: four bursts of 256
LABELS_USED = "BPSK,QPSK,8PSK,16QAM,64QAM,OOK,4ASK,GMSK,CPFSK,FM,AM-DSB-WC,NOISE"   # 12: 48 bursts


def _made(tmp_path, by_label: bool = False):
    """A real dataset of 48 bursts of 256 samples, rewritten with /iq in gzip chunks of CHUNK
    samples (`dataset generate` writes chunks of 65,536: one would be the whole file), its
    bursts in label order where by_label (each label's four then fill one chunk)."""
    gen = tmp_path / "gen.h5"
    assert main(["dataset", "generate", "--out", str(gen), "--classes", LABELS_USED, "--snr=20", "--per-cell", "4",
                 "--lengths", "256", "--seed", "3", "--channel", "clean"]) == 0
    out = tmp_path / "d.h5"
    with h5py.File(gen, "r") as f, h5py.File(out, "w") as g:
        g.attrs.update(dict(f.attrs))
        order = np.argsort(f["label_index"][()], kind="stable") if by_label else np.arange(f["offset"].size)
        for name in f:
            if name not in ("iq", "offset"):
                g.create_dataset(name, data=f[name][()][order])
        iq, offsets, lengths = f["iq"][()], f["offset"][()], f["length"][()]
        g.create_dataset("iq", data=np.concatenate([iq[o:o + n] for o, n in zip(offsets[order], lengths[order])]),
                         chunks=(CHUNK,), compression="gzip", shuffle=True)
        g.create_dataset("offset", data=np.concatenate(([0], np.cumsum(lengths[order])[:-1])).astype(np.int64))
    return out


def _damage(path, *chunks: int) -> None:
    """Flip bits in the compressed bytes of these chunks of /iq, where h5py finds them."""
    with h5py.File(path, "r") as f:
        infos = [f["iq"].id.get_chunk_info_by_coord((k * CHUNK,)) for k in chunks]
    with open(path, "r+b") as fh:
        for info in infos:
            fh.seek(info.byte_offset + 16)
            raw = bytearray(fh.read(info.size - 32))
            fh.seek(info.byte_offset + 16)
            fh.write(bytes(b ^ 0x5A for b in raw))
    with h5py.File(path, "r") as f, pytest.raises(OSError):
        f["iq"][chunks[0] * CHUNK:(chunks[0] + 1) * CHUNK]


def _bursts_in(path, *chunks: int) -> set[int]:
    with DatasetReader(path) as ds:
        return {i for i in range(len(ds)) for k in chunks
                if ds.offsets[i] < (k + 1) * CHUNK and ds.offsets[i] + ds.lengths[i] > k * CHUNK}


def _evaluate(path, model_dir, out, *more: str) -> int:
    return main(["evaluate", str(path), "--model-dir", str(model_dir), "--out", str(out), "--no-plots",
                 "--no-refiner", *more])


def test_evaluate_leaves_out_the_bursts_of_a_damaged_chunk_and_says_so(tiny_model_dir, tmp_path, capsys):
    # exit 2 before any burst was classified: the samples digest read the whole /iq first
    path = _made(tmp_path)
    with h5py.File(path, "r") as f:
        intact = hashlib.sha256(f["iq"][()].tobytes()).hexdigest()
    _damage(path, 5)
    hit = _bursts_in(path, 5)
    assert len(hit) == 4
    capsys.readouterr()
    card = tmp_path / "card"
    assert _evaluate(path, tiny_model_dir, tmp_path / "ev", "--card", "--card-dir", str(card)) == 0
    out, err = capsys.readouterr()
    res = json.loads((tmp_path / "ev" / "evaluation.json").read_text())
    unread = res["unreadable"]
    assert unread["bursts"] == 4 and unread["by_reason"] == {"unreadable": 4}
    assert unread["damaged_iq_ranges"] == [[5 * CHUNK, 6 * CHUNK]] and "cannot be read" in unread["first"]
    assert res["dataset"]["n_bursts"] == 48 and res["overall"]["n"] == 48 - 4 - sum(res["rejected"].values())
    assert "unreadable: 4 bursts cannot be read" in out and "over the other 44" in out
    assert f"warning: {path}: 4 of 48 bursts cannot be read (unreadable 4)" in err and "Traceback" not in err
    assert "4 of its 48 bursts could not be read" in (card / "MODEL_CARD.md").read_text()
    with DatasetReader(path) as ds:
        assert set(ds.unreadable_bursts().tolist()) == hit == {
            i for i, b in enumerate(ds.read_or_reject(np.arange(len(ds)))) if not isinstance(b, np.ndarray)}
        assert ds.damaged_ranges() == [(5 * CHUNK, 6 * CHUNK)]
        assert ds.samples_sha256() == res["dataset"]["samples_sha256"] != intact   # the damage is in the digest
    # an intact file says so too, in the same place
    assert _evaluate(_made(tmp_path / "whole"), tiny_model_dir, tmp_path / "ev2") == 0
    assert json.loads((tmp_path / "ev2" / "evaluation.json").read_text())["unreadable"] == {
        "bursts": 0, "by_reason": {}}


def test_evaluate_of_a_file_with_no_readable_burst_is_one_line(tiny_model_dir, tmp_path, capsys):
    path = _made(tmp_path)
    _damage(path, *range(12))
    capsys.readouterr()
    assert _evaluate(path, tiny_model_dir, tmp_path / "ev") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nothing to evaluate: none of its 48 bursts can be read (unreadable 48)" in err
    assert not (tmp_path / "ev" / "evaluation.json").exists()


def _train(path, out) -> int:
    return main(["train", "--out", str(out), "--data", str(path), "--steps", "2", "--batch-size", "4",
                 "--buckets", "256", "--val-per-bucket", "4", "--device", "cpu"])


def test_training_leaves_out_the_bursts_of_a_damaged_chunk_with_a_counted_warning(tmp_path, capsys):
    # the first batch to draw one ended the run, exit 2, nothing written
    path = _made(tmp_path)
    _damage(path, 7)
    hit = _bursts_in(path, 7)
    batches = td.hdf5_batches(str(path), td.DataRecipe(buckets_samples=(256,), batch_size=4), seed=0)
    assert sum(len(next(batches)["label"]) for _ in range(30)) == 30 * 4   # epochs of the other 44, no short batch
    assert batches.unreadable == hit
    capsys.readouterr()
    assert _train(path, tmp_path / "run") == 0
    err = capsys.readouterr().err
    assert err.count(f"warning: {path}: 4 of 48 bursts (8.3%) cannot be read") == 1, err
    assert f"(samples {7 * CHUNK}..{8 * CHUNK - 1})" in err and "left out of training" in err
    meta = json.loads((tmp_path / "run" / "model.json").read_text())
    assert meta["extra"]["training"]["unreadable_bursts_left_out"] == 4


@pytest.mark.parametrize(("by_label", "chunks", "said"), [
    (False, (2, 9), "8 of 48 bursts (16.7%) cannot be read"),         # past the 10 % training does without
    (True, (3,), "every burst of "),                                  # 8.3 %, but one label's all
])
def test_training_stops_where_too_much_is_unreadable(tmp_path, capsys, by_label, chunks, said):
    path = _made(tmp_path, by_label=by_label)
    _damage(path, *chunks)
    capsys.readouterr()
    assert _train(path, tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and "make the file again or copy it anew" in err, err
    assert not (tmp_path / "run" / "model.pt").exists()


def test_training_leaves_out_damage_the_first_look_missed_as_batches_meet_it(tmp_path, capsys, monkeypatch):
    # the safety net behind the look before the first batch (which reads a compressed /iq only)
    path = _made(tmp_path)
    _damage(path, 4)
    monkeypatch.setattr(DatasetReader, "damaged_ranges", lambda self: [])
    batches = td.hdf5_batches(str(path), td.DataRecipe(buckets_samples=(256,), batch_size=4), seed=1)
    capsys.readouterr()
    got = [next(batches) for _ in range(30)]
    assert all(len(b["label"]) >= 2 and np.isfinite(b["x"]).all() for b in got)
    assert batches.unreadable == _bursts_in(path, 4)
    lines = capsys.readouterr().err.splitlines()   # one a batch that met some, with the count so far
    assert lines and all(line.startswith(f"warning: {path}: ") for line in lines)
    assert "4 of 48 bursts (8.3%) cannot be read" in lines[-1] and "found as batches were read)" in lines[-1]
