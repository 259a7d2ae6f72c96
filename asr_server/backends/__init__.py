"""Backends: one module (or package) per framework behind the one `base.Backend` interface.

onnxruntime.py, pytorch.py, tensorflow.py, openvino.py (+ openvino_options.py), tensorrt.py, python/ (Triton's
`TritonPythonModel` contract); reshape.py is the config `reshape` shared by them. To add a backend: subclass
`base.Backend` (load, execute -> one result per request, unload; auto_complete_config if the model file can
fill the config), name it in `base._BACKEND_MODULES` (and `PLATFORM_TO_BACKEND` for a Triton platform name),
and read the model's config from `ModelContext.config`. A backend that calls back into the server (BLS) does
so through `ModelContext.port` (`asr_server/server_port.py`), never by importing the layers above.
"""
