"""Chunk-by-chunk streaming decoding of many sequences per call: per-sequence decoding windows, the encoder
run on a batch of windows, CTC prefix beam search carried across chunks, endpointing, rescoring of ended segments.

Like ``pipeline``, it works on numpy arrays and calls the encoder and decoder through functions the caller passes
(``inline_onnx``'s onnxruntime sessions by default, or BLS calls to the encoder and decoder models:
``streaming_recogniser``), so it needs no server and is tested on its own.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np

from ..decoding import ctc_search
from ..decoding.details import hypothesis_details, wants_details
from ..decoding.endpoint import RULE1, EndpointDetector, frame_energies
from ..decoding.hotwords import Hotwords
from ..units import Tokenizer
from ..windows import WindowConfig
from .pipeline import DecodingSettings, Rescorer, SequenceKey, rescore_nbests
from .stream_state import EndedSegment, Streams, StreamState


@dataclasses.dataclass(frozen=True)
class EncoderJob:
    """One decoding window of one sequence for the streaming encoder."""

    key: SequenceKey
    window: np.ndarray  # (W, num_mel_bins)
    valid: int  # real frames in the window (W except on the last one)
    start: bool  # first window of the sequence (the encoder's state starts from zero)
    end: bool  # last window (the encoder frees its state)


@dataclasses.dataclass(frozen=True)
class EncoderResult:
    topk_log_probs: np.ndarray  # (T', K)
    topk_ids: np.ndarray  # (T', K)
    chunk_out: np.ndarray  # (T', d)
    valid: int  # real encoder frames


# Runs windows of different sequences (at most one per sequence) in one go -> results in the same order; a
# window that failed is an Exception in its slot (or the runner raises, failing every window of the round).
EncoderRunner = Callable[[list[EncoderJob]], list[Union[EncoderResult, Exception]]]


class StreamFailed(Exception):
    """A chunk of a stream that failed, or of a stream that failed earlier: the client gets this error
    instead of a transcript, and the stream is not silently restarted."""

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code  # a TritonError code name ("INVALID_ARG": the client's options); None: INTERNAL


@dataclasses.dataclass(frozen=True)
class ChunkTranscript:
    """What one chunk is answered with: the stream's transcript so far, and DETAILS when the chunk asked."""

    text: str
    details: Optional[dict] = None


@dataclasses.dataclass(frozen=True)
class StreamChunk:
    """What one request brings for one sequence."""

    key: SequenceKey
    frames: np.ndarray  # (T, num_mel_bins) new fbank frames
    start: bool
    end: bool
    # the request's parameters: on START, `details` and the endpoint rules (endpoint.EndpointRules) of the stream
    parameters: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    want_details: bool = False  # the request asks for the DETAILS output (ChunkTranscript.details)


def _reason(exc: Exception) -> str:
    """What a client is told about an exception that failed its stream."""
    if isinstance(exc, StreamFailed):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


@dataclasses.dataclass
class _Batch:
    """The working set of one step() call, by chunk index."""

    chunks: list[StreamChunk]
    now: float
    results: list = dataclasses.field(default_factory=list)  # a ChunkTranscript or a StreamFailed, per chunk
    states: list = dataclasses.field(default_factory=list)  # each chunk's StreamState (None: refused)
    ended: list = dataclasses.field(default_factory=list)  # EndedSegments of each chunk, waiting for rescoring
    rounds: list = dataclasses.field(default_factory=list)  # round r: [(chunk index, state, r-th new window)]
    used: list = dataclasses.field(default_factory=list)  # the streams this step touched
    end_sent: set = dataclasses.field(default_factory=set)  # chunks whose END window reached the encoder

    def __post_init__(self) -> None:
        n = len(self.chunks)
        self.results, self.states = [None] * n, [None] * n
        self.ended = [[] for _ in range(n)]


class StreamingScorer:
    """Per-sequence windows, CTC prefix beam search carried across chunks, rescoring on END."""

    def __init__(self, tokenizer: Tokenizer, settings: DecodingSettings, window: WindowConfig,
                 feature_dim: int, encoder_dim: int, hotwords: Optional[Hotwords] = None,
                 streams: Optional[Streams] = None) -> None:
        self.tokenizer = tokenizer
        self.settings = settings
        self.hotwords = hotwords or Hotwords(tokenizer.encode)  # the model's, and per-stream ones (on START)
        ctc_search.warm_up(settings.search_options())  # compile at load, not in a stream's first chunk
        self.window = window
        self.feature_dim = feature_dim
        self.encoder_dim = encoder_dim
        # Every stream's state (its `decoding` part here; a failed stream keeps its reason until END or a new
        # START); shared with the fbank and the inline encoder of the same model, one idle limit for all.
        self.streams = streams if streams is not None else Streams(settings.idle_seconds)

    def step(self, chunks: Sequence[StreamChunk], run_encoder: EncoderRunner,
             rescorer: Optional[Rescorer] = None) -> list[Union[ChunkTranscript, StreamFailed]]:
        """Advance every sequence of the batch by its new frames -> its ChunkTranscript (partial, or final on
        END; with its DETAILS dict when the chunk wants them), or a StreamFailed for a chunk of a stream that
        failed (now or earlier, until END or a new START).

        The transcript is the whole stream's: the final texts of the segments that ended (endpointing) and the
        current segment's partial.

        Windows of different sequences go to the encoder together, round by round: round r holds the r-th
        new window of every sequence that has one, so each sequence's windows stay in order.

        A chunk fails alone: whatever goes wrong with one sequence (bad options, its frames, its encoder or
        decoder call) fails that sequence's chunk and stream, never the other sequences of the batch."""
        now = time.monotonic()
        self.streams.sweep(now)
        batch = _Batch(list(chunks), now)
        self._admit(batch)
        self._run_rounds(batch, run_encoder)
        self._answer(batch, self._finish_segments(batch, rescorer))
        # A stream is idle from when its last chunk was answered, not from when that chunk's step began: a slow
        # step (the first one compiles the search kernels, seconds on a cold cache) must not make the next
        # chunk, which arrived in time, find its stream dropped.
        done = time.monotonic()
        for stream in batch.used:
            stream.last_seen = done
        self._close_encoder_sequences(
            [i for i in range(len(chunks)) if isinstance(batch.results[i], StreamFailed)
             and batch.states[i] is not None and batch.states[i].windows_sent > 0 and i not in batch.end_sent],
            batch.chunks, run_encoder)
        return batch.results

    # ---- the phases of a step ------------------------------------------------------------------------
    def _admit(self, batch: "_Batch") -> None:
        """Each chunk's stream (made on START; a chunk of a stream this scorer does not hold is refused) and the
        encoder windows its frames complete, queued by round."""
        now = batch.now
        for i, chunk in enumerate(batch.chunks):
            if chunk.start:
                stream = self.streams.open(chunk.key, now)
                stream.failed = None
                try:
                    stream.decoding = self._new_stream(chunk)
                except ValueError as exc:  # bad per-request options: this stream fails alone
                    batch.results[i] = self._fail(chunk, str(exc), now, code="INVALID_ARG")
                    continue
            stream = self.streams.get(chunk.key)
            state = None if stream is None else stream.decoding
            if state is None:
                batch.results[i] = self._refuse(chunk, now)
                continue
            stream.last_seen = now
            batch.used.append(stream)
            batch.states[i] = state
            try:
                jobs = self._windows(state, chunk)
            except Exception as exc:  # noqa: BLE001 - e.g. frames of the wrong shape: this stream fails alone
                batch.results[i] = self._fail(chunk, _reason(exc), now)
                continue
            for index, (window, valid) in enumerate(jobs):
                job = EncoderJob(chunk.key, window, valid, start=state.windows_sent == 0,
                                 end=chunk.end and index == len(jobs) - 1)
                state.windows_sent += 1
                if index >= len(batch.rounds):
                    batch.rounds.append([])
                batch.rounds[index].append((i, state, job))

    def _run_rounds(self, batch: "_Batch", run_encoder: EncoderRunner) -> None:
        """Round r runs the r-th new window of every live stream in one encoder call; the search consumes it."""
        for round_jobs in batch.rounds:
            live = [(i, state, job) for i, state, job in round_jobs if batch.results[i] is None]
            if not live:
                continue
            batch.end_sent.update(i for i, _, job in live if job.end)
            try:
                outs = run_encoder([job for _, _, job in live])
            except Exception as exc:  # noqa: BLE001 - fails the streams of this round, not the batch
                outs = [exc] * len(live)
            for (i, state, job), result in zip(live, outs):
                if isinstance(result, Exception):
                    batch.results[i] = self._fail(batch.chunks[i], _reason(result), batch.now)
                    continue
                n = int(result.valid) if job.valid > 0 else 0
                if n:
                    try:
                        self._consume(state, result, n, batch.ended[i], job.window)
                    except Exception as exc:  # noqa: BLE001 - e.g. a malformed encoder output: this stream alone
                        batch.results[i] = self._fail(batch.chunks[i], _reason(exc), batch.now)

    def _finish_segments(self, batch: "_Batch", rescorer: Optional[Rescorer]) -> dict:
        """Close the ended streams' last segments and rescore every segment that ended in this step ->
        {chunk index: [(segment, final tokens)]}; the finals' texts are appended to their streams."""
        chunks, results = batch.chunks, batch.results
        for i in [i for i in range(len(chunks)) if results[i] is None and chunks[i].end]:
            state = batch.states[i]
            # after an endpoint, a tail without a token is not a segment of its own
            segment = state.end_segment(self.encoder_dim, keep=state.segment == 0 or bool(
                state.search.best().tokens))
            if segment is not None:
                batch.ended[i].append(segment)
            self.streams.release(chunks[i].key, "decoding")
        final_of = self._finish_streams(
            {i: batch.ended[i] for i in range(len(chunks)) if results[i] is None and batch.ended[i]}, rescorer)
        for i, outcome in list(final_of.items()):
            if isinstance(outcome, Exception):
                results[i] = self._fail(chunks[i], _reason(outcome), batch.now)
                del final_of[i]
                continue
            for _, hyp in outcome:
                text = self.tokenizer.decode(hyp)
                if text or not chunks[i].end:
                    batch.states[i].finals.append(text)
        return final_of

    def _answer(self, batch: "_Batch", final_of: dict) -> None:
        """Each live chunk's transcript: the stream's finals and the current partial; DETAILS when asked."""
        for i in [i for i in range(len(batch.chunks)) if batch.results[i] is None]:
            state, chunk = batch.states[i], batch.chunks[i]
            partial = () if chunk.end else state.search.best().tokens
            texts = [*state.finals, self.tokenizer.decode(partial)]
            details = None
            if chunk.want_details:
                try:
                    details = self._details(state, chunk, partial, final_of.get(i, []))
                except Exception as exc:  # noqa: BLE001 - this chunk alone fails
                    batch.results[i] = self._fail(chunk, _reason(exc), batch.now)
                    continue
            batch.results[i] = ChunkTranscript(" ".join(t for t in texts if t), details)

    def _close_encoder_sequences(self, failed: list[int], chunks: list[StreamChunk], run_encoder) -> None:
        """Streams that failed here with their encoder sequence still open get an END-only window, so the
        encoder frees their caches now rather than at its idle limit (their later windows are never sent)."""
        if not failed:
            return
        empty = self._empty_window()
        try:
            run_encoder([EncoderJob(chunks[i].key, empty, 0, start=False, end=True) for i in failed])
        except Exception:  # noqa: BLE001 - best effort: the encoder's idle limit frees them otherwise
            pass

    def _windows(self, state: StreamState, chunk: StreamChunk) -> list[tuple[np.ndarray, int]]:
        """(window, valid frames) of the encoder windows this chunk completes; on END also the last one."""
        jobs = [(w, self.window.window) for w in state.windower.push(chunk.frames)]
        if chunk.end:
            last = state.windower.finish()
            # The encoder's sequence must see an END even when nothing is left to decode.
            jobs.append(last if last is not None else (self._empty_window(), 0))
        return jobs

    def _empty_window(self) -> np.ndarray:
        """A window with no valid frames: what carries an END to the encoder when nothing is left to decode."""
        return np.zeros((self.window.window, self.feature_dim), np.float32)

    def _finish_streams(self, ended: dict[int, list[EndedSegment]], rescorer: Optional[Rescorer]
                        ) -> dict[int, Union[list[tuple[EndedSegment, tuple]], Exception]]:
        """Final hypotheses of the segments that ended, by chunk: [(segment, tokens)], or the Exception that
        failed that chunk's rescoring. All segments are rescored in one decoder call; if that call fails, each
        chunk's segments are rescored on their own, so one sequence's bad input fails that sequence alone."""
        order = [(i, seg) for i, segments in ended.items() for seg in segments]
        if not order:
            return {}
        try:
            hyps = self._finish([seg for _, seg in order], rescorer)
        except Exception as exc:  # noqa: BLE001 - which sequence it belongs to is found below
            if len(ended) == 1:
                return {i: exc for i in ended}
        else:
            out: dict[int, list] = {}
            for (i, seg), hyp in zip(order, hyps):
                out.setdefault(i, []).append((seg, hyp))
            return out
        out = {}
        for i, segments in ended.items():
            try:
                out[i] = list(zip(segments, self._finish(segments, rescorer)))
            except Exception as exc:  # noqa: BLE001 - this chunk's rescoring failed: it fails alone
                out[i] = exc
        return out

    def _new_stream(self, chunk: StreamChunk) -> StreamState:
        state = StreamState.create(self.window, self.feature_dim, self.settings.search_options(),
                                   self.hotwords.for_request(chunk.parameters))
        state.details = wants_details(chunk.parameters)
        rules = self.settings.endpoint.updated(chunk.parameters)
        if rules.enabled:
            state.endpoint = EndpointDetector(rules, self.settings.frame_seconds, blank_id=0,
                                              emission_lag=self.settings.timestamp_shift[1])
        return state

    def _consume(self, state: StreamState, result: EncoderResult, n: int, ended: list,
                 window: Optional[np.ndarray] = None) -> None:
        """Feed the first ``n`` encoder frames of a window to the stream, cutting segments at endpoints;
        ``window``: the (W, num_mel_bins) fbank the encoder read, for the endpoint rules' loudness."""
        log_probs, ids, out = result.topk_log_probs[:n], result.topk_ids[:n], result.chunk_out[:n]
        best = energies = None
        if state.endpoint is not None:
            best = np.take_along_axis(ids, np.argmax(log_probs, axis=-1)[:, None], axis=-1)[:, 0]
            if window is not None:
                energies = frame_energies(window, n, self.window.subsampling)
        bound = self.settings.max_rescoring_frames
        pos = 0
        while pos < n:
            hit = None
            if best is not None:
                hit = state.endpoint.scan(best[pos:], None if energies is None else energies[pos:])
            stop = n if hit is None else pos + hit[0]
            state.search.advance(log_probs[pos:stop], ids[pos:stop])
            state.keep_encoder_out(out[pos:stop], stop - pos, bound)
            state.keep_topk(log_probs[pos:stop], ids[pos:stop], bound)
            state.frames += stop - pos
            if hit is not None:
                segment = state.end_segment(self.encoder_dim, keep=hit[1] != RULE1)
                if segment is not None:
                    ended.append(segment)
            pos = stop

    def _details(self, state: StreamState, chunk: StreamChunk, partial: tuple,
                 finals: list[tuple[EndedSegment, tuple]]) -> dict:
        """DETAILS of one chunk: the current segment (or, on END, the last one), and every segment that ended
        with this chunk in ``finals``. Words, tokens and n-best only when the stream asked for ``details``."""
        full = state.details or wants_details(chunk.parameters)
        fs = self.settings.frame_seconds

        def describe(tokens, nbest, log_probs, ids, index, start, end, final):
            info = (hypothesis_details(self.tokenizer, tokens, log_probs if full else None, ids, fs,
                                       start * fs, nbest if full else (), self.settings.timestamp_shift)
                    if full else {"text": self.tokenizer.decode(tokens)})
            info.update(segment=index, final=final, start=round(start * fs, 3), end=round(end * fs, 3))
            return info

        ended = [describe(hyp, seg.nbest, seg.log_probs, seg.ids, seg.index, seg.start_frame, seg.end_frame, True)
                 for seg, hyp in finals]
        if chunk.end:
            out = dict(ended[-1]) if ended else {"text": "", "segment": state.segment, "final": True}
        else:
            log_probs, ids = state.segment_topk() if full else (None, None)
            nbest = [(h.tokens, h.score) for h in state.search.nbest()] if full else ()
            out = describe(partial, nbest, log_probs, ids, state.segment, state.segment_start, state.frames, False)
        if ended:
            out["finals"] = ended
        return out

    def _finish(self, segments: list[EndedSegment], rescorer: Optional[Rescorer]) -> list[tuple]:
        """Final token tuples of ended segments: rescored, except for segments too long to keep their encoder
        output (their CTC result is final)."""
        hyps = [seg.nbest[0][0] if seg.nbest else () for seg in segments]
        kept = [i for i, seg in enumerate(segments) if seg.encoder_out is not None]
        if kept:
            nbests = [segments[i].nbest for i in kept]
            outs = [segments[i].encoder_out for i in kept]
            lengths = np.array([o.shape[0] for o in outs], dtype=np.int32)
            longest = max(1, int(lengths.max()))
            padded = np.zeros((len(outs), longest, self.encoder_dim), dtype=np.float32)
            for b, out in enumerate(outs):
                padded[b, :out.shape[0]] = out
            for i, hyp in zip(kept, rescore_nbests(nbests, padded, lengths, self.settings, rescorer)):
                hyps[i] = hyp
        return hyps

    def _fail(self, chunk: StreamChunk, reason: str, now: float, code: Optional[str] = None) -> StreamFailed:
        """The stream's state is unusable: drop it and remember why, so its later chunks fail too."""
        self._set_failed(chunk, reason, now)
        return StreamFailed(f"sequence {chunk.key} failed: {reason}", code)

    def _set_failed(self, chunk: StreamChunk, reason: Optional[str], now: float) -> None:
        """No decoding state any more; until END the stream remembers ``reason`` (on END it is forgotten)."""
        stream = self.streams.open(chunk.key, now)
        stream.decoding = None
        stream.failed = None if chunk.end else reason
        self.streams.release(chunk.key, "decoding")  # gone when nothing else of it is left

    def _refuse(self, chunk: StreamChunk, now: float) -> StreamFailed:
        """A chunk without START for a stream this scorer does not hold (failed, or dropped while idle)."""
        stream = self.streams.get(chunk.key)
        reason = None if stream is None else stream.failed
        self._set_failed(chunk, reason or "no state", now)
        if reason is not None:
            return StreamFailed(f"sequence {chunk.key} failed on an earlier chunk ({reason}); its audio since "
                                "then is not decoded: start a new sequence with START", "INVALID_ARG")
        return StreamFailed(f"sequence {chunk.key} has no decoding state (it was idle longer than "
                            f"{self.settings.idle_seconds:g} s, or never started): start it again with START",
                            "INVALID_ARG")

    def drop(self, key: SequenceKey) -> None:
        self.streams.drop(key)

    @property
    def decoding(self) -> dict:
        """{key: StreamState} of the streams being decoded (a view)."""
        return self.streams.with_part("decoding")

    @property
    def failed(self) -> dict:
        """{key: reason} of the streams that failed and wait for their END (a view)."""
        return self.streams.with_part("failed")
