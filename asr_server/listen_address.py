"""What a listening socket binds for a service address as the settings give it ("0.0.0.0", "[::]", a name).

The port checks before loading (`server.py`) and the workers' port picking and placeholders (`workers.py`)
must bind exactly where gRPC and aiohttp will, or they would check another socket than the one that serves.
"""

from __future__ import annotations

import socket
from typing import Optional


def bind_target(address: str, port: int) -> Optional[tuple[socket.AddressFamily, str]]:
    """(address family, host) to bind for ADDRESS:PORT; None when the name does not resolve here, in which
    case the service's own bind reports it in its words."""
    host = address.strip("[]")  # gRPC takes IPv6 as [::]
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror:
        return None
    return family, host
