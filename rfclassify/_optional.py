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


def require(module: str, purpose: str = "") -> ModuleType:
    """Import `module` or raise MissingDependencyError naming the install command."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        if top == "tensorrt":
            hint = "TensorRT comes with JetPack: apt-get install python3-libnvinfer"
        else:
            extra = _EXTRA_FOR.get(top, "")
            hint = f"pip install 'rfclassify[{extra}]'" if extra else f"pip install {top}"
        what = f" (needed for {purpose})" if purpose else ""
        raise MissingDependencyError(f"{top} is not installed{what}; {hint}") from exc


def available(module: str) -> bool:
    """True when `module` can be imported (imports it)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True
