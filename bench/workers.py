"""Paced streams held at chunk p99 < 300 ms by `asr-server --workers 1` and `--workers N`, serving layer only.

    python -m bench.workers [--workers 1,2] [--seconds 10] [--clients 2] [--connections 8]
    python -m bench.workers --load perf_analyzer      # NVIDIA's C++ load generator (scripts/get_perf_analyzer.sh)

The server runs the bundled streaming_wenet config with bench/stream_overhead.py's fixed-answer model.py (the
serving layer's cost without the recogniser), as `python -m asr_server --workers N` in a subprocess. The load:
--clients generator processes, each spreading its streams over --connections gRPC connections, each a TCP
connection of its own (the kernel gives each connection to one worker; one connection would put every stream on
one worker), 640 ms chunks paced at real time, sent from pre-serialised requests (bench/lean_streams.py) so that
the generators leave the cores to the server. The stream count doubles until the chunk p99 passes 300 ms or a
stream fails, then bisects the gap down to --resolution; the largest count that held is printed per setting,
and their ratio. The generators still share the machine with the server, and say so by their own CPU time.

With --load perf_analyzer the load is NVIDIA's perf_analyzer instead (C++, a fraction of the Python
generators' CPU): S streams are S concurrent sequences (--num-of-sequences) of --seconds of 640 ms chunks at
S / 0.64 requests a second in all (request-rate mode), shared by --perf-processes processes of one connection
each, and a count holds when every process's p99 is under 300 ms and together they kept up with the rate. The repository then declares TRANSCRIPTS only, since
perf_analyzer asks for every declared output and the fixed-answer model makes no DETAILS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from asr_server.child_process import stop_process
from bench._latency import percentile_ms

ROOT = Path(__file__).resolve().parent.parent
CHUNK_MS = 640.0
P99_LIMIT_MS = 300.0


def generator(url: str, data: str, streams: int, connections: int, seconds: float, offset: float, out) -> None:
    """One load process: `streams` paced streams over `connections` connections (bench.lean_streams: requests
    serialised once, so that the generator leaves the cores to the server); puts its chunk latencies."""
    import random

    import grpc

    from asr_client.connections import OWN_CONNECTION
    from asr_client.streaming import MAX_SEQUENCE_ID, StreamOptions
    from bench.lean_streams import paced_sequence, utterance_requests
    from bench.vs_sherpa import load_data

    options = StreamOptions(chunk_ms=CHUNK_MS)
    utterances = [utterance_requests(samples, options.plan, options.model) for _, samples, _ in load_data(Path(data))]
    # a random base keeps the generator processes' sequence ids apart, as the bundled client's does
    sequence_ids = iter(range(random.SystemRandom().randrange(1, MAX_SEQUENCE_ID // 2), MAX_SEQUENCE_ID))

    async def main():
        # one TCP connection per channel (asr_client.connections says why)
        channels = [grpc.aio.insecure_channel(url, options=[OWN_CONNECTION])
                    for _ in range(max(1, min(connections, streams)))]

        async def one(i):
            await asyncio.sleep((i / max(1, streams) + offset) * CHUNK_MS / 1000)
            latencies, audio, k = [], 0.0, i
            while audio < seconds:
                utterance = utterances[k % len(utterances)]
                latencies += await paced_sequence(channels[i % len(channels)], utterance, next(sequence_ids))
                audio += utterance.seconds
                k += 1
            return latencies

        try:
            results = await asyncio.gather(*(one(i) for i in range(streams)), return_exceptions=True)
        finally:
            for c in channels:
                await c.close()
        errors = [r for r in results if isinstance(r, BaseException)]
        return [x for r in results if not isinstance(r, BaseException) for x in r], len(errors)

    started = time.process_time()
    latencies, errors = asyncio.run(main())
    out.put((latencies, errors, time.process_time() - started))


def load(url: str, args, streams: int) -> tuple[float, int, float]:
    """(chunk p99 ms, failed streams, generators' CPU-s) of `streams` paced streams."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    shares = [streams // args.clients + (i < streams % args.clients) for i in range(args.clients)]
    procs = [ctx.Process(target=generator, args=(url, str(args.data), n, args.connections, args.seconds,
                                                 i / args.clients / max(1, n), out))
             for i, n in enumerate(shares) if n]
    for p in procs:
        p.start()
    latencies, errors, cpu = [], 0, 0.0
    for _ in procs:
        lat, err, c = out.get(timeout=args.seconds * 10 + 120)
        latencies += lat
        errors += err
        cpu += c
    for p in procs:
        p.join()
    p99 = percentile_ms(latencies, 99, empty=float("inf"))
    return p99, errors, cpu


KEEP_UP = 0.95  # perf_analyzer's throughput must reach this share of the rate it was asked to send


def perf_analyzer_input(folder: Path) -> Path:
    """perf_analyzer's --input-data: one 640 ms chunk (silence: the fixed-answer model does not read it)."""
    samples = int(CHUNK_MS / 1000 * 16000)
    path = folder / "chunk.json"
    path.write_text(json.dumps({"data": [{"WAV": {"content": [0.0] * samples, "shape": [samples]},
                                          "WAV_LENS": [samples]}]}))
    return path


SEQUENCE_IDS_PER_PROCESS = 10**8  # each process draws its sequence ids from a range of its own (stoi: < 2^31)


def load_perf_analyzer(url: str, args, streams: int) -> tuple[float, int, float]:
    """(chunk p99 ms, failed: 1 when a perf_analyzer failed or they fell behind the rate, their CPU-s) of
    `streams` sequences paced as streams, shared by --perf-processes perf_analyzer processes of one thread and one
    connection each. One process with several threads sends a sequence's requests over several connections,
    where they can overtake each other (from about 190 sequences here: "must specify the START flag")."""
    import resource
    from concurrent.futures import ThreadPoolExecutor

    from asr_server.analyzer.perf import LoadPoint, PerfError, PerfSettings, Workload, measure

    workload = Workload(input_args=("--input-data", str(args.perf_input)), sequence=True, streaming=True,
                        sequence_length=max(1, round(args.seconds * 1000 / CHUNK_MS)))
    shares = [n for n in (streams // args.perf_processes + (i < streams % args.perf_processes)
                          for i in range(args.perf_processes)) if n]

    def one(index: int, count: int):
        first = 1 + index * SEQUENCE_IDS_PER_PROCESS
        settings = PerfSettings(args.perf_binary, measurement_interval_ms=int(args.seconds * 1000), max_trials=3,
                                extra_args=("--num-of-sequences", str(count), "--max-threads", "1",
                                            "--sequence-id-range", f"{first}:{first + SEQUENCE_IDS_PER_PROCESS}"))
        try:
            return measure(settings, url, "streaming_wenet", workload,
                           LoadPoint(request_rate=count / (CHUNK_MS / 1000)))
        except PerfError as exc:
            print(f"    perf_analyzer {index} at {count} of {streams} streams: {exc}", flush=True)
            return None

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with ThreadPoolExecutor(len(shares)) as pool:
        results = list(pool.map(one, range(len(shares)), shares))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if any(r is None for r in results):
        return float("inf"), 1, cpu
    behind = sum(r.throughput for r in results) < KEEP_UP * streams / (CHUNK_MS / 1000)
    return max(r.p99_ms for r in results), int(behind), cpu  # the worst process's p99: a conservative bound


PERF_IDLE_US = 60_000_000  # perf_analyzer leaves some of its sequences alone for longer than the bundled 5 s


def transcripts_only(repo: Path) -> None:
    """Drop every output but TRANSCRIPTS from the repository's streaming_wenet config, and let a sequence idle
    for PERF_IDLE_US: perf_analyzer's request-rate mode picks which sequence each request goes to, so a sequence
    can wait longer than the 5 s after which the server frees it (its next request then fails for want of a
    START flag, as in Triton)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    path = repo / "streaming_wenet" / "config.pbtxt"
    config = text_format.Parse(path.read_text(), mc.ModelConfig())
    kept = [o for o in config.output if o.name == "TRANSCRIPTS"]
    del config.output[:]
    config.output.extend(kept)
    config.sequence_batching.max_sequence_idle_microseconds = PERF_IDLE_US
    path.write_text(text_format.MessageToString(config))


def held(p99: float, errors: int) -> bool:
    return errors == 0 and p99 < P99_LIMIT_MS


def largest_held(url: str, args) -> tuple[int, list[str]]:
    lines, best, failed_at = [], 0, None

    def holds(count: int) -> bool:
        """One trial at `count` streams, its line in `lines`."""
        # bench/gpu_scale.py shares this search with its own arguments, without --load: the Python generators
        generator = load_perf_analyzer if getattr(args, "load", "python") == "perf_analyzer" else load
        p99, errors, cpu = generator(url, args, count)
        lines.append(f"    {count:5d} streams: chunk p99 {p99:7.0f} ms, failed {errors}, load generators' CPU "
                     f"{cpu:.1f} s")
        return held(p99, errors)

    count = args.start
    while count <= args.max_streams:
        if not holds(count):
            failed_at = count
            break
        best = count
        count *= 2
    while best and failed_at and failed_at - best > max(1.0, best * args.resolution):  # bisect the gap
        middle = (best + failed_at) // 2
        if holds(middle):
            best = middle
        else:
            failed_at = middle
    return best, lines


def start_server(repo: Path, workers: int) -> tuple[subprocess.Popen, str]:
    from bench.soak import free_ports, wait_ready

    grpc_port, http_port, metrics_port = free_ports(3)
    log_path = Path(tempfile.gettempdir()) / f"bench_workers_{workers}.log"
    with open(log_path, "w") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "asr_server", "--model-repository", str(repo), "--workers", str(workers),
             "--grpc-address", "127.0.0.1", "--grpc-port", str(grpc_port), "--http-address", "127.0.0.1",
             "--http-port", str(http_port), "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port)],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"127.0.0.1:{grpc_port}"
    asyncio.run(wait_ready(url, process, 600))
    # every worker up: the supervisor opens the metrics port after the last one has loaded its models (a load
    # started earlier would put its connections on the first workers only)
    deadline = time.monotonic() + 600
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server's workers did not all start (log: {log_path})")
            time.sleep(0.5)  # another process: nothing to wait on but its port
    return process, url


def main() -> int:
    from bench.stream_overhead import no_op_repository

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", default="1,2", help="settings compared, in one run")
    p.add_argument("--data", type=Path, default=ROOT / "tests" / "data" / "demo_utts")
    p.add_argument("--seconds", type=float, default=10.0, help="audio per stream at each count")
    p.add_argument("--clients", type=int, default=2, help="load generator processes")
    p.add_argument("--connections", type=int, default=8, help="gRPC connections per generator")
    p.add_argument("--start", type=int, default=32)
    p.add_argument("--max-streams", type=int, default=2048)
    p.add_argument("--resolution", type=float, default=0.125,
                   help="bisect until the gap between held and failed counts is at most this share of the held one")
    p.add_argument("--load", choices=("python", "perf_analyzer"), default="python",
                   help="the load generator: bench/lean_streams.py processes, or NVIDIA's perf_analyzer")
    p.add_argument("--perf-processes", type=int, default=8,
                   help="perf_analyzer processes (one thread and one connection each)")
    args = p.parse_args()
    if args.load == "perf_analyzer":
        from asr_server.analyzer.perf import find_binary

        if not 1 <= args.perf_processes <= (2**31 - 1) // SEQUENCE_IDS_PER_PROCESS:
            p.error("--perf-processes: 1 to 21 (perf_analyzer reads sequence ids as 32-bit integers)")

        args.perf_binary = find_binary()
    settings = [int(w) for w in args.workers.split(",")]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo = no_op_repository(Path(tmp) / "repo")
        if args.load == "perf_analyzer":
            transcripts_only(repo)
            args.perf_input = perf_analyzer_input(Path(tmp))
        for workers in settings:
            process, url = start_server(repo, workers)
            try:
                results[workers], lines = largest_held(url, args)
            finally:
                stop_process(process, 60)
            print(f"--workers {workers}: {results[workers]} paced streams held (chunk p99 < {P99_LIMIT_MS:.0f} ms)")
            print("\n".join(lines))
    base = results[settings[0]]
    for workers in settings[1:]:
        ratio = results[workers] / base if base else float("nan")
        print(f"--workers {workers} / --workers {settings[0]}: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
