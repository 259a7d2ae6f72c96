"""Triton's `triton_python_backend_utils` API in parts, one module per job; model files import it whole
through `asr_server/backends/python/triton_python_backend_utils.py`."""
