"""WebSocket streaming against gRPC streaming, same server, same model, same paced load (the target:
64 real-time streams hold chunk p99 < 300 ms over WebSocket, with server CPU per audio-second within 1.2x of
the gRPC path's).

    python -m bench.ws_vs_grpc --streams 64 --seconds 20

S streams per protocol, each the demo utterances end to end (cut to --seconds; stream i starts i/S of the way
into them, wrapping round, unless --lockstep), sent in 0.5 s chunks at the speed of speech, starts staggered over
one chunk. WebSocket speaks sherpa-onnx's dialect (float32 frames, one
JSON reply per frame: the chunk latency is frame sent -> its reply); each stream's last chunk is left out on both
sides (all streams end within one half second, so their last chunks meet every final rescoring at once;
--with-last counts them); gRPC is asr_client's StreamingClient with
the same 0.5 s chunks and the same decoding (endpointing, DETAILS with every chunk, as the dialects ask).
Server CPU comes from /proc (the server runs in its own process); each protocol's run gets a fresh server.
Prints p50/p99 chunk latency, server CPU-s per audio-s and the ratio, and where a request spent its time in the
model (Triton's statistics: mean queue and compute per request, mean batch per execution).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import time
from pathlib import Path

import numpy as np

from bench._latency import percentile_ms

ROOT = Path(__file__).resolve().parent.parent
CHUNK_S = 0.5
RATE = 16000


def serve(repo: str, ports) -> None:
    import logging

    from asr_server.server import Server
    from asr_server.settings import ServerSettings

    logging.basicConfig(level=logging.WARNING)

    async def main():
        settings = ServerSettings(model_repositories=(Path(repo),), grpc_address="127.0.0.1", grpc_port=0,
                                  http_address="127.0.0.1", http_port=0, allow_metrics=False)
        server = Server(settings)
        await server.start()
        ports.put((server.grpc_port, server.http_port))
        await asyncio.Event().wait()

    asyncio.run(main())


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its threads (children included), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def utterance_audio(seconds: float) -> np.ndarray:
    from asr_client.audio import load_audio

    parts = [load_audio(p).samples for p in sorted((ROOT / "tests" / "data" / "demo_utts").glob("*.flac"))]
    audio = np.concatenate(parts)
    while audio.size < seconds * RATE:
        audio = np.concatenate([audio, audio])
    return audio[: int(seconds * RATE)]


async def ws_stream(port: int, audio: np.ndarray, delay: float, latencies: list, first_extra_s: float = 0.0,
                    with_last: bool = False) -> None:
    import aiohttp

    await asyncio.sleep(delay)
    step, extra = int(CHUNK_S * RATE), int(first_extra_s * RATE)
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(f"ws://127.0.0.1:{port}/") as ws:
            sent: list[float] = []
            mine: list[float] = []

            async def reader():
                async for message in ws:
                    if message.data == "Done!":
                        # the last frame's reply is left out, as the gRPC side leaves out its last chunk (which
                        # carries END): every stream ends within the same half second, so the last replies
                        # queue behind 64 final rescorings, in either protocol
                        latencies.extend(mine if with_last else mine[:-1])
                        return
                    # one partial per chunk (a segment's final comes just before it, in the same answer)
                    if sent and not json.loads(message.data)["is_final"]:
                        mine.append(time.monotonic() - sent.pop(0))

            task = asyncio.create_task(reader())
            start = time.monotonic()
            # the first frame `extra` samples longer, as the gRPC client's first chunk carries its look-ahead
            bounds = [0, *range(step + extra, audio.size, step), audio.size]
            for i, (begin, end) in enumerate(zip(bounds, bounds[1:])):
                await asyncio.sleep(max(0.0, start + end / RATE - time.monotonic()))
                sent.append(time.monotonic())
                await ws.send_bytes(audio[begin:end].astype("<f4").tobytes())
            await ws.send_str("Done")
            await task


async def grpc_stream(port: int, audio: np.ndarray, delay: float, latencies: list, with_last: bool = False
                      ) -> None:
    from asr_client.streaming import StreamingClient, StreamOptions

    await asyncio.sleep(delay)
    # the decoding the WebSocket dialects ask for: endpointing (segments end and are rescored at pauses) and
    # DETAILS with every chunk, words, tokens and times included (the `details` parameter: sherpa-onnx's
    # partials carry tokens and timestamps), so that the two protocols carry the same work
    options = StreamOptions(chunk_ms=CHUNK_S * 1000, realtime=True, parameters={"endpoint": True, "details": True},
                            details=True)
    async with StreamingClient(f"127.0.0.1:{port}", options) as client:
        result = await client.transcribe(audio)
    latencies.extend(p.latency_s for p in (result.partials if with_last else result.partials[:-1]))


def model_statistics(grpc_port: int, model: str = "streaming_wenet") -> dict:
    """The model's cumulative server-side counters (Triton's statistics extension): requests, executions,
    queue and compute nanoseconds."""
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}") as client:
        stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    inference = stats.get("inference_stats", {})
    return {"requests": int(inference.get("success", {}).get("count", 0)),
            "executions": int(stats.get("execution_count", 0)),
            "queue_ns": int(inference.get("queue", {}).get("ns", 0)),
            "compute_ns": sum(int(inference.get(k, {}).get("ns", 0))
                              for k in ("compute_input", "compute_infer", "compute_output"))}


def server_side(before: dict, after: dict) -> dict:
    """Per request over the measured run: mean queue and compute ms, and the mean batch of an execution."""
    d = {k: after[k] - before[k] for k in before}
    n = max(1, d["requests"])
    return {"queue_ms": d["queue_ns"] / n / 1e6, "compute_ms": d["compute_ns"] / n / 1e6,
            "mean_batch": d["requests"] / max(1, d["executions"])}


def run(protocol: str, streams: int, audio: np.ndarray, repo: str, lockstep: bool = False,
        first_extra_s: float = 0.0, with_last: bool = False) -> dict:
    ctx = mp.get_context("spawn")
    ports = ctx.Queue()
    proc = ctx.Process(target=serve, args=(repo, ports), daemon=True)
    proc.start()
    try:
        grpc_port, http_port = ports.get(timeout=180)
        latencies: list[float] = []
        stream = ws_stream if protocol == "websocket" else grpc_stream
        port = http_port if protocol == "websocket" else grpc_port

        def audio_of(i: int) -> np.ndarray:
            # Stream i starts i/S of the way into the audio (wrapping round), so that the streams do not all
            # reach the same pause, and end the same segment, within one chunk; --lockstep: all the same audio.
            return audio if lockstep else np.roll(audio, -(i * audio.size) // streams)

        async def main():
            extra = {"first_extra_s": first_extra_s} if protocol == "websocket" else {}
            extra["with_last"] = with_last
            await asyncio.gather(*(stream(port, audio_of(i), CHUNK_S * i / streams, latencies, **extra)
                                   for i in range(streams)))

        async def warm_up():  # compiled kernels, first batches: two short streams, not measured
            await asyncio.gather(*(stream(port, audio[: 4 * RATE], 0, []) for _ in range(2)))

        asyncio.run(warm_up())
        stats0, cpu0, t0 = model_statistics(grpc_port), cpu_seconds(proc.pid), time.monotonic()
        asyncio.run(main())
        cpu, wall = cpu_seconds(proc.pid) - cpu0, time.monotonic() - t0
        server = server_side(stats0, model_statistics(grpc_port))
    finally:
        proc.terminate()
        proc.join(10)
    audio_s = streams * audio.size / RATE
    return {"protocol": protocol, "streams": streams, "chunks": len(latencies), "p50_ms": percentile_ms(latencies, 50),
            "p99_ms": percentile_ms(latencies, 99), "cpu_per_audio_s": cpu / audio_s, "wall_s": wall, **server}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=20.0, help="audio per stream")
    ap.add_argument("--repo", default=str(ROOT / "model_repo"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--lockstep", action="store_true",
                    help="every stream the same audio from its start (staggered by one chunk at most): their pauses, "
                         "endpoints and rescorings all fall within the same half second")
    ap.add_argument("--ws-first-extra-ms", type=float, default=0.0,
                    help="make the WebSocket client's first frame this much longer (the gRPC client's first chunk "
                         "carries asr_client.chunking.LOOKAHEAD_MS)")
    ap.add_argument("--with-last", action="store_true",
                    help="also count each stream's last chunk (gRPC: the one carrying END; WebSocket: the last "
                         "frame before Done), which meets every stream's final rescoring at once")
    args = ap.parse_args(argv)
    audio = utterance_audio(args.seconds)
    rows = [run(p, args.streams, audio, args.repo, args.lockstep, args.ws_first_extra_ms / 1000, args.with_last)
            for p in ("grpc", "websocket")]
    for r in rows:
        print(f"{r['protocol']:9s} {r['streams']} streams: chunk latency p50 {r['p50_ms']:.0f} ms, p99 "
              f"{r['p99_ms']:.0f} ms ({r['chunks']} chunks); server CPU {r['cpu_per_audio_s']:.4f} s per audio-s; "
              f"in the model, per request: queue {r['queue_ms']:.1f} ms, compute {r['compute_ms']:.1f} ms, "
              f"mean batch {r['mean_batch']:.1f}")
    ratio = rows[1]["cpu_per_audio_s"] / rows[0]["cpu_per_audio_s"]
    print(f"websocket / grpc server CPU per audio-s: {ratio:.2f}x (target <= 1.2x); websocket p99 "
          f"{rows[1]['p99_ms']:.0f} ms (target < 300 ms)")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "cpu_ratio": ratio}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
