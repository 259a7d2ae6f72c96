"""`asr-server`: the server command, with tritonserver's flag names."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Optional, Sequence

from asr_server.errors import ServerError
from asr_server.log_format import OneLineFormatter
from asr_server.settings import MODEL_CONTROL_MODES, ServerSettings


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean, got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="asr-server", description="Triton-compatible inference server for ASR")
    p.add_argument("--model-repository", "--model-store", action="append", required=True, type=Path,
                   help="model repository folder (repeatable)")
    p.add_argument("--grpc-address", default="0.0.0.0")
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument("--http-address", default="0.0.0.0")
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--metrics-address", default=None, help="defaults to --http-address")
    p.add_argument("--metrics-port", type=int, default=8002)
    p.add_argument("--allow-grpc", type=_bool, default=True)
    p.add_argument("--allow-http", type=_bool, default=True)
    p.add_argument("--allow-metrics", type=_bool, default=True)
    p.add_argument("--model-control-mode", choices=MODEL_CONTROL_MODES, default="none")
    p.add_argument("--load-model", action="append", default=[], help="model to load at start (explicit mode)")
    p.add_argument("--strict-readiness", type=_bool, default=True)
    p.add_argument("--repository-poll-secs", type=float, default=15.0)
    p.add_argument("--exit-on-error", type=_bool, default=True)
    p.add_argument("--exit-timeout-secs", type=float, default=30.0)
    p.add_argument("--log-verbose", type=int, default=0)
    p.add_argument("--grpc-max-message-bytes", type=int, default=1 << 30)
    p.add_argument("--grpc-restricted-protocol", action="append", default=[],
                   help="<protocol>[,<protocol>...]:<key>=<value>: calls need header triton-grpc-protocol-<key>")
    p.add_argument("--http-restricted-api", action="append", default=[],
                   help="<api>[,<api>...]:<key>=<value>: requests need header <key>: <value>")
    p.add_argument("--grpc-use-ssl", type=_bool, default=False)
    p.add_argument("--grpc-use-ssl-mutual", type=_bool, default=False)
    p.add_argument("--grpc-server-cert", type=Path, default=None)
    p.add_argument("--grpc-server-key", type=Path, default=None)
    p.add_argument("--grpc-root-cert", type=Path, default=None)
    p.add_argument("--http-ssl-cert", type=Path, default=None, help="serve HTTPS with this certificate (PEM)")
    p.add_argument("--http-ssl-key", type=Path, default=None)
    p.add_argument("--http-max-input-size", type=int, default=64 << 20, help="bytes; larger HTTP bodies get 413")
    return p


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
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname).1s %(name)s] %(message)s"))
    logging.basicConfig(level=logging.DEBUG if args.log_verbose else logging.INFO, handlers=[handler])
    from asr_server.server import Server  # after logging is set up: model imports may log

    try:
        server = Server(settings_from_args(args))
        asyncio.run(server.serve_forever())
    except (ServerError, ValueError) as exc:
        logging.getLogger("asr_server").error("%s", exc)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
