"""Which model a file of a model folder belongs to: each file a backend loads or export reads
must be the one made for the model.json beside it, or it is an error naming both files.

A folder's files can be mixed by hand (another model's model.onnx copied into a copy of
models/, another model.json beside the shipped graphs); each such mix once ran silently under
model.json's id and temperature, or exported the weights under another model's id (seventy-first
session). Two links tie the files to model.json:

* the **weights**: train names a model ``rfc-resnet-<date>-<8 hex>``, the hex the beginning of
  the sha256 of its weights (``train.weights_digest``), so model.pt is checked against the id
  (``weights_problem``). An id of another form (hand-made folders, tests) is not checked.
* the **graphs**: model.json records the sha256 of model.onnx and of each static graph. Export
  records them (``extra.export.onnx_sha256`` / ``static_sha256``, since the seventy-first
  session); before that the calibration records held them as the graphs the INT8 artifacts were
  made from (``extra.int8.source_onnx_sha256``, ``extra.tensorrt_int8.source_onnx_sha256`` and
  ``static_sha256``), which is how the shipped model's graphs are checked. The INT8 graph and
  TensorRT's INT8 artifacts carry their own digests (``extra.int8.sha256``,
  ``extra.tensorrt_int8.qdq_sha256`` / ``calibration_cache_sha256``). A graph model.json records
  no digest for (exported before that session and never calibrated) cannot be checked and is
  used as it stands.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rfclassify._digest import model_file_sha256
from rfclassify.model.meta import META_FILE, ModelMeta

#: the end of a model id train writes: the first 8 hex digits of its weights' sha256
_WEIGHTS_ID = re.compile(r"-([0-9a-f]{8})$")


def _record(meta: ModelMeta, key: str) -> dict[str, Any]:
    record = meta.extra.get(key)
    return record if isinstance(record, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def recorded_sha256(meta: ModelMeta, name: str) -> tuple[str, str] | None:
    """(sha256, where model.json records it) for the model-folder file `name` (model.onnx, a
    static graph, the INT8 graph, TensorRT's Q/DQ graph or calibration cache), or None where
    model.json records none. Export's record first: it is rewritten with the graphs."""
    export, int8, trt = _record(meta, "export"), _record(meta, "int8"), _record(meta, "tensorrt_int8")
    found: list[tuple[str, str]] = []
    if name == meta.onnx_file:
        found = [(_text(export.get("onnx_sha256")), "extra.export.onnx_sha256"),
                 (_text(int8.get("source_onnx_sha256")), "extra.int8.source_onnx_sha256"),
                 (_text(trt.get("source_onnx_sha256")), "extra.tensorrt_int8.source_onnx_sha256")]
    static = export.get("static_files")
    for bucket, file in (static.items() if isinstance(static, dict) else ()):
        if file == name:
            for key, record in (("export", export), ("tensorrt_int8", trt)):
                digests = record.get("static_sha256")
                if isinstance(digests, dict):
                    found.append((_text(digests.get(bucket)), f"extra.{key}.static_sha256.{bucket}"))
    if name and name == meta.int8_onnx_file:
        found.append((_text(int8.get("sha256")), "extra.int8.sha256"))
    for key in ("qdq", "calibration_cache"):
        if name and name == trt.get(f"{key}_file"):
            found.append((_text(trt.get(f"{key}_sha256")), f"extra.tensorrt_int8.{key}_sha256"))
    return next(((digest, where) for digest, where in found if digest), None)


def digest_problem(meta: ModelMeta, model_dir: str | Path, name: str, digest: str) -> str | None:
    """Why the file `name` of model_dir, whose sha256 is `digest`, is not the one model.json
    records (one line naming both files), or None: it is, or model.json records none."""
    recorded = recorded_sha256(meta, name)
    if recorded is None or recorded[0] == digest:
        return None
    model_dir = Path(model_dir)
    return (f"{model_dir / name} is not the file {model_dir / META_FILE} records for model {meta.model_id!r} "
            f"(sha256 {digest[:12]}, {recorded[1]} {recorded[0][:12]}): another model's file, or another "
            f"model's {META_FILE}; put the model's own files together, or make them again "
            "(`rfclassify export`, then `rfclassify calibrate`)")


def file_problem(meta: ModelMeta, model_dir: str | Path, name: str) -> str | None:
    """digest_problem for file `name` of model_dir as it is on disk; None where model.json records
    no digest for it or it is not a file (whoever needs it says it is missing). ModelNotFoundError
    where it cannot be read."""
    path = Path(model_dir) / name
    if recorded_sha256(meta, name) is None or not path.is_file():
        return None
    return digest_problem(meta, model_dir, name, model_file_sha256(path))


def digests_problem(meta: ModelMeta, model_dir: str | Path, digests: Mapping[str, str]) -> str | None:
    """The first digest_problem of `digests` (model-folder file -> sha256), or None."""
    return next((p for name, digest in digests.items() if (p := digest_problem(meta, model_dir, name, digest))),
                None)


def weights_problem(meta: ModelMeta, model_dir: str | Path, state: Mapping[str, Any]) -> str | None:
    """Why `state` (the weights read from model_dir's weights file) are not the weights of
    model.json's model (one line naming both files), or None: they are, or the model id does not
    end in a weights digest (not one train named)."""
    m = _WEIGHTS_ID.search(meta.model_id)
    if m is None:
        return None
    from rfclassify.model.train import weights_digest

    got = weights_digest(dict(state))[:8]
    if got == m.group(1):
        return None
    model_dir = Path(model_dir)
    return (f"{model_dir / meta.weights_file} holds the weights of another model than {model_dir / META_FILE} "
            f"names: model {meta.model_id!r} ends in its weights' digest, {m.group(1)}, and these are {got}; "
            f"put the model's own {meta.weights_file} and {META_FILE} together")
