"""Streaming scorer: per sequence, fbank frames -> decoding windows -> the streaming encoder -> CTC prefix beam
search carried across chunks -> the partial transcript; on END, attention rescoring and the final transcript.

The encoder and decoder run here with onnxruntime when the parameters `encoder_onnx` / `decoder_onnx` name
their graphs (asr_server/asr/serving/inline_onnx.py: one call per round of windows, the caches kept here).
Otherwise they are the models `streaming_encoder` (BLS, its caches held as implicit state by that model's
sequence batcher; one BLS request per sequence, in parallel, so that its sequence batcher runs them as one
batch) and `decoder`: the way to a TensorRT or GPU encoder.
"""

import concurrent.futures
import json

import numpy as np
import triton_python_backend_utils as pb_utils

from asr_server.asr.serving import serving_config
from asr_server.asr.decoding.details import DETAILS, encode
from asr_server.asr.serving.streaming_scorer import EncoderResult, StreamChunk, StreamFailed, StreamingScorer
from asr_server.asr.serving.triton_helpers import cancelled_response, control, error_response, input_array, run_decoder

ENCODER = "streaming_encoder"
ENCODER_OUTPUTS = ["log_probs", "log_probs_idx", "chunk_out", "chunk_out_lens"]
MAX_PARALLEL_BLS = 64  # concurrent encoder requests; the encoder's sequence batcher batches them


def encode_one(job):
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


class TritonPythonModel:
    def initialize(self, args):
        setup = serving_config.decoder_setup(args)
        params = setup.params
        self.scorer = StreamingScorer(
            setup.tokenizer, setup.settings, serving_config.window_config(params),
            int(params.get("num_mel_bins", 80)), int(params["encoder_output_size"]), setup.hotwords)
        self.pool = None
        self.inline_encoder, inline_decoder = serving_config.inline_graphs(
            args, params, setup.settings)
        if self.inline_encoder is not None:
            self.run_encoder = self.inline_encoder
        else:
            self.pool = concurrent.futures.ThreadPoolExecutor(MAX_PARALLEL_BLS, thread_name_prefix="wenet-bls")
        self.run_decoder = inline_decoder or run_decoder

    def run_encoder(self, jobs):
        """One result per job; a job whose encoder request failed holds its exception, so only its own
        stream fails."""
        futures = [self.pool.submit(encode_one, job) for job in jobs]
        return [f.exception() or f.result() for f in futures]

    def drop(self, key):
        """Forget a sequence: its decoding state, and its encoder caches when they are kept here."""
        self.scorer.drop(key)
        if self.inline_encoder is not None:
            self.inline_encoder.drop(key)

    def execute(self, requests):
        chunks, slots, responses = [], [], [None] * len(requests)
        for i, request in enumerate(requests):
            key = int(control(request, "CORRID"))
            if request.is_cancelled():
                self.drop(key)
                responses[i] = cancelled_response()
                continue
            speech = input_array(request, "speech")
            n = int(input_array(request, "speech_lengths").reshape(-1)[0])
            # parameters: `details` and the endpoint rules (see asr_server.asr.serving.pipeline.StreamChunk)
            chunks.append(StreamChunk(key, speech[0, :n], bool(control(request, "START")),
                                      bool(control(request, "END")), json.loads(request.parameters() or "{}"),
                                      DETAILS in request.requested_output_names()))
            slots.append(i)
        if chunks:
            try:  # a sequence whose encoder or decoder call fails comes back as a StreamFailed of its own
                texts = self.scorer.step(chunks, self.run_encoder, self.run_decoder)
            except Exception as exc:  # noqa: BLE001 - a bug in step(): no stream of the batch can be trusted
                for chunk in chunks:
                    self.drop(chunk.key)
                texts = [StreamFailed(f"{type(exc).__name__}: {exc}")] * len(chunks)
            details = self.scorer.last_details or [None] * len(texts)
            for i, text, info in zip(slots, texts, details):
                if isinstance(text, StreamFailed):
                    responses[i] = error_response(text.message, code=None)
                    continue
                # A scalar, as WeNet's model returns it: with the config's `reshape { shape: [ ] }` clients see
                # TRANSCRIPTS as [1], which WeNet's streaming client reads with `as_numpy(...)[0].decode()`.
                out = np.array(text.encode("utf-8"), dtype=np.object_)
                tensors = [pb_utils.Tensor("OUTPUT0", out)]
                if info is not None:  # only when DETAILS is requested (an ensemble requests every output)
                    tensors.append(pb_utils.Tensor(DETAILS, np.array(encode(info), dtype=np.object_)))
                responses[i] = pb_utils.InferenceResponse(tensors)
        return responses

    def finalize(self):
        if self.pool is not None:
            self.pool.shutdown(wait=False)
