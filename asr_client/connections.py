"""gRPC clients on TCP connections of their own.

gRPC lets channels with equal arguments share one TCP connection (its global subchannel pool), so several
tritonclient clients made in one process to one address are one connection. `asr-server --workers N` hands
each connection to one worker: to use them all, a client process needs connections of its own, which a local
subchannel pool gives.
"""

from __future__ import annotations

import tritonclient.grpc.aio as grpcclient

MAX_MESSAGE_BYTES = 2**31 - 1  # tritonclient's own send and receive limits
OWN_CONNECTION = ("grpc.use_local_subchannel_pool", 1)  # the channel argument: a subchannel pool of its own


def own_connection_client(url: str) -> grpcclient.InferenceServerClient:
    """A tritonclient aio client that shares its TCP connection with no other client."""
    return grpcclient.InferenceServerClient(url, channel_args=[
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        OWN_CONNECTION,
    ])
