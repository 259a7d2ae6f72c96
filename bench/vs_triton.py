"""Real NVIDIA Triton 2.51 (python backend) against asr_server on the same python model folder, in one run.

Both servers run as subprocesses on 127.0.0.1 (tests/helpers/real_triton.py starts them the same way) and
serve an unchanged copy of model_repo/add_sub (a Triton python_backend model: two FP32 [4] inputs). asr_server
also serves an ONNX identity model (FP32 [1, 16], onnxruntime backend) to show its native path; the Triton
in the nvidia-pytriton wheel has no onnxruntime backend, so that row is ours only.

The client is tritonclient.grpc.aio in this process: `concurrency` tasks each send one request, await the
answer, and send the next. Servers are measured in alternating blocks, so background load hits all alike.
With --perf-analyzer (fetched by `bash scripts/get_perf_analyzer.sh`), NVIDIA's C++ perf_analyzer measures
the same pairs too, also alternating. Prints p50/p99 latency and infer/s at each concurrency, and the ratios.
Fetch Triton first: `bash scripts/get_triton.sh`.

    python -m bench.vs_triton [--requests 2000] [--concurrency 1 8] [--perf-analyzer]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from bench._latency import latency_summary
from tests.helpers import real_triton as rt

BLOCK = 200  # requests per measurement block (per server, per concurrency)
WARMUP = 200  # requests before measuring, per target
PERF_ANALYZER = ROOT / ".tools" / "perf_analyzer"

IDENTITY_CONFIG = """
name: "identity_onnx"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 16 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 16 ] } ]
"""


@dataclass(frozen=True)
class Target:
    label: str  # the row's name
    server: str  # "triton" or "asr_server"
    model: str
    make_inputs: Callable  # (module) -> list of InferInput
    check: Callable  # (InferResult) -> None, raises if the answer is wrong
    pa_args: tuple[str, ...]  # perf_analyzer's --shape arguments for this model


A = np.arange(4, dtype=np.float32)
B = np.full(4, 0.5, np.float32)
X = np.arange(16, dtype=np.float32).reshape(1, 16)


def add_sub_inputs(module) -> list:
    inputs = [module.InferInput("INPUT0", [4], "FP32"), module.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(A)
    inputs[1].set_data_from_numpy(B)
    return inputs


def add_sub_check(result) -> None:
    assert np.array_equal(result.as_numpy("OUTPUT0"), A + B) and np.array_equal(result.as_numpy("OUTPUT1"), A - B)


def identity_inputs(module) -> list:
    tensor = module.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(X)
    return [tensor]


def identity_check(result) -> None:
    assert np.array_equal(result.as_numpy("OUTPUT0"), X)


def triton_has_onnxruntime() -> bool:
    wheel_backends = (rt.TRITONSERVER.resolve().parent.parent / "backends")
    return (wheel_backends / "onnxruntime").is_dir() or (rt.BACKENDS / "onnxruntime").is_dir()


def build_repos(tmp: Path) -> tuple[Path, Path]:
    """Triton's repository (add_sub) and ours (the same add_sub folder, plus the ONNX identity model)."""
    from tests.helpers.onnx_models import identity_model

    triton_repo, ours_repo = tmp / "triton", tmp / "ours"
    for repo in (triton_repo, ours_repo):
        shutil.copytree(ROOT / "model_repo" / "add_sub", repo / "add_sub",
                        ignore=shutil.ignore_patterns("__pycache__"))
    (ours_repo / "identity_onnx").mkdir()
    (ours_repo / "identity_onnx" / "config.pbtxt").write_text(IDENTITY_CONFIG)
    identity_model(ours_repo / "identity_onnx" / "1" / "model.onnx", shape=["batch", 16])
    return triton_repo, ours_repo


# ---- tritonclient.grpc.aio ---------------------------------------------------------------------------
async def timed_block(client, target: Target, concurrency: int, requests: int) -> tuple[list[float], float]:
    import tritonclient.grpc.aio as aioclient

    inputs = target.make_inputs(aioclient)
    latencies: list[float] = []

    async def worker(count: int) -> None:
        for _ in range(count):
            t0 = time.perf_counter()
            await client.infer(target.model, inputs)
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    await asyncio.gather(*(worker(requests // concurrency) for _ in range(concurrency)))
    return latencies, time.perf_counter() - start


async def measure_grpc(targets: list[Target], urls: dict[str, str], concurrencies: list[int],
                       requests: int) -> dict[tuple[int, str], dict]:
    import tritonclient.grpc.aio as aioclient

    clients = {name: aioclient.InferenceServerClient(url) for name, url in urls.items()}
    try:
        for target in targets:  # warm up, and check every answer once
            client = clients[target.server]
            for _ in range(WARMUP):
                result = await client.infer(target.model, target.make_inputs(aioclient))
            target.check(result)
        results = {}
        for concurrency in concurrencies:
            samples = {t.label: ([], 0.0) for t in targets}
            block = max(BLOCK, concurrency) // concurrency * concurrency
            for _ in range(max(1, requests // block)):
                for target in targets:
                    latencies, elapsed = await timed_block(clients[target.server], target, concurrency, block)
                    old = samples[target.label]
                    samples[target.label] = (old[0] + latencies, old[1] + elapsed)
            for label, sample in samples.items():
                results[(concurrency, label)] = latency_summary(*sample)
        return results
    finally:
        for client in clients.values():
            await client.close()


# ---- perf_analyzer -----------------------------------------------------------------------------------
def perf_analyzer(url: str, target: Target, concurrency: int) -> dict:
    env = dict(os.environ, LD_LIBRARY_PATH=str(PERF_ANALYZER / "lib"))
    cmd = [str(PERF_ANALYZER / "bin" / "perf_analyzer"), "-i", "grpc", "-u", url, "-m", target.model,
           *target.pa_args, "--concurrency-range", str(concurrency), "--measurement-interval", "1500",
           "--stability-percentage", "999", "--max-trials", "5"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    text = out.stdout + out.stderr
    rps = re.search(r"Throughput: ([\d.]+) infer/sec", text)
    p50 = re.search(r"p50 latency: (\d+) usec", text)
    p99 = re.search(r"p99 latency: (\d+) usec", text)
    if out.returncode != 0 or not (rps and p50 and p99):
        raise RuntimeError(f"perf_analyzer failed ({out.returncode}):\n{text[-2000:]}")
    return {"p50_ms": int(p50.group(1)) / 1e3, "p99_ms": int(p99.group(1)) / 1e3, "rps": float(rps.group(1))}


def measure_perf_analyzer(targets: list[Target], urls: dict[str, str], concurrencies: list[int],
                          rounds: int) -> dict[tuple[int, str], dict]:
    results = {}
    for concurrency in concurrencies:
        runs: dict[str, list[dict]] = {t.label: [] for t in targets}
        for _ in range(rounds):  # alternate whole runs
            for target in targets:
                runs[target.label].append(perf_analyzer(urls[target.server], target, concurrency))
        for label, got in runs.items():  # the median run of each
            results[(concurrency, label)] = {k: statistics.median(r[k] for r in got) for k in got[0]}
    return results


# ---- report ------------------------------------------------------------------------------------------
def print_table(title: str, results: dict, targets: list[Target], concurrencies: list[int]) -> None:
    print(title)
    print(f"{'conc':>4}  {'server / backend':<30} {'model':<14} {'p50 ms':>8} {'p99 ms':>8} {'infer/s':>8}")
    for concurrency in concurrencies:
        for target in targets:
            r = results[(concurrency, target.label)]
            print(f"{concurrency:>4}  {target.label:<30} {target.model:<14} "
                  f"{r['p50_ms']:8.3f} {r['p99_ms']:8.3f} {r['rps']:8.0f}")
    for concurrency in concurrencies:
        t, o = results[(concurrency, TRITON_PY)], results[(concurrency, OURS_PY)]
        print(f"c={concurrency}: asr_server / Triton (python add_sub): p50 {o['p50_ms'] / t['p50_ms']:.2f}x, "
              f"p99 {o['p99_ms'] / t['p99_ms']:.2f}x, infer/s {o['rps'] / t['rps']:.2f}x "
              f"(latency < 1 and infer/s > 1 favour asr_server)")
    print()


TRITON_PY = "Triton 2.51, python backend"
OURS_PY = "asr_server, python backend"
OURS_ORT = "asr_server, onnxruntime"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="measured requests per row and concurrency")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--perf-analyzer", action="store_true", help="also measure with NVIDIA's perf_analyzer")
    parser.add_argument("--rounds", type=int, default=3, help="perf_analyzer runs per row (alternating)")
    args = parser.parse_args()
    if not rt.available():
        print(rt.SKIP_REASON, file=sys.stderr)
        return 2
    if args.perf_analyzer and not (PERF_ANALYZER / "bin" / "perf_analyzer").exists():
        print("perf_analyzer not fetched (run: bash scripts/get_perf_analyzer.sh)", file=sys.stderr)
        return 2

    targets = [
        Target(TRITON_PY, "triton", "add_sub", add_sub_inputs, add_sub_check, ()),
        Target(OURS_PY, "asr_server", "add_sub", add_sub_inputs, add_sub_check, ()),
        Target(OURS_ORT, "asr_server", "identity_onnx", identity_inputs, identity_check,
               ("--shape", "INPUT0:16")),
    ]
    onnx_note = ("Triton's wheel has an onnxruntime backend, but this bench serves the ONNX model on asr_server only"
                 if triton_has_onnxruntime() else
                 "the nvidia-pytriton 0.7.0 wheel ships no onnxruntime backend: the ONNX row is asr_server only")
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        triton_repo, ours_repo = build_repos(Path(tmp))
        triton = stack.enter_context(rt.real_triton(triton_repo, extra_args=["--log-info=false"]))
        ours = stack.enter_context(rt.asr_server_process(ours_repo, extra_args=["--allow-http", "false",
                                                                                 "--allow-metrics", "false"]))
        urls = {"triton": triton.grpc_url, "asr_server": ours.grpc_url}
        grpc_results = asyncio.run(measure_grpc(targets, urls, args.concurrency, args.requests))
        pa_results = (measure_perf_analyzer(targets, urls, args.concurrency, args.rounds)
                      if args.perf_analyzer else None)

    print(f"ModelInfer over gRPC on 127.0.0.1, {os.cpu_count()} CPUs, servers and client on the same machine")
    print(f"add_sub: FP32 [4] x2 (model_repo/add_sub, unchanged, same folder on both); {onnx_note}")
    print_table(f"tritonclient.grpc.aio, {args.requests} requests per row, alternating blocks of {BLOCK}",
                grpc_results, targets, args.concurrency)
    if pa_results:
        print_table(f"perf_analyzer (C++ client), median of {args.rounds} alternating runs",
                    pa_results, targets, args.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main())
