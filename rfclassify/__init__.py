"""rfclassify: edge RF modulation classification.

    clf = rfclassify.Classifier.load(backend="auto", precision="int8")
    results = clf.classify([iq0, iq1], sample_rate=None)

The classifier is imported on first use so that importing the package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rfclassify._exceptions import (
    BackendError,
    ConfigError,
    InputError,
    InternalError,
    MessageError,
    MissingDependencyError,
    ModelNotFoundError,
    RfclassifyError,
    UserError,
)
from rfclassify.labels import LABELS, UNKNOWN_LABEL

__version__ = "0.1.0"

__all__ = [
    "LABELS",
    "UNKNOWN_LABEL",
    "BackendError",
    "Classifier",
    "ClassificationResult",
    "ConfigError",
    "InputError",
    "InternalError",
    "MessageError",
    "MissingDependencyError",
    "ModelNotFoundError",
    "RfclassifyError",
    "UserError",
    "__version__",
]

if TYPE_CHECKING:
    from rfclassify.engine.classifier import ClassificationResult, Classifier


def __getattr__(name: str) -> Any:
    if name in ("Classifier", "ClassificationResult"):
        from rfclassify.engine import classifier

        return getattr(classifier, name)
    raise AttributeError(f"module 'rfclassify' has no attribute {name!r}")
