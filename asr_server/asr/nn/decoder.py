"""Transformer attention decoders: left-to-right and U2++'s bidirectional pair (WeNet ``BiTransformerDecoder``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .attention import MultiHeadedAttention
from .embedding import PositionalEncoding
from .encoder import LAYER_NORM_EPS, PositionwiseFeedForward, activation
from .masks import make_pad_mask, subsequent_mask


class DecoderLayer(nn.Module):
    """Pre-norm: masked self-attention -> source attention over the encoder output -> FFN."""

    def __init__(self, size: int, self_attn: MultiHeadedAttention, src_attn: MultiHeadedAttention,
                 feed_forward: PositionwiseFeedForward, dropout_rate: float):
        super().__init__()
        self.self_attn = self_attn
        self.src_attn = src_attn
        self.feed_forward = feed_forward
        self.norm1 = nn.LayerNorm(size, eps=LAYER_NORM_EPS)
        self.norm2 = nn.LayerNorm(size, eps=LAYER_NORM_EPS)
        self.norm3 = nn.LayerNorm(size, eps=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, tgt, tgt_mask, memory, memory_mask):
        """tgt (B*N, L, d), tgt_mask (B*N, L, L), memory (B, T, d), memory_mask (B, 1, T) -> (B*N, L, d).

        N > 1 (N hypotheses of each utterance, grouped by utterance): each utterance's N*L queries attend to
        its memory once, so the keys and values of the memory are projected once per utterance instead of N
        times (rescoring: N = beam); the same attention as repeating the memory N times."""
        t = self.norm1(tgt)
        x = tgt + self.dropout(self.self_attn(t, t, t, tgt_mask))
        q = self.norm2(x)
        if memory.size(0) != tgt.size(0):
            q = q.reshape(memory.size(0), -1, q.size(2))                  # (B, N*L, d)
        x = x + self.dropout(self.src_attn(q, memory, memory, memory_mask).reshape(x.shape))
        return x + self.dropout(self.feed_forward(self.norm3(x)))


class TransformerDecoder(nn.Module):
    def __init__(self, vocab_size: int, encoder_output_size: int, attention_heads: int, linear_units: int,
                 num_blocks: int, dropout_rate: float, positional_dropout_rate: float,
                 self_attention_dropout_rate: float, src_attention_dropout_rate: float,
                 activation_type: str = "relu"):
        super().__init__()
        d = encoder_output_size
        self.embed = nn.Sequential(nn.Embedding(vocab_size, d), PositionalEncoding(d, positional_dropout_rate))
        self.after_norm = nn.LayerNorm(d, eps=LAYER_NORM_EPS)
        self.output_layer = nn.Linear(d, vocab_size)
        self.decoders = nn.ModuleList([
            DecoderLayer(d, MultiHeadedAttention(attention_heads, d, self_attention_dropout_rate),
                         MultiHeadedAttention(attention_heads, d, src_attention_dropout_rate),
                         PositionwiseFeedForward(d, linear_units, dropout_rate, activation(activation_type)),
                         dropout_rate)
            for _ in range(num_blocks)])

    def forward(self, memory: torch.Tensor, memory_mask: torch.Tensor, ys_in_pad: torch.Tensor,
                ys_in_lens: torch.Tensor) -> torch.Tensor:
        """memory (B, T, d), memory_mask (B, 1, T) bool, ys_in_pad (B, L) int64 ([sos] + tokens, padded),
        ys_in_lens (B,) -> logits (B, L, vocab). ys_in_pad may also hold N rows per utterance ((B*N, L), row r
        of utterance r // N; see DecoderLayer)."""
        L = ys_in_pad.size(1)
        tgt_mask = (~make_pad_mask(ys_in_lens, L)).unsqueeze(1) & subsequent_mask(L, ys_in_pad.device).unsqueeze(0)
        x, _ = self.embed[1](self.embed[0](ys_in_pad))
        for layer in self.decoders:
            x = layer(x, tgt_mask, memory, memory_mask)
        return self.output_layer(self.after_norm(x))


@dataclass(frozen=True)
class DecoderConfig:
    """WeNet ``decoder_conf`` keys (bitransformer / transformer)."""

    attention_heads: int = 4
    linear_units: int = 2048
    num_blocks: int = 6
    r_num_blocks: int = 0                 # right-to-left decoder blocks; 0 = plain transformer decoder
    dropout_rate: float = 0.1
    positional_dropout_rate: float = 0.1
    self_attention_dropout_rate: float = 0.0
    src_attention_dropout_rate: float = 0.0
    activation_type: str = "relu"

    IGNORED = frozenset({"input_layer", "use_output_layer", "normalize_before", "src_attention",
                         "gradient_checkpointing", "tie_word_embedding", "use_sdpa", "query_bias", "key_bias",
                         "value_bias", "layer_norm_type", "norm_eps", "n_kv_head", "head_dim", "mlp_type",
                         "mlp_bias", "n_expert", "n_expert_activated"})

    @classmethod
    def from_dict(cls, d: dict) -> "DecoderConfig":
        unknown = set(d) - set(cls.__dataclass_fields__) - cls.IGNORED
        if unknown:
            raise ValueError(f"unsupported decoder_conf keys: {sorted(unknown)}")
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class BiTransformerDecoder(nn.Module):
    """``left_decoder`` reads hypotheses left to right, ``right_decoder`` reversed (U2++)."""

    def __init__(self, vocab_size: int, encoder_output_size: int, cfg: DecoderConfig):
        super().__init__()
        common = dict(attention_heads=cfg.attention_heads, linear_units=cfg.linear_units,
                      dropout_rate=cfg.dropout_rate, positional_dropout_rate=cfg.positional_dropout_rate,
                      self_attention_dropout_rate=cfg.self_attention_dropout_rate,
                      src_attention_dropout_rate=cfg.src_attention_dropout_rate,
                      activation_type=cfg.activation_type)
        self.left_decoder = TransformerDecoder(vocab_size, encoder_output_size, num_blocks=cfg.num_blocks, **common)
        self.right_decoder = TransformerDecoder(vocab_size, encoder_output_size, num_blocks=cfg.r_num_blocks,
                                                **common)

    def forward(self, memory, memory_mask, ys_in_pad, ys_in_lens, r_ys_in_pad, reverse_weight: float = 0.0):
        """Both directions; returns (left logits (B, L, V), right logits (B, L, V) or None)."""
        left = self.left_decoder(memory, memory_mask, ys_in_pad, ys_in_lens)
        right = None
        if reverse_weight > 0.0:
            right = self.right_decoder(memory, memory_mask, r_ys_in_pad, ys_in_lens)
        return left, right
