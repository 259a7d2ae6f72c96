"""What a streaming model keeps per stream, in one place: ``Streams``, one ``Stream`` object per sequence
holding its fbank residual, its decoding state (windows, search, segments, finals), the streaming encoder's
caches and why it failed, with one idle setting and one sweep (as sherpa-onnx's OnlineStream).

The streaming encoder consumes fixed decoding windows of fbank frames (their geometry: ``asr.windows``).
Clients send audio of any length, so frames are buffered here and cut into windows as they become complete;
the last, shorter window is padded and flagged by its valid length.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Hashable, Iterator, Optional

import numpy as np

from ..decoding.ctc_search import CtcSearch, SearchOptions, make_search
from ..windows import WindowConfig


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
class EndedSegment:
    """A segment of a stream that ended (an endpoint, or END), waiting for its final (rescored) result."""

    index: int  # segment number in its stream, from 0
    nbest: list  # [(tokens, ctc score)] best first
    encoder_out: Optional[np.ndarray]  # (T, d) for rescoring; None when the segment outgrew the bound
    log_probs: Optional[np.ndarray]  # (T, K) top-k of its frames, for timestamps; None past the bound
    ids: Optional[np.ndarray]  # (T, K)
    start_frame: int  # first encoder frame of the segment, counted from the stream's start
    end_frame: int  # one past its last frame


@dataclasses.dataclass
class StreamState:
    """What the server keeps for one utterance between its chunks.

    A stream is a series of segments (one, unless endpointing cuts it); the search, the encoder output kept
    for rescoring and the top-k frames kept for timestamps belong to the current segment."""

    windower: FrameWindower
    search: CtcSearch
    search_options: Optional[SearchOptions] = None  # how a new segment's search is made
    encoder_out: list = dataclasses.field(default_factory=list)  # (T_i, d) chunks, kept for rescoring
    windows_sent: int = 0  # windows given to the encoder so far (the first one carries START)
    kept_frames: int = 0  # encoder frames in encoder_out
    rescorable: bool = True  # False once the stream outgrew the rescoring bound (encoder_out then freed)
    topk: list = dataclasses.field(default_factory=list)  # [(log_probs (T_i, K), ids (T_i, K))] of the segment
    topk_frames: int = 0  # frames in topk (None-equivalent once past the bound: timed_out)
    timed: bool = True  # False once the segment outgrew the bound (no timestamps for it)
    segment: int = 0  # index of the current segment
    segment_start: int = 0  # encoder frame where the current segment starts
    frames: int = 0  # encoder frames decoded since the stream's start
    finals: list = dataclasses.field(default_factory=list)  # texts of the segments that ended
    details: bool = False  # words, tokens and n-best in DETAILS (request parameter `details` on START)
    endpoint: Any = None  # an endpoint.EndpointDetector when endpointing is on
    context: Any = None  # hotwords.ContextGraph biasing the stream's search (None: no hotwords)

    @classmethod
    def create(cls, window: WindowConfig, feature_dim: int, search: SearchOptions,
               context: Any = None) -> "StreamState":
        return cls(FrameWindower(window, feature_dim), make_search(search, context), search, context=context)

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

    def keep_topk(self, log_probs: np.ndarray, ids: np.ndarray, max_frames: int = 0) -> None:
        """(T, K) top-k frames of the segment, for timestamps; bounded like the encoder output."""
        if not len(log_probs) or not self.timed:
            return
        if max_frames and self.topk_frames + len(log_probs) > max_frames:
            self.timed, self.topk, self.topk_frames = False, [], 0
            return
        self.topk.append((np.array(log_probs), np.array(ids)))
        self.topk_frames += len(log_probs)

    def segment_topk(self) -> tuple[Optional[np.ndarray], Optional[np.ndarray]]:
        """(T, K) log-probs and ids of the current segment's frames (None past the bound)."""
        if not self.timed:
            return None, None
        if not self.topk:
            return np.zeros((0, 1)), np.zeros((0, 1), np.int64)
        return np.concatenate([lp for lp, _ in self.topk]), np.concatenate([i for _, i in self.topk])

    def encoder_output(self, dim: int) -> np.ndarray:
        """(T, d) every encoder frame of the current segment so far."""
        if not self.encoder_out:
            return np.zeros((0, dim), dtype=np.float32)
        return np.concatenate(self.encoder_out)

    def end_segment(self, dim: int, keep: bool = True) -> Optional[EndedSegment]:
        """Close the current segment (returned, unless ``keep`` is False) and start the next one."""
        ended = None
        if keep:
            log_probs, ids = self.segment_topk()
            ended = EndedSegment(self.segment, [(h.tokens, h.score) for h in self.search.nbest()],
                                 self.encoder_output(dim) if self.rescorable else None, log_probs, ids,
                                 self.segment_start, self.frames)
            self.segment += 1
        self.search = make_search(self.search_options, self.context)
        self.encoder_out, self.kept_frames, self.rescorable = [], 0, True
        self.topk, self.topk_frames, self.timed = [], 0, True
        self.segment_start = self.frames
        return ended


PARTS = ("fbank", "decoding", "encoder_cache", "failed")


@dataclasses.dataclass
class Stream:
    """Everything one model instance keeps for one stream between its chunks. Each part is set by the stage
    that uses it and cleared when that stage is done with the stream; a stream with no part left is gone."""

    last_seen: float  # monotonic seconds when it was last used (idle eviction)
    fbank: Any = None  # features.StreamingFbank: the samples short of a whole frame (audio-in models)
    decoding: Optional[StreamState] = None  # the scorer's windows, search, segments and finals
    encoder_cache: Optional[dict] = None  # the streaming encoder's carried state, when run inline
    failed: Optional[str] = None  # why the stream failed: its chunks are refused until END or a new START

    def empty(self) -> bool:
        return all(getattr(self, part) is None for part in PARTS)


class Streams:
    """The streams of one model instance by sequence key, with one idle limit for all their parts."""

    def __init__(self, idle_seconds: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_seconds = idle_seconds
        self.clock = clock
        self._streams: dict[Hashable, Stream] = {}

    def get(self, key: Hashable) -> Optional[Stream]:
        return self._streams.get(key)

    def open(self, key: Hashable, now: float) -> Stream:
        """The key's stream (made when there is none), marked as used at ``now``."""
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = Stream(now)
        stream.last_seen = now
        return stream

    def release(self, key: Hashable, part: str) -> None:
        """A stage is done with a stream: its part goes, and the stream with it when nothing is left."""
        stream = self._streams.get(key)
        if stream is None:
            return
        setattr(stream, part, None)
        if stream.empty():
            del self._streams[key]

    def drop(self, key: Hashable) -> None:
        self._streams.pop(key, None)

    def sweep(self, now: Optional[float] = None) -> None:
        """Forget every stream unused for longer than idle_seconds (a client gone without END)."""
        now = self.clock() if now is None else now
        for key in [k for k, s in self._streams.items() if now - s.last_seen > self.idle_seconds]:
            del self._streams[key]

    def with_part(self, part: str) -> dict:
        """{key: that part} of the streams that have it (a view for diagnostics and tests)."""
        return {k: getattr(s, part) for k, s in self._streams.items() if getattr(s, part) is not None}

    def __contains__(self, key: Hashable) -> bool:
        return key in self._streams

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._streams)

    def __len__(self) -> int:
        return len(self._streams)
