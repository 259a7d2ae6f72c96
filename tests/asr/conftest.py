"""Tiny seeded random U2++ models shared by the recogniser tests."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the recogniser tests need torch")

from asr_server.asr.nn.model import ModelConfig, U2Model  # noqa: E402
from asr_server.asr.nn.decoder import DecoderConfig  # noqa: E402
from asr_server.asr.nn.encoder import EncoderConfig, GlobalCMVN  # noqa: E402

VOCAB = 23  # <blank>, <unk>, 20 units, <sos/eos>
CHUNK = 4   # encoder frames per streaming chunk in the tests
LEFT_CHUNKS = 2


def tiny_model(seed: int = 0, causal: bool = True, norm: str = "layer_norm", bidecoder: bool = True) -> U2Model:
    torch.manual_seed(seed)
    enc = EncoderConfig(output_size=32, attention_heads=4, linear_units=48, num_blocks=2, cnn_module_kernel=5,
                        causal=causal, use_dynamic_chunk=True, cnn_module_norm=norm, dropout_rate=0.1,
                        positional_dropout_rate=0.1)
    dec = DecoderConfig(attention_heads=4, linear_units=48, num_blocks=1, r_num_blocks=1 if bidecoder else 0)
    cmvn = GlobalCMVN(torch.randn(80) * 0.1, 1.0 + 0.1 * torch.rand(80))
    model = U2Model(ModelConfig(input_dim=80, vocab_size=VOCAB, reverse_weight=0.3 if bidecoder else 0.0),
                    enc, dec, cmvn)
    # random values for the parameters that start at zero/one, so a wrong wiring cannot hide behind them
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


@pytest.fixture
def model() -> U2Model:
    return tiny_model()
