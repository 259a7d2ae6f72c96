"""The model repository builder: the ASR pipelines as Triton `ModelConfig` messages, and the rewriters that move
a built repository onto another runtime.

- `pipelines`: `build(model_dir, onnx_dir, out, BuildOptions(...))` writes the offline ensemble and the streaming
  models from a WeNet model folder and its ONNX graphs (`scripts/build_model_repo.py` is its command line);
- `model_folder`: what the builder reads from a WeNet folder (subsampling, up-to-date exports, WeNet's own
  export folders);
- `openvino`: the encoders as OpenVINO IR on the openvino backend (`scripts/openvino_repo.py`);
- `tensorrt`: the graph models as TensorRT engines, and their INT32 ONNX twin (`scripts/build_trt.py`);
- `torchscript`: TorchScript encoders and decoder for the pytorch backend on CUDA.

Every config is written with protobuf's text format, so what real Triton parses is what was built.
"""
