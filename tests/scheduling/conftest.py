from __future__ import annotations

import pytest
import tritonclient.grpc.aio as aioclient


@pytest.fixture
async def client_of():
    """`client_of(server)`: a gRPC aio client of a running test server, closed after the test."""
    clients = []

    def make(server) -> aioclient.InferenceServerClient:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()
