"""The exception tree. Callers catch by layer:

    RfclassifyError
    ├── UserError              a mistake the user can fix; the CLI prints one line, exit 2
    │   ├── ConfigError        bad config file or option value
    │   ├── InputError         bad argument, file or data
    │   │   └── MessageError   a malformed wire message (carries a short reject reason code)
    │   ├── ModelNotFoundError model files missing or unreadable
    │   └── MissingDependencyError  an optional extra is not installed
    ├── InternalError          our fault or the platform's; exit 1
    │   └── BackendError       an inference backend failed to load or run
    └── Cancelled              work left off because a stop was asked for (the daemon's start)
"""

from __future__ import annotations

import json


class RfclassifyError(Exception):
    """Base of every error rfclassify raises on purpose."""


class UserError(RfclassifyError):
    """Something the user (or the program feeding us) can fix."""


class ConfigError(UserError):
    """A configuration file or option is invalid."""


class InputError(UserError):
    """An argument, file or piece of data is invalid."""


class MessageError(InputError):
    """A wire message could not be decoded; `reason` is the short code published in `reject`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class ModelNotFoundError(UserError):
    """The model files are missing or unreadable."""


class MissingDependencyError(UserError):
    """An optional dependency is not installed; the message names the extra to install."""


class InternalError(RfclassifyError):
    """A fault that is not the user's."""


class BackendError(InternalError):
    """An inference backend failed to load or run."""


class Cancelled(RfclassifyError):
    """Work left off at a safe point because a stop was asked for (a threading.Event set)."""


def quoted(value: object, width: int = 60) -> str:
    """A value read from a user's file, as an error message quotes it: JSON for a scalar or a
    flat list of scalars, at most `width` characters; a description for anything nested (whose
    repr may be as deep as the file)."""
    scalar = (str, int, float, bool, type(None))
    if isinstance(value, scalar) or (isinstance(value, (list, tuple)) and all(isinstance(v, scalar) for v in value)):
        text = json.dumps(value)
        return text if len(text) <= width else f"{text[:width - 3]}..."
    if isinstance(value, dict):
        return "a JSON object"
    return f"a JSON array of {len(value)} items" if isinstance(value, (list, tuple)) else type(value).__name__


def first_line(exc: BaseException, width: int = 300) -> str:
    """A third-party exception's message up to its first line break, at most `width` characters
    (torch's state-dict errors list every key; pickle's, ONNX Runtime's and torch's loaders say
    what went wrong first), or its type's name when it has none."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:width]
