"""The model config as Triton shows it to python models: `initialize(args)` and `auto_complete_config`."""

from __future__ import annotations

import json
from pathlib import Path

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.backends.base import ModelContext
from asr_server.backends.python import triton_python_backend_utils as pb_utils
from asr_server.backends.python.importer import forget_model_module, import_model_module, model_class, model_path
from asr_server.errors import ErrorCode, ServerError
from asr_server.proto_json import message_to_dict


def config_to_dict(config: mc.ModelConfig) -> dict:
    """The config as Triton shows it to python models: proto field names, enum names, every field
    printed (`"max_batch_size": 0`, `"input": []`), int64 values as JSON numbers."""
    return message_to_dict(config)


def config_from_dict(data: dict) -> mc.ModelConfig:
    config = mc.ModelConfig()
    json_format.ParseDict(data, config)
    return config


def initialize_args(ctx: ModelContext) -> dict[str, str]:
    """The `args` of `TritonPythonModel.initialize`, every value a string, as Triton passes them."""
    kind = ctx.instance_kind[len("KIND_"):] if ctx.instance_kind.startswith("KIND_") else ctx.instance_kind
    return {
        "model_config": json.dumps(config_to_dict(ctx.config)),
        "model_instance_kind": kind,
        "model_instance_name": ctx.instance_name or f"{ctx.name}_0_0",
        "model_instance_device_id": str(ctx.device_id),
        "model_repository": str(ctx.model_dir),
        "model_version": str(ctx.version),
        "model_name": ctx.name,
    }


def auto_complete_config(config: mc.ModelConfig, version_dir: Path) -> mc.ModelConfig:
    """Run `TritonPythonModel.auto_complete_config(ModelConfig)` if the model defines it and return
    the config with what it added (inputs, outputs, max_batch_size, batching, decoupled policy)."""
    path = model_path(config, version_dir)
    module = import_model_module(path, config.name or path.parent.parent.name)
    try:
        hook = getattr(model_class(module, path), "auto_complete_config", None)
        if hook is None:
            return config
        helper = pb_utils.ModelConfig(json.dumps(config_to_dict(config)))
        try:
            completed = hook(helper)
        except Exception as exc:  # noqa: BLE001 - a model's mistake is a load failure, not a crash
            raise ServerError(
                f"auto-complete-config of model '{config.name}' failed: {type(exc).__name__}: {exc}",
                ErrorCode.INVALID_ARGUMENT,
            ) from exc
        if not isinstance(completed, pb_utils.ModelConfig):
            raise ServerError(
                f"auto_complete_config of model '{config.name}' must return the ModelConfig it was "
                f"given, got {type(completed).__name__}",
                ErrorCode.INVALID_ARGUMENT,
            )
        try:
            return config_from_dict(completed.as_dict())
        except json_format.ParseError as exc:
            raise ServerError(
                f"auto-complete-config of model '{config.name}' produced an invalid config: {exc}",
                ErrorCode.INVALID_ARGUMENT,
            ) from exc
    finally:
        forget_model_module(module)
