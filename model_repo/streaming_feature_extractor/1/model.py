"""Streaming feature extractor: per sequence, audio chunks of any length -> the fbank frames they complete.

The residual samples of each sequence are kept (created on START, dropped on END or when idle), so the
frames equal the whole-utterance fbank whatever the client's chunk sizes. Parameter `fbank_backend`:
"kaldi-native-fbank" (CPU, the default) or "kaldifeat" (one batched call per execute, on the instance's GPU
for KIND_GPU).
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from asr_server.asr.serving import serving_config
from asr_server.asr.serving.pipeline import StreamingFeatures
from asr_server.asr.serving.streaming_recogniser import audio_frames
from asr_server.asr.serving.triton_helpers import cancelled_response, error_response


class TritonPythonModel:
    def initialize(self, args):
        setup = serving_config.feature_setup(args)
        self.features = StreamingFeatures(setup.config, float(setup.params.get("idle_seconds", 5.0)),
                                          setup.compute_fbank)

    def execute(self, requests):
        responses = []
        # every sequence's new samples in one fbank call (kaldifeat batches them on the device)
        for frames in audio_frames(requests, self.features, "wav", "wav_lens"):
            if frames is None:  # cancelled: its sequence's state is dropped
                responses.append(cancelled_response())
            elif isinstance(frames, ValueError):  # this chunk fails alone; the sequence keeps its state
                responses.append(error_response(str(frames)))
            else:
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("speech", frames[None].astype(np.float32)),
                    pb_utils.Tensor("speech_lengths", np.array([[frames.shape[0]]], dtype=np.int32)),
                ]))
        return responses
