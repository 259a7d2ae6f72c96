"""Throughput and latency of an ONNX MLP served with and without dynamic batching, in the same run.

One server process (multiprocessing spawn) serves the same model twice: `mlp_batched` with
`dynamic_batching { max_queue_delay_microseconds: DELAY_US }` and `mlp_direct` without it (same instance
groups). The client (this process, tritonclient.grpc.aio) runs N concurrent tasks that each send FP32
[1, 256] requests back to back for a fixed time. Prints infer/s and p50/p99 latency at concurrency 1, 8 and
32, and the batched/direct throughput ratio at concurrency 32 (the target: >= 3x on a 2-core machine).

The model (MLP_LAYERS MatMul layers of width MLP_WIDTH, ~7 MB of FP32 weights) is chosen so that batching
matters: one row is a memory-bound matrix-vector product per layer, while 32 rows reuse every weight 32 times.

Reading the figures: on the 2-vCPU development machine two busy processes together do no more work than one
(the vCPUs share one core's worth of time), so client, server loop and ORT threads all compete for about one
core and every point is CPU-bound. Batching then wins by spending less CPU per request; the delay must cover
the time a full batch takes to arrive (~max_batch_size / arrival rate): with 2 ms only ~8 requests arrive and
the ratio at concurrency 32 falls to ~2.4x, 5 ms gives batches of ~25. The price is latency at concurrency 1,
where every request waits out the delay (as in Triton).

    python -m bench.batching [--seconds 4] [--delay-us 5000] [--instances 0]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from bench._latency import latency_summary
from bench._server import serve_repository, server_process

FEATURES = 256  # input and output width
MLP_WIDTH = 512  # hidden width
MLP_LAYERS = 8  # MatMul layers (ReLU between them)
CONCURRENCIES = (1, 8, 32)
MAX_BATCH_SIZE = 32

CONFIG = """
name: "{name}"
backend: "onnxruntime"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ {features} ] }} ]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ {features} ] }} ]
{instances}
{batching}
"""


def write_mlp(path: Path) -> None:
    from onnx import TensorProto, helper, numpy_helper

    from tests.helpers.onnx_models import write_model

    rng = np.random.default_rng(0)
    nodes, weights = [], []
    previous, width = "INPUT0", FEATURES
    for layer in range(MLP_LAYERS):
        last = layer == MLP_LAYERS - 1
        out_width = FEATURES if last else MLP_WIDTH
        weight = (rng.standard_normal((width, out_width)) / np.sqrt(width)).astype(np.float32)
        weights.append(numpy_helper.from_array(weight, f"w{layer}"))
        if last:
            nodes.append(helper.make_node("MatMul", [previous, f"w{layer}"], ["OUTPUT0"]))
        else:
            nodes.append(helper.make_node("MatMul", [previous, f"w{layer}"], [f"m{layer}"]))
            nodes.append(helper.make_node("Relu", [f"m{layer}"], [f"h{layer}"]))
            previous = f"h{layer}"
        width = out_width
    shape = ["batch", FEATURES]
    write_model(path, nodes, [("INPUT0", TensorProto.FLOAT, shape)], [("OUTPUT0", TensorProto.FLOAT, shape)], weights)


def write_repo(repo: Path, delay_us: int, instances: int) -> None:
    group = f"instance_group [ {{ kind: KIND_CPU, count: {instances} }} ]" if instances else ""
    for name, batching in (
        ("mlp_batched", f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}"),
        ("mlp_direct", ""),
    ):
        folder = repo / name
        folder.mkdir(parents=True)
        (folder / "config.pbtxt").write_text(CONFIG.format(
            name=name, max_batch_size=MAX_BATCH_SIZE, features=FEATURES, instances=group, batching=batching,
        ))
        if name == "mlp_batched":
            write_mlp(folder / "1" / "model.onnx")
        else:
            (folder / "1").mkdir()
            (folder / "1" / "model.onnx").write_bytes((repo / "mlp_batched" / "1" / "model.onnx").read_bytes())


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc; 0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(port: int, model: str, concurrency: int, seconds: float, warmup_s: float, server_pid: int) -> dict:
    import tritonclient.grpc.aio as aioclient

    client = aioclient.InferenceServerClient(f"127.0.0.1:{port}")
    data = np.random.default_rng(1).standard_normal((1, FEATURES)).astype(np.float32)
    inp = aioclient.InferInput("INPUT0", [1, FEATURES], "FP32")
    inp.set_data_from_numpy(data)
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    start = loop.time()
    measure_from, end = start + warmup_s, start + warmup_s + seconds

    cpu: dict[str, float] = {}

    async def sample_cpu() -> None:
        await asyncio.sleep(max(0.0, measure_from - loop.time()))
        cpu["client"], cpu["server"] = -time.process_time(), -process_cpu_s(server_pid)
        await asyncio.sleep(max(0.0, end - loop.time()))
        cpu["client"] += time.process_time()
        cpu["server"] += process_cpu_s(server_pid)

    async def worker() -> None:
        while True:
            t0 = loop.time()
            if t0 >= end:
                return
            result = await client.infer(model, [inp])
            t1 = loop.time()
            if t0 >= measure_from:
                latencies.append(t1 - t0)
            assert result.as_numpy("OUTPUT0").shape == (1, FEATURES)

    await asyncio.gather(sample_cpu(), *(worker() for _ in range(concurrency)))
    elapsed = loop.time() - measure_from  # includes the requests in flight at `end`
    stats = (await client.get_inference_statistics(model, as_json=True))["model_stats"][0]
    await client.close()
    return {
        **latency_summary(latencies, elapsed),
        "inferences": int(stats.get("inference_count", 0)),
        "executions": int(stats.get("execution_count", 0)),
        "queue_ns": int(stats["inference_stats"]["queue"].get("ns", 0)),
        "infer_ns": int(stats["inference_stats"]["compute_infer"].get("ns", 0)),
        "success": int(stats["inference_stats"]["success"].get("count", 0)),
        "client_cpu": cpu["client"] / seconds,  # cores busy in this process
        "server_cpu": cpu["server"] / seconds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per point")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each point")
    parser.add_argument("--delay-us", type=int, default=5000, help="max_queue_delay_microseconds")
    parser.add_argument("--instances", type=int, default=0, help="instance count (0: the default, 2 for CPU)")
    args = parser.parse_args()

    results: dict[tuple[str, int], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        write_repo(repo, args.delay_us, args.instances)
        with server_process(serve_repository, str(repo), timeout_s=60) as (proc, port):
            previous = {"mlp_batched": (0, 0, 0, 0, 0), "mlp_direct": (0, 0, 0, 0, 0)}
            for concurrency in CONCURRENCIES:
                for model in ("mlp_direct", "mlp_batched"):
                    r = asyncio.run(measure(port, model, concurrency, args.seconds, args.warmup, proc.pid))
                    inferences, executions, queue_ns, infer_ns, success = previous[model]
                    previous[model] = (r["inferences"], r["executions"], r["queue_ns"], r["infer_ns"], r["success"])
                    runs, done = r["executions"] - executions, max(1, r["success"] - success)
                    r["mean_batch"] = (r["inferences"] - inferences) / runs if runs else 0.0
                    r["queue_ms"] = (r["queue_ns"] - queue_ns) / done / 1e6
                    r["infer_ms"] = (r["infer_ns"] - infer_ns) / done / 1e6
                    results[(model, concurrency)] = r

    print(f"ONNX MLP {MLP_LAYERS} x MatMul (width {MLP_WIDTH}), FP32 [1, {FEATURES}] per request, "
          f"{os.cpu_count()} CPUs, client and server on 127.0.0.1, {args.seconds:.0f} s per point")
    print(f"batched: dynamic_batching {{ max_queue_delay_microseconds: {args.delay_us} }}, "
          f"max_batch_size {MAX_BATCH_SIZE}; instances: {args.instances or 'default (2)'}")
    print(f"{'model':<12} {'conc':>4} {'infer/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'batch':>6} {'queue ms':>8} {'exec ms':>7} {'srv cpu':>7} {'cli cpu':>7}")
    for concurrency in CONCURRENCIES:
        for model in ("mlp_direct", "mlp_batched"):
            r = results[(model, concurrency)]
            print(f"{model:<12} {concurrency:>4} {r['rps']:9.0f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} "
                  f"{r['mean_batch']:6.1f} {r['queue_ms']:8.2f} {r['infer_ms']:7.2f} {r['server_cpu']:7.2f} {r['client_cpu']:7.2f}")
    print("batch: mean executed batch size; queue/exec ms: server-side mean per request (ModelStatistics)")
    print("srv/cli cpu: CPU cores busy in the server / client process")
    top = CONCURRENCIES[-1]
    ratio = results[("mlp_batched", top)]["rps"] / results[("mlp_direct", top)]["rps"]
    print(f"throughput ratio batched / direct at concurrency {top}: {ratio:.2f}x (target >= 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
