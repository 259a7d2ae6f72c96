"""The `python` backend: hosts Triton python_backend models (`TritonPythonModel` in model.py) unchanged.

One module per job:
    backend.py        PythonBackend: load, execute (a batch in, one result per request out), unload
    importer.py       importing model.py as a fresh module per instance, with its own API bound to its route
    bls.py            InstanceRoute: the instance's BLS requests to the server that loaded it
    convert.py        tensors, requests and responses between the server's types and the API's
    error_codes.py    TritonError <-> ServerError codes
    model_config.py   the config as python models see it: initialize args, auto_complete_config
    event_loop.py     the loop an instance's `async def execute` coroutines run on
    triton_python_backend_utils.py (+ api/)   the API model files import, under Triton's module name
"""

from asr_server.backends.python.backend import PythonBackend
from asr_server.backends.python.importer import register_shared_api

register_shared_api()  # `import triton_python_backend_utils` works wherever the backend is loaded

__all__ = ["PythonBackend"]
