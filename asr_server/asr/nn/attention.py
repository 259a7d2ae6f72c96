"""Multi-head attention: plain (decoder) and WeNet's relative-position variant (conformer encoder)."""

from __future__ import annotations

import math

import torch
from torch import nn


class MultiHeadedAttention(nn.Module):
    """Scaled dot-product attention with ``linear_q/k/v/out`` (WeNet names)."""

    def __init__(self, n_head: int, n_feat: int, dropout_rate: float):
        super().__init__()
        assert n_feat % n_head == 0
        self.d_k = n_feat // n_head
        self.h = n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)
        self.dropout = nn.Dropout(p=dropout_rate)

    def forward_qkv(self, query, key, value):
        """(B, T, d) each -> q, k, v: (B, h, T, d_k)."""
        b = query.size(0)
        q = self.linear_q(query).view(b, -1, self.h, self.d_k).transpose(1, 2)
        k = self.linear_k(key).view(b, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(value).view(b, -1, self.h, self.d_k).transpose(1, 2)
        return q, k, v

    def forward_attention(self, value: torch.Tensor, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """value: (B, h, T_k, d_k), scores: (B, h, T_q, T_k), mask: (B, 1|T_q, T_k) bool valid -> (B, T_q, d)."""
        b = value.size(0)
        if mask.size(-1) > 0:
            masked = ~mask.unsqueeze(1)                     # (B, 1, 1|T_q, T_k)
            # finfo.min instead of -inf keeps fp16 exports finite; masked probabilities are zeroed below anyway.
            scores = scores.masked_fill(masked, torch.finfo(scores.dtype).min)
            attn = torch.softmax(scores, dim=-1).masked_fill(masked, 0.0)
        else:
            attn = torch.softmax(scores, dim=-1)
        x = torch.matmul(self.dropout(attn), value)         # (B, h, T_q, d_k)
        return self.linear_out(x.transpose(1, 2).reshape(b, -1, self.h * self.d_k))

    def forward(self, query, key, value, mask):
        """query (B, T_q, d), key/value (B, T_k, d), mask (B, 1|T_q, T_k) -> (B, T_q, d)."""
        q, k, v = self.forward_qkv(query, key, value)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        return self.forward_attention(v, scores, mask)


def _with_cache(k: torch.Tensor, v: torch.Tensor, cache: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prepend cached keys/values ((B, h, C, 2*d_k), keys|values on the last axis); returns k, v, new cache."""
    if cache is not None and cache.size(2) > 0:
        k_cache, v_cache = torch.split(cache, cache.size(-1) // 2, dim=-1)
        k = torch.cat([k_cache, k], dim=2)
        v = torch.cat([v_cache, v], dim=2)
    return k, v, torch.cat([k, v], dim=-1)


class CachedSelfAttention(MultiHeadedAttention):
    """Encoder self-attention without position terms (WeNet ``selfattn`` beside ``abs_pos``), same call and
    cache layout as ``RelPositionMultiHeadedAttention`` (``pos_emb`` is accepted and unused)."""

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                pos_emb: torch.Tensor | None = None, cache: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v = self.forward_qkv(query, key, value)
        k, v, new_cache = _with_cache(k, v, cache)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        return self.forward_attention(v, scores, mask), new_cache


class RelPositionMultiHeadedAttention(MultiHeadedAttention):
    """Self-attention with Transformer-XL style position terms (``linear_pos``, ``pos_bias_u``, ``pos_bias_v``).

    As in WeNet, the position term uses the key's own (absolute) sinusoid rather than a shifted relative one:
    ``pos_emb`` has one row per key frame, so a cached key keeps the position it had when it was computed and
    chunk-by-chunk decoding equals the full-context pass.
    """

    def __init__(self, n_head: int, n_feat: int, dropout_rate: float):
        super().__init__(n_head, n_feat, dropout_rate)
        self.linear_pos = nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = nn.Parameter(torch.empty(self.h, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.empty(self.h, self.d_k))
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                pos_emb: torch.Tensor, cache: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Self-attention over [cache; current].

        query/key/value: (B, T, d) current frames
        mask:    (B, 1|T, C+T) bool, True = attend (C = cached frames, 0 without a cache)
        pos_emb: (1|B, C+T, d) sinusoids of the key positions
        cache:   (B, h, C, 2*d_k) keys and values of earlier frames concatenated on the last axis, or None
        returns: out (B, T, d), new_cache (B, h, C+T, 2*d_k)
        """
        q, k, v = self.forward_qkv(query, key, value)      # (B, h, T, d_k)
        k, v, new_cache = _with_cache(k, v, cache)
        p = self.linear_pos(pos_emb).view(pos_emb.size(0), -1, self.h, self.d_k).transpose(1, 2)  # (1|B,h,K,d_k)
        q = q.transpose(1, 2)                                # (B, T, h, d_k)
        q_u = (q + self.pos_bias_u).transpose(1, 2)          # (B, h, T, d_k)
        q_v = (q + self.pos_bias_v).transpose(1, 2)
        matrix_ac = torch.matmul(q_u, k.transpose(-2, -1))   # (B, h, T, K)
        matrix_bd = torch.matmul(q_v, p.transpose(-2, -1))   # (B, h, T, K)
        scores = (matrix_ac + matrix_bd) / math.sqrt(self.d_k)
        return self.forward_attention(v, scores, mask), new_cache
