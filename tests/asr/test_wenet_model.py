"""model_repo/wenet/1/model.py, the streaming scorer, run through ``execute`` with a stand-in for Triton's
``triton_python_backend_utils``: its encoder and decoder BLS calls are replaced by fakes, so one batch of
requests is exactly what the test builds (served tests cannot pin which sequences share a batch).

A bad request must fail alone: a decoder (rescoring) call that fails for one sequence of a batch used to fail
every request of that batch and drop every sequence in it."""

from __future__ import annotations

import importlib.util
import json
import sys
import types

import numpy as np
import pytest

from asr_server.asr.serving.streaming_scorer import EncoderResult
from tests.conftest import ROOT

MEL = 8  # fbank bins of the fake model
DIM = 8  # encoder output size
CHUNK, SUBSAMPLING, RIGHT_CONTEXT = 4, 4, 6  # window 19 frames, stride 16


class _Tensor:
    def __init__(self, name, array):
        self._name, self._array = name, np.asarray(array)

    def name(self):
        return self._name

    def as_numpy(self):
        return self._array


class _TritonError:
    INTERNAL, INVALID_ARG, CANCELLED = "INTERNAL", "INVALID_ARG", "CANCELLED"

    def __init__(self, message, code="INTERNAL"):
        self._message, self.code = message, code

    def message(self):
        return self._message


class _TritonModelException(Exception):
    def message(self):
        return str(self.args[0])


class _Response:
    def __init__(self, output_tensors=None, error=None):
        self.tensors = {t.name(): t.as_numpy() for t in output_tensors or []}
        self.error = error


class _Request:
    def __init__(self, key, frames, start, end):
        self.inputs = {"speech": _Tensor("speech", frames[None]), "speech_lengths": _Tensor("speech_lengths", [[len(frames)]]),
                       "START": _Tensor("START", [[int(start)]]), "END": _Tensor("END", [[int(end)]]),
                       "CORRID": _Tensor("CORRID", [[key]])}

    def is_cancelled(self):
        return False

    def parameters(self):
        return "{}"

    def requested_output_names(self):
        return ["OUTPUT0"]


def _fake_pb_utils():
    pb = types.ModuleType("triton_python_backend_utils")
    pb.Tensor, pb.InferenceResponse, pb.TritonError = _Tensor, _Response, _TritonError
    pb.TritonModelException = _TritonModelException
    pb.get_input_tensor_by_name = lambda request, name: request.inputs[name]
    pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START, pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 1, 2
    return pb


def fake_encoder(job):
    """Like the streaming encoder's BLS answer: per window, one token (2 or 3 by the window's mean sign) on the
    first frame, blanks after; chunk_out carries the window's mean so the decoder can tell streams apart."""
    token = 2 + int(job.window[: max(job.valid, 1)].mean() > 0)
    log_probs = np.full((CHUNK, 2), -5.0, np.float32)
    ids = np.zeros((CHUNK, 2), np.int64)
    log_probs[0], ids[0] = (-0.01, -5.0), (token, 0)
    log_probs[1:, 0] = -0.01
    valid = min(CHUNK, (job.valid - 1) // SUBSAMPLING) if job.valid else 0
    return EncoderResult(log_probs, ids, np.full((CHUNK, DIM), float(job.key), np.float32), valid)


@pytest.fixture
def wenet(tmp_path, monkeypatch):
    """An initialised TritonPythonModel of model_repo/wenet/1/model.py, its BLS calls faked."""
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", _fake_pb_utils())
    spec = importlib.util.spec_from_file_location("wenet_model_under_test", ROOT / "model_repo" / "wenet" / "1" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "units.txt").write_text("<blank> 0\n<unk> 1\na 2\nb 3\n<sos/eos> 4\n")
    params = {"units": "units.txt", "beam_size": 2, "bidecoder": 0, "rescoring": 1, "chunk_size": CHUNK,
              "subsampling_rate": SUBSAMPLING, "right_context": RIGHT_CONTEXT, "num_mel_bins": MEL,
              "encoder_output_size": DIM}
    config = {"parameters": {k: {"string_value": str(v)} for k, v in params.items()}}
    from asr_server.asr.serving import streaming_recogniser

    monkeypatch.setattr(streaming_recogniser, "encode_window_by_bls", fake_encoder)  # the BLS call of each window
    model = module.TritonPythonModel()
    model.initialize({"model_config": json.dumps(config), "model_repository": str(tmp_path)})
    model.decoder_calls = []

    def run_decoder(inputs, encoder_out, lengths):
        """The decoder BLS: fails whenever the batch holds sequence `bad` (its encoder_out carries its key)."""
        keys = sorted({int(encoder_out[b, 0, 0]) for b in range(len(lengths))})
        model.decoder_calls.append(keys)
        if model.bad in keys:
            raise _TritonModelException("decoder: inference failed for this input")
        return np.zeros(len(lengths), np.int64)

    model.bad = None
    model.recogniser.run_decoder = run_decoder
    yield model
    model.finalize()


def frames_of(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    frames = rng.normal(size=(n, MEL)).astype(np.float32)
    frames[: n // 3] += 2  # the first windows read as one token, the rest mostly the other
    return frames


def texts(responses) -> list:
    return [r.error.message() if r.error is not None else r.tensors["OUTPUT0"].item().decode() for r in responses]


def run(model, batches) -> list[list]:
    return [texts(model.execute([_Request(*item) for item in batch])) for batch in batches]


def test_a_decoder_failure_for_one_sequence_fails_that_request_alone_and_the_others_go_on(wenet):
    a, b, c = frames_of(1, 60), frames_of(2, 70), frames_of(3, 90)
    # every sequence in the same batches; 11 and 12 end (rescoring) in the second, 13 goes on to a third
    batches = [[(11, a[:30], True, False), (12, b[:30], True, False), (13, c[:30], True, False)],
               [(11, a[30:], False, True), (12, b[30:], False, True), (13, c[30:60], False, False)],
               [(13, c[60:], False, True)]]
    clean = run(wenet, batches)
    assert all(isinstance(t, str) and t for batch in clean for t in batch)
    assert wenet.decoder_calls == [[11, 12], [13]]  # rescoring of a batch's ending streams is one call

    wenet.bad, wenet.decoder_calls = 11, []
    faulty = run(wenet, batches)
    assert faulty[0] == clean[0]
    assert "decoder: inference failed for this input" in faulty[1][0]  # the bad request fails ...
    assert faulty[1][1:] == clean[1][1:]  # ... alone: 12's final and 13's partial are what they were
    assert faulty[2] == clean[2]  # and 13's stream goes on to the same final
    assert len(wenet.recogniser.streams) == 0
