"""Offline recognition: one ModelInfer request per utterance (the `attention_rescoring` ensemble)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Optional

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException

from asr_client.tensors import details_of, transcript_of, transcript_output, wav_inputs

DEFAULT_OFFLINE_MODEL = "attention_rescoring"


class OfflineError(Exception):
    """The server answered the request with an error; the message is the server's."""


@dataclass(frozen=True)
class OfflineResult:
    text: str  # transcript
    latency_s: float  # request round trip, seconds
    details: Optional[dict] = None  # the DETAILS JSON (words, times, n-best) when asked for


async def recognize(
    grpc_client: grpcclient.InferenceServerClient,
    samples: np.ndarray,
    model: str = DEFAULT_OFFLINE_MODEL,
    request_id: str = "",
    timeout_s: Optional[float] = None,
    parameters: Optional[dict] = None,
    details: bool = False,
) -> OfflineResult:
    """samples: (n,) float32 at 16 kHz in [-1, 1]; parameters: request parameters (hotwords, details, ...);
    details: also ask for the DETAILS output."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        result = await grpc_client.infer(
            model, wav_inputs(samples), outputs=transcript_output(details), request_id=request_id,
            client_timeout=timeout_s, parameters=parameters or None,
        )
    except InferenceServerException as error:
        raise OfflineError(f"model '{model}': {error.message()}") from error
    except grpc.RpcError as error:
        raise OfflineError(f"model '{model}': {error}") from error
    return OfflineResult(text=transcript_of(result), latency_s=loop.time() - started,
                         details=details_of(result) if details else None)
