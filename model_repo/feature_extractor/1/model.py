"""Offline feature extractor: WAV (+ WAV_LENS) -> Kaldi fbank, padded to the longest utterance of the batch.

Padding every request of a batch to the same length lets the encoder batch them (it only batches equal
shapes). Parameter `fbank_backend`: "kaldi-native-fbank" (CPU, the default) or "kaldifeat" (batched, on
the instance's GPU when the instance group is KIND_GPU; kaldifeat must be installed).
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from asr_server.asr.features.fbank import checked_waveform
from asr_server.asr.serving import serving_config
from asr_server.asr.serving.triton_helpers import error_response, input_array


class TritonPythonModel:
    def initialize(self, args):
        setup = serving_config.feature_setup(args)
        params, self.config, self.compute_fbank = setup.params, setup.config, setup.compute_fbank
        # The encoder's subsampling needs this many frames; shorter audio is padded (its speech_lengths stay
        # true, so it decodes to an empty transcript instead of failing in the encoder).
        self.min_frames = int(params.get("min_frames", 7))
        self.max_samples = serving_config.max_audio_samples(params, self.config)

    def execute(self, requests):
        waves, errors = [], {}
        for i, request in enumerate(requests):
            wav = input_array(request, "wav")  # (B, N) float in [-1, 1]
            lens = input_array(request, "wav_lens").reshape(-1)
            try:
                for b in range(wav.shape[0]):  # refused before any fbank: memory stays bounded per request
                    reason = serving_config.too_long(int(lens[b]), self.max_samples, self.config)
                    if reason:
                        raise ValueError(reason)
                waves.append([checked_waveform(wav[b], int(lens[b])) for b in range(wav.shape[0])])
            except ValueError as exc:  # this request fails alone
                errors[i] = error_response(str(exc))
                waves.append([])
        # every utterance of every request in one call (kaldifeat batches them on the device)
        flat = iter(self.compute_fbank([w for batch in waves for w in batch]))
        feats = [[next(flat) for _ in batch] for batch in waves]
        longest = max([self.min_frames] + [f.shape[0] for batch in feats for f in batch])
        responses = []
        for i, batch in enumerate(feats):
            if i in errors:
                responses.append(errors[i])
                continue
            speech = np.zeros((len(batch), longest, self.config.num_mel_bins), dtype=np.float32)
            for b, f in enumerate(batch):
                speech[b, : f.shape[0]] = f
            lengths = np.array([[f.shape[0]] for f in batch], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("speech", speech), pb_utils.Tensor("speech_lengths", lengths),
            ]))
        return responses
