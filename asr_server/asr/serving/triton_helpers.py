"""Small helpers for the Triton python models in model_repo/ (they run here and in real Triton).

They use Triton's `triton_python_backend_utils`, imported when called, so this module imports in any
process; inside a python model (ours or Triton's stub) that module is always importable.
"""

from __future__ import annotations

import numpy as np


def input_array(request, name: str) -> np.ndarray:
    """The request's input tensor ``name`` as numpy."""
    import triton_python_backend_utils as pb_utils

    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


def control(request, name: str):
    """The scalar value of a sequence control input (START, END, CORRID, ...)."""
    return input_array(request, name).reshape(-1)[0]


def error_response(message: str, code: str = "INVALID_ARG"):
    """A response that fails this request alone; ``code``: a ``TritonError`` code name (``None``: Triton's
    default, INTERNAL)."""
    import triton_python_backend_utils as pb_utils

    if code is None:
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, getattr(pb_utils.TritonError, code)))


def cancelled_response():
    """The answer to a request the client cancelled (its sequence's state is dropped by the caller)."""
    return error_response("request cancelled", "CANCELLED")


def run_decoder(inputs, encoder_out: np.ndarray, lengths: np.ndarray, model_name: str = "decoder") -> np.ndarray:
    """Attention rescoring through BLS: WeNet's decoder.onnx -> best_index (B,).

    inputs: asr_server.asr.decoding.rescoring.DecoderInputs; encoder_out (B, T, d); lengths (B,).
    """
    import triton_python_backend_utils as pb_utils

    tensors = [pb_utils.Tensor("encoder_out", encoder_out.astype(np.float32)),
               pb_utils.Tensor("encoder_out_lens", lengths.reshape(-1, 1).astype(np.int32))]
    tensors += [pb_utils.Tensor(name, value) for name, value in inputs.feeds().items()]
    response = pb_utils.InferenceRequest(
        model_name=model_name, requested_output_names=["best_index"], inputs=tensors).exec()
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return pb_utils.get_output_tensor_by_name(response, "best_index").as_numpy().reshape(-1)
