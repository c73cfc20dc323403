"""The options that say how recordings are read into bursts (`classify` and `dataset import`):
a raw file's datatype and rate, how a recording that marks no bursts is cut, the band rule.

Kept free of numpy, so that a command's parser is built without it."""

from __future__ import annotations

import argparse
from typing import Any

from rfclassify._argtypes import float_range


def sigmf_datatype(text: str) -> str:
    """--raw's value: a SigMF datatype name (cf32_le, ci16_le, cu8, ...)."""
    from rfclassify._exceptions import InputError
    from rfclassify.engine.sigmf import sigmf_dtype

    try:
        sigmf_dtype(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_reading_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--raw", type=sigmf_datatype, metavar="DATATYPE",
                        help="read a FILE that is neither SigMF, HDF5 nor WAV as raw samples of this SigMF datatype "
                             "(cf32_le: GNU Radio's file_sink of gr_complex; ci16_le, cu8, ...)")
    parser.add_argument("--sample-rate", type=float_range(0.0, 1e12, lo_open=True), metavar="HZ",
                        help="a raw FILE's sample rate (recorded in the results)")
    # the choices are rfclassify.engine.file_bursts.CUTS, spelled out: importing it pulls numpy in
    parser.add_argument("--cut", choices=("auto", "energy", "whole"), default="auto",
                        help="a recording without annotations: 'energy' finds its bursts with the daemon's "
                             "energy detector, 'whole' takes it as one burst; 'auto' (default): raw "
                             "files by energy, SigMF recordings whole")
    parser.add_argument("--threshold-db", type=float_range(0.0, 100.0), metavar="DB",
                        help="energy cutting: a block is 'on' this far above the noise floor (default 6; "
                             "lower finds weaker bursts, as the daemon's [cutter] threshold_db)")
    parser.add_argument("--full-band", action="store_true",
                        help="SigMF: take an annotation's whole capture band, not the band its "
                             "core:freq_lower_edge / core:freq_upper_edge give (mixed to 0 Hz and decimated)")


def reading_from_args(args: argparse.Namespace) -> Any:
    """The file_bursts.Reading the options give."""
    from rfclassify.engine.file_bursts import Reading
    from rfclassify.serve.config import CutterConfig

    cutter = CutterConfig() if args.threshold_db is None else CutterConfig(threshold_db=args.threshold_db)
    return Reading(cut=args.cut, full_band=args.full_band, raw=args.raw, sample_rate_hz=args.sample_rate,
                   cutter=cutter)
