"""`rfclassify dataset generate|inspect|gnuradio|import`: make and look at HDF5 datasets."""

from __future__ import annotations

import argparse
import shlex
import sys

from rfclassify._argtypes import count, finite_float, int_range, output_file, path_text, seed
from rfclassify._exceptions import InputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True

    g = sub.add_parser("generate", help="generate a balanced synthetic dataset (class x SNR grid)",
                       description="Generate a balanced class x SNR dataset of variable-length bursts.")
    g.add_argument("--out", type=path_text, required=True, help="output HDF5 file")
    g.add_argument("--seed", type=seed, default=0, help="random seed (same seed -> same file, any --workers)")
    g.add_argument("--classes", default="all", help="'all' or comma-separated labels (default all)")
    _add_snr_args(g, default_min=-20.0, default_max=30.0, default_step=2.0)
    g.add_argument("--per-cell", type=count(), default=100, help="examples per class x SNR cell (default 100)")
    g.add_argument("--length-min", type=count(), default=64, help="shortest burst, samples (default 64)")
    g.add_argument("--length-max", type=count(), default=8192, help="longest burst, samples (default 8192)")
    g.add_argument("--lengths", default=None,
                   help="comma-separated burst lengths instead of the log-uniform range, e.g. 128,1024,4096")
    g.add_argument("--channel", default="full",
                   help="channel preset(s), comma-separated; examples rotate through them "
                        "(full, clean, one impairment family, or 'all' for full, clean and every "
                        "family alone; see docs/datasets.md)")
    g.add_argument("--chunk", type=count(), default=256, help="examples per synthesize call (part of the seed's plan)")
    g.add_argument("--workers", type=int_range(1, 1024), default=1, help="worker processes (default 1)")
    g.add_argument("--compression", choices=("none", "gzip", "lzf"), default="none")
    g.add_argument("--force", action="store_true", help="overwrite an existing file")
    g.set_defaults(_action=_generate)

    i = sub.add_parser("inspect", help="print a dataset's coverage; optionally draw a PNG sheet",
                       description="Print coverage (class x SNR, class x length bucket, parameter ranges).")
    i.add_argument("file", help="HDF5 dataset")
    i.add_argument("--png", type=output_file, default=None,
                   help="also draw constellations and spectra per class to this PNG")
    i.set_defaults(_action=_inspect)

    r = sub.add_parser("gnuradio", help="make an evaluation set with GNU Radio's own modulators and channel",
                       description="Run a GNU Radio 3.10 flowgraph (system /usr/bin/python3) and convert "
                                   "its output into an rfclassify HDF5 dataset.")
    r.add_argument("--out", type=path_text, required=True, help="output HDF5 file")
    r.add_argument("--seed", type=seed, default=0)
    r.add_argument("--classes", default="all",
                   help="'all' (every label GNU Radio can make) or comma-separated labels")
    _add_snr_args(r, default_min=-10.0, default_max=30.0, default_step=4.0)
    r.add_argument("--per-cell", type=count(), default=20, help="bursts per class x SNR cell (default 20)")
    r.add_argument("--length", type=int, default=1024, help="burst length, samples (default 1024)")
    r.add_argument("--python", default="/usr/bin/python3", help="the Python that has GNU Radio")
    r.add_argument("--force", action="store_true", help="overwrite an existing file")
    r.set_defaults(_action=_gnuradio)

    _add_import_args(sub)


def _add_import_args(sub: argparse._SubParsersAction) -> None:
    from rfclassify.commands._reading import add_reading_arguments

    m = sub.add_parser("import", help="make a dataset of the labelled bursts of recordings (field data)",
                       description="Write the bursts that SigMF recordings (or rfclassify datasets) label with a "
                                   "label the model classifies to an rfclassify HDF5 dataset, for train --data "
                                   "and evaluate. Bursts are read as classify reads them.")
    m.add_argument("files", nargs="+", metavar="FILE",
                   help="SigMF recording or archive, or rfclassify HDF5 dataset: the files that label bursts "
                        "(a WAV or raw recording labels none: annotate it with classify --annotate, check the "
                        "labels, and import that SigMF)")
    m.add_argument("--out", type=path_text, required=True, help="output HDF5 file")
    m.add_argument("--force", action="store_true", help="overwrite an existing file")
    add_reading_arguments(m)
    m.set_defaults(_action=_import)


def _add_snr_args(p: argparse.ArgumentParser, default_min: float, default_max: float, default_step: float) -> None:
    p.add_argument("--snr-min", type=finite_float, default=default_min, help=f"lowest SNR, dB (default {default_min:g})")
    p.add_argument("--snr-max", type=finite_float, default=default_max, help=f"highest SNR, dB (default {default_max:g})")
    p.add_argument("--snr-step", type=finite_float, default=default_step, help=f"SNR step, dB (default {default_step:g})")
    p.add_argument("--snr", default=None, help="comma-separated SNR list in dB instead of min/max/step; write --snr=-10,0,10 when it starts with a minus")


#: SNR values a grid may hold, dB, and how many (1e300 dB became an infinite noise scale deep in
#: the synthesizer; a step of 1e-300 dB built a grid for ever). The synthesizer's own bound,
#: rfclassify.dsp.synth.SNR_LIMIT_DB (not imported: this module stays free of numpy).
SNR_LIMIT_DB = 200.0
MAX_SNR_POINTS = 10_000


def snr_grid(args: argparse.Namespace) -> tuple[float, ...]:
    """The SNR grid from --snr LIST or --snr-min/--snr-max/--snr-step (inclusive)."""
    if args.snr is not None:
        try:
            grid = tuple(float(s) for s in args.snr.split(",") if s.strip())
        except ValueError:
            raise InputError(f"--snr must be comma-separated numbers, got {args.snr!r}") from None
        if not grid:
            raise InputError("--snr is empty")
    else:
        if args.snr_step <= 0:
            raise InputError(f"--snr-step must be > 0, got {args.snr_step:g}")
        if args.snr_min > args.snr_max:
            raise InputError(f"--snr-min {args.snr_min:g} is above --snr-max {args.snr_max:g}: the SNR grid is empty")
        if not (abs(args.snr_min) <= SNR_LIMIT_DB and abs(args.snr_max) <= SNR_LIMIT_DB):
            raise InputError(f"--snr-min and --snr-max must lie in -{SNR_LIMIT_DB:g}..{SNR_LIMIT_DB:g} dB")
        # Compared as a float: a step of 1e-320 dB, or a span of 2e308 dB, made it inf, which
        # int() refused with an OverflowError traceback (before the sixty-seventh session).
        steps = (args.snr_max - args.snr_min) / args.snr_step + 1e-9
        if steps >= MAX_SNR_POINTS:
            raise InputError(f"the SNR grid would hold {steps + 1:.3g} values; at most {MAX_SNR_POINTS} "
                             "(a larger --snr-step)")
        grid = tuple(round(args.snr_min + k * args.snr_step, 6) for k in range(int(steps) + 1))
    if len(grid) > MAX_SNR_POINTS or not all(abs(v) <= SNR_LIMIT_DB for v in grid):
        # NaN fails the comparison too
        raise InputError(f"SNR values must be at most {MAX_SNR_POINTS} numbers in "
                         f"-{SNR_LIMIT_DB:g}..{SNR_LIMIT_DB:g} dB")
    return grid


def _int_list(text: str, option: str) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise InputError(f"{option} must be comma-separated integers, got {text!r}") from None


def _command_line(args: argparse.Namespace) -> str:
    """The command with every effective option spelled out (defaults included), for the file."""
    words = ["rfclassify", "dataset", args.action, *getattr(args, "files", ())]
    for key, value in sorted(vars(args).items()):
        if key.startswith("_") or key in ("action", "command", "verbose", "file", "files") or value is None:
            continue
        if key in ("snr_min", "snr_max", "snr_step") and args.snr is not None:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            words.append(flag)
        elif value is not False:   # --snr=-10,0: a value starting with '-' read as an option otherwise
            text = str(value)
            words += [f"{flag}={text}"] if text.startswith("-") else [flag, text]
    return shlex.join(words)


def _generate(args: argparse.Namespace) -> int:
    from rfclassify._progress import Progress
    from rfclassify.data.generate import GenerateSpec, check_output, generate_dataset
    from rfclassify.labels import parse_labels

    lengths = _int_list(args.lengths, "--lengths") if args.lengths is not None else ()
    if args.lengths is not None and not lengths:
        raise InputError("--lengths is empty")
    spec = GenerateSpec(
        classes=parse_labels(args.classes),
        snr_grid_db=snr_grid(args), per_cell=args.per_cell, lengths_samples=lengths,
        length_min_samples=args.length_min, length_max_samples=args.length_max,
        channels=tuple(c.strip() for c in args.channel.split(",") if c.strip()),
        seed=args.seed, chunk_examples=args.chunk)
    check_output(args.out, args.force)
    with Progress(spec.n_examples, desc="generate", unit="bursts") as bar:
        report = generate_dataset(spec, args.out, workers=args.workers, force=args.force,
                                  compression=args.compression, command_line=_command_line(args),
                                  on_progress=bar.update)
    print(f"wrote {report.path}: {report.n_examples} bursts, {report.n_samples} samples in "
          f"{report.elapsed_s:.1f} s ({report.bursts_per_s:,.1f} bursts/s, {report.workers} worker(s))")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from rfclassify.data.inspect import coverage_report
    from rfclassify.data.reader import DatasetReader

    with DatasetReader(args.file) as ds:
        print(coverage_report(ds))
        if args.png:
            from rfclassify.data.sheet import draw_sheet

            print(f"sheet: {draw_sheet(ds, args.png)}")
    return 0


def _gnuradio(args: argparse.Namespace) -> int:
    from rfclassify.data.gnuradio_source import GnuRadioSpec, generate_gnuradio_dataset
    from rfclassify.labels import parse_labels

    spec = GnuRadioSpec(snr_grid_db=snr_grid(args), classes=parse_labels(args.classes),
                        per_cell=args.per_cell, length_samples=args.length, seed=args.seed)
    report = generate_gnuradio_dataset(spec, args.out, python=args.python, force=args.force,
                                       command_line=_command_line(args))
    print(f"wrote {report.path}: {report.n_examples} bursts of {spec.length_samples} samples from GNU Radio "
          f"{report.gr_version} in {report.elapsed_s:.1f} s ({report.n_examples / report.elapsed_s:,.1f} bursts/s); "
          f"labels: {', '.join(report.classes)}")
    return 0


def _import(args: argparse.Namespace) -> int:
    from rfclassify.commands._reading import reading_from_args
    from rfclassify.data.import_recordings import import_recordings, skipped_text

    report = import_recordings(args.files, args.out, reading_from_args(args), force=args.force,
                               command_line=_command_line(args), note=lambda line: print(line, file=sys.stderr))
    labels = ", ".join(f"{name} {n}" for name, n in report.per_label.most_common())
    print(f"wrote {report.path}: {report.n_examples} bursts from {len(report.files)} file(s) in "
          f"{report.elapsed_s:.1f} s; {labels}"
          + (f"; {report.split} long burst(s) split into pieces" if report.split else ""))
    if report.skipped:
        print(f"skipped {skipped_text(report.skipped)}")
    return 0


def run(args: argparse.Namespace) -> int:
    return int(args._action(args) or 0)
