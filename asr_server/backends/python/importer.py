"""Importing a model file: a fresh module per instance, with its own `triton_python_backend_utils`.

Triton runs every instance in its own stub process; here every instance imports model.py as a new module
object (own globals, own copies of the helper modules in its model folder) inside the server process, and
that import sees a copy of the API bound to the instance's route (`instance_api`), as a stub process is
bound to its one model.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
import threading
import types
from pathlib import Path
from typing import Optional

from tritonclient.grpc import model_config_pb2 as mc

from asr_server.backends.python import triton_python_backend_utils as pb_utils
from asr_server.backends.python.api.routes import ModelRoute, calling_route
from asr_server.errors import ErrorCode, ServerError, internal

PB_UTILS_MODULE_NAME = "triton_python_backend_utils"
MODEL_CLASS_NAME = "TritonPythonModel"
DEFAULT_MODEL_FILENAME = "model.py"

_import_lock = threading.Lock()  # sys.path and sys.modules edits must not interleave between loads
_module_counter = itertools.count()


def register_shared_api() -> None:
    """Make `import triton_python_backend_utils` work anywhere in the process: the shared (unbound) API,
    for code outside model folders that imports it when it runs (see api/routes.py)."""
    sys.modules[PB_UTILS_MODULE_NAME] = pb_utils


def instance_api(route: ModelRoute) -> types.ModuleType:
    """A copy of the API for one model instance: `InferenceRequest` (the requests the model builds and the
    ones it receives) and `get_model_dir` fall back to `route` where the backend is not calling into a model
    (the model's own threads); every other name is the shared object, so `isinstance` checks against the
    shared classes hold."""
    api = types.ModuleType(PB_UTILS_MODULE_NAME, pb_utils.__doc__)
    api.__dict__.update({name: getattr(pb_utils, name) for name in pb_utils.__all__})
    api.__all__ = list(pb_utils.__all__)
    api.InferenceRequest = type(
        "InferenceRequest", (pb_utils.InferenceRequest,), {"bound_route": route, "__module__": PB_UTILS_MODULE_NAME}
    )

    def get_model_dir() -> str:
        """The version folder of the calling model (where its model.py lives)."""
        return (calling_route() or route).model_dir

    api.get_model_dir = get_model_dir
    return api


def model_path(config: mc.ModelConfig, version_dir: Path) -> Path:
    return Path(version_dir) / (config.default_model_filename or DEFAULT_MODEL_FILENAME)


def _is_under(module: types.ModuleType, folder: Path) -> bool:
    file = getattr(module, "__file__", None)
    if not file:
        return False
    try:
        return Path(file).resolve().is_relative_to(folder)
    except (OSError, ValueError):
        return False


def import_model_module(path: Path, model_name: str, api: Optional[types.ModuleType] = None) -> types.ModuleType:
    """Import `path` as a new module object, never shared with another instance.

    `api` is what `import triton_python_backend_utils` gives the model file and the helper modules it
    imports from its folder (`instance_api(route)`; the shared API when None). The version folder and
    the model folder are on sys.path only while the file is imported (Triton puts them there for the
    same reason: `import helper` next to model.py). Helper modules imported from the model folder are then
    dropped from sys.modules, so the next instance gets its own copies, as it would in its own Triton stub
    process. Returns the module, registered in sys.modules under a unique name (dataclasses and pickle look
    modules up there) until `forget_model_module`.
    """
    if not path.is_file():
        raise ServerError(f"unable to find python model file '{path}' for model '{model_name}'", ErrorCode.NOT_FOUND)
    safe_name = re.sub(r"\W", "_", model_name)
    unique_name = f"_triton_python_model_{safe_name}_{next(_module_counter)}"
    spec = importlib.util.spec_from_file_location(unique_name, path)
    if spec is None or spec.loader is None:
        raise internal(f"cannot import python model file '{path}'")
    module = importlib.util.module_from_spec(spec)
    model_dir = path.parent.parent.resolve()
    search_paths = [str(path.parent), str(path.parent.parent)]
    with _import_lock:
        sys.modules[PB_UTILS_MODULE_NAME] = api if api is not None else pb_utils
        before = set(sys.modules)
        sys.modules[unique_name] = module
        sys.path[:0] = search_paths
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - a broken model file fails its load, not the server
            sys.modules.pop(unique_name, None)
            raise internal(f"failed to import python model file '{path}': {type(exc).__name__}: {exc}") from exc
        except BaseException:
            sys.modules.pop(unique_name, None)
            raise
        finally:
            register_shared_api()
            for entry in search_paths:
                if entry in sys.path:  # the model may have removed it itself
                    sys.path.remove(entry)
            for name in set(sys.modules) - before - {unique_name}:
                if _is_under(sys.modules[name], model_dir):
                    del sys.modules[name]
    return module


def forget_model_module(module: types.ModuleType) -> None:
    sys.modules.pop(module.__name__, None)


def model_class(module: types.ModuleType, path: Path) -> type:
    found = getattr(module, MODEL_CLASS_NAME, None)
    if found is None:
        raise internal(f"python model file '{path}' does not define class '{MODEL_CLASS_NAME}'")
    return found
