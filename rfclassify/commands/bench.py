"""`rfclassify bench [model|daemon]`: benchmarks, each against a baseline in the same process.

`rfclassify bench` / `rfclassify bench model`: each backend and precision on one network
against PyTorch eager fp32 (rfclassify.engine.bench). `rfclassify bench daemon`: the whole
daemon against the bare `Classifier.classify` on the same backend, owned by
rfclassify.serve.bench_daemon (its own options; see `rfclassify bench daemon --help`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys

from rfclassify._argtypes import float_range, output_file, thread_count
from rfclassify.engine.options import add_model_arguments, batch_sizes, names, positive_ints

DAEMON_MODULE = "rfclassify.serve.bench_daemon"
_MISSING_DAEMON = f"the daemon benchmark is not available: {DAEMON_MODULE} does not exist in this version"


def _add_model_bench_arguments(parser: argparse.ArgumentParser, suppress: bool) -> None:
    # The same options on `bench` and `bench model`; on the subparser their defaults are
    # suppressed so they do not overwrite values given before the word `model`.
    def d(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    add_model_arguments(parser, backend=False, suppress_default=suppress)
    # None: not given (the defaults skip what this machine lacks; what the user names and
    # none of which can be measured is an error, engine.bench.BenchConfig.named)
    parser.add_argument("--backends", type=names, default=d(None),
                        help="comma-separated backends (default tensorrt,onnxruntime,torch: those that "
                             "cannot run here are listed as skipped, with the reason; named, at least "
                             "one of them must be measurable)")
    parser.add_argument("--precisions", type=names, default=d(None),
                        help="comma-separated precisions (default: all each backend can run here; named, "
                             "at least one of them must be measurable)")
    parser.add_argument("--buckets", type=positive_ints, default=d((1024,)),
                        help="window lengths in samples (default 1024)")
    parser.add_argument("--batch-sizes", type=batch_sizes, default=d(None),
                        help="batch sizes (default 1,64 on CPU, 1,64,1024 on GPU)")
    parser.add_argument("--seconds", type=float_range(0.01, 86400.0), default=d(2.0),
                        help="seconds per measurement, baseline included (default 2)")
    parser.add_argument("--device", default=d(None), help="cpu, cuda or cuda:N (default: per backend)")
    parser.add_argument("--threads", type=thread_count, default=d(None), help="CPU threads (default: all usable)")
    parser.add_argument("--json", type=output_file, default=d(None), metavar="FILE",
                        help="also write the full report as JSON to FILE ('-' for stdout only)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _add_model_bench_arguments(parser, suppress=False)
    modes = parser.add_subparsers(dest="bench_mode", metavar="MODE", parser_class=type(parser))
    modes.required = False
    model = modes.add_parser("model", help="backends on one network (the default)")
    _add_model_bench_arguments(model, suppress=True)
    daemon = modes.add_parser("daemon", help="the whole daemon (rfclassify.serve.bench_daemon)")
    if importlib.util.find_spec(DAEMON_MODULE) is not None:
        try:  # the daemon bench needs pyzmq; `bench model` must not (GPU boxes may lack it)
            importlib.import_module(DAEMON_MODULE).add_arguments(daemon)
        except ImportError:
            pass


def run(args: argparse.Namespace) -> int:
    from rfclassify._exceptions import ConfigError

    if getattr(args, "bench_mode", None) == "daemon":
        if importlib.util.find_spec(DAEMON_MODULE) is None:
            raise ConfigError(_MISSING_DAEMON)
        words = list(getattr(args, "_argv", ()))
        if "bench" in words and "daemon" in words[words.index("bench"):]:
            early = [w for w in words[words.index("bench") + 1:words.index("daemon", words.index("bench"))]
                     if w.startswith("-")]
            if early:   # the daemon's own defaults took their place, without a word (sixty-sixth session)
                raise ConfigError(f"{', '.join(early)} before 'daemon' would be ignored: options of the daemon "
                                  "benchmark go after the word, `rfclassify bench daemon --model-dir ...`")
        return int(importlib.import_module(DAEMON_MODULE).run(args))
    from rfclassify._atomic import write_atomic
    from rfclassify.engine.bench import TABLE_HEADER, BenchConfig, few_calls_note, format_row, run_bench
    from rfclassify.model.meta import default_model_dir

    named = args.backends is not None or args.precisions is not None
    backends = BenchConfig.backends if args.backends is None else tuple(args.backends)
    config = BenchConfig(backends=backends, precisions=args.precisions,
                         buckets_samples=tuple(args.buckets), batch_sizes=args.batch_sizes,
                         seconds=args.seconds, device=args.device, threads=args.threads, named=named)
    report = run_bench(args.model_dir or default_model_dir(), config)
    to_stdout_only = args.json is not None and str(args.json) == "-"
    if to_stdout_only:
        print(json.dumps(report, indent=2))
        for s in report["skipped"]:   # also in the report; said where a person reads it
            print(f"skipped {s['backend']} {s['precision']}: {s['reason']}", file=sys.stderr)
        return 0
    out = sys.stdout
    print(f"model {report['model']}; baseline: {report['baseline']}; "
          f"{report['threads']} CPU threads", file=out)
    print(TABLE_HEADER, file=out)
    for row in report["rows"]:
        print(format_row(row), file=out)
    for s in report["skipped"]:
        print(f"skipped {s['backend']} {s['precision']}: {s['reason']}", file=out)
    print("x_lat = eager median latency / backend median latency; "
          "x_thr = backend windows/s / eager windows/s", file=out)
    note = few_calls_note(report["rows"])
    if note:
        print(note, file=out)
    if args.json is not None:
        # in one step (a failed write, a full disk, left a valid earlier report cut short); an
        # error names the file, exit 2
        write_atomic(args.json, json.dumps(report, indent=2) + "\n")
    return 0
