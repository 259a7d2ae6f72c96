"""Streaming feature extractor: per sequence, audio chunks of any length -> the fbank frames they complete.

The residual samples of each sequence are kept (created on START, dropped on END or when idle), so the
frames equal the whole-utterance fbank whatever the client's chunk sizes.
"""

import sys
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

try:
    import asr_server  # noqa: F401
except ImportError:  # real Triton's python stub: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from asr_server.asr import serving_config
from asr_server.asr.features import checked_waveform
from asr_server.asr.pipeline import StreamingFeatures
from asr_server.triton_helpers import control


class TritonPythonModel:
    def initialize(self, args):
        params = serving_config.parameters(args)
        self.features = StreamingFeatures(serving_config.fbank_config(params),
                                          float(params.get("idle_seconds", 5.0)))

    def execute(self, requests):
        responses = []
        for request in requests:
            key = int(control(request, "CORRID"))
            if request.is_cancelled():
                self.features.drop(key)
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("request cancelled", pb_utils.TritonError.CANCELLED)))
                continue
            wav = pb_utils.get_input_tensor_by_name(request, "wav").as_numpy()
            n = int(pb_utils.get_input_tensor_by_name(request, "wav_lens").as_numpy().reshape(-1)[0])
            try:
                samples = checked_waveform(wav[0], n)
            except ValueError as exc:  # this chunk fails alone; the sequence keeps its state
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)))
                continue
            frames = self.features.accept(key, samples, bool(control(request, "START")),
                                          bool(control(request, "END")))
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("speech", frames[None].astype(np.float32)),
                pb_utils.Tensor("speech_lengths", np.array([[frames.shape[0]]], dtype=np.int32)),
            ]))
        return responses
