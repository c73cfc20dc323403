"""INT8 calibration and quantized artifacts (Q/DQ ONNX, TensorRT calibration cache)."""
