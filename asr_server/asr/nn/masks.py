"""Padding and chunk masks. Convention: True = may attend / valid frame."""

from __future__ import annotations

import torch


def make_pad_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """lengths: (B,) -> (B, max_len) bool, True on PADDED positions (WeNet's convention for this helper)."""
    seq = torch.arange(max_len, device=lengths.device, dtype=lengths.dtype)
    return seq.unsqueeze(0) >= lengths.unsqueeze(1)


def subsequent_mask(size: int, device: torch.device | None = None) -> torch.Tensor:
    """(size, size) bool lower-triangular: position i sees 0..i (decoder self-attention)."""
    return torch.tril(torch.ones(size, size, dtype=torch.bool, device=device))


def subsequent_chunk_mask(size: int, chunk_size: int, num_left_chunks: int = -1,
                          device: torch.device | None = None) -> torch.Tensor:
    """(size, size) bool: frame i sees its own chunk, and ``num_left_chunks`` chunks before it (-1: all).

    This is exactly what chunk-by-chunk decoding with a cache of ``chunk_size * num_left_chunks`` frames sees,
    which is why the full-context forward with this mask equals streaming.
    """
    pos = torch.arange(size, device=device)
    chunk_idx = pos // chunk_size
    end = torch.clamp((chunk_idx + 1) * chunk_size, max=size)                      # (size,)
    if num_left_chunks < 0:
        start = torch.zeros_like(pos)
    else:
        start = torch.clamp((chunk_idx - num_left_chunks) * chunk_size, min=0)
    return (pos.unsqueeze(0) >= start.unsqueeze(1)) & (pos.unsqueeze(0) < end.unsqueeze(1))


def add_optional_chunk_mask(xs: torch.Tensor, masks: torch.Tensor, use_dynamic_chunk: bool,
                            use_dynamic_left_chunk: bool, decoding_chunk_size: int, static_chunk_size: int,
                            num_decoding_left_chunks: int, training: bool,
                            generator: torch.Generator | None = None) -> torch.Tensor:
    """Attention mask of the encoder, WeNet's dynamic chunk training scheme.

    xs: (B, T, D) (only T is used); masks: (B, 1, T) bool valid frames.
    decoding_chunk_size: >0 fixed chunk, <0 full context, 0 -> random chunk while training, full context
    otherwise (WeNet draws a random chunk even in eval mode; full context is what callers mean there).
    returns (B, T, T) or (B, 1, T) bool.
    """
    max_len = xs.size(1)
    if use_dynamic_chunk:
        num_left = -1
        if decoding_chunk_size < 0 or (decoding_chunk_size == 0 and not training):
            chunk = max_len
        elif decoding_chunk_size > 0:
            chunk, num_left = decoding_chunk_size, num_decoding_left_chunks
        else:
            chunk = int(torch.randint(1, max_len + 1, (1,), generator=generator))
            # Half the batches train full context; the rest a chunk of 1..25 frames (40 ms .. 1 s).
            if chunk > max_len // 2:
                chunk = max_len
            else:
                chunk = chunk % 25 + 1
                if use_dynamic_left_chunk:
                    max_left = (max_len - 1) // chunk
                    num_left = int(torch.randint(0, max_left + 1, (1,), generator=generator))
        if chunk >= max_len and num_left < 0:
            # full context: the padding mask alone says the same, and keeps T symbolic in traced exports
            return masks
        return masks & subsequent_chunk_mask(max_len, chunk, num_left, xs.device).unsqueeze(0)
    if static_chunk_size > 0:
        return masks & subsequent_chunk_mask(max_len, static_chunk_size, num_decoding_left_chunks,
                                             xs.device).unsqueeze(0)
    return masks
