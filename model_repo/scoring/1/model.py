"""Offline scorer: CTC prefix beam search over the encoder's top-k, attention rescoring with `decoder` (BLS).

The optional output DETAILS (one JSON per utterance) carries word/token timestamps, confidences and the n-best
when the request parameter `details` is true; without it DETAILS holds only the text (an ensemble asks its
steps for every output, so the parameter, not the requested outputs, decides what is computed).
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

from asr_server.asr.serving import serving_config
from asr_server.asr.decoding.details import DETAILS, to_json_bytes, wants_details
from asr_server.asr.serving.pipeline import OfflineScorer
from asr_server.asr.serving.triton_helpers import error_response, input_array, run_decoder

class TritonPythonModel:
    def initialize(self, args):
        setup = serving_config.decoder_setup(args)
        self.scorer = OfflineScorer(setup.tokenizer, setup.settings, setup.hotwords)

    def execute(self, requests):
        responses = []
        for request in requests:
            def get(name):
                return input_array(request, name)

            want = DETAILS in request.requested_output_names()
            parameters = json.loads(request.parameters() or "{}")  # details; hotwords, hotwords_score
            # every token's log-prob (optional input, mapped by the ensemble): hotword tokens outside a frame's
            # top-k are searched too
            full = pb_utils.get_input_tensor_by_name(request, "ctc_log_probs")
            try:
                results = self.scorer.recognize(
                    get("encoder_out"), get("encoder_out_lens").reshape(-1), get("batch_log_probs"),
                    get("batch_log_probs_idx"), run_decoder, details=want and wants_details(parameters),
                    parameters=parameters, full_log_probs=None if full is None else full.as_numpy())
            except ValueError as exc:  # a bad hotwords parameter: this request fails alone
                responses.append(error_response(str(exc)))
                continue
            out = np.array([[t.encode("utf-8")] for t, _ in results], dtype=np.object_)
            tensors = [pb_utils.Tensor("OUTPUT0", out)]
            if want:
                tensors.append(pb_utils.Tensor(DETAILS, np.array(
                    [[to_json_bytes(d or {"text": t, "segment": 0, "final": True})] for t, d in results], dtype=np.object_)))
            responses.append(pb_utils.InferenceResponse(tensors))
        return responses
