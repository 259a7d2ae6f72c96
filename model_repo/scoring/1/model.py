"""Offline scorer: CTC prefix beam search over the encoder's top-k, attention rescoring with `decoder` (BLS)."""

import numpy as np
import triton_python_backend_utils as pb_utils

from asr_server.asr import serving_config
from asr_server.asr.pipeline import OfflineScorer
from asr_server.triton_helpers import run_decoder

class TritonPythonModel:
    def initialize(self, args):
        params = serving_config.parameters(args)
        tokenizer = serving_config.tokenizer(args, params)
        self.scorer = OfflineScorer(tokenizer, serving_config.decoding_settings(params, tokenizer.symbols))

    def execute(self, requests):
        responses = []
        for request in requests:
            def get(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy()

            texts = self.scorer.decode(
                get("encoder_out"), get("encoder_out_lens").reshape(-1),
                get("batch_log_probs"), get("batch_log_probs_idx"), run_decoder)
            out = np.array([[t.encode("utf-8")] for t in texts], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
