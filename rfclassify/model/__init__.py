"""The network, training, evaluation, ONNX export and the model card."""
