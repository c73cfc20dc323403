"""Files replaced in one step (rfclassify._atomic) and the writers that use it."""

from __future__ import annotations

import os

import pytest

from rfclassify._atomic import replacing, temporary_name, write_atomic
from rfclassify.model.evaluate import write_json
from rfclassify.model.meta import META_FILE, ModelMeta


def test_a_write_replaces_the_file_and_leaves_nothing_else(tmp_path):
    path = tmp_path / "sub" / "cache.bin"
    assert write_atomic(path, b"\x00\x01") == path        # the folder made where missing
    write_atomic(path, "text é")
    assert path.read_bytes() == "text é".encode("utf-8")
    assert sorted(p.name for p in path.parent.iterdir()) == ["cache.bin"]


def test_a_write_that_fails_keeps_the_old_file_and_removes_its_temporary_one(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="disk full"):
        with replacing(path) as tmp:
            assert tmp == temporary_name(path) and tmp.parent == path.parent
            tmp.write_bytes(b"half of the n")
            raise RuntimeError("disk full")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.bin"]


def test_the_new_file_is_on_the_disk_before_it_replaces_the_old(tmp_path, monkeypatch):
    # the order a power cut needs: flush the new content, then rename (else the rename may land
    # on the disk before the data, and a reboot finds an empty model file)
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: calls.append("replace") or real_replace(a, b))
    write_atomic(tmp_path / "f", b"x")
    assert calls[:2] == ["fsync", "replace"]


@pytest.mark.parametrize("write", [
    lambda d: ModelMeta(model_id="new").save(d),
    lambda d: write_json(d / META_FILE, {"model_id": "new"}),
], ids=["model.json", "evaluate's json"])
def test_a_model_file_whose_rename_fails_is_left_as_it_was(tmp_path, monkeypatch, write):
    ModelMeta(model_id="old").save(tmp_path)

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        write(tmp_path)
    monkeypatch.undo()
    assert ModelMeta.load(tmp_path).model_id == "old"
    assert [p.name for p in tmp_path.iterdir()] == [META_FILE]   # no temporary file left behind
