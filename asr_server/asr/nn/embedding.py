"""Sinusoidal positional encodings and WeNet's Conv2d subsampling front ends (x4, x6, x8)."""

from __future__ import annotations

import math

import torch
from torch import nn


class PositionalEncoding(nn.Module):
    """x * sqrt(d) + PE (decoder) or, with ``add_to_input=False``, x * sqrt(d) and PE returned apart (encoder's
    relative-position attention, WeNet's ``RelPositionalEncoding``)."""

    def __init__(self, d_model: int, dropout_rate: float, max_len: int = 5000, add_to_input: bool = True):
        super().__init__()
        self.d_model = d_model
        self.xscale = math.sqrt(d_model)
        self.dropout = nn.Dropout(p=dropout_rate)
        self.add_to_input = add_to_input
        pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        # Not persistent: WeNet checkpoints do not hold it, and it is a pure function of d_model.
        self.register_buffer("pe", pe, persistent=False)  # (max_len, d_model)

    def position_encoding(self, offset: torch.Tensor | int, size: int) -> torch.Tensor:
        """PE rows offset .. offset+size-1.

        offset: int, or (B,) int64 tensor (one start per sequence; negative starts clamp to row 0, those
        positions belong to masked cache frames; starts past the table clamp to its last ``size`` rows).
        returns: (1, size, d) for an int offset, (B, size, d) for a tensor.
        """
        if isinstance(offset, int):
            return self.pe[offset:offset + size].unsqueeze(0)
        # Streams of any length: a start past the table (5000 rows = 200 s of 40 ms frames) is clamped so the
        # window takes the table's last `size` rows instead of failing the Gather. Safe because streaming
        # attends over a bounded cache: past the clamp point every chunk's window [C cached; T' new frames]
        # keeps consecutive key positions ending at the same row, so each chunk is scored as if it sat at
        # ~200 s, a position no less valid than 300 s for a model trained on utterances far shorter than
        # either (keys carry no position of their own; the position term is recomputed from these rows each
        # chunk). That argument holds for the relative-position encoder (rel_pos); with abs_pos the cached keys
        # keep the rows they were given, so past the clamp point new frames repeat the cache's last rows: an
        # approximation, still better than failing. WeNet asserts here instead and resets streams at
        # endpoints (wenet-e2e/wenet#389, #1518).
        limit = self.pe.size(0) - size
        if isinstance(limit, torch.Tensor) and limit.device != offset.device:
            limit = limit.to(offset.device)  # traced on a GPU: size is a 0-d CPU tensor, clamp wants one device
        start = torch.clamp(offset.reshape(-1, 1), max=limit)
        index = start + torch.arange(size, device=offset.device, dtype=offset.dtype)
        index = torch.clamp(index, min=0)
        return nn.functional.embedding(index, self.pe)

    def forward(self, x: torch.Tensor, offset: torch.Tensor | int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """x: (B, T, d) -> (x', pos_emb (1 or B, T, d))."""
        pos_emb = self.position_encoding(offset, x.size(1)).to(x.dtype)
        x = x * self.xscale
        if self.add_to_input:
            x = x + pos_emb
        return self.dropout(x), self.dropout(pos_emb)


class Conv2dSubsampling(nn.Module):
    """Stacked stride-s kxk convolutions (WeNet ``Conv2dSubsampling{4,6,8}``): 10 ms frames -> 40/60/80 ms.

    ``layers``: (kernel, stride) per convolution. Output frame n sees inputs rate*n .. rate*n + right_context,
    right_context = sum((kernel - 1) * product of the earlier strides). WeNet names the output projection
    ``out.0`` for x4 and ``linear`` for x6/x8; ``out_name`` keeps its state_dict keys.
    """

    layers: tuple[tuple[int, int], ...] = ()
    out_name = "linear"

    def __init__(self, idim: int, odim: int, pos_enc: PositionalEncoding):
        super().__init__()
        convs, channels, freq = [], 1, idim
        for kernel, stride in self.layers:
            convs += [nn.Conv2d(channels, odim, kernel, stride), nn.ReLU()]
            channels, freq = odim, (freq - kernel) // stride + 1
        self.conv = nn.Sequential(*convs)
        proj = nn.Linear(odim * freq, odim)
        if self.out_name == "out":
            self.out = nn.Sequential(proj)
        else:
            self.linear = proj
        self.pos_enc = pos_enc
        rate, ctx = 1, 0
        for kernel, stride in self.layers:
            ctx += (kernel - 1) * rate
            rate *= stride
        self.subsampling_rate, self.right_context = rate, ctx  # subsampling_geometry() of the layer's name

    def output_mask(self, x_mask: torch.Tensor) -> torch.Tensor:
        """(B, 1, T) valid input frames -> (B, 1, T') valid output frames (WeNet's slicing)."""
        for kernel, stride in self.layers:
            x_mask = x_mask[:, :, kernel - 1::stride]
        return x_mask

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor, offset: torch.Tensor | int = 0
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: (B, T, idim), x_mask: (B, 1, T) -> x (B, T', odim), pos_emb (1|B, T', odim), mask (B, 1, T').

        offset: position of the first output frame (int, or (B,) per stream); only an absolute positional
        encoding adds it to x, the relative one returns it as pos_emb."""
        x = self.conv(x.unsqueeze(1))                        # (B, C, T', F')
        b, c, t, f = x.size()
        x = (self.out if self.out_name == "out" else self.linear)(x.transpose(1, 2).reshape(b, t, c * f))
        x, pos_emb = self.pos_enc(x, offset)
        return x, pos_emb, self.output_mask(x_mask)


class Conv2dSubsampling4(Conv2dSubsampling):
    """Two stride-2 3x3 convolutions; needs 7 input frames for its first output."""

    layers = ((3, 2), (3, 2))
    out_name = "out"


class Conv2dSubsampling6(Conv2dSubsampling):
    """3x3 stride 2, then 5x5 stride 3; right context 10."""

    layers = ((3, 2), (5, 3))


class Conv2dSubsampling8(Conv2dSubsampling):
    """Three stride-2 3x3 convolutions; right context 14."""

    layers = ((3, 2), (3, 2), (3, 2))


SUBSAMPLING = {"conv2d": Conv2dSubsampling4, "conv2d6": Conv2dSubsampling6, "conv2d8": Conv2dSubsampling8}


def subsampling_geometry(input_layer: str) -> tuple[int, int]:
    """(subsampling rate, right context in input frames) of a train.yaml ``input_layer`` name."""
    if input_layer not in SUBSAMPLING:
        raise ValueError(f"unknown input_layer '{input_layer}' (one of {', '.join(SUBSAMPLING)})")
    rate, ctx = 1, 0
    for kernel, stride in SUBSAMPLING[input_layer].layers:
        ctx += (kernel - 1) * rate
        rate *= stride
    return rate, ctx
