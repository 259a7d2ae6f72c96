"""A client that sends on a stream but never reads its answers: the server stops reading that
stream's requests once MAX_STREAM_BACKLOG answers wait, instead of queueing every answer in memory; other
clients are served meanwhile, and the stream resumes when its client reads."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from asr_server.protocol.grpc_service import MAX_STREAM_BACKLOG
from tests.conftest import BUNDLED_REPO, copy_model
from tests.helpers.waiting import wait_until

SENT = 200
VALUES = 256 * 1024  # 1 MiB of FP32 per request and per answer: more than gRPC's window holds


def request(i: int) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="identity_fp32", id=str(i))
    message.inputs.add(name="INPUT0", datatype="FP32", shape=[1, VALUES])
    message.raw_input_contents.append(np.full(VALUES, i, np.float32).tobytes())
    return message


async def executed(client) -> int:
    stats = await client.get_inference_statistics("identity_fp32", as_json=True)
    return int(stats["model_stats"][0]["inference_stats"]["success"].get("count", 0))


async def executed_at_least(client, count: int) -> bool:
    return await executed(client) >= count


async def test_a_stream_whose_answers_are_not_read_stops_being_read(tmp_path, running):
    copy_model(tmp_path, BUNDLED_REPO / "identity_fp32")
    async with running(tmp_path, allow_http=False) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        # A fixed flow-control window on the client: with gRPC's BDP probing its window grows with the
        # traffic, and the answers that then wait in the client's buffer (4-8 of these 1 MiB ones, by timing)
        # would count as "held" beside the server's backlog.
        options = [("grpc.max_receive_message_length", 8 << 20), ("grpc.http2.bdp_probe", 0)]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}", options=options) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

            async def requests():
                for i in range(SENT):
                    yield request(i)

            call = stub.ModelStreamInfer(requests())  # its answers are not read for now
            # the stream is being served (however slowly this machine runs it) ...
            assert await wait_until(lambda: executed_at_least(client, MAX_STREAM_BACKLOG // 2), 30)
            # ... and, given time to run on, stops at the backlog
            await asyncio.sleep(2.0)
            held = await executed(client)
            assert MAX_STREAM_BACKLOG // 2 <= held <= MAX_STREAM_BACKLOG + 4, held
            # another client is served meanwhile
            other = aioclient.InferInput("INPUT0", [1, 4], "FP32")
            other.set_data_from_numpy(np.ones((1, 4), np.float32))
            assert (await client.infer("identity_fp32", [other])).as_numpy("OUTPUT0").tolist() == [[1, 1, 1, 1]]
            # reading resumes the stream: every request is answered, in order of ids
            ids = []
            async for answer in call:
                ids.append(int(answer.infer_response.id))
                if len(ids) == SENT:
                    break
            assert sorted(ids) == list(range(SENT))
            call.cancel()
        await client.close()
