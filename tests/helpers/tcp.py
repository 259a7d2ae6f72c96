"""TCP connections on this machine, read from the kernel's tables."""

from __future__ import annotations

from pathlib import Path


def established_connections_to(port: int) -> int:
    """Established TCP connections to `port` on this machine, counted from their client ends (/proc/net/tcp and
    tcp6: hex ports, state 01; gRPC's sockets are IPv6 ones with IPv4-mapped addresses)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                count += 1
    return count
