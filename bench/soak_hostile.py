"""The hostile side of bench/soak.py: requests that once crashed or bloated the server, sent beside the normal
traffic, and a burst of one-shot streams whose memory must be handed back.

Each hostile case has an expected outcome; any other outcome is counted as wrong and reported:
- crash parameters: ``hotwords_score`` NaN, offline and on a stream's first chunk -> refused;
- one output asked for twice -> answered, once;
- a system shared-memory region truncated after registration -> refused ("smaller than registered");
- a slow reader: a stream that sends its chunks and stops reading the answers, then goes -> nothing to check
  but that everyone else is still served (the server holds at most a bounded backlog for it);
- HTTP clients that stop mid-body or dribble their headers, then go -> the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time

import numpy as np

SHM_ROOT = "/dev/shm"


async def refused(call, figures, case: str, timeout_s: float) -> None:
    """The call must fail with an error answer (not hang, not succeed)."""
    from tritonclient.utils import InferenceServerException

    figures.hostile_sent += 1
    try:
        await asyncio.wait_for(call, timeout_s)
    except asyncio.TimeoutError:
        figures.lost += 1
        figures.note(f"hostile {case}: no answer in {timeout_s:g} s")
        return
    except InferenceServerException:
        return
    figures.hostile_wrong += 1
    figures.note(f"hostile {case}: accepted")


async def nan_hotword_score(client, samples, figures, timeout_s: float) -> None:
    from bench.soak import wav_inputs

    params = {"hotwords": "hello world", "hotwords_score": float("nan")}
    await refused(client.infer("attention_rescoring", wav_inputs(samples), parameters=params),
                  figures, "offline hotwords_score=nan", timeout_s)
    await refused(client.infer("streaming_wenet", wav_inputs(samples), sequence_id=random.randrange(1, 2**40),
                               sequence_start=True, sequence_end=True, parameters=params),
                  figures, "streaming hotwords_score=nan", timeout_s)


async def duplicate_output(client, samples, expected: str, figures, timeout_s: float) -> None:
    import tritonclient.grpc.aio as aioclient

    from bench.soak import wav_inputs

    figures.hostile_sent += 1
    outputs = [aioclient.InferRequestedOutput("TRANSCRIPTS"), aioclient.InferRequestedOutput("TRANSCRIPTS")]
    try:
        result = await asyncio.wait_for(client.infer("attention_rescoring", wav_inputs(samples), outputs=outputs),
                                        timeout_s)
    except asyncio.TimeoutError:
        figures.lost += 1
        return
    except Exception as exc:  # noqa: BLE001 - counted
        figures.hostile_wrong += 1
        figures.note(f"hostile duplicate output: {exc}")
        return
    names = [o.name for o in result.get_response().outputs]
    text = result.as_numpy("TRANSCRIPTS").reshape(-1)[0].decode()
    if names != ["TRANSCRIPTS"] or text != expected:
        figures.hostile_wrong += 1
        figures.note(f"hostile duplicate output: outputs {names}, {text!r} != {expected!r}")


async def truncated_region(client, figures, timeout_s: float, index: int) -> None:
    import tritonclient.grpc.aio as aioclient
    import tritonclient.utils.shared_memory as shm

    key, name = f"/soak_{os.getpid()}_{index}", f"soak_region_{index}"
    samples = np.zeros(16000, np.float32)
    handle = shm.create_shared_memory_region(name, key, samples.nbytes)
    try:
        shm.set_shared_memory_region(handle, [samples])
        await client.register_system_shared_memory(name, key, samples.nbytes)
        os.truncate(os.path.join(SHM_ROOT, key[1:]), 0)
        wav = aioclient.InferInput("WAV", [1, samples.size], "FP32")
        wav.set_shared_memory(name, samples.nbytes)
        lens = aioclient.InferInput("WAV_LENS", [1, 1], "INT32")
        lens.set_data_from_numpy(np.full((1, 1), samples.size, np.int32))
        await refused(client.infer("attention_rescoring", [wav, lens]), figures, "truncated region", timeout_s)
    finally:
        with contextlib.suppress(Exception):
            await client.unregister_system_shared_memory(name)
        shm.destroy_shared_memory_region(handle)


async def slow_reader(client, samples, figures, chunks: int = 40) -> None:
    """A stream that reads its first answer, sends the rest without reading, then goes away."""
    from bench.soak import wav_inputs

    figures.hostile_sent += 1
    piece = samples[:8000]
    sequence_id = random.randrange(1, 2**40)

    async def requests():
        for i in range(chunks):
            yield dict(model_name="streaming_wenet", inputs=wav_inputs(piece), sequence_id=sequence_id,
                       sequence_start=i == 0, sequence_end=False)

    responses = client.stream_infer(requests())
    with contextlib.suppress(Exception):
        await asyncio.wait_for(responses.__anext__(), 10)
        await asyncio.sleep(2.0)  # the answers pile up on the server's side, bounded
    responses.cancel()


async def partial_http(http_port: int, figures) -> None:
    """One client stops mid-body, another dribbles its headers; both go after a second."""
    figures.hostile_sent += 2
    body_head = (b"POST /v2/models/attention_rescoring/infer HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"inputs\": [")
    for first in (body_head, b"GET /v2/health/ready HTTP/1.1\r\nX-Slow: "):
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", http_port)
            writer.write(first)
            await writer.drain()
            await asyncio.sleep(1.0)
            writer.close()


async def hostile_worker(url: str, http_port: int, items, offline_refs, deadline: float, args, figures) -> None:
    import tritonclient.grpc.aio as aioclient

    rng = random.Random(args.seed + 29)
    client = aioclient.InferenceServerClient(url)
    count = 0
    try:
        while time.monotonic() < deadline:
            utt, samples = items[rng.randrange(len(items))]
            case = count % 5
            if case == 0:
                await nan_hotword_score(client, samples, figures, args.response_timeout)
            elif case == 1:
                await duplicate_output(client, samples, offline_refs[utt], figures, args.response_timeout)
            elif case == 2:
                await truncated_region(client, figures, args.response_timeout, count)
            elif case == 3:
                await slow_reader(client, samples, figures)
            else:
                await partial_http(http_port, figures)
            count += 1
            await asyncio.sleep(rng.uniform(0.2, 1.0))
    finally:
        await client.close()


async def burst(url: str, at: float, count: int, items, figures, timeout_s: float) -> None:
    """At `at`, `count` one-shot streams at once (START and END on one request), every one answered."""
    import tritonclient.grpc.aio as aioclient

    from bench.soak import wav_inputs

    await asyncio.sleep(max(0.0, at - time.monotonic()))
    client = aioclient.InferenceServerClient(url)
    rng = random.Random(count)

    async def one(i: int) -> None:
        samples = items[rng.randrange(len(items))][1][:32000]
        try:
            await asyncio.wait_for(client.infer("streaming_wenet", wav_inputs(samples), sequence_id=2**50 + i,
                                                sequence_start=True, sequence_end=True), timeout_s)
            figures.burst_answered += 1
        except asyncio.TimeoutError:
            figures.lost += 1
        except Exception as exc:  # noqa: BLE001 - counted
            figures.burst_errors += 1
            figures.note(f"burst stream {i}: {exc}")

    try:
        await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        await client.close()
