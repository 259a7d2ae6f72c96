"""The benchmarks' server process: our server on a model repository, gRPC only, on a free 127.0.0.1 port.

Run as a multiprocessing (spawn) target; it puts the bound port on `port_queue` and serves until killed.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path


def serve_repository(repo: str, port_queue) -> None:
    from asr_server.server import Server
    from asr_server.settings import ServerSettings

    logging.basicConfig(level=logging.WARNING)

    async def main():
        settings = ServerSettings(model_repositories=(Path(repo),), grpc_address="127.0.0.1", grpc_port=0,
                                  allow_http=False, allow_metrics=False)
        server = Server(settings)
        await server.start()
        port_queue.put(server.grpc_port)
        await asyncio.Event().wait()

    asyncio.run(main())
