"""What an ONNX export is sized for, and the error every export raises when ONNX Runtime and PyTorch disagree."""

from __future__ import annotations

from dataclasses import dataclass

from ..nn.model import U2Model

OPSET = 17          # LayerNormalization is a single op from 17 on; Trilu (decoder mask) needs >= 14
SHERPA_OPSET = 13   # what the sherpa-onnx 2.0.1 peer was measured with (perf_anchors.md)
FP16_ATOL = 5e-2    # fp16 graphs vs the fp32 model: 10-bit mantissa over a few layers


class ExportMismatch(RuntimeError):
    """ONNX Runtime and PyTorch disagree beyond the tolerance (or a graph's I/O is not the promised one)."""


@dataclass(frozen=True)
class ExportOptions:
    """What the exported graphs are sized for. Validated in ``verify_options``."""

    chunk_size: int = 16     # encoder frames per streaming chunk (40 ms each with x4 subsampling)
    left_chunks: int = 4     # chunks of attention history the streaming cache holds (fixed: C = chunk*left)
    beam: int = 10           # top-k of the CTC log-probs returned by the encoders
    opset: int = OPSET       # ONNX opset of encoder/streaming_encoder/decoder
    atol: float = 1e-4       # max |ORT - torch| accepted for fp32 graphs
    seed: int = 0            # random parity inputs


def verify_options(model: U2Model, opts: ExportOptions) -> None:
    if opts.chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {opts.chunk_size}")
    if opts.left_chunks < 1:
        raise ValueError("left_chunks must be >= 1: the streaming graph needs a fixed, non-empty cache "
                         f"(got {opts.left_chunks})")
    if not 1 <= opts.beam <= model.vocab_size:
        raise ValueError(f"beam must be in 1..vocab_size ({model.vocab_size}), got {opts.beam}")
    if opts.atol <= 0:
        raise ValueError(f"atol must be > 0, got {opts.atol}")


def cache_frames(opts: ExportOptions) -> int:
    """C: encoder frames of attention cache per layer."""
    return opts.chunk_size * opts.left_chunks
