"""Encoders on a device (CPU/CUDA parity) and bring-your-own ONNX encoders (overhead, post-hoc codes)."""
