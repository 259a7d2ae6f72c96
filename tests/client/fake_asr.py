"""Fake ASR pipelines with WeNet's model names and tensors, as Triton python-backend models.

`attention_rescoring`: offline, WAV [B, -1] FP32 + WAV_LENS [B, 1] INT32 -> TRANSCRIPTS [B, 1] BYTES.
`streaming_wenet`: sequence model with START/END/CORRID controls; keeps each sequence's samples, answers every
chunk with the words of the complete tone segments so far, and END with the words of all of it.
Both decode tests/client/tones.py's tone code, so the tests know the reference.
"""

from __future__ import annotations

from pathlib import Path

from tests.client.tones import DECODER_SOURCE
from tests.helpers.sequence_models import SEQUENCE_CONTROLS, python_model

TENSORS = """
    input [
      { name: "WAV", data_type: TYPE_FP32, dims: [ -1 ] },
      { name: "WAV_LENS", data_type: TYPE_INT32, dims: [ 1 ] }
    ]
    output [ { name: "TRANSCRIPTS", data_type: TYPE_STRING, dims: [ 1 ] } ]
"""

OFFLINE_CONFIG = """
    name: "attention_rescoring"
    backend: "python"
    max_batch_size: 8
""" + TENSORS + """
    dynamic_batching { max_queue_delay_microseconds: 1000 }
"""

STREAMING_CONFIG = """
    name: "streaming_wenet"
    backend: "python"
    max_batch_size: 8
""" + TENSORS + """
    sequence_batching {
      max_sequence_idle_microseconds: 5000000
      oldest { max_candidate_sequences: 64 max_queue_delay_microseconds: 1000 }
""" + SEQUENCE_CONTROLS + """
    }
"""

COMMON_SOURCE = DECODER_SOURCE + '''
import triton_python_backend_utils as pb_utils


def audio_of(request):
    """The request's real samples: WAV (1, padded_n) trimmed to WAV_LENS (1, 1), as WeNet's models do."""
    wav = pb_utils.get_input_tensor_by_name(request, "WAV").as_numpy()
    length = int(pb_utils.get_input_tensor_by_name(request, "WAV_LENS").as_numpy().reshape(-1)[0])
    if wav.ndim != 2 or wav.shape[0] != 1 or not 0 <= length <= wav.shape[1]:
        raise ValueError(f"bad WAV {wav.shape} / WAV_LENS {length}")
    return wav[0, :length]


def text_response(text):
    return pb_utils.InferenceResponse([pb_utils.Tensor("TRANSCRIPTS", np.array([[text.encode()]], dtype=np.object_))])


def error_response(error):
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error)))
'''

OFFLINE_SOURCE = COMMON_SOURCE + '''

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(text_response(decode(audio_of(request))))
            except ValueError as error:
                responses.append(error_response(error))
        return responses
'''

STREAMING_SOURCE = COMMON_SOURCE + '''

def control(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def initialize(self, args):
        self.audio = {}  # correlation id -> list of (n,) float32 chunks

    def execute(self, requests):
        responses = []
        for request in requests:
            corrid = control(request, "CORRID")
            try:
                samples = audio_of(request)
            except ValueError as error:
                responses.append(error_response(error))
                continue
            if control(request, "START"):
                self.audio[corrid] = []
            self.audio[corrid].append(samples)
            so_far = np.concatenate(self.audio[corrid])
            if control(request, "END"):
                del self.audio[corrid]
                responses.append(text_response(decode(so_far)))
            else:
                responses.append(text_response(decode(so_far, complete_only=True)))
        return responses
'''


def fake_asr_repo(repo: Path) -> Path:
    python_model(repo, "attention_rescoring", OFFLINE_CONFIG, OFFLINE_SOURCE)
    python_model(repo, "streaming_wenet", STREAMING_CONFIG, STREAMING_SOURCE)
    return repo
