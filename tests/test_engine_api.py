"""The public names are a contract: pin them."""

from __future__ import annotations

import rfclassify


def test_public_names_are_pinned():
    assert sorted(rfclassify.__all__) == sorted([
        "LABELS", "UNKNOWN_LABEL", "BackendError", "Classifier", "ClassificationResult",
        "ConfigError", "InputError", "InternalError", "MessageError", "MissingDependencyError",
        "ModelNotFoundError", "RfclassifyError", "UserError", "__version__",
    ])
    for name in rfclassify.__all__:
        assert getattr(rfclassify, name) is not None


def test_lazy_exports_are_the_engine_classes():
    from rfclassify.engine.classifier import ClassificationResult, Classifier

    assert rfclassify.Classifier is Classifier
    assert rfclassify.ClassificationResult is ClassificationResult


def test_classifier_api_surface():
    for attr in ("load", "classify", "infer_windows", "results_from_outputs", "labels", "backend",
                 "backend_reason", "precision", "precision_reason", "device", "model_id", "close"):
        assert hasattr(rfclassify.Classifier, attr), attr
