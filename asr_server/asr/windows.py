"""Streaming window geometry: which fbank frames the encoder reads for each chunk of encoder frames.

A window of ``(chunk_size - 1) * subsampling + right_context + 1`` input frames yields ``chunk_size`` encoder
frames, and consecutive windows start ``chunk_size * subsampling`` frames apart (they overlap by the
subsampling convolution's context). The one place these formulas live: the encoder (``nn.encoder``), the ONNX
export, the streaming scorer (``serving``), scripts/build_model_repo.py and scripts/eval.py all ask here.
It imports neither torch nor the server, so the Triton python models use it as the trainer does.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class WindowConfig:
    chunk_size: int = 16  # encoder frames per chunk (16 frames x 40 ms = 640 ms)
    subsampling: int = 4  # input frames per encoder frame
    right_context: int = 6  # extra input frames the subsampling convolutions read past a chunk

    @property
    def window(self) -> int:
        """Input frames of one decoding window (67 for WeNet's 16-frame chunks)."""
        return (self.chunk_size - 1) * self.subsampling + self.right_context + 1

    @property
    def stride(self) -> int:
        """Input frames between the starts of consecutive windows (64 for 16-frame chunks)."""
        return self.chunk_size * self.subsampling

    @property
    def min_last_frames(self) -> int:
        """A last window shorter than this produces no encoder frame and is dropped."""
        return self.right_context + 1
