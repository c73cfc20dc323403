"""Which backend, device and precision to run: the 'auto' rules, with the reason for each choice.

Backend 'auto' tries, in order, and takes the first that can run here:

1. tensorrt on cuda:0 — if ``import tensorrt`` works and pycuda (the ``jetson`` extra) is
   installed (the backend itself never ran: no TensorRT on any machine of this project);
2. torch on cuda:0 — if torch imports and ``torch.cuda.is_available()``;
3. onnxruntime on the CPU — if onnxruntime imports and model.onnx exists;
4. torch on the CPU — the last resort (e.g. onnxruntime not installed).

A skipped candidate is listed with why it was skipped, in ``Selection.reason``.

Precision 'auto' is the best the chosen backend can run from the files present, in the order
int8, fp16, fp32 (int8 needs calibrated artifacts; fp16 needs a GPU). An explicit precision
the backend cannot run is an error when the backend was named explicitly; with backend
'auto' it falls back down that order (int8 -> fp16 -> fp32) with a logged warning, and
``Selection.precision`` / ``precision_reason`` say what actually runs.

A file of another model (``Backend.foreign_file``: model.json records another sha256 for it,
rfclassify.model.provenance) is no reason to skip: it is a ModelNotFoundError naming both files,
whatever was asked, so neither precision nor backend 'auto' falls back past it.

Each skipped candidate carries a typed ``Problem`` (a ``ProblemKind`` plus the message shown
to the user, which names what to install where a library is missing). When an explicitly named
backend cannot run, the kinds pick the error: NOT_INSTALLED or DOES_NOT_IMPORT on every device
tried -> MissingDependencyError; MODEL_FILES_MISSING of its one candidate -> ModelNotFoundError;
anything else (and every 'auto' failure) -> ConfigError.
"""

from __future__ import annotations

import enum
import importlib
import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path

from rfclassify._exceptions import ConfigError, MissingDependencyError, ModelNotFoundError
from rfclassify._optional import available, install_hint
from rfclassify.engine.base import Backend
from rfclassify.engine.devices import device_index, device_kind
from rfclassify.model.meta import ModelMeta

log = logging.getLogger(__name__)

BACKEND_CHOICES: tuple[str, ...] = ("auto", "tensorrt", "torch", "onnxruntime")
PRECISION_CHOICES: tuple[str, ...] = ("auto", "int8", "fp16", "fp32")
_PRECISION_ORDER: tuple[str, ...] = ("int8", "fp16", "fp32")  # best first

# name -> (module, class)
_BACKENDS: dict[str, tuple[str, str]] = {
    "tensorrt": ("rfclassify.engine.tensorrt_backend", "TensorRTBackend"),
    "torch": ("rfclassify.engine.torch_backend", "TorchBackend"),
    "onnxruntime": ("rfclassify.engine.onnxruntime_backend", "OnnxRuntimeBackend"),
}


@dataclass(frozen=True)
class Selection:
    """What will run, and why."""

    backend: str
    device: str
    precision: str
    reason: str
    precision_reason: str


class ProblemKind(enum.Enum):
    """Why a (backend, device, precision) candidate cannot run: decides the exception raised."""

    NO_BACKEND_MODULE = "no backend module"          # this version has no module for it
    NOT_INSTALLED = "not installed"                  # its library is missing: install the extra
    DOES_NOT_IMPORT = "does not import"              # its library is there but fails to import
    NO_DEVICE = "no device"                          # the device asked for is absent or unusable
    PRECISION_UNSUPPORTED = "precision unsupported"  # the backend cannot run it on that device
    MODEL_FILES_MISSING = "model files missing"      # a file that precision needs is not there


@dataclass(frozen=True)
class Problem:
    """One reason a candidate was skipped: `kind` for decisions, `message` for people."""

    kind: ProblemKind
    message: str

    def __str__(self) -> str:
        return self.message


def backend_class(name: str) -> type[Backend]:
    """The Backend subclass called `name` (imports its module, not its heavy library)."""
    if name not in _BACKENDS:   # 'auto' is a rule for choosing one, not a backend of its own
        raise ConfigError(f"unknown backend {name!r}; choose from {', '.join(_BACKENDS)}")
    module, cls = _BACKENDS[name]
    if importlib.util.find_spec(module) is None:
        raise ConfigError(f"the {name} backend is not part of this version of rfclassify")
    return getattr(importlib.import_module(module), cls)


def unusable(name: str, device: str) -> Problem | None:
    """Why backend `name` cannot run on `device` in this process, or None when it can."""
    kind = device_kind(device)
    if name == "tensorrt":
        if importlib.util.find_spec(_BACKENDS["tensorrt"][0]) is None:
            return Problem(ProblemKind.NO_BACKEND_MODULE, "no tensorrt backend module in this version")
        if not available("tensorrt"):
            return Problem(ProblemKind.DOES_NOT_IMPORT, f"tensorrt does not import; {install_hint('tensorrt')}")
        if not available("pycuda.driver"):
            return Problem(ProblemKind.NOT_INSTALLED, f"pycuda is not installed; {install_hint('pycuda')}")
        if kind != "cuda":
            return Problem(ProblemKind.NO_DEVICE, "tensorrt needs a CUDA device")
        return None
    if name == "torch":
        if not available("torch"):
            return Problem(ProblemKind.NOT_INSTALLED, f"torch is not installed; {install_hint('torch')}")
        if kind == "cuda":
            import torch

            if not torch.cuda.is_available():
                return Problem(ProblemKind.NO_DEVICE, "torch sees no CUDA GPU")
            if device_index(device) >= torch.cuda.device_count():
                return Problem(ProblemKind.NO_DEVICE,
                               f"torch sees {torch.cuda.device_count()} CUDA GPU(s), no {device}")
        return None
    if name == "onnxruntime":
        if kind != "cpu":
            return Problem(ProblemKind.NO_DEVICE, "onnxruntime is used on the CPU only")
        if not available("onnxruntime"):
            return Problem(ProblemKind.NOT_INSTALLED,
                           f"onnxruntime is not installed; {install_hint('onnxruntime')}")
        return None
    raise ConfigError(f"unknown backend {name!r}; choose from {', '.join(_BACKENDS)}")


def torch_device(device: str) -> str:
    """`device` ('auto', 'cpu', 'cuda' or 'cuda:N') as torch will use it in this process, for
    the training tools: 'auto' is cuda where torch sees a GPU, else cpu; ConfigError saying why
    for a device torch cannot use here (an unknown name, no GPU, no such GPU)."""
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    problem = unusable("torch", device)
    if problem is not None:
        raise ConfigError(f"device {device} asked for, but {problem}")
    return device


def candidates(backend: str, device: str | None) -> list[tuple[str, str]]:
    """(backend, device) pairs to try, in order, for a requested backend and optional device."""
    if backend == "auto":
        order = [("tensorrt", "cuda:0"), ("torch", "cuda:0"), ("onnxruntime", "cpu"), ("torch", "cpu")]
        if device is not None:
            kind = device_kind(device)
            order = [(b, device) for b, d in order if device_kind(d) == kind]
        return order
    if backend not in _BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; choose from {', '.join(BACKEND_CHOICES)}")
    if device is not None:
        return [(backend, device)]
    if backend == "torch":
        return [("torch", "cuda:0"), ("torch", "cpu")]
    return [(backend, "cuda:0" if backend == "tensorrt" else "cpu")]


def _precision_for(cls: type[Backend], meta: ModelMeta, model_dir: Path, device: str,
                   requested: str, may_fall_back: bool,
                   dla_core: int | None = None) -> tuple[str, str] | tuple[None, Problem]:
    """(precision, reason), or (None, Problem saying why none works) for one backend candidate
    (its engines on DLA core `dla_core` where it has one).

    The Problem is MODEL_FILES_MISSING when any precision tried lacked its files (supplying
    them would help), else PRECISION_UNSUPPORTED.
    """
    supported = cls.precisions_by_device.get(device_kind(device), ())
    start = 0 if requested == "auto" else _PRECISION_ORDER.index(requested)
    tried: list[str] = []
    kind = ProblemKind.PRECISION_UNSUPPORTED
    for p in _PRECISION_ORDER[start:]:
        if p not in supported:
            tried.append(f"{p}: not supported by {cls.name} on {device_kind(device)}")
        elif foreign := cls.foreign_file(meta, model_dir, p, dla_core=dla_core):
            raise ModelNotFoundError(foreign)   # another model's file: an error, never a fallback
        elif problem := cls.artifact_problem(meta, model_dir, p, dla_core=dla_core):
            tried.append(f"{p}: {problem}")
            kind = ProblemKind.MODEL_FILES_MISSING
        elif requested in ("auto", p):
            return p, ("auto: best available" if requested == "auto" else "as requested") + (
                f" ({'; '.join(tried)})" if tried else "")
        else:
            return p, f"fell back from {requested} to {p} ({'; '.join(tried)})"
        if requested != "auto" and not may_fall_back:
            break
    return None, Problem(kind, "; ".join(tried))


def select_backend(meta: ModelMeta, model_dir: str | Path, backend: str = "auto",
                   precision: str = "auto", device: str | None = None, *,
                   dla_core: int | None = None) -> Selection:
    """Apply the module's rules; ConfigError / ModelNotFoundError when nothing can run.
    dla_core: TensorRT's engines would run on that DLA core, whose INT8 engines are built from
    other files than the GPU's (the calibration cache, not the Q/DQ graph)."""
    if precision not in PRECISION_CHOICES:
        raise ConfigError(f"unknown precision {precision!r}; choose from {', '.join(PRECISION_CHOICES)}")
    model_dir = Path(model_dir)
    skipped: list[str] = []
    problems: list[Problem] = []
    for name, dev in candidates(backend, device):
        problem = unusable(name, dev)
        if problem is None:
            cls = backend_class(name)
            chosen, why = _precision_for(cls, meta, model_dir, dev, precision, backend == "auto", dla_core)
            if chosen is not None:
                head = "auto: " if backend == "auto" else "requested: "
                reason = head + "; ".join(skipped + [f"{name} on {dev} chosen"])
                if chosen != precision and precision != "auto":
                    log.warning("precision %s is not available (%s); running %s", precision, why, chosen)
                log.info("backend %s on %s, %s (%s; precision %s)", name, dev, chosen, reason, why)
                return Selection(name, dev, chosen, reason, why)
            problem = why
        skipped.append(f"{name} on {dev} skipped ({problem.message})")
        problems.append(problem)
    # An explicitly named backend: its library missing (on every device tried: torch tries two)
    # is a MissingDependencyError naming what to install; its one candidate's model files
    # missing a ModelNotFoundError; anything else is a ConfigError.
    if backend != "auto" and problems:
        if all(p.kind in (ProblemKind.NOT_INSTALLED, ProblemKind.DOES_NOT_IMPORT) for p in problems):
            messages = dict.fromkeys(p.message for p in problems)   # torch's two devices: one line
            raise MissingDependencyError(f"backend {backend}: " + "; ".join(messages))
        if len(problems) == 1 and problems[0].kind is ProblemKind.MODEL_FILES_MISSING:
            raise ModelNotFoundError(f"backend {backend}, precision {precision}: {problems[0].message}")
    raise ConfigError("no backend can run here: " + "; ".join(skipped))
