"""GPU placement: device discovery, per-GPU engine profiles, engine checks (the TensorRT and TorchScript
repository rewriters are in asr_server/repo_builder/)."""
