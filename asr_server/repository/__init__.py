"""Reading a Triton model repository: folders, versions, config.pbtxt parsing, completion and validation.

Order for a model manager, per model folder `repo / name`:
    versions = available_versions(model_dir)
    config = complete_config(read_config(model_dir), model_dir, versions, gpus=...)
    served = select_versions(config, versions)     # empty: "... has no available versions"
    stamp = fingerprint(model_dir)                 # poll mode: reload when it changes

The config type: Triton's own `ModelConfig` protobuf message (`tritonclient.grpc.model_config_pb2`) is the
model config of every layer: parsed here, then read as is by the core (request validation, metadata), the
schedulers and the backends, as Triton's C++ core reads `inference::ModelConfig` everywhere. A second, typed
copy of its ~40 message types would have to be kept in step with Triton's schema for no gain: the message is
already typed, and it is also what ModelConfig RPCs, config overrides and python models exchange. What stays
at the protocol edge (`asr_server/protocol/`) is the wire protocol: `service_pb2`, grpc and the HTTP JSON;
tests/server/test_layers.py holds both rules.
"""

from asr_server.repository.config import complete_config, config_from_json, read_config
from asr_server.repository.validation import validate_config
from asr_server.repository.versions import available_versions, fingerprint, list_model_dirs, select_versions

__all__ = [
    "available_versions",
    "complete_config",
    "config_from_json",
    "fingerprint",
    "list_model_dirs",
    "read_config",
    "select_versions",
    "validate_config",
]
