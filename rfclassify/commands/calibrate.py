"""`rfclassify calibrate`: the model's INT8 graph for ONNX Runtime on the CPU (rfclassify.quant.cpu_int8)
and, from the same ranges, TensorRT's Q/DQ graph and DLA calibration cache (rfclassify.quant.tensorrt_int8)."""

from __future__ import annotations

import argparse

from rfclassify._argtypes import path_text, width
from rfclassify.engine.options import model_dir_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-dir", type=model_dir_path, default=None,
                        help="exported model directory; its model_int8.onnx and model.json are written "
                             "(default: shipped models/)")
    parser.add_argument("--data", type=path_text, default=None, metavar="FILE.h5",
                        help="calibration set (default: the shipped calibration_data/calibration.h5)")
    parser.add_argument("--bursts", type=width, default=None, metavar="N",
                        help="calibrate on N of its bursts, spread evenly over the file (default: all)")


def run(args: argparse.Namespace) -> int:
    from rfclassify.model.meta import ModelMeta, default_model_dir
    from rfclassify.quant.cpu_int8 import calibrate_model_dir, rejected_text

    model_dir = args.model_dir or default_model_dir()
    rec = calibrate_model_dir(model_dir, args.data, max_bursts=args.bursts)
    cal = rec["calibration"]
    windows = ", ".join(f"{b}: {n}" for b, n in cal["windows_per_bucket"].items())
    print(f"calibrated on {cal['bursts']} bursts of {cal['file']} ({rec['method']}; windows per bucket {windows}"
          + (f"; {cal['rejected']} left out as serving rejects them: {rejected_text(cal['rejected_by_reason'])}"
             if cal["rejected"] else "") + ")")
    print(f"wrote {model_dir}/{rec['file']}: {rec['format']}, activations {rec['activations']}, "
          f"weights {rec['weights']}; {rec['int8_nodes']} nodes INT8, {len(rec['fp32_nodes'])} fp32 (the heads)")
    print(" bucket  bursts  top-1 agreement  max |softmax diff|  mean / max |SNR diff| dB")
    for b, a in rec["agreement"].items():
        print(f"{b:>7} {a['bursts']:>7} {a['top1_agreement']:>16.3f} {a['max_abs_softmax_diff']:>19.3f}"
              f"  {a['mean_abs_snr_db_diff']:.2f} / {a['max_abs_snr_db_diff']:.2f}")
    print("model.json names it (int8_onnx_file); precision auto now serves it on ONNX Runtime")
    trt = ModelMeta.load(model_dir).extra.get("tensorrt_int8", {})
    if trt:
        print(f"wrote {model_dir}/{trt['qdq_file']} (TensorRT's Q/DQ graph: activations {trt['activations']}) and "
              f"{model_dir}/{trt['calibration_cache_file']} (the DLA's calibration cache: {trt['cache_tensors']} "
              f"tensors, {trt['cache_scales_equalized']} scales raised to their sum's or pooling's; TensorRT "
              f"{trt['calibration_cache_tensorrt']} header)")
        print(" bucket  top-1 agreement with fp32 in ONNX Runtime: Q/DQ graph / cache's scales")
        for b in sorted(trt["agreement_qdq"], key=int):
            print(f"{b:>7} {trt['agreement_qdq'][b]['top1_agreement']:>16.3f} / "
                  f"{trt['agreement_cache_scales'][b]['top1_agreement']:.3f}")
        print("`rfclassify engine build` makes TensorRT engines of them (never run here: no TensorRT)")
    return 0
