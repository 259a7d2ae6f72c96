"""The pipelines' tensor contract, shared by offline and streaming requests.

WAV FP32 [1, samples] (16 kHz, [-1, 1]), WAV_LENS INT32 [1, 1], TRANSCRIPTS BYTES [1, 1]: the pipelines
have max_batch_size > 0, so every request carries a leading batch dimension of one.
"""

from __future__ import annotations

import json
from typing import Optional

import numpy as np
import tritonclient.grpc.aio as grpcclient

WAV = "WAV"
WAV_LENS = "WAV_LENS"
TRANSCRIPTS = "TRANSCRIPTS"
DETAILS = "DETAILS"  # optional output: one JSON per request (words, times, n-best, segments)


def wav_inputs(samples: np.ndarray, length: int | None = None) -> list[grpcclient.InferInput]:
    """samples: (n,) float32, possibly zero-padded; length: the real sample count (default n)."""
    wav = grpcclient.InferInput(WAV, [1, len(samples)], "FP32")
    wav.set_data_from_numpy(np.ascontiguousarray(samples, dtype=np.float32).reshape(1, -1))
    lens = grpcclient.InferInput(WAV_LENS, [1, 1], "INT32")
    lens.set_data_from_numpy(np.array([[len(samples) if length is None else length]], dtype=np.int32))
    return [wav, lens]


def transcript_output(details: bool = False) -> list[grpcclient.InferRequestedOutput]:
    """TRANSCRIPTS, and DETAILS when asked (a model without it refuses the request)."""
    names = [TRANSCRIPTS, DETAILS] if details else [TRANSCRIPTS]
    return [grpcclient.InferRequestedOutput(n) for n in names]


def details_of(result: grpcclient.InferResult) -> Optional[dict]:
    """The DETAILS JSON of a response, or None when it has none."""
    values = result.as_numpy(DETAILS)
    if values is None:
        return None
    value = values.reshape(-1)[0]
    return json.loads(value.decode("utf-8") if isinstance(value, bytes) else str(value))


def transcript_of(result: grpcclient.InferResult) -> str:
    """The first transcript of a response: BYTES [1, 1] (or [1]) -> str."""
    values = result.as_numpy(TRANSCRIPTS)
    if values is None:
        raise ValueError(f"response has no {TRANSCRIPTS} output")
    value = values.reshape(-1)[0]
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
