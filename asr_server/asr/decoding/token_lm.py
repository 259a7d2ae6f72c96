"""A token-level n-gram language model (ARPA) for shallow fusion in the CTC prefix beam search.

The model is an ordinary back-off n-gram in ARPA format whose "words" are the recogniser's own units (BPE
pieces such as ``▁the``, ``re``), so it scores every prefix of the beam token by token, with no word boundary
to wait for and no out-of-vocabulary word: a misspelt word ("▁s p ate s") simply scores low. The search ranks
a prefix by

    log p_ctc(prefix) + weight * log p_lm(prefix) + bonus * len(prefix)

(natural logs), as WeNet's and pyctcdecode's shallow fusion do with word LMs; ``bonus`` offsets the LM's
preference for short hypotheses. The LM only reorders the beam; its score rides along in the hypothesis score.

Layout for the compiled kernel (``_ctc_kernels.lm_step``): one state per history the ARPA lists (an n-gram of
order < n, plus the empty history, state 0), the arcs of each state sorted by token in CSR form, each arc with
its log-probability and the state it leads to (the longest listed suffix of history + token), and each state's
back-off weight and back-off state (its longest listed proper suffix). A token unknown to the LM scores the
ARPA's ``<unk>`` (or ``UNK_FLOOR``) at the empty history.

Where models come from: ``scripts/build_lm.py`` estimates one from text with IRSTLM (Debian ``irstlm``; KenLM's
``lmplz`` is not in the registries); any ARPA whose words are the model's units works.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import math
import threading
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from . import _ctc_kernels as _k
from .numbers import bounded_float

LN10 = math.log(10.0)
UNK_FLOOR = -10.0 * LN10  # a unit the ARPA neither lists nor gives <unk>: 1e-10
MAX_WEIGHT = 10.0  # LM weight; beyond a few the LM alone decides and the acoustics are ignored
MAX_BONUS = 100.0  # per-token bonus, nats
DEFAULT_WEIGHT, DEFAULT_BONUS = 0.7, 3.0  # chosen on held-out game speakers (open_en_wip MODEL_CARD.md)
DEFAULT_FUSION = f"{DEFAULT_WEIGHT:.1f}/{DEFAULT_BONUS:.1f}"  # as eval.py's --lm-fusion and its mode names write it
BOS, EOS, UNK = "<s>", "</s>", "<unk>"


@dataclasses.dataclass(frozen=True, eq=False)
class TokenLm:
    """A back-off n-gram over token ids, in the kernel's layout, with its fusion weights."""

    arc_start: np.ndarray  # (S+1,) int64: the arcs of state s are arc_start[s]:arc_start[s+1]
    arc_token: np.ndarray  # (E,) int32 token id, ascending within a state
    arc_next: np.ndarray  # (E,) int32 state after the token
    # float64, so that the kernel sums in float64 compiled or interpreted (numpy would keep float32 sums float32)
    arc_logp: np.ndarray  # (E,) float64 natural-log probability of the token after the state's history
    backoff: np.ndarray  # (S,) int32 longest listed proper suffix of the state's history (-1: the empty one)
    backoff_logw: np.ndarray  # (S,) float64 natural-log back-off weight
    start: int  # the state after <s> (0 when the ARPA has none)
    eos: int  # token id of </s> in arc_token (-1 when the ARPA has none)
    unk_logp: float  # log p of a token the LM does not list
    order: int
    weight: float = 0.0  # LM weight in the ranking score
    bonus: float = 0.0  # per-token bonus in the ranking score

    @property
    def empty(self) -> bool:
        return self.arc_start[-1] == 0

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.arc_start, self.arc_token, self.arc_next, self.arc_logp,
                                      self.backoff, self.backoff_logw))

    def with_weights(self, weight: float, bonus: float) -> "TokenLm":
        return dataclasses.replace(self, weight=bounded_float(weight, "lm_weight", 0.0, MAX_WEIGHT),
                                   bonus=bounded_float(bonus, "lm_bonus", -MAX_BONUS, MAX_BONUS))

    def step(self, state: int, token: int) -> tuple[float, int]:
        """(log p(token | state's history), next state)."""
        logp, nxt = _k.lm_step(state, token, self.arc_start, self.arc_token, self.arc_next, self.arc_logp,
                               self.backoff, self.backoff_logw, self.unk_logp)
        return float(logp), int(nxt)

    def score_tokens(self, tokens: Sequence[int], state: int | None = None) -> tuple[float, int]:
        """(summed log p of ``tokens`` from ``state`` (default: after <s>), the state after them)."""
        state = self.start if state is None else state
        total = 0.0
        for token in tokens:
            logp, state = self.step(state, int(token))
            total += logp
        return total, state

    def end_logp(self, state: int) -> float:
        """log p(</s> | state): what ending the sentence here costs (0 when the ARPA has no </s>)."""
        return self.step(state, self.eos)[0] if self.eos >= 0 else 0.0

    def fused(self, tokens: Sequence[int], lm_logp: float, final_state: int) -> float:
        """The fusion term of a whole hypothesis: weight * (its LM log p and the end of sentence) + bonus * len."""
        return self.weight * (lm_logp + self.end_logp(final_state)) + self.bonus * len(tokens)


def _empty() -> TokenLm:
    return TokenLm(np.zeros(2, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float64),
                   np.full(1, -1, np.int32), np.zeros(1, np.float64), 0, -1, UNK_FLOOR, 0)


EMPTY = _empty()


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def read_arpa(path: Path) -> Iterator[tuple[tuple[str, ...], float, float]]:
    """(n-gram words, log10 p, log10 back-off weight) of every entry of an ARPA file (.gz read as gzip)."""
    order = 0
    with _open_text(Path(path)) as f:
        for raw in f:
            line = raw.strip()
            if not line or line.startswith("ngram ") or line == "\\data\\":
                continue
            if line.startswith("\\"):
                order = int(line[1:line.index("-")]) if line.endswith("-grams:") else 0
                continue
            if order == 0:
                continue
            fields = line.split()
            if len(fields) not in (order + 1, order + 2):
                raise ValueError(f"{path}: {order}-gram line without {order} words: {line[:80]!r}")
            yield tuple(fields[1:order + 1]), float(fields[0]), float(fields[order + 1]) if len(fields) > order + 1 else 0.0


def load_arpa(path: Path, symbols: Sequence[str], weight: float = DEFAULT_WEIGHT,
              bonus: float = DEFAULT_BONUS) -> TokenLm:
    """An ARPA over the model's units -> TokenLm. ``symbols``: unit id -> its string (units.txt).
    The model instances of one process share the arrays (parsing takes a second or two)."""
    path = Path(path).resolve()
    with _LOADING:  # instances starting together parse once, and one at a time
        return _load_arpa(path, path.stat().st_mtime_ns, tuple(symbols)).with_weights(weight, bonus)


_LOADING = threading.Lock()


@functools.lru_cache(maxsize=4)
def _load_arpa(path: Path, _mtime_ns: int, symbols: tuple[str, ...]) -> TokenLm:
    ids = {s: i for i, s in enumerate(symbols)}
    extra = {BOS: len(symbols), EOS: len(symbols) + 1}  # ids past the vocabulary: never emitted by the model
    logp: dict[tuple[int, ...], float] = {}
    bow: dict[tuple[int, ...], float] = {}
    unk = None
    order = 0
    for words, lp10, bw10 in read_arpa(path):
        if words == (UNK,):
            unk = lp10 * LN10
            continue
        try:
            key = tuple(ids[w] if w in ids else extra[w] for w in words)
        except KeyError:
            continue  # an n-gram with a word the model cannot emit can never be reached
        logp[key] = lp10 * LN10
        if bw10:
            bow[key] = bw10 * LN10
        order = max(order, len(key))
    if not logp:
        raise ValueError(f"{path}: no n-gram over the model's units")
    histories = sorted({k[:-1] for k in logp} | {k for k in logp if len(k) < order} | {()}, key=lambda h: (len(h), h))
    state_of = {h: i for i, h in enumerate(histories)}

    def longest_listed_suffix(seq: tuple[int, ...]) -> int:
        for cut in range(max(0, len(seq) - order + 1), len(seq) + 1):
            s = state_of.get(seq[cut:])
            if s is not None:
                return s
        return 0

    arcs: list[list[tuple[int, int, float]]] = [[] for _ in histories]
    for key, lp in logp.items():
        arcs[state_of[key[:-1]]].append((key[-1], longest_listed_suffix(key), lp))
    starts = np.zeros(len(histories) + 1, np.int64)
    flat: list[tuple[int, int, float]] = []
    for s, out in enumerate(arcs):
        out.sort()
        flat.extend(out)
        starts[s + 1] = len(flat)
    backoff = np.array([-1] + [longest_listed_suffix(h[1:]) for h in histories[1:]], np.int32)
    backoff_logw = np.array([bow.get(h, 0.0) for h in histories], np.float64)
    return TokenLm(starts, np.array([a[0] for a in flat], np.int32), np.array([a[1] for a in flat], np.int32),
                   np.array([a[2] for a in flat], np.float64), backoff, backoff_logw,
                   state_of.get((extra[BOS],), 0), extra[EOS] if (extra[EOS],) in logp else -1,
                   UNK_FLOOR if unk is None else unk, order)
