"""validate_request remembers the input and output signatures it accepted (a stream's chunks repeat one):
what it skips for them must never let a bad request through."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_server import core
from asr_server.core import validate_request
from asr_server.errors import ServerError
from asr_server.messages import InferRequest, RequestedOutput, SequenceControl, Tensor
from asr_server.repository.validation import RequestRules

CONFIG = """
name: "m" max_batch_size: 4
input { name: "WAV" data_type: TYPE_FP32 dims: [-1] }
input { name: "LENS" data_type: TYPE_INT32 dims: [1] }
output { name: "TEXT" data_type: TYPE_STRING dims: [1] }
"""


def rules_and_config():
    config = mc.ModelConfig()
    text_format.Parse(CONFIG, config)
    return RequestRules.of(config), config


def chunk(samples: int = 160, rows: int = 1, sequence_id=7, outputs=(), wav_type: str = "FP32") -> InferRequest:
    wav = np.zeros((rows, samples), np.float32 if wav_type == "FP32" else np.float64)
    return InferRequest("m", inputs=[Tensor("WAV", wav_type, wav), Tensor("LENS", "INT32", np.ones((rows, 1), np.int32))],
                        outputs=[RequestedOutput(name) for name in outputs], sequence=SequenceControl(sequence_id))


def test_an_accepted_signature_is_remembered_and_a_changed_one_checked_again():
    rules, config = rules_and_config()
    validate_request(config, chunk(), rules)
    validate_request(config, chunk(outputs=["TEXT"]), rules)
    assert len(rules.accepted) == 2
    validate_request(config, chunk(), rules)  # remembered
    assert len(rules.accepted) == 2
    for bad, words in ((chunk(rows=5), "batch-size must be <= 4"), (chunk(wav_type="FP64"), "data-type is 'FP64'"),
                       (chunk(outputs=["NOPE"]), "unexpected inference output 'NOPE'"),
                       (chunk(sequence_id=-1), "sequence_id -1")):
        for _ in range(2):  # a refused signature is never remembered
            with pytest.raises(ServerError, match=words):
                validate_request(config, bad, rules)
    assert len(rules.accepted) == 2


def test_the_memory_is_bounded(monkeypatch):
    rules, config = rules_and_config()
    monkeypatch.setattr(RequestRules, "ACCEPTED_LIMIT", 3)
    for samples in range(100, 120):
        validate_request(config, chunk(samples=samples), rules)
    assert 1 <= len(rules.accepted) <= 3


def test_requests_naming_many_outputs_or_undeclared_ones_are_not_remembered():
    rules, config = rules_and_config()
    validate_request(config, chunk(outputs=["TEXT"] * (core.MEMO_MAX_OUTPUTS + 1)), rules)
    assert not rules.accepted
    open_config = mc.ModelConfig()
    text_format.Parse(CONFIG.split("output")[0], open_config)  # declares no outputs: any name is accepted
    open_rules = RequestRules.of(open_config)
    validate_request(open_config, chunk(outputs=["ANY"]), open_rules)
    assert not open_rules.accepted
