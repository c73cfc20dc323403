"""`rfclassify export`: ONNX (dynamic) + per-bucket static graphs, with parity and DLA checks."""

from __future__ import annotations

import argparse

from rfclassify._argtypes import int_range, path_text
from rfclassify.engine.options import model_dir_path
from rfclassify.model.dla_check import MAX_BATCH as DLA_MAX_BATCH


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-dir", type=model_dir_path, default=None,
                        help="trained model directory (default: shipped models/)")
    parser.add_argument("--out", type=path_text, default=None, help="output directory (default: the model directory)")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset (17 up to the most this torch exports)")
    # the DLA's batch limit: past it the graphs fail their own DLA check, after a parity check
    # at that batch that ran for minutes (a batch of 5,000 took more than 5 minutes here)
    parser.add_argument("--static-batch", type=int_range(1, DLA_MAX_BATCH), default=None, metavar="N",
                        help=f"also fix the batch of the static (DLA) graphs, at most the DLA's {DLA_MAX_BATCH} "
                             "(default: dynamic batch, pinned by the TensorRT profile)")


def run(args: argparse.Namespace) -> int:
    from rfclassify.model.export import export_model_dir
    from rfclassify.model.meta import default_model_dir

    model_dir = args.model_dir or default_model_dir()
    rep = export_model_dir(model_dir, args.out, opset=args.opset, static_batch=args.static_batch)
    out = args.out or model_dir
    print(f"wrote {out}/{rep['onnx_file']} (dynamic batch and length, BatchNorm folded)")
    for length, d in rep["dynamic"].items():
        worst = max(p["max_abs_logit_diff"] for p in d.values())
        print(f"  parity L={length}: max |logit diff| {worst:.2e} (random and synthesized bursts)")
    for b, s in rep["static"].items():
        worst = max(p["max_abs_logit_diff"] for p in s["parity"].values())
        dla = "DLA ok" if not s["dla_violations"] else f"DLA: {len(s['dla_violations'])} violation(s)"
        print(f"wrote {out}/{s['file']}: max |logit diff| {worst:.2e}; {dla}")
        for v in s["dla_violations"][:5]:
            print(f"    {v}")
    if rep["int8"] != "none":
        print(f"INT8 graph {rep['int8']}")
    w = rep["worst"]
    print(f"worst over all graphs: |logit| {w['max_abs_logit_diff']:.2e}, "
          f"|softmax| {w['max_abs_softmax_diff']:.2e}, |snr_db| {w['max_abs_snr_db_diff']:.2e}")
    return 0 if rep["dla_ok_all_buckets"] else 1
