"""Streaming feature extractor: per sequence, audio chunks of any length -> the fbank frames they complete.

The residual samples of each sequence are kept (created on START, dropped on END or when idle), so the
frames equal the whole-utterance fbank whatever the client's chunk sizes. Parameter `fbank_backend`:
"kaldi-native-fbank" (CPU, the default) or "kaldifeat" (one batched call per execute, on the instance's GPU
for KIND_GPU).
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from asr_server.asr.features.fbank import checked_waveform
from asr_server.asr.serving import serving_config
from asr_server.asr.serving.pipeline import StreamingFeatures
from asr_server.asr.serving.triton_helpers import cancelled_response, control, error_response, input_array


class TritonPythonModel:
    def initialize(self, args):
        setup = serving_config.feature_setup(args)
        self.features = StreamingFeatures(setup.config, float(setup.params.get("idle_seconds", 5.0)),
                                          setup.compute_fbank)

    def execute(self, requests):
        responses = [None] * len(requests)
        chunks, where = [], []
        for i, request in enumerate(requests):
            key = int(control(request, "CORRID"))
            if request.is_cancelled():
                self.features.drop(key)
                responses[i] = cancelled_response()
                continue
            wav = input_array(request, "wav")
            n = int(input_array(request, "wav_lens").reshape(-1)[0])
            try:
                samples = checked_waveform(wav[0], n)
            except ValueError as exc:  # this chunk fails alone; the sequence keeps its state
                responses[i] = error_response(str(exc))
                continue
            chunks.append((key, samples, bool(control(request, "START")), bool(control(request, "END"))))
            where.append(i)
        # every sequence's new samples in one fbank call (kaldifeat batches them on the device)
        for i, frames in zip(where, self.features.accept_many(chunks)):
            responses[i] = pb_utils.InferenceResponse([
                pb_utils.Tensor("speech", frames[None].astype(np.float32)),
                pb_utils.Tensor("speech_lengths", np.array([[frames.shape[0]]], dtype=np.int32)),
            ])
        return responses
