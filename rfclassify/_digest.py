"""sha256 of a model file: what model.json records to tell the file it was made with from another."""

from __future__ import annotations

import hashlib
from pathlib import Path

from rfclassify._exceptions import ModelNotFoundError


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def model_file_sha256(path: str | Path) -> str:
    """file_sha256 of a model directory's file that is there; ModelNotFoundError naming it where
    it cannot be read (its mode, an I/O error), which was an OSError traceback."""
    try:
        return file_sha256(path)
    except OSError as exc:
        raise ModelNotFoundError(f"{path} cannot be read ({exc.strerror or exc}); make it readable to "
                                 "this user or restore the model") from None
