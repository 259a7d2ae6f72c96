"""TLS for the endpoints: gRPC with tritonserver's flags, HTTPS with our own (Triton has none for HTTP).

gRPC: `--grpc-use-ssl` with `--grpc-server-cert` / `--grpc-server-key` (PEM files); `--grpc-use-ssl-mutual`
also requires clients to present a certificate signed by `--grpc-root-cert` (it implies `--grpc-use-ssl`, as
in Triton). HTTP: `--http-ssl-cert` / `--http-ssl-key` serve HTTPS instead of HTTP on --http-port.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Optional

import grpc

from asr_server.settings import ServerSettings


def _read(path: Optional[Path], flag: str) -> bytes:
    if path is None:
        raise ValueError(f"{flag} is required")
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"{flag}: cannot read '{path}': {exc.strerror}") from None


def grpc_credentials(s: ServerSettings) -> Optional[grpc.ServerCredentials]:
    """Server credentials for the gRPC port, or None for plain text."""
    if not (s.grpc_use_ssl or s.grpc_use_ssl_mutual):
        return None
    pair = (_read(s.grpc_server_key, "--grpc-server-key"), _read(s.grpc_server_cert, "--grpc-server-cert"))
    root = _read(s.grpc_root_cert, "--grpc-root-cert") if (s.grpc_use_ssl_mutual or s.grpc_root_cert) else None
    return grpc.ssl_server_credentials([pair], root_certificates=root, require_client_auth=s.grpc_use_ssl_mutual)


def http_ssl_context(s: ServerSettings) -> Optional[ssl.SSLContext]:
    """An SSL context for the HTTP port, or None for plain HTTP."""
    if s.http_ssl_cert is None and s.http_ssl_key is None:
        return None
    if s.http_ssl_cert is None or s.http_ssl_key is None:
        raise ValueError("--http-ssl-cert and --http-ssl-key go together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(s.http_ssl_cert, s.http_ssl_key)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"--http-ssl-cert/--http-ssl-key: {exc}") from None
    return context
