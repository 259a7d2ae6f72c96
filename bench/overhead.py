"""Per-request overhead of our ModelInfer against a raw grpcio echo server, measured in the same run.

Both servers run in their own process on 127.0.0.1 and answer the same tritonclient request
(one FP32 [1, 16] tensor): ours through the full path (convert, validate, schedule, execute an ONNX
identity model, convert back), the echo server by returning the input bytes from a bare ModelInfer.
Prints p50/p99 latency and requests/s at concurrency 1 (sync client) and the p50 ratio (target <= 1.5x).
The two servers are measured in alternating blocks of 100 requests, so background load hits both alike.

    python -m bench.overhead [--requests 2000]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from bench._latency import latency_summary
from bench._server import serve_echo, serve_repository, server_process

CONFIG = """
name: "identity"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 16 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 16 ] } ]
"""


def make_client(port: int):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    inp = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    inp.set_data_from_numpy(data)
    for _ in range(200):  # warm-up
        result = client.infer("identity", [inp])
    assert np.array_equal(result.as_numpy("OUTPUT0"), data), "server returned wrong data"
    return client, inp


def timed_block(client, inp, requests: int) -> tuple[list[float], float]:
    latencies = []
    start = time.perf_counter()
    for _ in range(requests):
        t0 = time.perf_counter()
        client.infer("identity", [inp])
        latencies.append(time.perf_counter() - t0)
    return latencies, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()

    from tests.helpers.onnx_models import identity_model

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        (repo / "identity").mkdir()
        (repo / "identity" / "config.pbtxt").write_text(CONFIG)
        identity_model(repo / "identity" / "1" / "model.onnx", shape=["batch", 16])
        servers = {"raw grpcio echo": (serve_echo, ()), "asr_server": (serve_repository, (str(repo),))}
        clients = {}
        with contextlib.ExitStack() as running:
            for label, (target, extra) in servers.items():
                _, port = running.enter_context(server_process(target, *extra, timeout_s=60))
                clients[label] = make_client(port)
                running.callback(clients[label][0].close)
            # Alternate short blocks so that both servers see the same background load.
            samples = {label: ([], 0.0) for label in clients}
            block = 100
            for _ in range(max(1, args.requests // block)):
                for label, (client, inp) in clients.items():
                    latencies, elapsed = timed_block(client, inp, block)
                    samples[label] = (samples[label][0] + latencies, samples[label][1] + elapsed)
            results = {label: latency_summary(*sample) for label, sample in samples.items()}
    print(f"ModelInfer round trip, FP32 [1,16], concurrency 1, {args.requests} requests, 127.0.0.1")
    print(f"{'server':<18} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8}")
    for label, r in results.items():
        print(f"{label:<18} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f} {r['rps']:8.0f}")
    ratio = results["asr_server"]["p50_ms"] / results["raw grpcio echo"]["p50_ms"]
    print(f"p50 ratio asr_server / raw echo: {ratio:.2f}x (target <= 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
