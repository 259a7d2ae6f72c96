"""The recogniser's serving logic on numpy arrays: decoding settings, offline scoring, streaming features.

The Triton model files in `model_repo/` are thin: they turn tensors into numpy, call these classes, and
run the ONNX models (encoder, decoder) through whatever the caller passes in (BLS calls, or onnxruntime
sessions run in the model itself), so this module needs no server and is tested on its own. Chunk-by-chunk streaming decoding: ``streaming_scorer``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Mapping, Optional

import numpy as np

from ..decoding.ctc_search import SearchOptions, make_search
from ..decoding.details import hypothesis_details
from ..decoding.endpoint import EndpointRules
from ..decoding.hotwords import Hotwords
from ..decoding.token_lm import TokenLm
from ..features.fbank import FbankConfig, StreamingFbank, batch_fbank_computer
from .stream_state import Streams
from ..decoding.rescoring import DecoderInputs, build_decoder_inputs, hyps_from_best_index
from ..units import Tokenizer

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
    endpoint: EndpointRules = EndpointRules()  # the model's endpointing (requests may override it on START)
    frame_seconds: float = 0.04  # one encoder frame: fbank shift (10 ms) x subsampling (4); for timestamps
    # seconds the model emits a word's first / last token after it is spoken (timestamps move earlier by them),
    # and optionally how much later still the first word after a pause (alignment.word_times)
    timestamp_shift: tuple[float, ...] = (0.0, 0.0)
    lm: Optional[TokenLm] = None  # a token n-gram fused into the prefix beam search (parameter lm_file)

    def search_options(self) -> SearchOptions:
        return SearchOptions(method=self.search_method, beam_size=self.beam_size, top_k=self.beam_size,
                             blank_id=0, cutoff_prob=self.cutoff_prob, lm=self.lm)


# Decoder call: (inputs for a batch of n-best lists, encoder_out (B, T, d), encoder_out_lens (B,)) ->
# best_index (B,) — what WeNet's exported decoder.onnx returns.
Rescorer = Callable[[DecoderInputs, np.ndarray, np.ndarray], np.ndarray]


def rescore_nbests(nbests, encoder_out, lengths, settings: DecodingSettings, rescorer: Optional[Rescorer]):
    """The chosen token tuple of every n-best list (attention rescoring, or the CTC best)."""
    has_tokens = any(tokens for nbest in nbests for tokens, _ in nbest)
    if not settings.rescoring or rescorer is None or not has_tokens or int(np.max(lengths, initial=0)) == 0:
        return [nbest[0][0] if nbest else () for nbest in nbests]
    inputs = build_decoder_inputs(nbests, settings.beam_size, settings.sos, settings.eos,
                                  bidirectional=settings.bidirectional)
    best = rescorer(inputs, encoder_out, lengths)
    return hyps_from_best_index(nbests, best)


class OfflineScorer:
    """Whole utterances: CTC prefix beam search over the encoder's top-k, then attention rescoring."""

    def __init__(self, tokenizer: Tokenizer, settings: DecodingSettings, hotwords: Optional[Hotwords] = None) -> None:
        self.tokenizer = tokenizer
        self.settings = settings
        self.hotwords = hotwords or Hotwords(tokenizer.encode)  # the model's, and per-request ones

    def decode(self, encoder_out: np.ndarray, lengths: np.ndarray, topk_log_probs: np.ndarray,
               topk_ids: np.ndarray, rescorer: Optional[Rescorer] = None) -> list[str]:
        """encoder_out (B, T, d); lengths (B,); topk_log_probs / topk_ids (B, T, K) -> B transcripts."""
        return [text for text, _ in self.recognize(encoder_out, lengths, topk_log_probs, topk_ids, rescorer)]

    def recognize(self, encoder_out: np.ndarray, lengths: np.ndarray, topk_log_probs: np.ndarray,
                  topk_ids: np.ndarray, rescorer: Optional[Rescorer] = None, details: bool = False,
                  parameters: Mapping[str, Any] = {}, full_log_probs: Optional[np.ndarray] = None
                  ) -> list[tuple[str, Optional[dict]]]:
        """Like ``decode``, with each transcript's DETAILS dict (words, tokens, n-best) when ``details``;
        ``parameters``: the request's (``hotwords``, ``hotwords_score``); ``full_log_probs``: (B, T, V) every
        token's CTC log-prob (the encoder's ``ctc_log_probs``), when the model passes them: hotword tokens
        outside a frame's top-k are then searched too, and words are aligned on them."""
        nbests = []
        lengths = np.asarray(lengths).reshape(-1)
        context = self.hotwords.for_request(parameters)
        for b in range(encoder_out.shape[0]):
            search = make_search(self.settings.search_options(), context)
            n = int(lengths[b])
            if full_log_probs is not None and not context.empty:
                search.advance(topk_log_probs[b, :n], topk_ids[b, :n], full_log_probs[b, :n])
            else:
                search.advance(topk_log_probs[b, :n], topk_ids[b, :n])
            nbests.append([(h.tokens, h.score) for h in search.nbest()])
        hyps = rescore_nbests(nbests, encoder_out, lengths, self.settings, rescorer)
        out = []
        for b, hyp in enumerate(hyps):
            info = None
            if details:
                n = int(lengths[b])
                info = hypothesis_details(self.tokenizer, hyp, topk_log_probs[b, :n], topk_ids[b, :n],
                                          self.settings.frame_seconds, 0.0, nbests[b], self.settings.timestamp_shift,
                                          None if full_log_probs is None else full_log_probs[b, :n])
                info.update(segment=0, final=True)
            out.append((self.tokenizer.decode(hyp), info))
        return out


class StreamingFeatures:
    """Per-sequence fbank with residual samples, so clients may send chunks of any length.

    ``compute_fbank`` (``features.batch_fbank_computer``) featurises every stream's new samples of one batch in
    a single call: kaldi-native-fbank by default, or kaldifeat (batched, on a GPU for a KIND_GPU instance).
    """

    def __init__(self, config: FbankConfig, idle_seconds: float = 5.0, compute_fbank=None,
                 streams: Optional[Streams] = None) -> None:
        self.config = config
        self.compute_fbank = compute_fbank or batch_fbank_computer("kaldi-native-fbank", config)
        # each sequence's residual is the `fbank` part of its stream (shared with the scorer in streaming_wenet)
        self.streams = streams if streams is not None else Streams(idle_seconds)

    def accept_many(self, chunks: list[tuple[SequenceKey, np.ndarray, bool, bool]]) -> list[np.ndarray]:
        """The new (T, num_mel_bins) frames of each (key, samples, start, end) chunk, taken in order, with one
        fbank call for all of them; a sequence's state is created on START, dropped on END."""
        now = time.monotonic()
        self.streams.sweep(now)
        ready = []
        for key, samples, start, end in chunks:
            stream = self.streams.open(key, now)
            if start or stream.fbank is None:
                stream.fbank = StreamingFbank(self.config)
            ready.append(stream.fbank.take(samples))
            if end:
                self.streams.release(key, "fbank")
        todo = [i for i, r in enumerate(ready) if r.size]
        frames = [np.zeros((0, self.config.num_mel_bins), dtype=np.float32)] * len(chunks)
        for i, f in zip(todo, self.compute_fbank([ready[i] for i in todo])):
            frames[i] = f
        return frames

    def drop(self, key: SequenceKey) -> None:
        self.streams.release(key, "fbank")
