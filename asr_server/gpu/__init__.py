"""GPU placement and GPU-only deployment: device discovery, per-GPU profiles, TorchScript on CUDA, TensorRT
engine builds and their model repository."""
