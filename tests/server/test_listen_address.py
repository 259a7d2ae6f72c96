"""listen_address.bind_target: where the port checks bind, for the address forms the settings take."""

from __future__ import annotations

import socket

from asr_server.listen_address import bind_target


def test_ipv4_ipv6_in_grpc_brackets_and_names_resolve_to_what_a_listener_binds():
    assert bind_target("0.0.0.0", 8001) == (socket.AF_INET, "0.0.0.0")
    assert bind_target("127.0.0.1", 0) == (socket.AF_INET, "127.0.0.1")
    assert bind_target("[::]", 8001) == (socket.AF_INET6, "::")  # gRPC's spelling of IPv6
    family, host = bind_target("localhost", 0)
    assert host == "localhost" and family in (socket.AF_INET, socket.AF_INET6)


def test_a_name_that_does_not_resolve_is_left_to_the_services_own_bind():
    assert bind_target("host.invalid", 8001) is None  # RFC 2606: never resolves
    assert bind_target("no such host", 8001) is None
