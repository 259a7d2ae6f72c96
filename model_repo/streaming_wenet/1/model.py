"""Streaming recogniser in one model (build_model_repo.py's default streaming model): per sequence, audio
chunks of any length -> fbank frames (the residual samples kept, so the frames equal the whole utterance's)
-> decoding windows -> the streaming encoder -> CTC prefix beam search carried across chunks -> the partial
transcript; on END, attention rescoring and the final transcript.

The same work as WeNet's ensemble layout (streaming_wenet_ensemble = streaming_feature_extractor -> wenet),
without the ensemble's second model and request per chunk: asr_server/asr/serving/streaming_recogniser.py does the
fbank reading and the scoring for both. Inputs and outputs are the ensemble's (WAV, WAV_LENS -> TRANSCRIPTS,
DETAILS), so clients see no difference.
"""

from asr_server.asr.serving import serving_config
from asr_server.asr.serving.pipeline import StreamingFeatures
from asr_server.asr.serving.streaming_recogniser import StreamingRecogniser, audio_frames


class TritonPythonModel:
    def initialize(self, args):
        setup = serving_config.feature_setup(args)
        self.recogniser = StreamingRecogniser(args, transcript_output="TRANSCRIPTS")
        # the fbank residual lives in each stream's object beside its decoding state (one idle limit)
        self.features = StreamingFeatures(setup.config, compute_fbank=setup.compute_fbank,
                                          streams=self.recogniser.streams)

    def execute(self, requests):
        # None for a cancelled request: the recogniser drops the rest of its sequence
        return self.recogniser.respond(requests, audio_frames(requests, self.features, "WAV", "WAV_LENS"))

    def finalize(self):
        self.recogniser.finalize()
