"""What a TensorRT engine of the model is built from, and how: every decision the TensorRT
builder makes (graph, precision flags, quantization, DLA placement, optimization profiles,
cache keys), as plain functions that need no TensorRT, so they are tested on every machine.
``rfclassify.engine.tensorrt_engines`` carries a plan out with TensorRT.

The rules (facts in ../shared/DESIGN.md, "Facts you cannot check from here"):

* **GPU**: one engine from the dynamic graph, **one optimization profile per length bucket**
  (length fixed, batch 1..max_batch, tuned for ``GPU_OPT_BATCH``). INT8 parses TensorRT's Q/DQ
  graph (explicit quantization, ``rfclassify.quant.tensorrt_int8``); fp16 and fp32 the fp32
  graph. TensorRT 11 builds strongly typed networks only (no precision flags): int8 and fp32
  there, fp16 would need an fp16 graph, which export does not write.
* **DLA** (``dla_core`` set): DLA has no dynamic shapes, so one engine per bucket from that
  bucket's static graph (``models/static/``), one profile with min = opt = max =
  ``dla_batch``; a batch is cut into pieces of that size, the last padded. DLA runs FP16 and
  INT8 only, its INT8 from implicit quantization (the calibration cache) which TensorRT 8.5-10.x
  read and 11 removed; TensorRT 11.0-11.3 have no DLA at all. So DLA engines need TensorRT
  8.5-10.x here. The heads are pinned to FP16 (the cache leaves them out), layers DLA cannot
  run fall back to the GPU (``GPU_FALLBACK``). At most ``DLA_MAX_LOADABLES`` per DLA core, a
  batch of at most ``DLA_MAX_BATCH`` and buckets of at most ``DLA_MAX_DIM`` samples (the DLA's
  general limits); which DLA cores exist only TensorRT knows where it runs (the backend asks).
* **Cache key** (``engine_key``): a sha256 of everything an engine depends on (this module's
  ``ENGINE_FORMAT``, the TensorRT version, the device, the plan, the digests of the files it is
  built from), so a new model, calibration, TensorRT or GPU builds a new engine and an engine
  is never served to what it was not built for.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rfclassify._exceptions import ConfigError
from rfclassify.model.dla_check import MAX_BATCH as DLA_MAX_BATCH
from rfclassify.model.dla_check import MAX_DIM as DLA_MAX_DIM
from rfclassify.model.meta import ModelMeta

#: bump when a decision below changes, so engines built by the old rules are not reused
ENGINE_FORMAT = 1
#: the oldest TensorRT written for: name-based I/O (set_input_shape, execute_async_v3), JetPack 5.1
OLDEST_TENSORRT = (8, 5)
#: TensorRT 11 removed implicit quantization (and with it the calibration cache)
STRONGLY_TYPED_FROM = (11, 0)
#: DLA came back in TensorRT 11.4.1 (JetPack >= 7.2.2), after 11.0-11.3 had none
DLA_RETURNS = (11, 4, 1)
DLA_MAX_LOADABLES = 16
GPU_OPT_BATCH = 64
DEFAULT_DLA_BATCH = 8
#: layers (by ONNX node name prefix) kept out of INT8 on DLA: the heads (as the CPU plan does)
HEAD_PREFIXES: tuple[str, ...] = ("/head/", "/snr_head/")
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a TensorRT version string such as '10.3.0.30'."""
    m = _VERSION.match(str(version).strip())
    if m is None:
        raise ConfigError(f"not a TensorRT version: {version!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@dataclass(frozen=True)
class Profile:
    """One optimization profile: a bucket's length and the batch sizes it takes."""

    bucket: int
    min_batch: int
    opt_batch: int
    max_batch: int

    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(min, opt, max) input shapes, (batch, 2, 1, length)."""
        lo, opt, hi = ((b, 2, 1, self.bucket) for b in (self.min_batch, self.opt_batch, self.max_batch))
        return lo, opt, hi


@dataclass(frozen=True)
class EnginePart:
    """One engine file: the ONNX graph it is parsed from and its profiles."""

    onnx_file: str
    profiles: tuple[Profile, ...]
    tag: str   # 'all' (the GPU's one engine) or 'L<bucket>' (a DLA engine)

    @property
    def buckets(self) -> tuple[int, ...]:
        return tuple(p.bucket for p in self.profiles)


@dataclass(frozen=True)
class EnginePlan:
    """How the model's engines are built for one TensorRT, device and precision."""

    tensorrt: str
    precision: str
    device: str                      # 'gpu' or 'dla'
    dla_core: int | None
    quantization: str                # 'none', 'qdq' or 'calibration cache'
    calibration_cache: str | None    # model-directory file, for 'calibration cache'
    strongly_typed: bool
    flags: tuple[str, ...]           # trt.BuilderFlag names
    fp16_layer_prefixes: tuple[str, ...]
    engines: tuple[EnginePart, ...]
    notes: tuple[str, ...] = field(default=())

    def files(self) -> list[str]:
        """Model-directory files the engines are built from."""
        names = [p.onnx_file for p in self.engines]
        return names + ([self.calibration_cache] if self.calibration_cache else [])

    def part_files(self, part: EnginePart) -> list[str]:
        """Model-directory files one engine of the plan is built from: its graph, and the
        calibration cache where the plan reads one."""
        return [part.onnx_file] + ([self.calibration_cache] if self.calibration_cache else [])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> list[str]:
        """The plan in lines for people (`rfclassify engine build --plan`)."""
        where = f"DLA core {self.dla_core} (GPU fallback)" if self.device == "dla" else "GPU"
        cache = f" ({self.calibration_cache})" if self.calibration_cache else ""
        lines = [f"TensorRT {self.tensorrt}, {self.precision} on {where}",
                 f"quantization: {self.quantization}{cache}",
                 "network: " + ("strongly typed" if self.strongly_typed else "weakly typed, builder flags "
                                + (", ".join(self.flags) or "none"))]
        if self.fp16_layer_prefixes:
            lines.append("layers pinned to FP16: " + ", ".join(self.fp16_layer_prefixes))
        for part in self.engines:
            profiles = ", ".join(f"L{p.bucket} batch {p.min_batch}/{p.opt_batch}/{p.max_batch}" for p in part.profiles)
            lines.append(f"engine {part.tag}: {part.onnx_file}; profiles (min/opt/max) {profiles}")
        return lines + list(self.notes)


def plan_engines(meta: ModelMeta, precision: str, tensorrt_version: str, *, dla_core: int | None = None,
                 max_batch: int = 1024, dla_batch: int | None = None,
                 buckets: tuple[int, ...] | None = None) -> EnginePlan:
    """The engines to build for this model (model.json), precision, TensorRT version and device
    (the GPU, or DLA core `dla_core`); ConfigError saying why when this combination cannot be
    built. dla_batch None: the static graphs' own batch where export fixed one (--static-batch),
    else DEFAULT_DLA_BATCH. Whether the files exist is the caller's concern (``missing_inputs``)."""
    version = parse_version(tensorrt_version)
    if version[:2] < OLDEST_TENSORRT:
        raise ConfigError(f"TensorRT {tensorrt_version} is older than 8.5 (JetPack 5.1), "
                          "the oldest this backend is written for (name-based I/O)")
    if precision not in ("int8", "fp16", "fp32"):
        raise ConfigError(f"unknown precision {precision!r}; choose from int8, fp16, fp32")
    export = meta.extra.get("export") or {}
    static_batch = export.get("static_batch")
    if static_batch and dla_batch not in (None, static_batch):
        raise ConfigError(f"the static graphs were exported for batch {static_batch} (--static-batch), "
                          f"so the DLA engines run that batch, not {dla_batch}")
    dla_batch = int(dla_batch or static_batch or DEFAULT_DLA_BATCH)
    if max_batch < 1 or dla_batch < 1:
        raise ConfigError(f"batch sizes must be >= 1, got max_batch {max_batch}, dla_batch {dla_batch}")
    buckets = tuple(buckets or meta.buckets_samples)
    strongly_typed = version[:2] >= STRONGLY_TYPED_FROM
    trt_record = meta.extra.get("tensorrt_int8") if isinstance(meta.extra.get("tensorrt_int8"), dict) else {}
    if dla_core is None:
        if strongly_typed and precision == "fp16":
            raise ConfigError(f"TensorRT {tensorrt_version} builds strongly typed networks only: fp16 needs an "
                              "fp16 ONNX graph, which `rfclassify export` does not write; use int8 or fp32")
        if precision == "int8":
            onnx_file, quantization = trt_record.get("qdq_file") or "", "qdq"
            if not onnx_file:
                raise ConfigError("int8 on the GPU needs TensorRT's Q/DQ graph (model.json extra.tensorrt_int8); "
                                  "run `rfclassify calibrate`")
        else:
            onnx_file, quantization = meta.onnx_file, "none"
        by_precision = {"int8": ("INT8", "FP16"), "fp16": ("FP16",), "fp32": ()}
        flags: tuple[str, ...] = () if strongly_typed else by_precision[precision]
        opt = min(GPU_OPT_BATCH, max_batch)
        part = EnginePart(onnx_file, tuple(Profile(b, 1, opt, max_batch) for b in buckets), "all")
        return EnginePlan(tensorrt_version, precision, "gpu", None, quantization, None, strongly_typed, flags,
                          (), (part,))
    if dla_core < 0:
        raise ConfigError(f"DLA core must be >= 0, got {dla_core}")
    if precision == "fp32":
        raise ConfigError("the DLA runs fp16 and int8 only; use one of them, or the GPU for fp32")
    if dla_batch > DLA_MAX_BATCH:
        raise ConfigError(f"DLA batch {dla_batch} is above the DLA's limit of {DLA_MAX_BATCH}")
    too_long = [b for b in buckets if b > DLA_MAX_DIM]
    if too_long:
        raise ConfigError(f"buckets {too_long} (samples) are above the DLA's limit of {DLA_MAX_DIM} for a "
                          "dimension other than the batch; build for the GPU")
    if STRONGLY_TYPED_FROM <= version < DLA_RETURNS:
        raise ConfigError(f"TensorRT {tensorrt_version} has no DLA (11.0-11.3 dropped it; 11.4.1 brings it back)")
    if strongly_typed:
        raise ConfigError(f"DLA engines need TensorRT 8.5-10.x here: TensorRT {tensorrt_version} builds strongly "
                          "typed networks from typed graphs only (no implicit INT8 scales, no fp16 flag), which "
                          "this builder does not make for the DLA yet")
    if len(buckets) > DLA_MAX_LOADABLES:
        raise ConfigError(f"{len(buckets)} buckets need {len(buckets)} DLA loadables; a DLA core holds "
                          f"{DLA_MAX_LOADABLES}")
    static = dict(export.get("static_files") or {})
    missing = [b for b in buckets if str(b) not in static]
    if missing:
        raise ConfigError(f"DLA engines are built from the static graphs, and model.json names none for buckets "
                          f"{missing}; run `rfclassify export`")
    parts = tuple(EnginePart(static[str(b)], (Profile(b, dla_batch, dla_batch, dla_batch),), f"L{b}")
                  for b in buckets)
    notes: tuple[str, ...] = ()
    if precision == "int8":
        cache = trt_record.get("calibration_cache_file") or ""
        if not cache:
            raise ConfigError("int8 on the DLA needs TensorRT's calibration cache (model.json "
                              "extra.tensorrt_int8); run `rfclassify calibrate`")
        flags = ("INT8", "FP16", "GPU_FALLBACK", "PREFER_PRECISION_CONSTRAINTS")
        if version[:2] >= (10, 1):
            notes = (f"implicit INT8 (the calibration cache) is deprecated in TensorRT {tensorrt_version}: "
                     "expect a deprecation warning",)
        return EnginePlan(tensorrt_version, precision, "dla", dla_core, "calibration cache", cache, False, flags,
                          HEAD_PREFIXES, parts, notes)
    return EnginePlan(tensorrt_version, precision, "dla", dla_core, "none", None, False, ("FP16", "GPU_FALLBACK"),
                      (), parts)


def check_dla_core(dla_core: int | None, cores: int) -> None:
    """ConfigError unless DLA core `dla_core` is one of the `cores` the device has, as TensorRT
    counts them where it runs (``Runtime.num_DLA_cores``; an AGX Orin has 2, other Jetsons fewer);
    None (the GPU) always passes. Static ranges can only bound it (0..1, the AGX Orin's)."""
    if dla_core is None or 0 <= dla_core < cores:
        return
    have = "no DLA core" if cores < 1 else f"{cores} DLA core{'s' if cores > 1 else ''} (0..{cores - 1})"
    raise ConfigError(f"DLA core {dla_core} does not exist: TensorRT sees {have} on this device")


def batch_pieces(n: int, piece: int) -> list[tuple[int, int]]:
    """[start, stop) ranges cutting a batch of n into pieces of at most `piece` (DLA engines run
    exactly `piece`; the runner pads the last one)."""
    if n < 0 or piece < 1:
        raise ConfigError(f"cannot cut a batch of {n} into pieces of {piece}")
    return [(start, min(start + piece, n)) for start in range(0, n, piece)]


def engine_key(plan: EnginePlan, part: EnginePart, digests: Mapping[str, str], device_id: str) -> str:
    """sha256 of everything `part` of `plan` depends on: ENGINE_FORMAT, the plan (this part's
    graph and profiles), the digests of the model files it is built from, and the device
    (``device_id``: the GPU's name and compute capability, as the builder reports them)."""
    files = plan.part_files(part)
    missing = [f for f in files if f not in digests]
    if missing:
        raise ConfigError(f"no digest for {missing}")
    body = {"format": ENGINE_FORMAT, "device": device_id,
            "plan": {k: v for k, v in plan.to_dict().items() if k not in ("engines", "notes")},
            "part": asdict(part), "digests": {f: digests[f] for f in files}}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def engine_name_prefix(model_id: str) -> str:
    """How the names of a model's engines begin (its id made safe for a file name)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", model_id)[:80] + "-"


def engine_file_name(model_id: str, plan: EnginePlan, part: EnginePart, key: str) -> str:
    """A readable, unique file name for an engine: model, device, precision, part, key."""
    where = f"dla{plan.dla_core}" if plan.device == "dla" else "gpu"
    return f"{engine_name_prefix(model_id)}{where}-{plan.precision}-{part.tag}-{key[:16]}.engine"


def timing_cache_name(tensorrt_version: str, device_id: str) -> str:
    """The timing cache shared by every engine built by one TensorRT on one kind of device."""
    digest = hashlib.sha256(f"{tensorrt_version}|{device_id}".encode()).hexdigest()[:16]
    return f"timing-{'.'.join(map(str, parse_version(tensorrt_version)))}-{digest}.cache"


def engine_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where engines are kept: $RFCLASSIFY_ENGINE_CACHE; else, under systemd, the unit's
    StateDirectory ($STATE_DIRECTORY/engines, /var/lib/rfclassify); else
    $XDG_CACHE_HOME/rfclassify/engines (~/.cache/rfclassify/engines)."""
    env = os.environ if env is None else env
    if env.get("RFCLASSIFY_ENGINE_CACHE"):
        return Path(env["RFCLASSIFY_ENGINE_CACHE"])
    if env.get("STATE_DIRECTORY"):
        # systemd may list several directories, colon-separated; the first is the unit's own
        return Path(env["STATE_DIRECTORY"].split(":")[0]) / "engines"
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "rfclassify" / "engines"


def missing_inputs(plan: EnginePlan, model_dir: str | os.PathLike[str]) -> list[str]:
    """The model-directory files the plan needs that are not there."""
    return [f for f in plan.files() if not (Path(model_dir) / f).is_file()]
