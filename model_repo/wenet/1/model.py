"""Streaming scorer of WeNet's ensemble layout (streaming_feature_extractor -> wenet): per sequence, fbank frames
-> decoding windows -> the streaming encoder -> CTC prefix beam search carried across chunks -> the partial
transcript; on END, attention rescoring and the final transcript.

The work is asr_server/asr/serving/streaming_recogniser.py's, shared with streaming_wenet's single-model layout
(audio in). The encoder and decoder run here with onnxruntime when the parameters `encoder_onnx` /
`decoder_onnx` name their graphs, or are called through BLS (`streaming_encoder`, `decoder`).
"""

from asr_server.asr.serving.streaming_recogniser import StreamingRecogniser
from asr_server.asr.serving.triton_helpers import input_array


class TritonPythonModel:
    def initialize(self, args):
        self.recogniser = StreamingRecogniser(args, transcript_output="OUTPUT0")

    def execute(self, requests):
        frames = []
        for request in requests:
            if request.is_cancelled():
                frames.append(None)
                continue
            n = int(input_array(request, "speech_lengths").reshape(-1)[0])
            frames.append(input_array(request, "speech")[0, :n])
        return self.recogniser.respond(requests, frames)

    def finalize(self):
        self.recogniser.finalize()
