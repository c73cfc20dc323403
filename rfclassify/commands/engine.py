"""`rfclassify engine build|inspect|prune|selftest`: TensorRT engines of the model (rfclassify.engine.tensorrt_*).

`build --plan`, `inspect` without an engine file and `prune` work on any machine (they need no
TensorRT); the rest needs TensorRT and pycuda (a Jetson, or a machine with an NVIDIA GPU) and
says so in one line where they are missing. None of it has run with TensorRT.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rfclassify._argtypes import int_range, path_text, width
from rfclassify.engine.options import model_dir_path
from rfclassify.model.dla_check import MAX_BATCH as DLA_MAX_BATCH

#: the least top-1 agreement with ONNX Runtime fp32 that `selftest` passes, per precision: INT8
#: in TensorRT's symmetric form agreed 84-95 % per bucket in ONNX Runtime's emulation, the DLA
#: cache's scales 83-89 % (docs/engine.md); fp16 and fp32 should agree almost everywhere
SELFTEST_MIN_AGREEMENT = {"int8": 0.75, "fp16": 0.97, "fp32": 0.99}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="{build,inspect,prune,selftest}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--model-dir", type=model_dir_path, default=None,
                        help="model directory (default: $RFCLASSIFY_MODEL_DIR or the shipped models/)")
    common.add_argument("--precision", choices=("int8", "fp16", "fp32"), default="int8",
                        help="engine precision (default: int8)")
    common.add_argument("--device", default="cuda:0", help="CUDA device (default: cuda:0)")
    # an AGX Orin has DLA cores 0 and 1; where TensorRT runs, the count it reports is checked too
    common.add_argument("--dla-core", type=int_range(0, 1), default=None, metavar="N",
                        help="build for DLA core N (0 or 1) with GPU fallback (default: the GPU alone)")
    common.add_argument("--dla-batch", type=int_range(1, DLA_MAX_BATCH), default=None, metavar="N",
                        help=f"the DLA engines' fixed batch, at most the DLA's {DLA_MAX_BATCH} (default: the "
                             "static graphs' own, else 8)")
    common.add_argument("--max-batch", type=width, default=1024, metavar="N",
                        help="the GPU engine's largest batch (default: 1024)")
    common.add_argument("--cache-dir", type=path_text, default=None, metavar="DIR",
                        help="engine cache (default: $RFCLASSIFY_ENGINE_CACHE, $STATE_DIRECTORY/engines "
                             "under systemd, else ~/.cache/rfclassify/engines)")
    build = sub.add_parser("build", parents=[common], help="build (or find cached) the model's engines",
                           description="Build the model's TensorRT engines into the engine cache.")
    build.add_argument("--rebuild", action="store_true", help="build even where a cached engine matches")
    build.add_argument("--plan", action="store_true",
                       help="print what would be built and exit (needs no TensorRT)")
    build.add_argument("--tensorrt-version", default=None, metavar="X.Y.Z",
                       help="with --plan: the TensorRT to plan for (default: the installed one, else 10.3.0)")
    inspect = sub.add_parser("inspect", help="list the engine cache, or show one engine",
                             description="Without ENGINE: the cached engines and what they were built from "
                                         "(needs no TensorRT). With ENGINE: its record and, where TensorRT "
                                         "imports, its layers.")
    inspect.add_argument("engine", nargs="?", type=path_text, default=None, metavar="ENGINE",
                         help="an .engine file")
    inspect.add_argument("--cache-dir", type=path_text, default=None, metavar="DIR", help="engine cache")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    prune = sub.add_parser("prune", help="remove cached engines the model will not load again",
                           description="Remove from the engine cache what no start of this model will read: "
                                       "engines built from files the model directory no longer holds as they "
                                       "were (an earlier model or calibration) or, where TensorRT imports, by "
                                       "another TensorRT; their records; timing caches of another TensorRT; "
                                       "files of builds that did not finish. Engines of this model for any "
                                       "precision or device are kept. Needs no TensorRT. A cache shared by "
                                       "several models keeps only this one's.")
    prune.add_argument("--model-dir", type=model_dir_path, default=None,
                       help="the model whose engines are kept (default: $RFCLASSIFY_MODEL_DIR or the shipped models/)")
    prune.add_argument("--cache-dir", type=path_text, default=None, metavar="DIR", help="engine cache")
    prune.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    sub.add_parser("selftest", parents=[common],
                   help="build or load the engines and compare them with ONNX Runtime fp32",
                   description="Run synthesized bursts of every label and bucket through the TensorRT "
                               "engines and ONNX Runtime's fp32 graph; exit 1 when they agree less than "
                               "the precision allows.")


def run(args: argparse.Namespace) -> int:
    return {"build": _build, "inspect": _inspect, "prune": _prune, "selftest": _selftest}[args.action](args)


def _plan(args: argparse.Namespace, version: str):
    from rfclassify.engine.tensorrt_plan import plan_engines
    from rfclassify.model.meta import ModelMeta, default_model_dir

    model_dir = Path(args.model_dir or default_model_dir())
    meta = ModelMeta.load(model_dir)
    return model_dir, plan_engines(meta, args.precision, version, dla_core=args.dla_core,
                                   max_batch=args.max_batch, dla_batch=args.dla_batch)


def _backend(args: argparse.Namespace, rebuild: bool = False):
    from rfclassify._exceptions import ConfigError
    from rfclassify.engine.devices import device_kind
    from rfclassify.engine.tensorrt_backend import TensorRTBackend
    from rfclassify.model.meta import ModelMeta, default_model_dir

    if device_kind(args.device) != "cuda":
        raise ConfigError(f"TensorRT runs on a CUDA device, not {args.device}")
    model_dir = Path(args.model_dir or default_model_dir())
    return TensorRTBackend(ModelMeta.load(model_dir), model_dir, precision=args.precision, device=args.device,
                           dla_core=args.dla_core, dla_batch=args.dla_batch,
                           engine_cache=args.cache_dir, max_batch_size=args.max_batch, rebuild=rebuild)


def _build(args: argparse.Namespace) -> int:
    from rfclassify._optional import available
    from rfclassify.engine.tensorrt_plan import engine_cache_dir, missing_inputs

    if args.plan:
        version = args.tensorrt_version
        if version is None:
            from rfclassify._optional import require
            from rfclassify.quant.tensorrt_int8 import CACHE_TENSORRT_VERSION

            version = require("tensorrt").__version__ if available("tensorrt") else CACHE_TENSORRT_VERSION
        model_dir, plan = _plan(args, version)
        for line in plan.describe():
            print(line)
        missing = missing_inputs(plan, model_dir)
        print("files: " + ", ".join(f"{f}{' (MISSING)' if f in missing else ''}" for f in plan.files()))
        print(f"engine cache: {Path(args.cache_dir) if args.cache_dir else engine_cache_dir()}")
        if missing:
            print(f"rfclassify engine: error: {len(missing)} file(s) the plan needs are missing; run "
                  "`rfclassify export` / `rfclassify calibrate`", file=sys.stderr)
            return 2
        return 0
    if args.tensorrt_version:
        from rfclassify._exceptions import ConfigError

        raise ConfigError("--tensorrt-version plans for another TensorRT; it goes with --plan")
    backend = _backend(args, rebuild=args.rebuild)
    with backend:
        for line in backend.plan.describe():
            print(line)
        print(f"built: {', '.join(backend.built) or 'none (every engine was cached)'}")
    return 0


def _cache_to_read(cache_dir: str | None) -> tuple[Path, bool]:
    """The engine cache `inspect` and `prune` read, and whether it exists. A --cache-dir that does
    not exist or is not a folder is a mistake (a typo listed "0 engine(s)", exit 0, before); the
    default one not made yet only means nothing was built into it."""
    from rfclassify._exceptions import InputError
    from rfclassify.engine.tensorrt_plan import engine_cache_dir

    cache = Path(cache_dir) if cache_dir else engine_cache_dir()
    named = f"--cache-dir {cache}" if cache_dir else f"the engine cache {cache}"
    try:
        with os.scandir(cache):
            pass
    except FileNotFoundError:
        if cache_dir:
            raise InputError(f"{named}: no such folder") from None
        return cache, False
    except NotADirectoryError:
        raise InputError(f"{named}: not a folder") from None
    except OSError as exc:   # a folder this user may not list reads as empty through glob
        raise InputError(f"{named}: cannot be read ({exc.strerror})") from None
    return cache, True


def _inspect(args: argparse.Namespace) -> int:
    from rfclassify._exceptions import BackendError, InputError
    from rfclassify._optional import available
    from rfclassify.engine.tensorrt_engines import cached_engines, deserialize, layer_information, load_tensorrt

    if args.engine is None:
        cache, exists = _cache_to_read(args.cache_dir)
        engines = cached_engines(cache)
        if args.json:
            json.dump({"cache": str(cache), "exists": exists, "engines": engines}, sys.stdout, indent=2)
            print()
            return 0
        print(f"engine cache {cache}: {len(engines)} engine(s)"
              + ("" if exists else " (not made yet: nothing was built into it)"))
        for e in engines:
            print(f"  {e['file']}  {e.get('precision')} on {e.get('where')}, TensorRT {e.get('tensorrt')}, "
                  f"{e.get('device')}, {e['bytes'] / 1e6:.1f} MB, built {e.get('built_at')} "
                  f"in {e.get('build_seconds')} s")
        return 0
    path = Path(args.engine)
    if not path.is_file():
        raise InputError(f"{path} is not a file (an engine; without one, inspect lists the cache: --cache-dir DIR)"
                         if path.exists() else f"{path} does not exist")
    side = path.with_suffix(".json")
    tensorrt_here = available("tensorrt")
    if not tensorrt_here and not side.is_file():
        # nothing says it is an engine (`engine inspect c.npy` showed its size, exit 0)
        raise InputError(f"{path}: not known as an engine: no build record {side.name} beside it (`engine "
                         "build` writes one), and tensorrt does not import here to read the file itself")
    try:
        record = json.loads(side.read_text()) if side.is_file() else {}
    except (OSError, ValueError) as exc:   # a damaged record does not hide the engine
        record = {"unreadable": f"{side.name}: {exc}"}
    record = record if isinstance(record, dict) else {"unreadable": f"{side.name}: not a JSON object"}
    out = {"file": str(path), "bytes": path.stat().st_size, "record": record}
    if tensorrt_here:
        trt, logger = load_tensorrt()
        try:
            engine = deserialize(trt, logger, path, record.get("dla_core"))
        except BackendError as exc:   # the file named is no engine of this TensorRT: the user's to fix
            raise InputError(str(exc)) from None
        out["layers"] = layer_information(trt, engine)
    else:
        out["layers"] = "tensorrt does not import here: only the build record is shown"
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    print(f"{path} ({out['bytes'] / 1e6:.1f} MB)")
    for key in ("model_id", "precision", "where", "dla_core", "tensorrt", "device", "built_at", "key"):
        if key in record:
            print(f"  {key}: {record[key]}")
    layers = out["layers"]
    if isinstance(layers, dict):
        for layer in layers.get("Layers", []):
            print("  layer " + (layer if isinstance(layer, str) else
                                f"{layer.get('Name', '?')} ({layer.get('LayerType', '?')})"))
    else:
        print(f"  {layers}")
    return 0


def _prune(args: argparse.Namespace) -> int:
    from rfclassify._optional import available, require
    from rfclassify.engine.tensorrt_engines import stale_files
    from rfclassify.model.meta import ModelMeta, default_model_dir

    model_dir = Path(args.model_dir or default_model_dir())
    meta = ModelMeta.load(model_dir)
    cache, exists = _cache_to_read(args.cache_dir)
    if not exists:
        print(f"engine cache {cache}: not made yet (nothing was built into it), nothing to prune")
        return 0
    version = require("tensorrt").__version__ if available("tensorrt") else None
    stale = stale_files(cache, model_dir, meta.model_id, version)
    freed, failed = 0, 0
    for path, why in stale:
        try:
            size = path.stat().st_size
            if not args.dry_run:
                path.unlink()
        except FileNotFoundError:       # gone meanwhile (another prune)
            continue
        except OSError as exc:          # the service's cache, pruned by another user, say
            failed += 1
            print(f"rfclassify engine: cannot remove {path}: {exc.strerror}", file=sys.stderr)
            continue
        freed += size
        print(f"{'would remove' if args.dry_run else 'removed'} {path.name} ({size / 1e6:.1f} MB): {why}")
    judged = "" if version else "; TensorRT does not import here, so engines of another TensorRT were not judged"
    print(f"engine cache {cache}: {len(stale) - failed} file(s), {freed / 1e6:.1f} MB "
          f"{'to free' if args.dry_run else 'freed'}; kept what model {meta.model_id} ({model_dir}) uses{judged}")
    return 1 if failed else 0


def _selftest(args: argparse.Namespace) -> int:
    from rfclassify.engine.onnxruntime_backend import OnnxRuntimeBackend
    from rfclassify.quant.cpu_int8 import agreement_of

    backend = _backend(args)
    reference = OnnxRuntimeBackend(backend.meta, backend.model_dir, precision="fp32")
    with backend, reference:
        report = agreement_of(reference.infer, backend.infer, backend.meta, buckets=backend.buckets_samples)
        where = backend.plan.describe()[0]
    least = SELFTEST_MIN_AGREEMENT[args.precision]
    print(f"{where}, against ONNX Runtime fp32 (synthesized bursts, SNR 0..30 dB)")
    print(" bucket  bursts  top-1 agreement  max |softmax diff|  mean / max |SNR diff| dB")
    worst = 1.0
    for b, a in report.items():
        worst = min(worst, a["top1_agreement"])
        print(f"{b:>7} {a['bursts']:>7} {a['top1_agreement']:>16.3f} {a['max_abs_softmax_diff']:>19.3f}"
              f"  {a['mean_abs_snr_db_diff']:.2f} / {a['max_abs_snr_db_diff']:.2f}")
    ok = worst >= least
    print(f"{'PASS' if ok else 'FAIL'}: the least agreement {worst:.3f} {'>=' if ok else '<'} {least} for "
          f"{args.precision}")
    return 0 if ok else 1
