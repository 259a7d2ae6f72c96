"""The offline ASR ensemble on real NVIDIA Triton 2.51 (python backend) and on asr_server, same folders, one run.

What it measures: the cost of serving a pipeline of python models. The repository is model_repo's
attention_rescoring for the bundled model (feature_extractor -> encoder -> scoring, with the decoder called
through BLS), written by tests/helpers/asr_repos.py. Triton's wheel here ships only the python backend, so
encoder and decoder run as python models wrapping onnxruntime on both servers (the same files); a third row
is asr_server with its native onnxruntime backend. Each request is one held-out utterance
(tests/data/demo_utts, 1.8-4 s); `concurrency` tasks of tritonclient.grpc.aio each send one, await the
transcript, and send the next. Servers are measured in alternating blocks so background load hits all alike.
Prints p50/p99 latency, utterances/s and the real-time factor (audio seconds per wall second), then ratios.

    python -m bench.vs_triton_asr [--requests 240] [--concurrency 1 8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from asr_client.audio import load_audio
from bench._latency import percentile_ms
from tests.helpers import real_triton as rt
from tests.helpers.asr_repos import exported, offline_repo

DATA = ROOT / "tests" / "data" / "demo_utts"
BLOCK = 24  # requests per measurement block (per row, per concurrency)
SAMPLE_RATE = 16000
START_S = 120

TRITON = "Triton 2.51, python models"
OURS = "asr_server, python models"
OURS_ORT = "asr_server, onnxruntime"


def utterances() -> list[np.ndarray]:
    rows = [line.split() for line in (DATA / "wav.scp").read_text().splitlines()]
    return [load_audio(DATA / path).samples.astype(np.float32) for _, path in rows]


def inputs(module, samples: np.ndarray) -> list:
    wav = module.InferInput("WAV", [1, samples.size], "FP32")
    wav.set_data_from_numpy(samples.reshape(1, -1))
    lens = module.InferInput("WAV_LENS", [1, 1], "INT32")
    lens.set_data_from_numpy(np.array([[samples.size]], dtype=np.int32))
    return [wav, lens]


def transcript(result) -> str:
    return result.as_numpy("TRANSCRIPTS").reshape(-1)[0].decode()


async def timed_block(client, audio: list[np.ndarray], concurrency: int, count: int, offset: int):
    import tritonclient.grpc.aio as aioclient

    latencies: list[float] = []
    seconds = 0.0

    async def worker(first: int) -> None:
        nonlocal seconds
        for k in range(first, first + count // concurrency):
            samples = audio[(offset + k) % len(audio)]
            t0 = time.perf_counter()
            await client.infer("attention_rescoring", inputs(aioclient, samples))
            latencies.append(time.perf_counter() - t0)
            seconds += samples.size / SAMPLE_RATE

    start = time.perf_counter()
    await asyncio.gather(*(worker(i * (count // concurrency)) for i in range(concurrency)))
    return latencies, seconds, time.perf_counter() - start


async def measure(urls: dict[str, str], concurrencies: list[int], requests: int) -> dict:
    import tritonclient.grpc.aio as aioclient

    audio = utterances()
    clients = {label: aioclient.InferenceServerClient(url) for label, url in urls.items()}
    try:
        answers = {}
        for label, client in clients.items():  # warm up; the transcripts must agree
            answers[label] = [transcript(await client.infer("attention_rescoring", inputs(aioclient, a)))
                              for a in audio]
        if len({tuple(v) for v in answers.values()}) != 1:
            raise SystemExit(f"the servers disagree on the transcripts: {answers}")
        results = {}
        for concurrency in concurrencies:
            block = max(BLOCK, concurrency) // concurrency * concurrency
            samples = {label: ([], 0.0, 0.0) for label in clients}
            for round_ in range(max(1, requests // block)):
                for label, client in clients.items():
                    lat, sec, wall = await timed_block(client, audio, concurrency, block, round_ * block)
                    old = samples[label]
                    samples[label] = (old[0] + lat, old[1] + sec, old[2] + wall)
            for label, (lat, sec, wall) in samples.items():
                results[(concurrency, label)] = {
                    "p50_ms": percentile_ms(lat, 50), "p99_ms": percentile_ms(lat, 99),
                    "ups": len(lat) / wall, "speed": sec / wall}
        return results
    finally:
        for client in clients.values():
            await client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=240, help="measured utterances per row and concurrency")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    if not rt.available():
        print(rt.SKIP_REASON, file=sys.stderr)
        return 2
    if not exported():
        print("the bundled model's graphs are not exported: run bash scripts/build_demo_repo.sh", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        shim = offline_repo(Path(tmp) / "shim", onnx_as_python=True)
        native = offline_repo(Path(tmp) / "native", onnx_as_python=False)
        quiet = ["--allow-http", "false", "--allow-metrics", "false"]
        triton = stack.enter_context(rt.real_triton(shim, extra_args=["--log-info=false"], ready_timeout_s=START_S))
        ours = stack.enter_context(rt.asr_server_process(shim, extra_args=quiet, ready_timeout_s=START_S))
        ours_ort = stack.enter_context(rt.asr_server_process(native, extra_args=quiet, ready_timeout_s=START_S))
        urls = {TRITON: triton.grpc_url, OURS: ours.grpc_url, OURS_ORT: ours_ort.grpc_url}
        results = asyncio.run(measure(urls, args.concurrency, args.requests))

    print(f"attention_rescoring (bundled model) over gRPC on 127.0.0.1, {os.cpu_count()} CPUs, servers and client "
          f"on the same machine; {args.requests} utterances per row, alternating blocks of {BLOCK}")
    print(f"{'conc':>4}  {'server':<28} {'p50 ms':>8} {'p99 ms':>8} {'utt/s':>7} {'x real time':>11}")
    for concurrency in args.concurrency:
        for label in urls:
            r = results[(concurrency, label)]
            print(f"{concurrency:>4}  {label:<28} {r['p50_ms']:8.1f} {r['p99_ms']:8.1f} {r['ups']:7.1f} "
                  f"{r['speed']:11.1f}")
    for concurrency in args.concurrency:
        t, o = results[(concurrency, TRITON)], results[(concurrency, OURS)]
        print(f"c={concurrency}: asr_server / Triton, same python models: p50 {o['p50_ms'] / t['p50_ms']:.2f}x, "
              f"p99 {o['p99_ms'] / t['p99_ms']:.2f}x, utt/s {o['ups'] / t['ups']:.2f}x "
              f"(latency < 1 and utt/s > 1 favour asr_server)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
