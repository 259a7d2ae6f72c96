"""The common case in a few lines, without asyncio:

    from asr_client import transcribe, stream
    print(transcribe("call.wav").text)                     # a file: any format asr_client.audio reads
    print(transcribe(samples, sample_rate=8000).text)      # a numpy array at its own rate
    for partial in stream("call.wav"):                     # partial transcripts as the server sends them
        print(partial.text)

Both talk gRPC to a running asr-server (or Triton with these pipelines), 127.0.0.1:8001 by default. Audio
longer than ``LONG_AUDIO_S`` is cut at pauses and sent in pieces (asr_client.longform), as ``asr-client
transcribe --long`` does. The async API (StreamingClient, transcribe_files, offline.recognize) is underneath.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Union

import numpy as np
import tritonclient.grpc.aio as grpcclient

from asr_client import longform, offline
from asr_client.audio import SAMPLE_RATE, load_audio, resample, to_mono
from asr_client.streaming import DEFAULT_STREAMING_MODEL, DEFAULT_URL, Partial, StreamingClient, StreamOptions

LONG_AUDIO_S = 50.0  # the bundled offline models take up to 60 s in one request
AudioInput = Union[str, Path, np.ndarray]


@dataclass(frozen=True)
class Transcript:
    text: str
    words: tuple[longform.Word, ...]  # each word with its start and end (s) and confidence
    duration_s: float  # of the audio sent


def _samples(audio: AudioInput, sample_rate: Optional[int]) -> np.ndarray:
    if isinstance(audio, np.ndarray):
        if sample_rate is None:
            raise ValueError("a numpy array needs its sample_rate")
        kind = np.asarray(audio).dtype
        if np.issubdtype(kind, np.integer) and kind != np.int16:
            raise ValueError(f"integer audio must be int16 PCM, got {kind} (or pass float samples in [-1, 1])")
        data = np.asarray(audio, dtype=np.float32)
        if kind == np.int16:
            data = data / 32768.0
        return resample(to_mono(data), sample_rate, SAMPLE_RATE)
    return load_audio(audio).samples


def transcribe(audio: AudioInput, sample_rate: Optional[int] = None, url: str = DEFAULT_URL,
               model: str = offline.DEFAULT_OFFLINE_MODEL, hotwords: Optional[str] = None) -> Transcript:
    """The transcript of a file or an array (mono or (frames, channels); float in [-1, 1] or int16)."""
    samples = _samples(audio, sample_rate)
    parameters = {"hotwords": hotwords} if hotwords else None
    return asyncio.run(_transcribe(samples, url, model, parameters))


async def _transcribe(samples: np.ndarray, url: str, model: str, parameters: Optional[dict]) -> Transcript:
    async with grpcclient.InferenceServerClient(url) as client:
        if len(samples) > LONG_AUDIO_S * SAMPLE_RATE:
            long = await longform.transcribe_long(client, samples, model, parameters=parameters)
            return Transcript(long.text, long.words, len(samples) / SAMPLE_RATE)
        config = (await client.get_model_config(model, as_json=True)).get("config", {})
        details = any(o.get("name") == "DETAILS" for o in config.get("output", []))  # word times, when it has them
        if details:  # the words and their times come with the request parameter details
            parameters = {**(parameters or {}), "details": True}
        result = await offline.recognize(client, samples, model, parameters=parameters, details=details)
    words = tuple(longform.Word(w["word"], w["start"], w["end"], w.get("confidence"))
                  for w in (result.details or {}).get("words", []))
    return Transcript(result.text, words, len(samples) / SAMPLE_RATE)


def stream(audio: AudioInput, sample_rate: Optional[int] = None, url: str = DEFAULT_URL,
           model: str = DEFAULT_STREAMING_MODEL, chunk_ms: float = 640.0, realtime: bool = False,
           hotwords: Optional[str] = None) -> Iterator[Partial]:
    """Partial transcripts, one per chunk as the server answers it; the last is the final transcript. Iterate
    to the end: the stream runs in a thread of its own until the audio is sent."""
    samples = _samples(audio, sample_rate)
    options = StreamOptions(model=model, chunk_ms=chunk_ms, realtime=realtime,
                            parameters={"hotwords": hotwords} if hotwords else None)
    partials: queue.Queue = queue.Queue()
    done = object()

    def run() -> None:
        async def go():
            async with StreamingClient(url, options) as client:
                await client.transcribe(samples, on_partial=partials.put)
        try:
            asyncio.run(go())
            partials.put(done)
        except BaseException as error:  # handed to the iterating thread
            partials.put(error)

    worker = threading.Thread(target=run, name="asr-client-stream", daemon=True)
    worker.start()
    while True:
        item = partials.get()
        if item is done:
            break
        if isinstance(item, BaseException):
            raise item
        yield item
    worker.join()
