"""Inference backends behind one interface (onnxruntime, torch, tensorrt) and the engine cache."""
