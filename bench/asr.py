"""ASR serving capacity on this machine: offline RTF and paced real-time streams.

    python -m bench.asr [--repo model_repo] [--data tests/data/demo_utts] [--chunk-ms 640]

Starts the server on the model repository in a subprocess (127.0.0.1), then:
1. offline: every utterance of the data folder through `attention_rescoring` at concurrency 8, reporting
   RTF (wall time / audio time), WER and the latency p50/p99, and the server's CPU-seconds per audio-second
   beside the neural floor of the same work (bare ONNX Runtime, bench/offline_floor.py);
2. streaming: S concurrent streams through `streaming_wenet`, each paced at real time with 640 ms chunks,
   for S = 1, 2, 4, ... until the p99 chunk latency (sending a chunk -> its partial transcript) exceeds
   300 ms or the final results fall behind; prints the largest S that stayed under 300 ms.
3. with --scorer-cost: what DETAILS, hotwords and endpointing add to the streaming scorer's work per chunk
   (bench/asr_extras.py, which also measures timestamps, endpoint delay and long files).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from bench._latency import percentile_ms
from bench._server import serve_repository, server_process
from bench.offline_floor import offline_floor
from bench.vs_sherpa import cpu_seconds

P99_BUDGET_MS = 300.0


def load_data(folder: Path) -> list[tuple[str, np.ndarray, str]]:
    from asr_client.audio import load_audio

    texts = dict(line.split(" ", 1) for line in (folder / "text").read_text().splitlines() if line.strip())
    items = []
    for line in (folder / "wav.scp").read_text().splitlines():
        if not line.strip():
            continue
        utt, path = line.split(maxsplit=1)
        items.append((utt, load_audio(folder / path).samples, texts.get(utt, "")))
    return items


async def offline(url: str, items, concurrency: int) -> dict:
    import tritonclient.grpc.aio as aioclient

    from asr_client.offline import recognize
    from asr_client.report import error_rates

    client = aioclient.InferenceServerClient(url)
    semaphore = asyncio.Semaphore(concurrency)
    await recognize(client, items[0][1])  # warm-up

    async def one(samples):
        async with semaphore:
            return await recognize(client, samples)

    start = time.perf_counter()
    results = await asyncio.gather(*(one(samples) for _, samples, _ in items))
    wall = time.perf_counter() - start
    await client.close()
    audio = sum(s.size for _, s, _ in items) / 16000
    rates = error_rates([(ref, r.text) for (_, _, ref), r in zip(items, results)])
    latencies = [r.latency_s for r in results]
    return {"rtf": wall / audio, "audio_s": audio, "wer": rates.wer if rates else None,
            "p50_ms": percentile_ms(latencies, 50), "p99_ms": percentile_ms(latencies, 99)}


async def streams(url: str, items, count: int, chunk_ms: float) -> dict:
    from asr_client.report import error_rates
    from asr_client.streaming import StreamingClient, StreamOptions

    options = StreamOptions(chunk_ms=chunk_ms, realtime=True)
    async with StreamingClient(url, options) as client:
        picks = [items[i % len(items)] for i in range(count)]
        # Stagger the starts over one chunk, as independent speakers would be.
        async def one(i, samples):
            await asyncio.sleep((i / max(1, count)) * chunk_ms / 1000)
            return await client.transcribe(samples)

        results = await asyncio.gather(*(one(i, s) for i, (_, s, _) in enumerate(picks)))
    latencies = [lat for r in results for lat in r.chunk_latencies_s]
    lag = [r.elapsed_s - r.audio_s for r in results]
    rates = error_rates([(ref, r.text) for (_, _, ref), r in zip(picks, results)])
    return {"streams": count, "p50_ms": percentile_ms(latencies, 50), "p99_ms": percentile_ms(latencies, 99),
            "final_lag_ms": 1e3 * max(lag), "wer": rates.wer if rates else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT / "model_repo")
    parser.add_argument("--data", type=Path, default=ROOT / "tests" / "data" / "demo_utts")
    parser.add_argument("--chunk-ms", type=float, default=640.0)
    parser.add_argument("--concurrency", type=int, default=8, help="offline requests in flight")
    parser.add_argument("--offline-repeat", type=int, default=4,
                        help="offline passes over the data: one pass of 12 utterances is mostly ORT's first runs "
                             "on new shapes (0.018 CPU-s per audio-s against 0.009 over four)")
    parser.add_argument("--max-streams", type=int, default=128)
    parser.add_argument("--scorer-cost", action="store_true",
                        help="also time StreamingScorer.step per chunk with DETAILS / hotwords / endpointing")
    args = parser.parse_args()
    items = load_data(args.data)
    if args.scorer_cost:
        from bench.asr_extras import scorer_cost

        cost = scorer_cost(args.repo, items)
        print("streaming scorer per 640 ms chunk (encoder replayed, batch 1): " + ", ".join(
            f"{name} {ms:.3f} ms ({ms / cost['plain']:.2f}x)" for name, ms in cost.items()))
    with server_process(serve_repository, str(args.repo)) as (proc, port):
        url = f"127.0.0.1:{port}"
        asyncio.run(offline(url, items[:1], 1))  # warm-up outside the CPU count
        cpu0 = cpu_seconds(proc.pid)
        off = asyncio.run(offline(url, items * args.offline_repeat, args.concurrency))
        server_cpu = (cpu_seconds(proc.pid) - cpu0) / off["audio_s"]  # includes offline()'s own warm-up request
        print(f"offline attention_rescoring, {len(items) * args.offline_repeat} utterances ({off['audio_s']:.1f} s audio), "
              f"concurrency {args.concurrency}: RTF {off['rtf']:.4f}, latency p50 {off['p50_ms']:.0f} ms "
              f"p99 {off['p99_ms']:.0f} ms, WER {100 * (off['wer'] or 0):.1f}%")
        floor = offline_floor(args.repo, items)
        print(f"offline CPU-s per audio-s: server {server_cpu:.4f}; neural floor (bare ONNX Runtime, 1 thread, "
              f"batch 1, one pass) encoder {floor['encoder']:.4f}, encoder + decoder {floor['encoder_decoder']:.4f}: "
              f"server = {server_cpu / floor['encoder_decoder']:.2f}x the floor")
        print(f"\nstreaming_wenet, paced real-time streams, {args.chunk_ms:.0f} ms chunks")
        print(f"{'streams':>8} {'p50 ms':>8} {'p99 ms':>8} {'final lag ms':>13} {'WER %':>6}")
        best, count, exceeded = 0, 1, False
        while count <= args.max_streams:
            r = asyncio.run(streams(url, items, count, args.chunk_ms))
            print(f"{r['streams']:>8} {r['p50_ms']:8.0f} {r['p99_ms']:8.0f} {r['final_lag_ms']:13.0f} "
                  f"{100 * (r['wer'] or 0):6.1f}")
            if r["p99_ms"] > P99_BUDGET_MS:
                exceeded = True
                break
            best, count = count, count * 2
        limit = "the next step up exceeded it" if exceeded else "the most tried; raise --max-streams"
        print(f"sustained: {best} paced real-time streams with p99 chunk latency under {P99_BUDGET_MS:.0f} ms "
              f"({limit})" if best else "no stream count stayed under the latency budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
