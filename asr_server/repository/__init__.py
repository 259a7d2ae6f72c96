"""Reading a Triton model repository: folders, versions, config.pbtxt parsing, completion and validation.

Order for a model manager, per model folder `repo / name`:
    versions = available_versions(model_dir)
    config = complete_config(read_config(model_dir), model_dir, versions, gpus=...)
    served = select_versions(config, versions)     # empty: "... has no available versions"
    stamp = fingerprint(model_dir)                 # poll mode: reload when it changes
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
