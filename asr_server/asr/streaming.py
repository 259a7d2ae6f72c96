"""Streaming pieces that sit between features and the encoder: decoding windows and per-stream state.

The streaming encoder consumes fixed decoding windows of fbank frames. A window of
``(chunk_size - 1) * subsampling + right_context + 1`` input frames yields ``chunk_size`` encoder frames,
and consecutive windows start ``chunk_size * subsampling`` frames apart (they overlap by the subsampling
convolution's context). Clients send audio of any length, so frames are buffered here and cut into
windows as they become complete; the last, shorter window is padded and flagged by its valid length.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from .ctc_search import CtcSearch, SearchOptions, make_search


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


class FrameWindower:
    """Buffers fbank frames of one stream and cuts them into decoding windows."""

    def __init__(self, config: WindowConfig, feature_dim: int) -> None:
        self.config = config
        self._buffer = np.zeros((0, feature_dim), dtype=np.float32)

    @property
    def buffered_frames(self) -> int:
        return int(self._buffer.shape[0])

    def push(self, frames: np.ndarray) -> list[np.ndarray]:
        """frames: (T, D) new fbank frames -> the complete windows, each (window, D)."""
        if frames.size:
            self._buffer = np.concatenate([self._buffer, frames.astype(np.float32, copy=False)])
        window, stride = self.config.window, self.config.stride
        windows = []
        start = 0
        while self._buffer.shape[0] - start >= window:
            windows.append(self._buffer[start:start + window])
            start += stride
        if start:
            self._buffer = self._buffer[start:]
        return windows

    def finish(self) -> Optional[tuple[np.ndarray, int]]:
        """The last, zero-padded window and its valid frames, or None when too little is left."""
        valid = self.buffered_frames
        if valid < self.config.min_last_frames:
            return None
        padded = np.zeros((self.config.window, self._buffer.shape[1]), dtype=np.float32)
        padded[:valid] = self._buffer[:valid]
        self._buffer = self._buffer[:0]
        return padded, valid


@dataclasses.dataclass
class StreamState:
    """What the server keeps for one utterance between its chunks."""

    windower: FrameWindower
    search: CtcSearch
    encoder_out: list = dataclasses.field(default_factory=list)  # (T_i, d) chunks, kept for rescoring
    windows_sent: int = 0  # windows given to the encoder so far (the first one carries START)
    last_seen: float = 0.0  # monotonic seconds of the last request (idle eviction)
    kept_frames: int = 0  # encoder frames in encoder_out
    rescorable: bool = True  # False once the stream outgrew the rescoring bound (encoder_out then freed)

    @classmethod
    def create(cls, window: WindowConfig, feature_dim: int, search: SearchOptions, now: float) -> "StreamState":
        return cls(FrameWindower(window, feature_dim), make_search(search), last_seen=now)

    def keep_encoder_out(self, chunk_out: np.ndarray, valid: int, max_frames: int = 0) -> None:
        """chunk_out: (T', d) of one window, of which the first `valid` frames are real. Past `max_frames`
        (0: no bound) the stream stops keeping them: a stream of any length keeps bounded memory, and its
        CTC result is final (rescoring over hours of frames would cost more than the whole stream)."""
        if valid <= 0 or not self.rescorable:
            return
        if max_frames and self.kept_frames + valid > max_frames:
            self.rescorable, self.encoder_out, self.kept_frames = False, [], 0
            return
        self.encoder_out.append(np.array(chunk_out[:valid], dtype=np.float32))
        self.kept_frames += valid

    def encoder_output(self, dim: int) -> np.ndarray:
        """(T, d) every encoder frame of the utterance so far."""
        if not self.encoder_out:
            return np.zeros((0, dim), dtype=np.float32)
        return np.concatenate(self.encoder_out)
