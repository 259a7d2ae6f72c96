"""Server settings, named after tritonserver's flags."""

from __future__ import annotations

import dataclasses
from pathlib import Path

MODEL_CONTROL_MODES = ("none", "explicit", "poll")


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    model_repositories: tuple[Path, ...]  # --model-repository (repeatable)
    grpc_address: str = "0.0.0.0"  # --grpc-address; tests always bind 127.0.0.1
    grpc_port: int = 8001  # --grpc-port; 0 picks a free port
    http_address: str = "0.0.0.0"  # --http-address
    http_port: int = 8000  # --http-port
    metrics_address: str = "0.0.0.0"  # --metrics-address
    metrics_port: int = 8002  # --metrics-port
    allow_grpc: bool = True  # --allow-grpc
    allow_http: bool = True  # --allow-http
    allow_metrics: bool = True  # --allow-metrics
    model_control_mode: str = "none"  # --model-control-mode none|explicit|poll
    load_models: tuple[str, ...] = ()  # --load-model (explicit mode; "*" loads all)
    strict_readiness: bool = True  # --strict-readiness
    repository_poll_secs: float = 15.0  # --repository-poll-secs
    exit_on_error: bool = True  # --exit-on-error: fail start-up when a model fails to load
    log_verbose: int = 0  # --log-verbose
    max_message_bytes: int = 1 << 30  # --grpc-max-message-bytes: larger requests get RESOURCE_EXHAUSTED
    http_max_input_size: int = 64 << 20  # --http-max-input-size: bytes; larger HTTP bodies get 413
    exit_timeout_secs: float = 30.0  # --exit-timeout-secs: drain time at shutdown


def validate(settings: ServerSettings) -> ServerSettings:
    """Check the settings once, with the rule in the message."""
    if not settings.model_repositories:
        raise ValueError("--model-repository is required")
    for repo in settings.model_repositories:
        if not Path(repo).is_dir():
            raise ValueError(f"model repository '{repo}' is not a directory")
    if settings.model_control_mode not in MODEL_CONTROL_MODES:
        raise ValueError(f"--model-control-mode must be one of {MODEL_CONTROL_MODES}")
    if settings.load_models and settings.model_control_mode != "explicit":
        raise ValueError("--load-model is only allowed with --model-control-mode=explicit")
    if settings.repository_poll_secs <= 0:
        raise ValueError("--repository-poll-secs must be positive")
    if settings.max_message_bytes <= 0:
        raise ValueError("--grpc-max-message-bytes must be positive")
    if settings.http_max_input_size <= 0:
        raise ValueError("--http-max-input-size must be positive")
    return settings
