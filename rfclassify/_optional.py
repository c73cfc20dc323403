"""Heavy optional dependencies, imported on first use so light commands stay fast."""

from __future__ import annotations

import importlib
from types import ModuleType

from rfclassify._exceptions import MissingDependencyError

# module name -> the extra that installs it
_EXTRA_FOR = {
    "torch": "train",
    "lightgbm": "train",
    "onnx": "cpu",
    "onnxruntime": "cpu",
    "matplotlib": "plot",
    "pycuda": "jetson",
}


def install_hint(module: str) -> str:
    """What to run to install `module` (its top-level package): the rfclassify extra that brings
    it, or, for TensorRT, which no extra can (jetson_setup.sh takes it from apt)."""
    top = module.split(".")[0]
    if top == "tensorrt":
        return "TensorRT comes with JetPack: apt-get install python3-libnvinfer"
    extra = _EXTRA_FOR.get(top, "")
    return f"pip install 'rfclassify[{extra}]'" if extra else f"pip install {top}"


def require(module: str, purpose: str = "") -> ModuleType:
    """Import `module` or raise MissingDependencyError naming the install command."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        what = f" (needed for {purpose})" if purpose else ""
        raise MissingDependencyError(f"{module.split('.')[0]} is not installed{what}; {install_hint(module)}") from exc


def available(module: str) -> bool:
    """True when `module` can be imported (imports it)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True
