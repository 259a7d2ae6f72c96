"""The body of the streaming recognisers' Triton python models: model_repo/wenet (fbank frames in, as in WeNet's
ensemble) and model_repo/streaming_wenet (audio in: the fbank, the scorer, the encoder and the decoder in one
model). Both read their config's parameters the same way and answer the same way; only the frames' source
differs, so it lives here once.

Per sequence: fbank frames -> decoding windows -> the streaming encoder -> CTC prefix beam search carried across
chunks -> the partial transcript; on END, attention rescoring and the final transcript. The encoder and decoder
run in this process with onnxruntime when the parameters ``encoder_onnx`` / ``decoder_onnx`` name their graphs
(``inline_onnx``); otherwise they are the models ``streaming_encoder`` (BLS; its caches held as implicit state
by that model's sequence batcher; one BLS request per sequence, in parallel, so that its sequence batcher runs
them as one batch) and ``decoder``: the way to a TensorRT or GPU encoder.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import json
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from ..decoding.details import DETAILS, to_json_bytes
from ..features.fbank import checked_waveform
from . import serving_config
from .pipeline import StreamingFeatures
from .stream_state import Streams
from .streaming_scorer import EncoderJob, EncoderResult, StreamChunk, StreamFailed, StreamingScorer
from .triton_helpers import cancelled_response, control, error_response, input_array, run_decoder
from ..graph_names import STREAMING_ENCODER_OUTPUTS

ENCODER = "streaming_encoder"
ENCODER_OUTPUTS = list(STREAMING_ENCODER_OUTPUTS)
MAX_PARALLEL_BLS = 64  # concurrent encoder requests; the encoder's sequence batcher batches them


def encode_window_by_bls(job: EncoderJob) -> EncoderResult:
    """One window through the ``streaming_encoder`` model (BLS), in its sequence."""
    import triton_python_backend_utils as pb_utils

    flags = (pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START if job.start else 0) | (
        pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END if job.end else 0)
    request = pb_utils.InferenceRequest(
        model_name=ENCODER, requested_output_names=ENCODER_OUTPUTS, correlation_id=job.key, flags=flags,
        inputs=[pb_utils.Tensor("chunk_xs", job.window[None].astype(np.float32)),
                pb_utils.Tensor("chunk_lens", np.array([[job.valid]], dtype=np.int32))])
    response = request.exec()
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())

    def out(name):
        return pb_utils.get_output_tensor_by_name(response, name).as_numpy()

    return EncoderResult(out("log_probs")[0], out("log_probs_idx")[0], out("chunk_out")[0],
                         int(out("chunk_out_lens").reshape(-1)[0]))


def audio_frames(requests: Sequence, features: StreamingFeatures, wav: str, wav_lens: str
                 ) -> list[Union[np.ndarray, ValueError, None]]:
    """Each request's new fbank frames from its audio chunk (inputs ``wav``, ``wav_lens``), with every
    sequence's new samples in one fbank call: the (T, num_mel_bins) array, the ValueError of a chunk whose audio
    is refused (it fails alone; its sequence keeps its state), or None for a cancelled request (its sequence's
    fbank state is dropped). What streaming_feature_extractor and streaming_wenet both read."""
    frames: list[Union[np.ndarray, ValueError, None]] = [None] * len(requests)
    chunks, where = [], []
    for i, request in enumerate(requests):
        key = int(control(request, "CORRID"))
        if request.is_cancelled():
            features.drop(key)
            continue
        n = int(input_array(request, wav_lens).reshape(-1)[0])
        try:
            samples = checked_waveform(input_array(request, wav)[0], n)
        except ValueError as exc:
            frames[i] = exc
            continue
        chunks.append((key, samples, bool(control(request, "START")), bool(control(request, "END"))))
        where.append(i)
    for i, new in zip(where, features.accept_many(chunks)):
        frames[i] = new
    return frames


class StreamingRecogniser:
    """A streaming recogniser model's state and answers. ``transcript_output``: the name of its text output
    (``OUTPUT0`` for wenet, as WeNet's model calls it; ``TRANSCRIPTS`` for streaming_wenet)."""

    def __init__(self, args: Mapping[str, str], transcript_output: str) -> None:
        setup = serving_config.decoder_setup(args)
        params = setup.params
        self.transcript_output = transcript_output
        # One object per stream for every stage of this model (fbank residual in streaming_wenet, decoding
        # state, inline encoder caches), one idle limit: the config's idle_seconds.
        self.streams = Streams(setup.settings.idle_seconds)
        self.scorer = StreamingScorer(
            setup.tokenizer, setup.settings, serving_config.window_config(params),
            int(params.get("num_mel_bins", 80)), int(params["encoder_output_size"]), setup.hotwords, self.streams)
        self.pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self.inline_encoder, inline_decoder = serving_config.inline_graphs(args, params, setup.settings,
                                                                           self.streams)
        if self.inline_encoder is not None:
            self.run_encoder = self.inline_encoder
        else:
            self.pool = concurrent.futures.ThreadPoolExecutor(MAX_PARALLEL_BLS, thread_name_prefix="wenet-bls")
            self.run_encoder = self._encode_through_bls
        self.run_decoder = inline_decoder or run_decoder

    def _encode_through_bls(self, jobs: Sequence[EncoderJob]) -> list[Union[EncoderResult, Exception]]:
        """One result per job; a job whose encoder request failed holds its exception, so only its own
        stream fails. Each request is built in a copy of the calling context, which holds the route of the
        model being executed (asr_server/backends/python/api/routes.py): pool threads have none of their own."""
        futures = [self.pool.submit(contextvars.copy_context().run, encode_window_by_bls, job) for job in jobs]
        return [f.exception() or f.result() for f in futures]

    def drop(self, key) -> None:
        """Forget a sequence: every part of its stream."""
        self.streams.drop(key)

    def respond(self, requests: Sequence, frames: Sequence[Union[np.ndarray, Exception, None]]) -> list:
        """One response per request: ``frames[i]`` is request i's new (T, num_mel_bins) fbank frames, an
        Exception that fails that chunk alone (its sequence goes on, as when the feature extractor of WeNet's
        ensemble refuses a chunk), or None for a request that was cancelled (its sequence is dropped)."""
        chunks, slots, responses = [], [], [None] * len(requests)
        for i, (request, new) in enumerate(zip(requests, frames)):
            key = int(control(request, "CORRID"))
            if new is None:
                self.drop(key)
                responses[i] = cancelled_response()
                continue
            if isinstance(new, Exception):
                responses[i] = error_response(str(new))
                continue
            # parameters: `details` and the endpoint rules (see asr_server.asr.serving.pipeline.StreamChunk)
            chunks.append(StreamChunk(key, new, bool(control(request, "START")), bool(control(request, "END")),
                                      json.loads(request.parameters() or "{}"),
                                      DETAILS in request.requested_output_names()))
            slots.append(i)
        if chunks:
            for i, response in zip(slots, self._step(chunks)):
                responses[i] = response
        return responses

    def _step(self, chunks: list[StreamChunk]) -> list:
        import triton_python_backend_utils as pb_utils

        try:  # a sequence whose encoder or decoder call fails comes back as a StreamFailed of its own
            answers = self.scorer.step(chunks, self.run_encoder, self.run_decoder)
        except Exception as exc:  # noqa: BLE001 - a bug in step(): no stream of the batch can be trusted
            for chunk in chunks:
                self.drop(chunk.key)
            answers = [StreamFailed(f"{type(exc).__name__}: {exc}")] * len(chunks)
        out = []
        for answer in answers:
            if isinstance(answer, StreamFailed):
                out.append(error_response(answer.message, code=answer.code))
                continue
            # A scalar, as WeNet's model returns it: with the config's `reshape { shape: [ ] }` clients see the
            # transcript as [1], which WeNet's streaming client reads with `as_numpy(...)[0].decode()`.
            tensors = [pb_utils.Tensor(self.transcript_output,
                                       np.array(answer.text.encode("utf-8"), dtype=np.object_))]
            if answer.details is not None:  # only when DETAILS is requested (an ensemble requests every output)
                tensors.append(pb_utils.Tensor(DETAILS, np.array(to_json_bytes(answer.details), dtype=np.object_)))
            out.append(pb_utils.InferenceResponse(tensors))
        return out

    def finalize(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False)
