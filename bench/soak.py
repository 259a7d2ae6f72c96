"""Soak test: many streams with faults around them for a bounded time; nothing may be lost.

    python -m bench.soak --minutes 1 --streams 8 [--repo model_repo] [--data tests/data/demo_utts] [--seed 0]

Starts our server on the model repository (explicit model control, every model loaded) in a subprocess on
free 127.0.0.1 ports, and stops it at the end. For --minutes:
- --streams concurrent streams through `streaming_wenet`, each an utterance of the data folder cut into
  random chunks (50 ms .. 1 s); a share of them (--abandon) is dropped after a few chunks without END;
- one offline client sends utterances through `attention_rescoring`;
- another client sends bad requests (wrong dtype, wrong shape, negative and unknown sequence ids, a batch of
  two to the sequence model, NaN audio), each of which must be refused;
- halfway, `decoder` and `feature_extractor` are reloaded (explicit load) while the traffic goes on;
- a hostile client (bench/soak_hostile.py) sends what once crashed or bloated the server: NaN hotword scores,
  an output asked for twice, a truncated shared-memory region, a stream that stops reading, HTTP bodies and
  headers left unfinished;
- at 60% of the run, a burst of --burst one-shot streams at once.

Checks (exit status 1 if one fails):
- every completed stream's final transcript equals the same utterance streamed alone, uninterrupted, at the
  start. Not its offline transcript: streaming attends over a bounded chunk cache and offline over the whole
  utterance, so the two may legitimately differ; streaming windows do not depend on how the audio is chunked,
  so the streaming transcript is the invariant (the count equal to offline is printed for information);
- every offline result equals the utterance's offline transcript at the start (the reload changes nothing);
- every bad request is refused, every hostile case has its expected outcome, every burst stream is answered,
  and no request goes unanswered (--response-timeout); the server process is alive at the end;
- abandoned sequences are freed: after the idle timeout the server's live sequences go back to 0;
- RSS after the run (the burst included) is within --rss-slack of RSS after warm-up (the first quarter).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from asr_server.child_process import stop_process

ROOT = Path(__file__).resolve().parent.parent

SAMPLE_RATE = 16000
REFERENCE_CHUNK = 10240  # 640 ms: the reference streaming run
IDLE_SECONDS = 5.0  # the built repository's max_sequence_idle_microseconds
STREAMING_MODELS = ("streaming_wenet", "streaming_feature_extractor", "wenet", "streaming_encoder")


@dataclasses.dataclass
class Figures:
    streams_completed: int = 0
    streams_abandoned: int = 0
    stream_mismatches: int = 0
    stream_errors: int = 0
    finals_equal_offline: int = 0
    offline_requests: int = 0
    offline_mismatches: int = 0
    offline_errors: int = 0
    bad_sent: int = 0
    bad_accepted: int = 0
    lost: int = 0
    reloads: int = 0
    hostile_sent: int = 0
    hostile_wrong: int = 0
    burst_answered: int = 0
    burst_errors: int = 0
    errors: list = dataclasses.field(default_factory=list)  # first few unexpected errors, for the report

    def note(self, text: str) -> None:
        if len(self.errors) < 5:
            self.errors.append(text)


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except FileNotFoundError:
        return False


def live_sequences(metrics_port: int) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {s.labels["model"]: s.value for family in text_string_to_metric_families(text)
            if family.name == "asr_server_live_sequences" for s in family.samples}


def load_items(folder: Path) -> list[tuple[str, np.ndarray]]:
    from asr_client.audio import load_audio

    items = []
    for line in (folder / "wav.scp").read_text().splitlines():
        if line.strip():
            utt, path = line.split(maxsplit=1)
            items.append((utt, load_audio(folder / path).samples))
    return items


def wav_inputs(samples: np.ndarray, dtype: str = "FP32", lens_shape=(1, 1)) -> list:
    import tritonclient.grpc.aio as aioclient

    wav = aioclient.InferInput("WAV", [1, samples.size], dtype)
    wav.set_data_from_numpy(samples.reshape(1, -1).astype(np.float32 if dtype == "FP32" else np.int32))
    lens = aioclient.InferInput("WAV_LENS", list(lens_shape), "INT32")
    lens.set_data_from_numpy(np.full(lens_shape, samples.size, dtype=np.int32))
    return [wav, lens]


def cut(samples: np.ndarray, rng: random.Random, low: int, high: int) -> list[np.ndarray]:
    pieces, pos = [], 0
    while pos < samples.size:
        size = rng.randint(low, high)
        pieces.append(samples[pos:pos + size])
        pos += size
    return pieces


async def run_stream(client, pieces, sequence_id: int, timeout_s: float, figures: Figures, stop_after=None):
    """Send the pieces on one stream; returns the transcripts received ([] and counts a loss on timeout).
    With stop_after, the stream is closed after that many responses, without END (abandoned)."""
    sent = pieces if stop_after is None else pieces[:stop_after]

    async def requests():
        for i, piece in enumerate(sent):
            yield dict(model_name="streaming_wenet", inputs=wav_inputs(piece), sequence_id=sequence_id,
                       sequence_start=i == 0, sequence_end=stop_after is None and i == len(pieces) - 1)

    texts = []
    responses = client.stream_infer(requests()).__aiter__()
    try:
        while len(texts) < len(sent):
            try:
                result, error = await asyncio.wait_for(responses.__anext__(), timeout_s)
            except (asyncio.TimeoutError, StopAsyncIteration):
                figures.lost += len(sent) - len(texts)
                figures.note(f"sequence {sequence_id}: {len(sent) - len(texts)} response(s) lost")
                return None
            if error is not None:
                figures.stream_errors += 1
                figures.note(f"sequence {sequence_id}: {error}")
                return None
            texts.append(result.as_numpy("TRANSCRIPTS")[0].decode())
    finally:
        with contextlib.suppress(Exception):
            await responses.aclose()
    return texts


async def reference_transcripts(client, items) -> tuple[dict, dict]:
    from asr_client.offline import recognize

    streaming, offline, figures = {}, {}, Figures()
    for n, (utt, samples) in enumerate(items):
        pieces = [samples[i:i + REFERENCE_CHUNK] for i in range(0, samples.size, REFERENCE_CHUNK)]
        texts = await run_stream(client, pieces, 1 + n, 60.0, figures)
        if texts is None:
            raise SystemExit(f"the reference stream of {utt} failed: {figures.errors}")
        streaming[utt] = texts[-1]
        offline[utt] = (await recognize(client, samples)).text
    return streaming, offline


async def stream_worker(index: int, url: str, items, references, offline_refs, deadline: float, args,
                        figures: Figures) -> None:
    import tritonclient.grpc.aio as aioclient

    rng = random.Random(args.seed * 1000 + index)
    client = aioclient.InferenceServerClient(url)
    count = 0
    try:
        while time.monotonic() < deadline:
            utt, samples = items[rng.randrange(len(items))]
            pieces = cut(samples, rng, 800, 16000)
            sequence_id = 1_000_000 * (index + 1) + count
            count += 1
            if len(pieces) > 2 and rng.random() < args.abandon:
                if await run_stream(client, pieces, sequence_id, args.response_timeout, figures,
                                    stop_after=rng.randint(1, len(pieces) - 1)) is not None:
                    figures.streams_abandoned += 1
                continue
            texts = await run_stream(client, pieces, sequence_id, args.response_timeout, figures)
            if texts is None:
                continue
            figures.streams_completed += 1
            if texts[-1] != references[utt]:
                figures.stream_mismatches += 1
                figures.note(f"{utt}: streamed {texts[-1]!r}, alone {references[utt]!r}")
            figures.finals_equal_offline += texts[-1] == offline_refs[utt]
    finally:
        await client.close()


async def offline_worker(url: str, items, offline_refs, deadline: float, args, figures: Figures) -> None:
    import tritonclient.grpc.aio as aioclient

    from asr_client.offline import recognize

    rng = random.Random(args.seed + 7)
    client = aioclient.InferenceServerClient(url)
    try:
        while time.monotonic() < deadline:
            utt, samples = items[rng.randrange(len(items))]
            figures.offline_requests += 1
            try:
                text = (await asyncio.wait_for(recognize(client, samples), args.response_timeout)).text
            except asyncio.TimeoutError:
                figures.lost += 1
                continue
            except Exception as exc:  # noqa: BLE001 - counted and reported
                figures.offline_errors += 1
                figures.note(f"offline {utt}: {exc}")
                continue
            if text != offline_refs[utt]:
                figures.offline_mismatches += 1
                figures.note(f"offline {utt}: {text!r} != {offline_refs[utt]!r}")
    finally:
        await client.close()


async def bad_worker(url: str, items, deadline: float, args, figures: Figures) -> None:
    """Requests that must each be refused, from a client of their own."""
    import tritonclient.grpc.aio as aioclient

    rng = random.Random(args.seed + 13)
    client = aioclient.InferenceServerClient(url)
    samples = items[0][1][:8000]
    nan = samples.copy()
    nan[10] = np.nan

    def batch_of_two():
        inputs = wav_inputs(np.concatenate([samples, samples]))
        inputs[0].set_shape([2, samples.size])
        inputs[0].set_data_from_numpy(np.stack([samples, samples]))
        inputs[1].set_shape([2, 1])
        inputs[1].set_data_from_numpy(np.full((2, 1), samples.size, np.int32))
        return inputs

    bad = [
        lambda: client.infer("attention_rescoring", wav_inputs(samples, dtype="INT32")),
        lambda: client.infer("attention_rescoring", wav_inputs(samples, lens_shape=(1, 2))),
        lambda: client.infer("attention_rescoring", wav_inputs(nan)),
        lambda: client.infer("streaming_wenet", wav_inputs(samples), sequence_id=-1, sequence_start=True),
        lambda: client.infer("streaming_wenet", wav_inputs(samples), sequence_id=rng.randrange(1, 2**40) * 7919),
        lambda: client.infer("streaming_wenet", batch_of_two(), sequence_id=424242, sequence_start=True,
                             sequence_end=True),
    ]
    try:
        while time.monotonic() < deadline:
            figures.bad_sent += 1
            try:
                await asyncio.wait_for(rng.choice(bad)(), args.response_timeout)
                figures.bad_accepted += 1
            except asyncio.TimeoutError:
                figures.lost += 1
            except Exception:  # noqa: BLE001 - the refusal we want
                pass
            await asyncio.sleep(rng.uniform(0.05, 0.3))
    finally:
        await client.close()


async def reload_midway(url: str, at: float, figures: Figures) -> None:
    import tritonclient.grpc.aio as aioclient

    await asyncio.sleep(max(0.0, at - time.monotonic()))
    client = aioclient.InferenceServerClient(url)
    try:
        for name in ("decoder", "feature_extractor"):
            await client.load_model(name)
            figures.reloads += 1
    finally:
        await client.close()


async def soak(args, url: str, pid: int, http_port: int, metrics_port: int) -> int:
    import tritonclient.grpc.aio as aioclient

    from bench.soak_hostile import burst, hostile_worker

    items = load_items(args.data)
    client = aioclient.InferenceServerClient(url)
    rss_start = rss_mb(pid)
    references, offline_refs = await reference_transcripts(client, items)
    await client.close()
    figures = Figures()
    start = time.monotonic()
    duration = args.minutes * 60
    deadline = start + duration
    tasks = [stream_worker(i, url, items, references, offline_refs, deadline, args, figures)
             for i in range(args.streams)]
    tasks += [offline_worker(url, items, offline_refs, deadline, args, figures),
              bad_worker(url, items, deadline, args, figures), reload_midway(url, start + duration / 2, figures),
              hostile_worker(url, http_port, items, offline_refs, deadline, args, figures),
              burst(url, start + 0.6 * duration, args.burst, items, figures, max(args.response_timeout, 120.0))]
    rss_warm = []

    async def sample_warm_rss():
        await asyncio.sleep(duration / 4)
        rss_warm.append(rss_mb(pid))

    await asyncio.gather(*tasks, sample_warm_rss())
    await asyncio.sleep(IDLE_SECONDS + 1.5)  # abandoned sequences pass their idle timeout
    live = live_sequences(metrics_port)
    rss_end = rss_mb(pid)
    live_streaming = sum(v for k, v in live.items() if k in STREAMING_MODELS)
    freed = figures.streams_abandoned if live_streaming == 0 else 0
    rss_flat = rss_end <= rss_warm[0] * (1 + args.rss_slack)
    print(f"soak: {args.streams} streams for {args.minutes:g} min on {args.repo}")
    print(f"  streams completed         {figures.streams_completed}  (final == uninterrupted streaming run: "
          f"{figures.streams_completed - figures.stream_mismatches}; == offline transcript: "
          f"{figures.finals_equal_offline})")
    print(f"  streams abandoned / freed {figures.streams_abandoned} / {freed}  (live sequences after "
          f"{IDLE_SECONDS:g} s idle: {live})")
    print(f"  stream errors             {figures.stream_errors}")
    print(f"  offline requests          {figures.offline_requests}  (mismatches {figures.offline_mismatches}, "
          f"errors {figures.offline_errors})")
    print(f"  bad requests sent         {figures.bad_sent}  (accepted: {figures.bad_accepted})")
    print(f"  model reloads             {figures.reloads}")
    print(f"  hostile cases sent        {figures.hostile_sent}  (wrong outcome: {figures.hostile_wrong})")
    print(f"  burst streams             {args.burst}  (answered {figures.burst_answered}, errors "
          f"{figures.burst_errors})")
    print(f"  server alive at the end   {process_alive(pid)}")
    print(f"  responses lost            {figures.lost}")
    print(f"  RSS MB start / warm-up / end  {rss_start:.0f} / {rss_warm[0]:.0f} / {rss_end:.0f}  "
          f"({'flat' if rss_flat else 'GREW'} within {100 * args.rss_slack:.0f}%)")
    for line in figures.errors:
        print(f"  ! {line}")
    ok = (figures.lost == 0 and figures.stream_mismatches == 0 and figures.stream_errors == 0
          and figures.offline_mismatches == 0 and figures.offline_errors == 0 and figures.bad_accepted == 0
          and live_streaming == 0 and rss_flat and figures.reloads == 2 and figures.hostile_wrong == 0
          and figures.burst_answered == args.burst and process_alive(pid))
    print("soak:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


async def wait_ready(url: str, process: subprocess.Popen, timeout_s: float) -> None:
    import tritonclient.grpc.aio as aioclient

    client = aioclient.InferenceServerClient(url)
    end = time.monotonic() + timeout_s
    try:
        while time.monotonic() < end:
            if process.poll() is not None:
                raise SystemExit(f"the server exited with status {process.returncode}")
            with contextlib.suppress(Exception):
                if await client.is_server_ready():
                    return
            await asyncio.sleep(0.5)  # an external process: nothing to wait on but its port
        raise SystemExit(f"the server was not ready after {timeout_s:g} s")
    finally:
        await client.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=1.0)
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--repo", type=Path, default=ROOT / "model_repo")
    p.add_argument("--data", type=Path, default=ROOT / "tests" / "data" / "demo_utts")
    p.add_argument("--abandon", type=float, default=0.15, help="share of streams closed without END")
    p.add_argument("--response-timeout", type=float, default=30.0, help="seconds before a response is lost")
    p.add_argument("--rss-slack", type=float, default=0.15, help="RSS growth after warm-up still called flat")
    p.add_argument("--burst", type=int, default=600, help="one-shot streams sent at once at 60%% of the run")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if not 0 < args.minutes <= 60 or not 1 <= args.streams <= 256:
        raise SystemExit("--minutes must be in (0, 60] and --streams in [1, 256]")
    grpc_port, http_port, metrics_port = free_ports(3)
    command = [sys.executable, "-m", "asr_server", "--model-repository", str(args.repo),
               "--grpc-address", "127.0.0.1", "--grpc-port", str(grpc_port), "--http-address", "127.0.0.1",
               "--http-port", str(http_port), "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port),
               "--model-control-mode", "explicit", "--load-model", "*", "--exit-timeout-secs", "5"]
    log_path = Path(tempfile.gettempdir()) / f"soak_server_{os.getpid()}.log"
    log = open(log_path, "w")
    process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    print(f"server pid {process.pid} on {grpc_port=} {metrics_port=}, log {log_path}")
    url = f"127.0.0.1:{grpc_port}"
    try:
        asyncio.run(wait_ready(url, process, 120))
        return asyncio.run(soak(args, url, process.pid, http_port, metrics_port))
    finally:
        stop_process(process)
        log.close()


if __name__ == "__main__":
    sys.exit(main())
