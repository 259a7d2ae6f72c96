"""The recogniser's serving logic on numpy arrays: offline scoring and chunk-by-chunk streaming decoding.

The Triton model files in `model_repo/` are thin: they turn tensors into numpy, call these classes, and
run the ONNX models (encoder, decoder) through whatever the caller passes in (BLS in the server), so this
module needs no server and is tested on its own.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional, Sequence, Union

import numpy as np

from .ctc_search import SearchOptions, make_search
from .features import FbankConfig, StreamingFbank, batch_fbank_computer
from .rescoring import DecoderInputs, build_decoder_inputs, hyps_from_best_index
from .streaming import StreamState, WindowConfig
from .units import Tokenizer

SequenceKey = object  # a correlation id (int or str)


@dataclasses.dataclass(frozen=True)
class DecodingSettings:
    """What the scorers need to know about the model (read from the model folder's config parameters)."""

    beam_size: int = 10  # CTC prefix beam, and the decoder's n-best width
    sos: int = 0  # id of <sos/eos>
    eos: int = 0
    bidirectional: bool = True  # the decoder has a right-to-left branch
    rescoring: bool = True  # False: the CTC prefix beam result is final
    search_method: str = "prefix_beam"  # or "greedy"
    cutoff_prob: float = 1.0  # top-k probability mass a frame may extend with
    idle_seconds: float = 5.0  # per-sequence state is dropped after this long without a request
    max_rescoring_frames: int = 1500  # encoder frames (60 s of 40 ms) a stream keeps for rescoring; 0: all

    def search_options(self) -> SearchOptions:
        return SearchOptions(method=self.search_method, beam_size=self.beam_size, top_k=self.beam_size,
                             blank_id=0, cutoff_prob=self.cutoff_prob)


# Decoder call: (inputs for a batch of n-best lists, encoder_out (B, T, d), encoder_out_lens (B,)) ->
# best_index (B,) — what WeNet's exported decoder.onnx returns.
Rescorer = Callable[[DecoderInputs, np.ndarray, np.ndarray], np.ndarray]


def _rescore(nbests, encoder_out, lengths, settings: DecodingSettings, rescorer: Optional[Rescorer]):
    has_tokens = any(tokens for nbest in nbests for tokens, _ in nbest)
    if not settings.rescoring or rescorer is None or not has_tokens or int(np.max(lengths, initial=0)) == 0:
        return [nbest[0][0] if nbest else () for nbest in nbests]
    inputs = build_decoder_inputs(nbests, settings.beam_size, settings.sos, settings.eos,
                                  bidirectional=settings.bidirectional)
    best = rescorer(inputs, encoder_out, lengths)
    return hyps_from_best_index(nbests, best)


class OfflineScorer:
    """Whole utterances: CTC prefix beam search over the encoder's top-k, then attention rescoring."""

    def __init__(self, tokenizer: Tokenizer, settings: DecodingSettings) -> None:
        self.tokenizer = tokenizer
        self.settings = settings

    def decode(self, encoder_out: np.ndarray, lengths: np.ndarray, topk_log_probs: np.ndarray,
               topk_ids: np.ndarray, rescorer: Optional[Rescorer] = None) -> list[str]:
        """encoder_out (B, T, d); lengths (B,); topk_log_probs / topk_ids (B, T, K) -> B transcripts."""
        nbests = []
        for b in range(encoder_out.shape[0]):
            search = make_search(self.settings.search_options())
            n = int(lengths[b])
            search.advance(topk_log_probs[b, :n], topk_ids[b, :n])
            nbests.append([(h.tokens, h.score) for h in search.nbest()])
        hyps = _rescore(nbests, encoder_out, np.asarray(lengths).reshape(-1), self.settings, rescorer)
        return [self.tokenizer.decode(h) for h in hyps]


class StreamingFeatures:
    """Per-sequence fbank with residual samples, so clients may send chunks of any length.

    ``compute_fbank`` (``features.batch_fbank_computer``) featurises every stream's new samples of one batch in
    a single call: kaldi-native-fbank by default, or kaldifeat (batched, on a GPU for a KIND_GPU instance).
    """

    def __init__(self, config: FbankConfig, idle_seconds: float = 5.0, compute_fbank=None) -> None:
        self.config = config
        self.idle_seconds = idle_seconds
        self.compute_fbank = compute_fbank or batch_fbank_computer("kaldi-native-fbank", config)
        self.streams: dict[SequenceKey, tuple[StreamingFbank, float]] = {}

    def accept_many(self, chunks: list[tuple[SequenceKey, np.ndarray, bool, bool]]) -> list[np.ndarray]:
        """The new (T, num_mel_bins) frames of each (key, samples, start, end) chunk, taken in order, with one
        fbank call for all of them; a sequence's state is created on START, dropped on END."""
        now = time.monotonic()
        self.drop_idle(now)
        ready = []
        for key, samples, start, end in chunks:
            if start or key not in self.streams:
                self.streams[key] = (StreamingFbank(self.config), now)
            extractor, _ = self.streams[key]
            ready.append(extractor.take(samples))
            if end:
                del self.streams[key]
            else:
                self.streams[key] = (extractor, now)
        todo = [i for i, r in enumerate(ready) if r.size]
        frames = [np.zeros((0, self.config.num_mel_bins), dtype=np.float32)] * len(chunks)
        for i, f in zip(todo, self.compute_fbank([ready[i] for i in todo])):
            frames[i] = f
        return frames

    def drop(self, key: SequenceKey) -> None:
        self.streams.pop(key, None)

    def drop_idle(self, now: float) -> None:
        for key in [k for k, (_, seen) in self.streams.items() if now - seen > self.idle_seconds]:
            del self.streams[key]


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
    instead of a transcript, and the stream is not silently restarted (issue 13)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclasses.dataclass(frozen=True)
class StreamChunk:
    """What one request brings for one sequence."""

    key: SequenceKey
    frames: np.ndarray  # (T, num_mel_bins) new fbank frames
    start: bool
    end: bool


class StreamingScorer:
    """Per-sequence windows, CTC prefix beam search carried across chunks, rescoring on END."""

    def __init__(self, tokenizer: Tokenizer, settings: DecodingSettings, window: WindowConfig,
                 feature_dim: int, encoder_dim: int) -> None:
        self.tokenizer = tokenizer
        self.settings = settings
        self.window = window
        self.feature_dim = feature_dim
        self.encoder_dim = encoder_dim
        self.streams: dict[SequenceKey, StreamState] = {}
        # Streams that failed, until their END or a new START: (reason, monotonic seconds last seen).
        self.failed: dict[SequenceKey, tuple[str, float]] = {}

    def step(self, chunks: Sequence[StreamChunk], run_encoder: EncoderRunner,
             rescorer: Optional[Rescorer] = None) -> list[Union[str, StreamFailed]]:
        """Advance every sequence of the batch by its new frames -> its transcript (partial, or final on END),
        or a StreamFailed for a chunk of a stream that failed (now or earlier, until END or a new START).

        Windows of different sequences go to the encoder together, round by round: round r holds the r-th
        new window of every sequence that has one, so each sequence's windows stay in order."""
        now = time.monotonic()
        self.drop_idle(now)
        pending: list[list[EncoderJob]] = []
        states: list[Optional[StreamState]] = []
        results: list[Union[str, StreamFailed, None]] = [None] * len(chunks)
        for i, chunk in enumerate(chunks):
            if chunk.start:
                self.failed.pop(chunk.key, None)
                self.streams[chunk.key] = StreamState.create(self.window, self.feature_dim,
                                                             self.settings.search_options(), now)
            state = self.streams.get(chunk.key)
            if state is None:
                results[i] = self._refuse(chunk, now)
                states.append(None)
                continue
            state.last_seen = now
            states.append(state)
            jobs = [(w, self.window.window) for w in state.windower.push(chunk.frames)]
            if chunk.end:
                last = state.windower.finish()
                # The encoder's sequence must see an END even when nothing is left to decode.
                jobs.append(last if last is not None else
                            (np.zeros((self.window.window, self.feature_dim), np.float32), 0))
            for index, (window, valid) in enumerate(jobs):
                job = EncoderJob(chunk.key, window, valid, start=state.windows_sent == 0,
                                 end=chunk.end and index == len(jobs) - 1)
                state.windows_sent += 1
                if index >= len(pending):
                    pending.append([])
                pending[index].append((i, state, job))
        for round_jobs in pending:
            live = [(i, state, job) for i, state, job in round_jobs if results[i] is None]
            if not live:
                continue
            try:
                outs = run_encoder([job for _, _, job in live])
            except Exception as exc:  # noqa: BLE001 - fails the streams of this round, not the batch
                outs = [exc] * len(live)
            for (i, state, job), result in zip(live, outs):
                if isinstance(result, Exception):
                    results[i] = self._fail(chunks[i], f"{type(result).__name__}: {result}"
                                            if not isinstance(result, StreamFailed) else result.message, now)
                    continue
                n = int(result.valid) if job.valid > 0 else 0
                if n:
                    state.search.advance(result.topk_log_probs[:n], result.topk_ids[:n])
                    state.keep_encoder_out(result.chunk_out, n, self.settings.max_rescoring_frames)
        ok = [i for i in range(len(chunks)) if results[i] is None]
        for i in ok:
            results[i] = self.tokenizer.decode(states[i].search.best().tokens)
        finals = [i for i in ok if chunks[i].end]
        if finals:
            for i, text in zip(finals, self._finish([states[i] for i in finals], rescorer)):
                results[i] = text
            for i in finals:
                self.streams.pop(chunks[i].key, None)
        return results

    def _fail(self, chunk: StreamChunk, reason: str, now: float) -> StreamFailed:
        """The stream's state is unusable: drop it and remember why, so its later chunks fail too."""
        self.streams.pop(chunk.key, None)
        if not chunk.end:
            self.failed[chunk.key] = (reason, now)
        return StreamFailed(f"sequence {chunk.key} failed: {reason}")

    def _refuse(self, chunk: StreamChunk, now: float) -> StreamFailed:
        """A chunk without START for a stream this scorer does not hold (failed, or dropped while idle)."""
        reason, _ = self.failed.get(chunk.key, (None, 0.0))
        if chunk.end:
            self.failed.pop(chunk.key, None)
        else:
            self.failed[chunk.key] = (reason or "no state", now)
        if reason is not None:
            return StreamFailed(f"sequence {chunk.key} failed on an earlier chunk ({reason}); its audio since "
                                "then is not decoded: start a new sequence with START")
        return StreamFailed(f"sequence {chunk.key} has no decoding state (it was idle longer than "
                            f"{self.settings.idle_seconds:g} s, or never started): start it again with START")

    def _finish(self, states: list[StreamState], rescorer: Optional[Rescorer]) -> list[str]:
        """Final transcripts: rescored, except for streams too long to keep their encoder output."""
        hyps = [s.search.best().tokens for s in states]
        kept = [i for i, s in enumerate(states) if s.rescorable]
        if kept:
            nbests = [[(h.tokens, h.score) for h in states[i].search.nbest()] for i in kept]
            outs = [states[i].encoder_output(self.encoder_dim) for i in kept]
            lengths = np.array([o.shape[0] for o in outs], dtype=np.int32)
            longest = max(1, int(lengths.max()))
            padded = np.zeros((len(outs), longest, self.encoder_dim), dtype=np.float32)
            for b, out in enumerate(outs):
                padded[b, :out.shape[0]] = out
            for i, hyp in zip(kept, _rescore(nbests, padded, lengths, self.settings, rescorer)):
                hyps[i] = hyp
        return [self.tokenizer.decode(h) for h in hyps]

    def drop(self, key: SequenceKey) -> None:
        self.streams.pop(key, None)
        self.failed.pop(key, None)

    def drop_idle(self, now: float) -> None:
        idle = self.settings.idle_seconds
        for key in [k for k, s in self.streams.items() if now - s.last_seen > idle]:
            del self.streams[key]
        for key in [k for k, (_, seen) in self.failed.items() if now - seen > idle]:
            del self.failed[key]
