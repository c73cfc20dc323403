"""Building and caching TensorRT engines from an ``EnginePlan`` (rfclassify.engine.tensorrt_plan):
the TensorRT API calls, and the engine cache on disk.

Written against TensorRT's documented Python API (8.5-10.x; 11 where the plan allows it);
**never run**: no machine of this project has TensorRT (../shared/DESIGN.md). Every decision
is the plan's; this module only carries it out, so what it does is tested without TensorRT
except for the calls themselves (tests marked ``tensorrt`` skip elsewhere).

Cache layout (``engine_cache_dir()``): per engine ``<name>.engine`` (the serialized engine) and
``<name>.json`` (what it was built from: the plan, the key's inputs, the TensorRT version, the
build time); per TensorRT and device one timing cache, shared by later builds. Files are
written to a temporary name and renamed, so a build cut short leaves no half engine.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rfclassify._atomic import write_atomic
from rfclassify._digest import model_file_sha256
from rfclassify._exceptions import BackendError, Cancelled, ConfigError, ModelNotFoundError
from rfclassify._optional import require
from rfclassify.engine.tensorrt_plan import (EnginePart, EnginePlan, engine_cache_dir, engine_file_name,
                                             engine_key, engine_name_prefix, missing_inputs, parse_version,
                                             timing_cache_name)
from rfclassify.model.meta import INPUT_NAME, ModelMeta
from rfclassify.model.provenance import digests_problem
from rfclassify.quant.tensorrt_int8 import retarget_cache

log = logging.getLogger(__name__)

#: builder workspace; the network is small (its largest activation at batch 1024, 4,096 samples,
#: 32 channels is 512 MiB in fp32)
WORKSPACE_BYTES = 1 << 30


def device_id(cuda: Any, index: int, dla_core: int | None) -> str:
    """The device an engine is built for, as its cache key names it: GPU name, compute
    capability, and the DLA core (pycuda's driver module as `cuda`)."""
    dev = cuda.Device(index)
    major, minor = dev.compute_capability()
    return f"{dev.name()} sm_{major}{minor}" + (f" DLA{dla_core}" if dla_core is not None else "")


def cached_calibrator(trt: Any, cache_text: str, batch: int) -> Any:
    """An IInt8EntropyCalibrator2 that hands TensorRT the shipped calibration cache and no
    batches (the ranges were measured by `rfclassify calibrate`)."""

    class Calibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)
            self.asked_for_data = False    # TensorRT rejected the cache and tried to calibrate

        def get_batch_size(self) -> int:
            return batch

        def get_batch(self, names: Any) -> None:
            self.asked_for_data = True     # there is none: the build fails, build_engine says why
            return None

        def read_calibration_cache(self) -> bytes:
            return cache_text.encode()

        def write_calibration_cache(self, cache: Any) -> None:
            return None                    # the shipped cache stays as it is

    return Calibrator()


def build_engine(trt: Any, logger: Any, plan: EnginePlan, part: EnginePart, model_dir: Path,
                 timing_cache_path: Path | None) -> bytes:
    """Build one engine of the plan; its serialized bytes. BackendError with TensorRT's own
    errors when the parser or the builder fails."""
    builder = trt.Builder(logger)
    flags = 0
    if plan.strongly_typed:
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    elif hasattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH"):   # required before 10, ignored in 10
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    onnx_path = model_dir / part.onnx_file
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise BackendError(f"TensorRT cannot parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED   # for `rfclassify engine inspect`
    for name in plan.flags:
        config.set_flag(getattr(trt.BuilderFlag, name))
    if plan.device == "dla":
        config.default_device_type = trt.DeviceType.DLA
        config.DLA_core = int(plan.dla_core or 0)
    profiles = []
    for p in part.profiles:
        profile = builder.create_optimization_profile()
        profile.set_shape(INPUT_NAME, *p.shapes())
        config.add_optimization_profile(profile)
        profiles.append(profile)
    calibrator = None
    if plan.calibration_cache:
        text = retarget_cache((model_dir / plan.calibration_cache).read_text(), trt.__version__)
        calibrator = cached_calibrator(trt, text, part.profiles[0].opt_batch)
        config.int8_calibrator = calibrator
        config.set_calibration_profile(profiles[0])
    if plan.fp16_layer_prefixes:
        for i in range(network.num_layers):
            layer = network.get_layer(i)
            if layer.name.startswith(plan.fp16_layer_prefixes):
                layer.precision = trt.float16
                for j in range(layer.num_outputs):
                    if layer.get_output(j).dtype in (trt.float32, trt.float16):   # not shape tensors
                        layer.set_output_type(j, trt.float16)
    if timing_cache_path is not None:
        data = timing_cache_path.read_bytes() if timing_cache_path.is_file() else b""
        config.set_timing_cache(config.create_timing_cache(data), False)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None and calibrator is not None and calibrator.asked_for_data:
        raise BackendError(f"TensorRT {trt.__version__} did not accept the calibration cache "
                           f"{model_dir / plan.calibration_cache} and asked for calibration data, which "
                           "this builder does not have; run `rfclassify calibrate` with this TensorRT's "
                           "version in mind, or build for the GPU (the Q/DQ graph)")
    if serialized is None:
        raise BackendError(f"TensorRT could not build the {plan.precision} engine of {onnx_path} "
                           f"({plan.device}); its log above says why")
    if timing_cache_path is not None:
        write_atomic(timing_cache_path, bytes(config.get_timing_cache().serialize()))
    return bytes(serialized)


def digests(plan: EnginePlan, model_dir: Path, meta: ModelMeta | None = None) -> dict[str, str]:
    """sha256 of every file the plan builds from, the engine cache key's digests; ModelNotFoundError
    naming any missing, or (given model.json's `meta`) any whose digest is not the one model.json
    records (another model's file: its engine would be built and cached under this model's id)."""
    missing = missing_inputs(plan, model_dir)
    if missing:
        raise ModelNotFoundError(f"the TensorRT plan needs {', '.join(str(model_dir / f) for f in missing)}, "
                                 "which do not exist; run `rfclassify export` / `rfclassify calibrate`")
    found = {f: model_file_sha256(model_dir / f) for f in plan.files()}
    if meta is not None:
        problem = digests_problem(meta, model_dir, found)
        if problem:
            raise ModelNotFoundError(problem)
    return found


def cached_engines(cache_dir: Path) -> list[dict[str, Any]]:
    """What the cache holds: each engine's sidecar record with its file name and size (works
    without TensorRT: `rfclassify engine inspect` without an engine file)."""
    out = []
    if not cache_dir.is_dir():
        return out
    for side in sorted(cache_dir.glob("*.json")):
        engine = side.with_suffix(".engine")
        try:
            record = json.loads(side.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and engine.is_file():
            out.append({**record, "file": engine.name, "bytes": engine.stat().st_size})
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:      # another user's process
        return True
    return True


def stale_files(cache_dir: Path, model_dir: Path, model_id: str,
                tensorrt_version: str | None = None) -> list[tuple[Path, str]]:
    """The cache's files no start of the model in `model_dir` will read again, each with why:
    an engine (with its record) built from files the model directory no longer holds as they
    were, or by another TensorRT than `tensorrt_version` (None: not known here, not judged);
    an engine without its record whose name is another model's; a record without its engine;
    a timing cache of another TensorRT; a temporary file of a build whose process is gone.
    Engines of the model's files for any precision, device or batch are kept: a daemon may be
    configured for any of them. Reads files only; needs no TensorRT."""
    cache_dir, model_dir = Path(cache_dir), Path(model_dir)
    if not cache_dir.is_dir():
        return []
    hashed: dict[str, str | None] = {}

    def digest(name: str) -> str | None:
        if name not in hashed:
            path = model_dir / name
            # missing: its engines are stale; unreadable: not judged (prune would delete good engines)
            hashed[name] = model_file_sha256(path) if path.is_file() else None
        return hashed[name]

    version = ".".join(map(str, parse_version(tensorrt_version))) if tensorrt_version else None
    own_prefix = engine_name_prefix(model_id)
    out: list[tuple[Path, str]] = []
    for engine in sorted(cache_dir.glob("*.engine")):
        side = engine.with_suffix(".json")
        try:
            record = json.loads(side.read_text()) if side.is_file() else None
        except (OSError, ValueError):
            record = None
        if not isinstance(record, dict):
            if not engine.name.startswith(own_prefix):
                out.append((engine, "an engine without a readable record, named for another model"))
                if side.is_file():
                    out.append((side, "its record"))
            continue
        digests = record.get("digests")
        if not isinstance(digests, dict) or not all(isinstance(f, str) and isinstance(d, str)
                                                    for f, d in digests.items()):
            digests = {}    # a damaged record: it names nothing this model can vouch for
        changed = sorted(f for f, d in digests.items() if digest(f) != d)
        if changed or not digests:
            why = f"built from {', '.join(changed)} as {model_dir} no longer has it" if changed else \
                "its record names no files it was built from"
        elif tensorrt_version and str(record.get("tensorrt")) != tensorrt_version:
            why = f"built by TensorRT {record.get('tensorrt')}; this is {tensorrt_version}"
        else:
            continue
        out += [(engine, why), (side, "its record")]
    for side in sorted(cache_dir.glob("*.json")):
        if not side.with_suffix(".engine").exists():
            out.append((side, "a record whose engine is gone"))
    if version:
        for timing in sorted(cache_dir.glob("timing-*.cache")):
            if not timing.name.startswith(f"timing-{version}-"):
                out.append((timing, f"a timing cache of another TensorRT; this is {tensorrt_version}"))
    for tmp in sorted(cache_dir.glob(".*.tmp")):
        pid = tmp.name[:-len(".tmp")].rsplit(".", 1)[-1]
        if pid.isdigit() and not _pid_alive(int(pid)):
            out.append((tmp, f"left by a build that did not finish (process {pid} is gone)"))
    return out


def ensure_engine(trt: Any, logger: Any, meta: ModelMeta, model_dir: Path, plan: EnginePlan, part: EnginePart,
                  device: str, files: dict[str, str], cache_dir: Path | None = None,
                  rebuild: bool = False, cancel: threading.Event | None = None) -> tuple[Path, bool]:
    """The engine file of `part` for `device` (device_id's string): from the cache when one was
    built from the same inputs, else built now and cached. `files`: the plan's ``digests``,
    computed once for all its parts. Returns (path, built). With `cancel` set, Cancelled
    instead of a build (a build is one call of minutes that nothing interrupts: the daemon's
    stop during its start waits for the one under way, not for all of them)."""
    cache_dir = Path(cache_dir) if cache_dir is not None else engine_cache_dir()
    key = engine_key(plan, part, files, device)
    path = cache_dir / engine_file_name(meta.model_id, plan, part, key)
    if path.is_file() and not rebuild:
        return path, False
    if cancel is not None and cancel.is_set():
        raise Cancelled(f"stopped before building {path.name}")
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"the engine cache {cache_dir} cannot be made ({exc.strerror}); "
                          "set RFCLASSIFY_ENGINE_CACHE to a writable directory") from None
    start = time.monotonic()
    log.info("building TensorRT engine %s (%s on %s); this takes minutes", path.name, plan.precision, device)
    data = build_engine(trt, logger, plan, part, model_dir, cache_dir / timing_cache_name(plan.tensorrt, device))
    write_atomic(path, data)
    record = {"model_id": meta.model_id, "key": key, "device": device, "tensorrt": plan.tensorrt,
              "precision": plan.precision, "where": plan.device, "dla_core": plan.dla_core,
              "part": asdict(part),
              "digests": {f: files[f] for f in plan.part_files(part)},
              "build_seconds": round(time.monotonic() - start, 1),
              "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_atomic(path.with_suffix(".json"), json.dumps(record, indent=2) + "\n")
    log.info("built %s in %.0f s", path.name, record["build_seconds"])
    return path, True


def load_tensorrt() -> tuple[Any, Any]:
    """(tensorrt module, a logger at WARNING)."""
    trt = require("tensorrt", "the TensorRT backend")
    return trt, trt.Logger(trt.Logger.WARNING)


def deserialize(trt: Any, logger: Any, path: Path, dla_core: int | None) -> Any:
    """An ICudaEngine from a cached file; BackendError when TensorRT refuses it."""
    runtime = trt.Runtime(logger)
    if dla_core is not None:
        runtime.DLA_core = int(dla_core)
    engine = runtime.deserialize_cuda_engine(path.read_bytes())
    if engine is None:
        raise BackendError(f"TensorRT cannot load the engine {path} (another TensorRT or device?); "
                           "`rfclassify engine build --rebuild` builds it again")
    return engine


def layer_information(trt: Any, engine: Any) -> dict[str, Any]:
    """The engine inspector's JSON (layers, their precisions and devices where TensorRT says)."""
    inspector = engine.create_engine_inspector()
    return json.loads(inspector.get_engine_information(trt.LayerInformationFormat.JSON))
