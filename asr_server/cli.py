"""`asr-server`: the server command, with tritonserver's flag names."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from asr_server.errors import ServerError
from asr_server.log_format import OneLineFormatter
from asr_server.settings import MODEL_CONTROL_MODES, ServerSettings, validate


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean, got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="asr-server", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Triton-compatible inference server for ASR. The options are tritonserver's, with its "
                    "names and defaults: it binds 0.0.0.0 (every interface) on ports 8000 (HTTP), 8001 (gRPC) "
                    "and 8002 (metrics) unless told otherwise; give --grpc-address/--http-address 127.0.0.1 to "
                    "stay on this machine.")
    p.add_argument("--model-repository", "--model-store", action="append", required=True, type=Path,
                   help="model repository folder (repeatable)")
    p.add_argument("--grpc-address", default="0.0.0.0", help="address the gRPC endpoint binds")
    p.add_argument("--grpc-port", type=int, default=8001, help="gRPC port (0: any free port)")
    p.add_argument("--http-address", default="0.0.0.0", help="address the HTTP/REST endpoint binds")
    p.add_argument("--http-port", type=int, default=8000, help="HTTP port (0: any free port)")
    p.add_argument("--metrics-address", default=None, help="address of the Prometheus endpoint (default: "
                                                          "--http-address)")
    p.add_argument("--metrics-port", type=int, default=8002, help="Prometheus metrics port (GET /metrics)")
    p.add_argument("--allow-grpc", type=_bool, default=True, help="serve gRPC")
    p.add_argument("--allow-http", type=_bool, default=True, help="serve HTTP/REST")
    p.add_argument("--allow-metrics", type=_bool, default=True, help="serve metrics")
    p.add_argument("--model-control-mode", choices=MODEL_CONTROL_MODES, default="none",
                   help="none: load every model at start; explicit: load/unload on request (--load-model at "
                        "start); poll: follow the repository's changes")
    p.add_argument("--load-model", action="append", default=[], help="model to load at start (explicit mode; "
                                                                     "repeatable, * for all)")
    p.add_argument("--strict-readiness", type=_bool, default=True,
                   help="the server is ready only when every model is")
    p.add_argument("--repository-poll-secs", type=float, default=15.0, help="poll mode: seconds between polls")
    p.add_argument("--exit-on-error", type=_bool, default=True, help="exit when a model fails to load at start")
    p.add_argument("--exit-timeout-secs", type=float, default=30.0,
                   help="on SIGTERM: seconds accepted requests may take before they are cancelled")
    p.add_argument("--log-verbose", type=int, default=0, help="1 and above: debug logging")
    p.add_argument("--grpc-max-message-bytes", type=int, default=1 << 30, help="largest gRPC message")
    p.add_argument("--grpc-restricted-protocol", action="append", default=[],
                   help="<protocol>[,<protocol>...]:<key>=<value>: calls need header triton-grpc-protocol-<key>")
    p.add_argument("--http-restricted-api", action="append", default=[],
                   help="<api>[,<api>...]:<key>=<value>: requests need header <key>: <value>")
    p.add_argument("--grpc-use-ssl", type=_bool, default=False, help="serve gRPC over TLS")
    p.add_argument("--grpc-use-ssl-mutual", type=_bool, default=False, help="require client certificates")
    p.add_argument("--grpc-server-cert", type=Path, default=None, help="gRPC TLS certificate (PEM)")
    p.add_argument("--grpc-server-key", type=Path, default=None, help="gRPC TLS private key (PEM)")
    p.add_argument("--grpc-root-cert", type=Path, default=None, help="CA that signs client certificates (PEM)")
    p.add_argument("--http-ssl-cert", type=Path, default=None, help="serve HTTPS with this certificate (PEM)")
    p.add_argument("--http-ssl-key", type=Path, default=None, help="HTTPS private key (PEM)")
    p.add_argument("--http-max-input-size", type=int, default=64 << 20, help="bytes; larger HTTP bodies get 413")
    p.add_argument("--workers", type=_workers, default=1,
                   help="server processes sharing the ports, each with its own model instances; 'auto': one per "
                        "core (default 1; when they help: docs/operations.md)")
    p.add_argument("--http-idle-timeout-secs", type=float, default=75.0,
                   help="an HTTP connection without a complete request (headers) for this long is closed: idle "
                        "keep-alive connections, and clients that dribble their headers")
    p.add_argument("--http-body-timeout-secs", type=float, default=60.0,
                   help="a request body that makes no progress for this long is answered 408 and its "
                        "connection closed")
    return p


def _workers(text: str) -> int:
    if text == "auto":
        return len(os.sched_getaffinity(0))
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of processes or 'auto', got {text!r}") from None


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    return ServerSettings(
        model_repositories=tuple(args.model_repository),
        grpc_address=args.grpc_address,
        grpc_port=args.grpc_port,
        http_address=args.http_address,
        http_port=args.http_port,
        metrics_address=args.metrics_address or args.http_address,
        metrics_port=args.metrics_port,
        allow_grpc=args.allow_grpc,
        allow_http=args.allow_http,
        allow_metrics=args.allow_metrics,
        model_control_mode=args.model_control_mode,
        load_models=tuple(args.load_model),
        strict_readiness=args.strict_readiness,
        repository_poll_secs=args.repository_poll_secs,
        exit_on_error=args.exit_on_error,
        exit_timeout_secs=args.exit_timeout_secs,
        log_verbose=args.log_verbose,
        max_message_bytes=args.grpc_max_message_bytes,
        grpc_restricted_protocols=tuple(args.grpc_restricted_protocol),
        http_restricted_apis=tuple(args.http_restricted_api),
        grpc_use_ssl=args.grpc_use_ssl,
        grpc_use_ssl_mutual=args.grpc_use_ssl_mutual,
        grpc_server_cert=args.grpc_server_cert,
        grpc_server_key=args.grpc_server_key,
        grpc_root_cert=args.grpc_root_cert,
        http_ssl_cert=args.http_ssl_cert,
        http_ssl_key=args.http_ssl_key,
        http_max_input_size=args.http_max_input_size,
        http_idle_timeout_secs=args.http_idle_timeout_secs,
        http_body_timeout_secs=args.http_body_timeout_secs,
        workers=args.workers,
    )


def configure_logging(verbose: int, prefix: str = "") -> None:
    """One line per record; `prefix` names the worker process a line comes from (--workers)."""
    handler = logging.StreamHandler()
    handler.setFormatter(OneLineFormatter(f"%(asctime)s %(levelname).1s {prefix}%(name)s] %(message)s"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler], force=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_verbose)
    from asr_server.server import Server  # after logging is set up: model imports may log

    try:
        settings = validate(settings_from_args(args))
        if settings.workers > 1:
            from asr_server.workers import Supervisor

            Server.check_ports_free(settings)  # once, here: the workers share the ports
            asyncio.run(Supervisor(settings).run())
        else:
            asyncio.run(Server(settings).serve_forever())
    except (ServerError, ValueError) as exc:
        logging.getLogger("asr_server").error("%s", exc)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
