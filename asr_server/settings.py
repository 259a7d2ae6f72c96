"""Server settings, named after tritonserver's flags."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional

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
    http_idle_timeout_secs: float = 75.0  # --http-idle-timeout-secs: no complete request headers -> closed
    http_body_timeout_secs: float = 60.0  # --http-body-timeout-secs: a body without progress -> 408, closed
    workers: int = 1  # --workers: server processes sharing the ports (asr_server/workers.py)
    worker: Optional[Any] = None  # set inside a worker process: its workers.WorkerRole
    grpc_restricted_protocols: tuple[str, ...] = ()  # --grpc-restricted-protocol=<groups>:<key>=<value>
    http_restricted_apis: tuple[str, ...] = ()  # --http-restricted-api=<groups>:<key>=<value>
    grpc_use_ssl: bool = False  # --grpc-use-ssl
    grpc_use_ssl_mutual: bool = False  # --grpc-use-ssl-mutual: clients need a certificate from --grpc-root-cert
    grpc_server_cert: Optional[Path] = None  # --grpc-server-cert (PEM)
    grpc_server_key: Optional[Path] = None  # --grpc-server-key (PEM)
    grpc_root_cert: Optional[Path] = None  # --grpc-root-cert (PEM): CA that signs client certificates
    http_ssl_cert: Optional[Path] = None  # --http-ssl-cert (PEM): serve HTTPS (not a tritonserver flag)
    http_ssl_key: Optional[Path] = None  # --http-ssl-key (PEM)


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
    from asr_server.protocol import restrictions
    from asr_server.tls import grpc_credentials, http_ssl_context

    restrictions.parse(settings.grpc_restricted_protocols, grpc_side=True)
    restrictions.parse(settings.http_restricted_apis, grpc_side=False)
    grpc_credentials(settings)  # unreadable or missing certificate files fail here, at start
    http_ssl_context(settings)
    if settings.http_max_input_size <= 0:
        raise ValueError("--http-max-input-size must be positive")
    if settings.workers < 1:
        raise ValueError("--workers must be at least 1")
    for flag, value in (("--http-idle-timeout-secs", settings.http_idle_timeout_secs),
                        ("--http-body-timeout-secs", settings.http_body_timeout_secs)):
        if not value > 0:
            raise ValueError(f"{flag} must be positive")
    return settings
