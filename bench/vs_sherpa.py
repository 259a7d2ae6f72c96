"""Paced real-time streams per machine: this server vs sherpa-onnx's C++ websocket server, same weights.

    python -m bench.vs_sherpa --model-dir models/demo_en [--data tests/data/demo_utts] [--seconds 8]

1. exports DIR once with scripts/export_onnx.py --sherpa (our graphs + sherpa/model.onnx, sherpa/tokens.txt)
   and builds model repositories from the same graphs with scripts/build_model_repo.py: "rescore" (CTC
   prefix beam search + attention rescoring, the default) and "greedy" (--search greedy --no-rescoring, what
   sherpa-onnx does), each also as "*_proc" (--instance-process: each scorer instance in its own process)
   and as "*_workers" (`asr-server --workers N`: N server processes on one port, the load spread over
   --connections gRPC connections so that the kernel gives each worker its share);
2. the peer is the real server: `sherpa-onnx-online-websocket-server` (PyPI `sherpa-onnx-bin`) with
   `--wenet-ctc-model`, greedy search, endpointing off. It binds every interface, so this script re-runs
   itself inside a private network namespace (`unshare -n`, loopback only) with both servers and the load
   generator; where that is not possible sherpa-onnx is skipped with the reason;
3. the same metric for every system: S concurrent streams, 640 ms chunks paced at real time, starts staggered
   over one chunk, each stream playing the demo utterances back to back for about --seconds of audio; final
   latency = last audio sent -> final text (sherpa-onnx: the text "Done" goes right after the last samples and
   the final JSON result is the end; ours: the END request's response). A stream count is sustained when
   the p99 final latency is under 300 ms with no error; S = 8, 16, 32, ... then bisection;
4. also: our per-chunk latency, each server's CPU-seconds per audio-second (process CPU time from /proc), the
   load generator's, how busy the whole machine was (middle half of each trial), and the bare ONNX Runtime
   floor of the same work (streaming encoder windows at batch 1 and batched, one thread; plus decoder.onnx
   rescoring calls; plus the fbank), measured in the same run; from these, the CPU budget per audio-second
   that the targets (1.7x greedy, 1.3x rescoring) would leave the server, beside that floor; and at the
   largest stream count every system sustained, the same floor at that load (bench/paced_floor.py: the bare
   work paced as those streams send it and batched as each server batches; idle gaps make ORT dearer here);
5. sherpa-onnx gets its best settings: each of --sherpa-configs (work threads, ORT threads, max batch size)
   runs one probe at --probe-streams and the one with the lowest p99 final latency (then CPU) is searched;
6. WER of each on all utterances of --wer-data (default --data; unpaced, 640 ms chunks); a plot of p99 final
   latency and CPU against concurrent streams goes to --plot (docs/vs_sherpa.png).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from asr_server.child_process import stop_process
from bench._latency import percentile_ms
from bench._server import serve_repository, server_process

P99_BUDGET_MS = 300.0
SAMPLE_RATE = 16000
ONNX_MODELS = ("encoder", "streaming_encoder", "decoder")
SHERPA_SERVER = "sherpa-onnx-online-websocket-server"
IN_NETNS_ENV = "VS_SHERPA_IN_NETNS"


# ----------------------------------------------------------------------------------------------- preparation

def export_and_build(model_dir: Path, work: Path, threads: int) -> tuple[Path, dict[str, Path]]:
    onnx_dir = work / "onnx"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "export_onnx.py"), "--model-dir", str(model_dir),
                          "--out-dir", str(onnx_dir), "--sherpa"], capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise SystemExit(f"export failed:\n{run.stdout}\n{run.stderr}")
    repos = {}
    greedy = ["--search", "greedy", "--no-rescoring"]
    for mode, decoding in (("rescore", []), ("greedy", greedy), ("rescore_proc", ["--instance-process"]),
                           ("greedy_proc", greedy + ["--instance-process"])):
        repo = work / f"repo_{mode}"
        run = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_model_repo.py"), "--model-dir",
                              str(model_dir), "--onnx-dir", str(onnx_dir), "--out", str(repo), *decoding],
                             capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            raise SystemExit(f"build_model_repo failed:\n{run.stdout}\n{run.stderr}")
        for name in ONNX_MODELS:  # the same intra-op thread count as sherpa-onnx's --num-threads
            config = repo / name / "config.pbtxt"
            config.write_text(config.read_text() + 'parameters { key: "intra_op_thread_count" '
                              f'value: {{ string_value: "{threads}" }} }}\n')
        repos[mode] = repo
    return onnx_dir, repos


def load_data(folder: Path) -> list[tuple[str, np.ndarray, str]]:
    from asr_client.audio import load_audio

    texts = dict(line.split(" ", 1) for line in (folder / "text").read_text().splitlines() if line.strip())
    items = []
    for line in (folder / "wav.scp").read_text().splitlines():
        if line.strip():
            utt, path = line.split(maxsplit=1)
            items.append((utt, load_audio(folder / path).samples, texts.get(utt, "").strip()))
    return items


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def child_pids(pid: int) -> list[int]:
    """The live child processes of a process (a server's model instances run in processes of their own with
    instance_process), found by the parent each process's status names: a thread's own `children` list
    vanishes when that thread ends, and its children pass to another thread. Empty when the process is gone."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue  # it ended while we looked
        parent = next((line.split()[1] for line in status.splitlines() if line.startswith("PPid:")), None)
        if parent == str(pid):
            out.append(int(entry.name))
    return out


def cpu_seconds(pid: int | None = None) -> float:
    """user + system CPU seconds of a process (all its threads) and of its live child processes; this process
    when pid is None."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    total = _process_tree_cpu(pid)
    return float("nan") if total is None else total


def _process_tree_cpu(pid: int) -> float | None:
    """cpu_seconds of a process and its children; None when it is gone (a child gone meanwhile counts 0)."""
    try:
        fields = _stat(pid)
        children = child_pids(pid)
    except (OSError, IndexError, ValueError):
        return None
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(t for t in map(_process_tree_cpu, children) if t is not None)


def machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine so far (/proc/stat; idle and iowait are not busy)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


class MachineLoad:
    """How busy every core of the machine was in the middle half of a trial (the staggered start and the
    streams finishing one by one at its ends would water down an average over the whole trial)."""

    def __init__(self, every_s: float = 0.25):
        self.every_s, self.samples, self._stop = every_s, [], threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            self.samples.append(machine_ticks())
            if self._stop.wait(self.every_s):
                self.samples.append(machine_ticks())
                return

    def __enter__(self) -> "MachineLoad":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def steady_pct(self) -> float:
        n = len(self.samples)
        if n < 2:
            return float("nan")
        first, last = self.samples[n // 4], self.samples[max(n // 4 + 1, 3 * n // 4)]
        return 100 * (last[0] - first[0]) / max(1, last[1] - first[1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------------ the floor

def neural_floor(onnx_dir: Path, items, threads: int, beam: int = 10) -> dict:
    """CPU-seconds per audio-second of bare ONNX Runtime doing the streaming work: encoder windows (640 ms of
    audio each) at batch 1 and 32 with zero caches, and decoder.onnx rescoring one n-best list per utterance
    (batch 8, the demo utterances' lengths, 12-token hypotheses); and the fbank of the same audio."""
    import onnxruntime as ort

    def session(name):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        return ort.InferenceSession(str(onnx_dir / name), options, providers=["CPUExecutionProvider"])

    def timed(fn, repeat):
        fn()
        start = cpu_seconds()
        for _ in range(repeat):
            fn()
        return (cpu_seconds() - start) / repeat

    from bench.paced_floor import WINDOW_S, decoder_feeds, encoder_feeds, encoder_frames

    rng = np.random.default_rng(0)
    enc = session("streaming_encoder.onnx")
    out = {}
    for batch in (1, 32):
        feeds = encoder_feeds(enc, batch, rng)
        per_call = timed(lambda: enc.run(None, feeds), max(4, 128 // batch))
        out[f"encoder_b{batch}"] = per_call / (batch * WINDOW_S)
    dec = session("decoder.onnx")
    audio = np.array([s.size / SAMPLE_RATE for _, s, _ in items])
    batch = 8  # utterances of the mean length, padded to the longest
    feeds = decoder_feeds(dec, [int(audio.mean() / 0.04)] * batch, rng, padded=encoder_frames(audio.max()),
                          beam=beam)
    out["decoder"] = timed(lambda: dec.run(None, feeds), 8) / (batch * audio.mean())
    # Features are work every server does too: the fastest fbank here (ours, numpy, 32 chunks a call).
    from asr_server.asr.features.fbank import FbankConfig, batch_fbank_computer

    chunks = [rng.normal(scale=3000, size=int(WINDOW_S * SAMPLE_RATE) + 240).astype(np.float32) for _ in range(32)]
    fbank = batch_fbank_computer("numpy", FbankConfig())
    out["fbank"] = timed(lambda: fbank(chunks), 16) / (32 * WINDOW_S)
    return out


# ----------------------------------------------------------------------------------------- load generators

async def _paced_streams(transcribe, items, count: int, chunk_ms: float, seconds: float) -> dict:
    """count streams, staggered over one chunk, each playing utterances back to back for >= seconds of audio.
    transcribe(samples) -> (text, final latency s, [chunk latencies s])."""
    async def one(i):
        await asyncio.sleep(i / count * chunk_ms / 1000)
        finals, chunks, audio, k = [], [], 0.0, i
        while audio < seconds:
            samples = items[k % len(items)][1]
            _, final, lat = await transcribe(samples)
            finals.append(final)
            chunks += lat
            audio += samples.size / SAMPLE_RATE
            k += 1
        return finals, chunks, audio

    results = await asyncio.gather(*(one(i) for i in range(count)), return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    ok = [r for r in results if not isinstance(r, BaseException)]
    finals = [x for f, _, _ in ok for x in f]
    chunks = [x for _, c, _ in ok for x in c]
    return {"streams": count, "audio_s": sum(a for _, _, a in ok), "errors": len(errors),
            "first_error": repr(errors[0])[:200] if errors else "",
            "final_p50_ms": percentile_ms(finals, 50), "final_p99_ms": percentile_ms(finals, 99),
            "chunk_p50_ms": percentile_ms(chunks, 50), "chunk_p99_ms": percentile_ms(chunks, 99)}


class OurTranscriber:
    def __init__(self, client):
        self.client = client

    async def __call__(self, samples):
        r = await self.client.transcribe(samples)
        lat = list(r.chunk_latencies_s)
        return r.text, lat[-1], lat


async def ours_paced(url: str, items, count: int, chunk_ms: float, seconds: float, connections: int = 1) -> dict:
    """Paced streams over ``connections`` gRPC connections, each utterance on the next one in turn (with
    --workers the kernel gives each connection to one worker: one connection would load one worker only)."""
    from asr_client.connections import own_connection_client
    from asr_client.streaming import StreamingClient, StreamOptions

    async with contextlib.AsyncExitStack() as stack:
        options = StreamOptions(chunk_ms=chunk_ms, realtime=True)
        clients = [StreamingClient(url, options, await stack.enter_async_context(own_connection_client(url)))
                   for _ in range(max(1, connections))]
        turn = itertools.cycle([OurTranscriber(client) for client in clients])
        return await _paced_streams(lambda samples: next(turn)(samples), items, count, chunk_ms, seconds)


class SherpaTranscriber:
    """One utterance per websocket connection, as sherpa-onnx's own client does: binary float32 samples paced
    at real time, the text "Done" right after the last ones, JSON results back, "Done!" last."""

    def __init__(self, port: int, chunk: int, realtime: bool):
        self.url, self.chunk, self.realtime = f"ws://127.0.0.1:{port}", chunk, realtime

    async def __call__(self, samples):
        import aiohttp  # already a dependency of the project (no websockets package needed)

        loop = asyncio.get_running_loop()
        async with aiohttp.ClientSession() as session, session.ws_connect(
                self.url, max_msg_size=0, autoping=False, timeout=aiohttp.ClientWSTimeout(ws_close=10)) as ws:
            text, final_at = "", None

            async def receive():
                nonlocal text, final_at
                async for message in ws:
                    if message.type != aiohttp.WSMsgType.TEXT:
                        break
                    if message.data == "Done!":  # sent right after the last result: the final text is known
                        final_at = loop.time()
                        break
                    text = json.loads(message.data).get("text", text)

            receiver = asyncio.create_task(receive())
            started = loop.time()
            for begin in range(0, len(samples), self.chunk):
                piece = np.ascontiguousarray(samples[begin:begin + self.chunk], dtype=np.float32)
                if self.realtime:
                    delay = started + (begin + len(piece)) / SAMPLE_RATE - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                await ws.send_bytes(piece.tobytes())
            last_sent = loop.time()
            await ws.send_str("Done")
            await receiver
        if final_at is None:
            raise RuntimeError("sherpa-onnx closed the stream without its 'Done!'")
        return text, final_at - last_sent, []


async def sherpa_paced(port: int, items, count: int, chunk_ms: float, seconds: float) -> dict:
    chunk = int(round(chunk_ms * SAMPLE_RATE / 1000))
    return await _paced_streams(SherpaTranscriber(port, chunk, True), items, count, chunk_ms, seconds)


async def accuracy(transcribe, items, concurrency: int = 4) -> float | None:
    from asr_client.report import error_rates

    semaphore = asyncio.Semaphore(concurrency)

    async def one(samples):
        async with semaphore:
            return (await transcribe(samples))[0]

    hyps = await asyncio.gather(*(one(s) for _, s, _ in items))
    rates = error_rates([(ref, hyp) for (_, _, ref), hyp in zip(items, hyps)])
    return rates.wer if rates else None


async def ours_accuracy(url: str, items, chunk_ms: float) -> float | None:
    from asr_client.streaming import StreamingClient, StreamOptions

    async with StreamingClient(url, StreamOptions(chunk_ms=chunk_ms, realtime=False)) as client:
        return await accuracy(OurTranscriber(client), items)


# ------------------------------------------------------------------------------------------------ servers

class OurServer:
    """Our server on ``repo``: in a spawned process, or with workers > 1 as `python -m asr_server --workers N`
    (its pid is the supervisor's; cpu_seconds counts the workers, its children)."""

    def __init__(self, repo: Path, workers: int = 1):
        self._running = contextlib.ExitStack()
        if workers > 1:
            from bench.workers import start_server

            process, self.url = start_server(repo, workers)
            self._running.callback(stop_process, process)
            self.pid = process.pid
            return
        proc, port = self._running.enter_context(server_process(serve_repository, str(repo), timeout_s=180))
        self.pid = proc.pid
        self.url = f"127.0.0.1:{port}"

    def stop(self):
        self._running.close()


class SherpaServer:
    def __init__(self, exe: str, sherpa_dir: Path, meta: dict, work_threads: int, threads: int, batch: int,
                 log_dir: Path):
        self.port = free_port()
        self.settings = f"--num-work-threads={work_threads} --num-threads={threads} --max-batch-size={batch}"
        self.log = log_dir / f"sherpa_{work_threads}_{threads}_{batch}.log"
        self.proc = subprocess.Popen(
            [exe, f"--port={self.port}", f"--tokens={sherpa_dir / 'tokens.txt'}",
             f"--wenet-ctc-model={sherpa_dir / 'model.onnx'}", f"--wenet-ctc-chunk-size={meta['chunk_size']}",
             f"--wenet-ctc-num-left-chunks={meta['left_chunks']}", "--decoding-method=greedy_search",
             "--enable-endpoint=false", f"--num-work-threads={work_threads}", f"--num-threads={threads}",
             f"--max-batch-size={batch}", "--num-io-threads=1", f"--log-file={self.log}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # it listens once the model is loaded
            if self.proc.poll() is not None:
                raise RuntimeError(f"{SHERPA_SERVER} exited with {self.proc.returncode}; see {self.log}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{SHERPA_SERVER} did not listen within 120 s")

    def stop(self):
        if self.proc.poll() is None:
            stop_process(self.proc, 10)


def sherpa_meta(sherpa_dir: Path) -> dict:
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(sherpa_dir / "model.onnx")).metadata_props}
    meta.setdefault("chunk_size", "16")
    meta.setdefault("left_chunks", "4")
    return meta


# ------------------------------------------------------------------------------------------------ the runs

def trial(name: str, run, pid: int, count: int, rows: dict) -> bool:
    cpu, client, wall = cpu_seconds(pid), cpu_seconds(), time.monotonic()
    with MachineLoad() as load:
        r = asyncio.run(run(count))
    wall = time.monotonic() - wall
    cpu = cpu_seconds(pid) - cpu
    audio = r["audio_s"] or float("nan")
    r["cpu_per_audio_s"] = cpu / audio
    r["cpu_pct"] = 100 * cpu / wall
    r["load_generator_cpu_per_audio_s"] = (cpu_seconds() - client) / audio  # this process: the paced clients
    r["machine_busy_pct"] = load.steady_pct()
    rows.setdefault(name, {})[count] = r
    good = r["errors"] == 0 and r["final_p99_ms"] <= P99_BUDGET_MS
    chunk = f" chunk p50 {r['chunk_p50_ms']:4.0f} p99 {r['chunk_p99_ms']:5.0f} ms" if r["chunk_p99_ms"] == r[
        "chunk_p99_ms"] else ""
    note = f" errors {r['errors']}: {r['first_error']}" if r["errors"] else ""
    print(f"  {name:>15} S={count:<4} final p50 {r['final_p50_ms']:5.0f} p99 {r['final_p99_ms']:6.0f} ms{chunk}  "
          f"CPU {r['cpu_pct']:4.0f}% = {r['cpu_per_audio_s']:.4f} s/audio-s (clients "
          f"{r['load_generator_cpu_per_audio_s']:.4f}), machine {r['machine_busy_pct']:3.0f}% busy  "
          f"{'ok' if good else 'over'}{note}",
          flush=True)
    return good


def search(name: str, run, pid: int, rows: dict, args, deadline: float) -> tuple[int, str]:
    """Largest S under the p99 budget: doubling from --min-streams, then bisection to within 1/8. A failed S
    is tried once more (one stall of the shared machine can fail a trial) and fails only if both fail."""
    def ok(count):
        return trial(name, run, pid, count, rows) or (time.monotonic() < deadline
                                                      and trial(name, run, pid, count, rows))

    best, bad, count = 0, None, args.min_streams
    while count <= args.max_streams:
        if time.monotonic() > deadline:
            return best, "time bound reached while doubling"
        if ok(count):
            best, count = count, count * 2
        else:
            bad = count
            break
    if bad is None:
        return best, f"the most tried (--max-streams {args.max_streams})"
    while bad - best > max(1, best // 8):
        if time.monotonic() > deadline:
            return best, f"time bound reached; {bad} failed"
        mid = (best + bad) // 2
        if ok(mid):
            best = mid
        else:
            bad = mid
    return best, f"{bad} failed"


# The acceptance: sustained streams of each of our modes over sherpa-onnx's.
TARGET_RATIOS = {"ours greedy": 1.7, "ours rescore": 1.3}
PROC = "_proc"  # a mode's variant with each scorer instance in a process of its own (--instance-process)
WORKERS = "_workers"  # a mode's variant served by --workers N server processes


def base_name(name: str) -> str:
    """The decoding of a system ("ours greedy" for "ours greedy_proc" and "ours greedy_workers"): what its
    target, floor and repository depend on."""
    for variant in (PROC, WORKERS):
        if name.endswith(variant):
            return name[:-len(variant)]
    return name


def streaming_batching(repo: Path) -> tuple[float, int]:
    """(max_queue_delay in seconds, max_batch_size) of a repository's streaming_wenet."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    config = text_format.Parse((repo / "streaming_wenet" / "config.pbtxt").read_text(), mc.ModelConfig())
    return config.sequence_batching.oldest.max_queue_delay_microseconds / 1e6, config.max_batch_size


def floors_at_load(onnx_dir: Path, items, streams: int, seconds: float, best: dict, repos: dict,
                   sherpa_batch: int) -> dict:
    """bench.paced_floor's floor of each decoding at ``streams`` paced streams, batched as its server batches:
    sherpa-onnx whatever streams are ready (delay 0) up to its --max-batch-size; ours by the streaming model's
    sequence batching. Keys: base_name of each system in ``best``."""
    from bench.paced_floor import paced_floor

    out = {}
    for base in dict.fromkeys(base_name(n) for n in best):
        if base == "sherpa-onnx":
            delay, batch = 0.0, sherpa_batch
        else:
            delay, batch = streaming_batching(repos[base.split()[-1]])
        out[base] = paced_floor(onnx_dir, items, streams, seconds, delay, batch, rescoring=base == "ours rescore")
    return out


def target_budgets(best: dict, rows: dict, floors: dict, fbank: float) -> dict:
    """Whether a target is within reach on this machine: the server's CPU budget per audio-second when it
    carries ratio x the peer's streams, after the paced clients' own measured CPU, (a) with every core
    busy, (b) at the machine load where the busier of the two servers stopped (both stop short of 100%:
    latency grows before the cores run out; the middle half of its trial); beside the bare floor of the same
    work (neural + fbank). Every real-time stream brings one audio-second per second. Also the most streams that
    load carries were the server at its floor (no serving cost at all), and were it as far above its floor as
    the peer is above its own (batch-1) floor at the peer's limit: what batching alone can buy here."""
    peer = best.get("sherpa-onnx")
    if not peer:
        return {}
    cores = os.cpu_count() or 1
    peer_floor = floors.get("sherpa-onnx")
    peer_factor = rows["sherpa-onnx"][peer]["cpu_per_audio_s"] / (peer_floor + fbank) if peer_floor else None
    out = {}
    print("what the targets need on this machine:")
    for name in best:
        ratio = TARGET_RATIOS.get(base_name(name))
        if not ratio or not best[name]:
            continue
        target = int(np.ceil(ratio * peer))
        limit = rows[name][best[name]]
        per_stream = limit["load_generator_cpu_per_audio_s"]  # cores the clients take per real-time stream
        load = max(limit["machine_busy_pct"], rows["sherpa-onnx"][peer]["machine_busy_pct"]) / 100
        budget_full = (cores - per_stream * target) / target
        budget_load = (load * cores - per_stream * target) / target
        need = floors[name] + fbank
        streams_at = lambda cpu: load * cores / (cpu + per_stream)  # noqa: E731 - streams that load carries
        out[name] = {"ratio": ratio, "target_streams": target, "client_cores_per_stream": per_stream,
                     "machine_load_at_limit": load, "budget_every_core": budget_full,
                     "budget_at_limit_load": budget_load, "floor_with_fbank": need,
                     "ours_at_limit": limit["cpu_per_audio_s"], "streams_at_floor": streams_at(need),
                     "peer_over_its_floor": peer_factor,
                     "streams_at_peers_factor": streams_at(peer_factor * need) if peer_factor else None}
        verdict = ("out of reach even with every core busy" if budget_full < need else
                   f"out of reach at the {100 * load:.0f}% machine load where the servers stop" if budget_load < need
                   else "not excluded by the floor")
        print(f"  {name} target {ratio}x = {target} streams: the server may spend {budget_full:.4f} CPU-s per "
              f"audio-s with every core busy, {budget_load:.4f} at {100 * load:.0f}% machine load (the clients take "
              f"{per_stream * target:.2f} cores); bare floor of the work {need:.4f}, this server at its limit "
              f"{limit['cpu_per_audio_s']:.4f}: {verdict}")
        bound = out[name]
        line = (f"    that load carries {bound['streams_at_floor']:.0f} streams at the bare floor "
                f"({bound['streams_at_floor'] / peer:.2f}x sherpa-onnx's)")
        if peer_factor:
            line += (f"; {bound['streams_at_peers_factor']:.0f} ({bound['streams_at_peers_factor'] / peer:.2f}x) at "
                     f"{peer_factor:.2f}x the floor, where sherpa-onnx runs at its limit")
        print(line)
    return out


def plot(rows: dict, best: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, cpu) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, by_count in rows.items():
        counts = sorted(by_count)
        lat.plot(counts, [by_count[c]["final_p99_ms"] for c in counts], "o-", label=f"{name} (max {best[name]})")
        cpu.plot(counts, [by_count[c]["cpu_per_audio_s"] for c in counts], "o-", label=name)
    lat.axhline(P99_BUDGET_MS, color="grey", ls="--", lw=1)
    lat.set(xscale="log", yscale="log", xlabel="concurrent paced streams", ylabel="p99 final latency (ms)",
            title="final latency (last audio sent -> final text)")
    cpu.set(xscale="log", xlabel="concurrent paced streams", ylabel="server CPU-s per audio-s",
            title="server CPU per second of audio")
    for ax in (lat, cpu):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def in_private_netns(argv: list[str]) -> str | None:
    """Re-run this module (``argv``: the interpreter's arguments) inside `unshare -n` with loopback up;
    returns why not, or never returns."""
    if os.environ.get(IN_NETNS_ENV):
        return None
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare/ip not installed"
    probe = subprocess.run(["unshare", "-n", "sh", "-c", "ip link set lo up"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare -n failed: {probe.stderr.strip()[:200]}"
    env = dict(os.environ, **{IN_NETNS_ENV: "1"})
    os.execvpe("unshare", ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"',
                           sys.executable, *argv], env)
    return "exec failed"


def report(args, summary: dict, best: dict, rows: dict, onnx_dir: Path, items, repos: dict) -> None:
    """Print the searches' outcome (sustained streams, ratios, CPU beside the floors at the common stream count,
    what the targets need) and write the plot and the JSON summary."""
    print(f"\npaced real-time streams, {args.chunk_ms:.0f} ms chunks, ~{args.seconds:.0f} s of audio per stream "
          f"per trial; sustained = p99 final latency < {P99_BUDGET_MS:.0f} ms; ORT threads {args.threads}")
    for name in best:
        s = summary[name]
        print(f"{name:>15}: {s['max_streams']:4d} streams ({s['why']}); WER {100 * s['wer']:.1f}%")
    peer = best.get("sherpa-onnx")
    floor = summary["floor"]
    floors = {"ours greedy": floor["encoder_b32"], "ours rescore": floor["encoder_b32"] + floor["decoder"],
              "sherpa-onnx": floor["encoder_b1"]}
    floors.update({name: floors[base_name(name)] for name in best})
    for name in best:
        if name != "sherpa-onnx" and peer:
            print(f"{name} / sherpa-onnx sustained streams: {best[name] / peer:.2f}x")
    common = sorted(set.intersection(*(set(c for c, r in rows[n].items() if r["errors"] == 0)
                                       for n in best))) if best else []
    if common:  # the largest count every system sustained, else the largest every system ran
        sustained = [x for x in common if all(rows[n][x]["final_p99_ms"] <= P99_BUDGET_MS for n in best)]
        c = (sustained or common)[-1]
        paced = floors_at_load(onnx_dir, items, c, args.seconds, best, repos, summary.get("sherpa_batch", 8))
        print(f"server CPU-s per audio-s at S={c} (largest stream count every system ran), beside its neural floor "
              f"in a tight loop and at this load (bench.paced_floor: the same bare work paced as S={c} streams "
              f"send it, batched as that server batches, one thread):")
        for name in best:
            cpu, at_load = rows[name][c]["cpu_per_audio_s"], paced[base_name(name)]
            print(f"  {name:>15}: {cpu:.4f} = {cpu / floors[name]:.2f}x its neural floor ({floors[name]:.4f}), "
                  f"{cpu / at_load['neural']:.2f}x at this load ({at_load['neural']:.4f}, mean batch "
                  f"{at_load['mean_batch']:.1f}; + fbank {at_load['fbank']:.4f}: "
                  f"{cpu / (at_load['neural'] + at_load['fbank']):.2f}x)")
        summary["common_streams"] = c
        summary["floor_at_common_streams"] = paced
    summary["targets"] = target_budgets(best, rows, floors, floor["fbank"])
    summary["rows"] = rows
    if rows and args.plot:
        plot(rows, best, args.plot, f"{args.model_dir.name}, demo utterances, 640 ms chunks paced at real time, "
                                    f"{os.cpu_count()}-core machine; sherpa-onnx {summary.get('sherpa_settings', '')}")
        print(f"plot: {args.plot}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1, default=str))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", type=Path, required=True, help="WeNet-style model folder")
    parser.add_argument("--data", type=Path, default=ROOT / "tests" / "data" / "demo_utts")
    parser.add_argument("--wer-data", type=Path, default=None,
                        help="utterances for the WER lines (default --data); the 12 demo utterances hold 96 words, "
                             "so one word is 1.04 points: for a 0.3-point comparison use e.g. a test_a of "
                             "scripts/make_corpus.py --out DIR --train 0 --test 300 (2487 words)")
    parser.add_argument("--min-streams", type=int, default=8)
    parser.add_argument("--max-streams", type=int, default=1024)
    parser.add_argument("--chunk-ms", type=float, default=640.0)
    parser.add_argument("--seconds", type=float, default=8.0, help="audio per stream per trial")
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads, both servers")
    parser.add_argument("--sherpa-configs", default="2:1:32,1:1:32,2:1:8,2:2:32",
                        help="sherpa-onnx settings to probe: work-threads:num-threads:max-batch-size, ...")
    parser.add_argument("--probe-streams", type=int, default=128)
    parser.add_argument("--modes", default="sherpa,rescore,greedy,rescore_proc,greedy_proc",
                        help="systems to search; *_proc: ours with each scorer instance in its own process; "
                             "*_workers (e.g. greedy_workers): ours with --workers")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="server processes of the *_workers modes (default: one per core)")
    parser.add_argument("--connections", type=int, default=16,
                        help="gRPC connections the *_workers modes' load is spread over")
    parser.add_argument("--budget-s", type=float, default=1500.0, help="bound on the searches")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep the export and repositories here")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "vs_sherpa.png")
    parser.add_argument("--json", type=Path, default=None, help="write every row here")
    args = parser.parse_args()
    modes = args.modes.split(",")
    why_not = in_private_netns(["-m", __spec__.name, *sys.argv[1:]]) if "sherpa" in modes else None
    t0 = time.monotonic()
    exe = shutil.which(SHERPA_SERVER) or str(Path(sys.executable).parent / SHERPA_SERVER)
    if why_not is None and "sherpa" in modes and not Path(exe).exists():
        why_not = f"{SHERPA_SERVER} not found (pip install sherpa-onnx-bin)"
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="vs_sherpa_"))
    work.mkdir(parents=True, exist_ok=True)
    rows, best = {}, {}
    summary = {"skipped": {}}
    try:
        onnx_dir, repos = export_and_build(args.model_dir.resolve(), work, args.threads)
        items = load_data(args.data)
        wer_items = load_data(args.wer_data) if args.wer_data else items
        audio_s = sum(s.size for _, s, _ in items) / SAMPLE_RATE
        floor = neural_floor(onnx_dir, items, args.threads)
        summary["floor"] = floor
        version = subprocess.run([sys.executable, "-m", "pip", "show", "sherpa-onnx-bin"], capture_output=True,
                                 text=True).stdout
        version = next((line.split()[-1] for line in version.splitlines() if line.startswith("Version")), "?")
        print(f"sherpa-onnx-bin {version}; model {args.model_dir}; {len(items)} utterances, {audio_s:.1f} s; "
              f"{os.cpu_count()} cores; network namespace: {'private' if os.environ.get(IN_NETNS_ENV) else 'host'}; "
              f"prepared in {time.monotonic() - t0:.0f} s", flush=True)
        print(f"neural floor (bare ORT, {args.threads} thread, CPU-s per audio-s): streaming encoder batch 1 "
              f"{floor['encoder_b1']:.4f}, batch 32 {floor['encoder_b32']:.4f}; decoder rescoring "
              f"{floor['decoder']:.4f}; fbank (numpy, batch 32) {floor['fbank']:.4f}", flush=True)
        search_modes = [m for m in modes if not (m == "sherpa" and why_not)]
        if why_not and "sherpa" in modes:
            print(f"sherpa-onnx skipped: {why_not}")
            summary["skipped"]["sherpa"] = why_not
        share = lambda: max(60.0, (t0 + args.budget_s - time.monotonic()) / max(1, len(search_modes)))  # noqa: E731
        chunk = int(round(args.chunk_ms * SAMPLE_RATE / 1000))
        for mode in search_modes:
            deadline = time.monotonic() + share()
            if mode == "sherpa":
                sherpa_dir = onnx_dir / "sherpa"
                meta = sherpa_meta(sherpa_dir)
                configs = [tuple(int(x) for x in c.split(":")) for c in args.sherpa_configs.split(",")]
                probes = []
                for config in configs:
                    server = SherpaServer(exe, sherpa_dir, meta, *config, log_dir=work)
                    try:
                        probe_rows: dict = {}
                        trial(f"probe {':'.join(map(str, config))}",
                              lambda n, p=server.port: sherpa_paced(p, items, n, args.chunk_ms, args.seconds),
                              server.pid, args.probe_streams, probe_rows)
                        r = next(iter(next(iter(probe_rows.values())).values()))
                        probes.append((r["errors"] > 0, r["final_p99_ms"], r["cpu_per_audio_s"], config))
                    finally:
                        server.stop()
                probes.sort()
                winner = probes[0][3]
                summary["sherpa_probes"] = [{"config": c, "p99_ms": p, "cpu_per_audio_s": cpu, "errors": e}
                                            for e, p, cpu, c in probes]
                server = SherpaServer(exe, sherpa_dir, meta, *winner, log_dir=work)
                name = "sherpa-onnx"
                summary["sherpa_settings"] = server.settings
                summary["sherpa_batch"] = winner[2]
                print(f"sherpa-onnx settings chosen: {server.settings}", flush=True)
                try:
                    wer = asyncio.run(accuracy(SherpaTranscriber(server.port, chunk, False), wer_items))
                    print(f"sherpa-onnx WER {100 * wer:.2f}% ({len(wer_items)} utterances); searching", flush=True)
                    best[name], why = search(name, lambda n: sherpa_paced(server.port, items, n, args.chunk_ms,
                                                                          args.seconds), server.pid, rows, args,
                                             deadline)
                finally:
                    server.stop()
            else:
                name = f"ours {mode}"
                workers = args.workers if mode.endswith(WORKERS) else 1
                connections = args.connections if workers > 1 else 1
                server = OurServer(repos[base_name(mode)], workers)
                try:
                    wer = asyncio.run(ours_accuracy(server.url, wer_items, args.chunk_ms))
                    print(f"{name} WER {100 * wer:.2f}% ({len(wer_items)} utterances); searching", flush=True)
                    best[name], why = search(name, lambda n: ours_paced(server.url, items, n, args.chunk_ms,
                                                                        args.seconds, connections),
                                             server.pid, rows, args, deadline)
                finally:
                    server.stop()
            summary[name] = {"max_streams": best[name], "why": why, "wer": wer}
        report(args, summary, best, rows, onnx_dir, items, repos)  # runs bare ORT on the graphs: before cleanup
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"run took {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
