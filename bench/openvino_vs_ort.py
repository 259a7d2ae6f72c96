"""The ASR encoders on OpenVINO against onnxruntime, in the same run, through the server's own backends.

    python -m bench.openvino_vs_ort [--repo model_repo] [--threads 1,2] [--batches 1,4,16,64]
        [--offline-batches 1,4,8] [--offline-seconds 10] [--cell-seconds 1.5] [--no-transcripts] [--json out.json]

1. Streaming encoder: chunks/s by batch size (random chunk features, zero caches: the compute does not depend
   on the values) and CPU seconds per audio second (this process's user+system CPU over the audio the chunks
   hold, CLOCK_PROCESS_CPUTIME_ID); ORT and OpenVINO calls alternate round by round so that both see the same machine.
2. Offline encoder: utterances of --offline-seconds by batch size, same measures.
   Both engines are the server's backends (OnnxRuntimeBackend, OpenVINOBackend) loaded from the repository's
   configs with the thread count as a config parameter (intra_op_thread_count / INFERENCE_NUM_THREADS), so the
   settings are the ones a served model gets. Outputs are compared on the same inputs (max |diff|, top-k ids).
3. Transcripts: a server on the ONNX repository and one on its OpenVINO rewrite (scripts/openvino_repo.py)
   transcribe tests/data/demo_utts offline and streaming; every transcript must be identical.
Run it through /work/tools/heavy.sh on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from asr_server.backends.openvino import OpenVINOBackend  # noqa: E402  (first: keeps openvino's telemetry off)
from asr_server.backends.onnxruntime import OnnxRuntimeBackend
from asr_server.backends.base import ModelContext
from asr_server.repo_builder.openvino import rewrite_repository
from asr_server.repository import available_versions, complete_config, read_config

ENCODER_FRAME_S = 0.04  # one encoder output frame: 4x subsampling of 10 ms fbank frames (the demo model)
FBANK_FRAME_S = 0.01
NUMPY_TYPES = {8: np.int32, 9: np.int64, 11: np.float32}  # config TYPE_INT32, TYPE_INT64, TYPE_FP32


def load_backend(cls, model_dir: Path, parameters: dict[str, str]):
    config = complete_config(read_config(model_dir), model_dir, available_versions(model_dir))
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    version = max(available_versions(model_dir))
    backend = cls(ModelContext(model_dir.name, version, config, model_dir, model_dir / str(version),
                               instance_name=f"{model_dir.name}_bench"))
    backend.load()
    return backend


def streaming_feeds(config, batch: int, rng) -> dict[str, np.ndarray]:
    window, mels = config.input[0].dims
    feeds = {"chunk_xs": rng.standard_normal((batch, window, mels)).astype(np.float32),
             "chunk_lens": np.full((batch,), window, np.int32)}
    for state in config.sequence_batching.state:
        feeds[state.input_name] = np.zeros((batch, *state.dims), NUMPY_TYPES[state.data_type])
    return feeds


def offline_feeds(seconds: float, batch: int, rng) -> dict[str, np.ndarray]:
    frames = int(round(seconds / FBANK_FRAME_S))
    return {"speech": rng.standard_normal((batch, frames, 80)).astype(np.float32),
            "speech_lengths": np.full((batch,), frames, np.int32)}


def cpu_now() -> float:
    """This process's CPU seconds, every thread (CLOCK_PROCESS_CPUTIME_ID: ns resolution, where os.times()
    counts 10 ms ticks, too coarse for calls of a few ms)."""
    return time.process_time()


def compare(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict:
    """max |a - b| over float outputs; share of equal elements over integer outputs (top-k ids)."""
    diff, ids = 0.0, []
    for name, x in a.items():
        y = b[name]
        if x.dtype.kind == "f":
            diff = max(diff, float(np.max(np.abs(x - y))) if x.size else 0.0)
        elif name.endswith("idx"):
            ids.append(float(np.mean(x == y)))
    return {"max_abs_diff": diff, "ids_equal": min(ids) if ids else None}


def race(engines: dict, feeds: dict[str, np.ndarray], cell_s: float) -> dict[str, tuple[float, float]]:
    """Alternate one call of each engine until each has run cell_s; {name: (wall s per call, CPU s per call)}."""
    for backend in engines.values():  # warm-up (first calls allocate)
        for _ in range(2):
            backend._run(dict(feeds))
    wall = {name: 0.0 for name in engines}
    cpu = {name: 0.0 for name in engines}
    calls = {name: 0 for name in engines}
    while min(wall.values()) < cell_s or min(calls.values()) < 3:
        for name, backend in engines.items():
            c0, t0 = cpu_now(), time.perf_counter()
            backend._run(dict(feeds))
            wall[name] += time.perf_counter() - t0
            cpu[name] += cpu_now() - c0
            calls[name] += 1
    return {name: (wall[name] / calls[name], cpu[name] / calls[name]) for name in engines}


def encoder_rows(kind: str, onnx_dir: Path, ov_dir: Path, threads: int, batches: list[int], cell_s: float,
                 offline_s: float) -> list[dict]:
    engines = {
        "ort": load_backend(OnnxRuntimeBackend, onnx_dir, {"intra_op_thread_count": str(threads)}),
        "openvino": load_backend(OpenVINOBackend, ov_dir, {"INFERENCE_NUM_THREADS": str(threads)}),
    }
    config = engines["ort"].context.config
    rng = np.random.default_rng(0)
    rows = []
    for batch in batches:
        if kind == "streaming":
            feeds = streaming_feeds(config, batch, rng)
            audio_s = batch * config.output[0].dims[0] * ENCODER_FRAME_S
        else:
            feeds = offline_feeds(offline_s, batch, rng)
            audio_s = batch * offline_s
        parity = compare(engines["ort"]._run(dict(feeds)), engines["openvino"]._run(dict(feeds)))
        timings = race(engines, feeds, cell_s)
        row = {"encoder": kind, "threads": threads, "batch": batch, **parity}
        for name, (wall, cpu) in timings.items():
            row[f"{name}_items_per_s"] = batch / wall
            row[f"{name}_cpu_s_per_audio_s"] = cpu / audio_s
        row["openvino_speedup"] = timings["ort"][0] / timings["openvino"][0]
        rows.append(row)
        print(json.dumps(row), flush=True)
    for backend in engines.values():
        backend.unload()
    return rows


async def transcribe_all(port: int, items) -> tuple[list[str], list[str]]:
    import tritonclient.grpc.aio as aioclient

    from asr_client.offline import recognize
    from asr_client.streaming import StreamingClient, StreamOptions

    url = f"127.0.0.1:{port}"
    client = aioclient.InferenceServerClient(url)
    try:
        offline = [(await recognize(client, samples, timeout_s=60)).text for _, samples, _ in items]
    finally:
        await client.close()
    async with StreamingClient(url, StreamOptions(chunk_ms=640)) as streaming:
        streamed = [(await streaming.transcribe(samples)).text for _, samples, _ in items]
    return offline, streamed


def transcripts(repo: Path, items) -> tuple[list[str], list[str]]:
    from bench._server import serve_repository, server_process

    with server_process(serve_repository, str(repo)) as (_, port):
        return asyncio.run(transcribe_all(port, items))


def table(rows: list[dict]) -> str:
    lines = ["| encoder | threads | batch | ORT items/s | OpenVINO items/s | OV/ORT | ORT CPU-s/audio-s | "
             "OV CPU-s/audio-s | max abs diff | top-k ids equal |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ids = "-" if r["ids_equal"] is None else f"{100 * r['ids_equal']:.2f}%"
        lines.append(
            f"| {r['encoder']} | {r['threads']} | {r['batch']} | {r['ort_items_per_s']:.1f} | "
            f"{r['openvino_items_per_s']:.1f} | {r['openvino_speedup']:.2f} | {r['ort_cpu_s_per_audio_s']:.4f} | "
            f"{r['openvino_cpu_s_per_audio_s']:.4f} | {r['max_abs_diff']:.1e} | {ids} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repo", type=Path, default=ROOT / "model_repo")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batches", default="1,4,16,64", help="streaming encoder batch sizes (chunks per call)")
    p.add_argument("--offline-batches", default="1,4,8")
    p.add_argument("--offline-seconds", type=float, default=10.0, help="audio per offline utterance")
    p.add_argument("--cell-seconds", type=float, default=1.5, help="timed seconds per engine per cell")
    p.add_argument("--no-transcripts", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as work:
        onnx_repo = Path(work) / "onnx"
        shutil.copytree(args.repo, onnx_repo, ignore=shutil.ignore_patterns("add_sub", "identity_fp32", "__pycache__"))
        ov_repo = Path(work) / "openvino"
        start = time.monotonic()
        rewrite_repository(onnx_repo, ov_repo)
        print(f"IR written in {time.monotonic() - start:.1f} s", flush=True)
        rows = []
        for threads in (int(t) for t in args.threads.split(",")):
            rows += encoder_rows("streaming", onnx_repo / "streaming_encoder", ov_repo / "streaming_encoder",
                                 threads, [int(b) for b in args.batches.split(",")], args.cell_seconds,
                                 args.offline_seconds)
            rows += encoder_rows("offline", onnx_repo / "encoder", ov_repo / "encoder", threads,
                                 [int(b) for b in args.offline_batches.split(",")], args.cell_seconds,
                                 args.offline_seconds)
        result: dict = {"rows": rows}
        print(table(rows))
        if not args.no_transcripts:
            from bench.vs_sherpa import load_data

            items = load_data(ROOT / "tests" / "data" / "demo_utts")
            ort_texts = transcripts(onnx_repo, items)
            ov_texts = transcripts(ov_repo, items)
            same = [sum(a == b for a, b in zip(x, y)) for x, y in zip(ort_texts, ov_texts)]
            result["transcripts"] = {"utterances": len(items), "offline_identical": same[0],
                                     "streaming_identical": same[1]}
            print(f"transcripts identical, ONNX vs OpenVINO repository: offline {same[0]}/{len(items)}, "
                  f"streaming {same[1]}/{len(items)}")
            for kind, x, y in (("offline", *[t[0] for t in (ort_texts, ov_texts)]),
                               ("streaming", *[t[1] for t in (ort_texts, ov_texts)])):
                for (utt, _, _), a, b in zip(items, x, y):
                    if a != b:
                        print(f"  {kind} {utt}: ORT {a!r} vs OpenVINO {b!r}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
