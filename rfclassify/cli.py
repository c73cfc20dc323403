"""The `rfclassify` entry point: finds the subcommand, imports only its module, maps errors to exit codes.

Each subcommand lives in `rfclassify.commands.<module>` and provides
`add_arguments(parser)` and `run(args) -> int`. Only the chosen command's module is
imported, so `rfclassify status` never pays for torch, onnxruntime or tensorrt.
Exit codes: 0 success, 2 usage or input mistake (one line on stderr), 1 anything else
(a MemoryError too, as one line: a count that asks for more than the machine has). An
OSError is one line naming its path (a copy's or rename's destination, with its source after),
exit 2 where it names one (an output the user pointed at a file, a directory or somewhere
unwritable), else 1 (a full disk: _atomic.failed_write names the file in the text); also while
the command line is read (an option's type that looked at a path). A closed stdout (`| head`)
ends the command quietly, exit 1.
SIGTERM (`kill`, `timeout`, systemd) takes Ctrl-C's way out, exit 143 instead of 130: the
command's clean-up runs (temporary and partial files removed, worker processes ended), which
a process that died of the signal left behind. `serve` and `train` answer SIGTERM themselves
(a drain; a checkpoint), and `demo` and `bench daemon` say what they stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys

from rfclassify._exceptions import RfclassifyError, UserError
from rfclassify._signals import EXIT_STATUS, Terminated, sigterm_as_interrupt

# name -> (module under rfclassify.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("demo", "run the daemon and a simulated SDR together, then print a summary"),
    "serve": ("serve", "run the streaming classification daemon"),
    "status": ("status", "show the health and counters of a running daemon"),
    "simulate": ("simulate", "a synthetic SDR front end that publishes labelled bursts"),
    "classify": ("classify", "classify bursts stored in SigMF or HDF5 files"),
    "dataset": ("dataset", "generate or inspect a synthetic HDF5 dataset"),
    "train": ("train", "train the classifier (torch, CPU or CUDA)"),
    "evaluate": ("evaluate", "evaluate a model on an HDF5 dataset and write the model card"),
    "export": ("export", "export a trained model to ONNX"),
    "calibrate": ("calibrate", "calibrate the model's INT8 artifacts (ONNX Runtime's graph, TensorRT's pair)"),
    "engine": ("engine", "build, inspect and self-test TensorRT engines of the model"),
    "fit-refiner": ("fit_refiner", "fit the constellation refiner to a trained model"),
    "fit-sequence": ("fit_sequence", "train the refiner's sequence network on synthesized bursts"),
    "bench": ("bench", "benchmark backends against PyTorch eager fp32, and the daemon against its bare backend"),
    "keys": ("keys", "make CURVE key pairs for the daemon's sockets"),
}

#: commands that answer SIGTERM themselves, left to it: `serve` drains, `train` writes a
#: checkpoint, `demo` summarizes what it stopped (`bench daemon` nests its own
#: sigterm_as_interrupt, which wins while it lasts)
OWN_SIGTERM = frozenset({"serve", "train", "demo"})


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (its default), also for nested subparsers."""

    def error(self, message: str) -> None:  # noqa: D102 - argparse hook
        self.exit(2, f"{self.prog}: error: {message}\n")


def _chosen_command(argv: list[str]) -> str | None:
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = _Parser(prog="rfclassify", description="Edge RF modulation classifier.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    chosen = _chosen_command(argv)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            mod = importlib.import_module(f"rfclassify.commands.{module}")
            mod.add_arguments(p)
            p.set_defaults(_run=mod.run)
    return parser


def _version() -> str:
    from rfclassify import __version__

    return f"rfclassify {__version__}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser(argv)
    except ImportError as exc:  # a command module with a broken install
        print(f"rfclassify: error: {exc}", file=sys.stderr)
        return 1
    try:
        args = parser.parse_args(argv)
    except OSError as exc:   # an option's type that looked at a path; argparse passes it on as a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"rfclassify: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    _print_undecodable_bytes_as_given()
    args._argv = argv   # the words as given, for a command that records itself or checks their order
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    own_sigterm = args.command in OWN_SIGTERM
    try:
        with contextlib.nullcontext() if own_sigterm else sigterm_as_interrupt():
            return int(args._run(args) or 0)
    except Terminated:
        print(f"rfclassify {args.command}: stopped by SIGTERM", file=sys.stderr)
        return EXIT_STATUS["SIGTERM"]
    except KeyboardInterrupt:
        print("rfclassify: interrupted", file=sys.stderr)
        return EXIT_STATUS["SIGINT"]
    except UserError as exc:
        print(f"rfclassify {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except RfclassifyError as exc:  # InternalError and anything else not the user's
        print(f"rfclassify {args.command}: internal error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader of stdout left (`| head`): end quietly, as a pipeline expects
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())   # else Python reports the failed flush at exit
        return 1
    except OSError as exc:  # a path the command could not read or write: one line naming it
        logging.getLogger("rfclassify").debug("%s", args.command, exc_info=True)
        where = f"{exc.filename}: " if exc.filename else ""
        if exc.filename2:   # a copy or a rename: the second file is the one written
            where = f"{exc.filename2}: "
        source = f" (from {exc.filename})" if exc.filename2 and exc.filename else ""
        print(f"rfclassify {args.command}: error: {where}{exc.strerror or exc}{source}", file=sys.stderr)
        return 2 if exc.filename else 1
    except MemoryError as exc:  # a count that asks for more than the machine has (numpy names the size)
        print(f"rfclassify {args.command}: error: not enough memory for what was asked"
              + (f" ({str(exc).splitlines()[0][:200]})" if str(exc) else ""), file=sys.stderr)
        return 1


def _print_undecodable_bytes_as_given() -> None:
    """A path's bytes that are not UTF-8 (`--out $'o/out\\xff.h5'`: Python holds them as lone
    surrogates) printed back as they came, where stdout would refuse them (a UTF-8 locale other
    than C.UTF-8 makes its errors strict): the command's last line ("wrote PATH") was a
    UnicodeEncodeError traceback after its work."""
    if getattr(sys.stdout, "errors", None) == "strict" and hasattr(sys.stdout, "reconfigure"):
        with contextlib.suppress(ValueError, OSError):   # a stream already in use may refuse
            sys.stdout.reconfigure(errors="surrogateescape")


if __name__ == "__main__":
    sys.exit(main())
