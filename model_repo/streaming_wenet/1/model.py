"""Streaming recogniser in one model (build_model_repo.py's default streaming layout): per sequence, audio
chunks of any length -> fbank frames (the residual samples kept, so the frames equal the whole utterance's)
-> decoding windows -> the streaming encoder -> CTC prefix beam search carried across chunks -> the partial
transcript; on END, attention rescoring and the final transcript.

The same work as WeNet's ensemble layout (streaming_feature_extractor -> wenet, `--streaming-ensemble`), without
the ensemble's second model and request per chunk: asr_server/asr/serving/streaming_model.py does the scoring
for both. Inputs and outputs are the ensemble's (WAV, WAV_LENS -> TRANSCRIPTS, DETAILS), so clients see no
difference.
"""

from asr_server.asr.features.fbank import checked_waveform
from asr_server.asr.serving import serving_config
from asr_server.asr.serving.pipeline import StreamingFeatures
from asr_server.asr.serving.streaming_model import StreamingRecogniser
from asr_server.asr.serving.triton_helpers import control, input_array


class TritonPythonModel:
    def initialize(self, args):
        setup = serving_config.feature_setup(args)
        self.features = StreamingFeatures(setup.config, float(setup.params.get("idle_seconds", 5.0)),
                                          setup.compute_fbank)
        self.recogniser = StreamingRecogniser(args, transcript_output="TRANSCRIPTS")

    def execute(self, requests):
        frames = [None] * len(requests)
        chunks, where = [], []
        for i, request in enumerate(requests):
            key = int(control(request, "CORRID"))
            if request.is_cancelled():
                self.features.drop(key)  # the recogniser drops the rest of the sequence
                continue
            n = int(input_array(request, "WAV_LENS").reshape(-1)[0])
            try:
                samples = checked_waveform(input_array(request, "WAV")[0], n)
            except ValueError as exc:  # this chunk fails alone; the sequence keeps its state
                frames[i] = exc
                continue
            chunks.append((key, samples, bool(control(request, "START")), bool(control(request, "END"))))
            where.append(i)
        # every sequence's new samples in one fbank call
        for i, new in zip(where, self.features.accept_many(chunks)):
            frames[i] = new
        return self.recogniser.respond(requests, frames)

    def finalize(self):
        self.recogniser.finalize()
