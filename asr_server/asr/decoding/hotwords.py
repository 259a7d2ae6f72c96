"""Hotwords (contextual biasing): phrases whose tokens earn a bonus in the CTC prefix beam search.

The phrases become a prefix tree over token ids with Aho-Corasick failure links, in flat arrays the compiled
search kernel walks (``_ctc_kernels.context_step``). A prefix of the beam carries its state in the tree: each
token that extends a match adds ``score`` to its ranking score, a match that breaks off loses what it had
earned, and a completed phrase keeps its bonus. The biasing only reorders the beam; the CTC scores and the
attention rescoring see the same hypotheses (WeNet's and icefall's context graphs work the same way).

Where phrases come from:
- per model: the config parameter ``hotwords_file`` (a text file in the model's folder, one phrase per line,
  optionally ``phrase<TAB>score`` or ``phrase :score``), with ``hotwords_score`` the bonus per token;
- per request: the parameter ``hotwords`` (phrases separated by ``|`` or new lines, each optionally
  ``phrase:score``) and ``hotwords_score``; they replace the model's list for that request (or stream, when
  given on START).

No package the project uses builds such a tree over token ids for a numba kernel (icefall's ContextGraph is
Python objects, sherpa-onnx's is C++), so it is written here.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from ..model_files import file_in_folder
from .numbers import bounded_float

DEFAULT_SCORE = 2.0  # bonus per matched token (natural-log units; icefall's recipes use 1.5-2)
MAX_PHRASES = 1000  # per request: a request cannot make the server build an unbounded tree
MAX_PHRASE_CHARS = 200
MAX_TOTAL_CHARS = 20_000  # per request, all phrases together: building the tree costs time on the scorer
CACHE_BYTES = 16 << 20  # the built trees of recent requests kept, at most this many bytes of arrays
MAX_SCORE = 100.0  # |bonus| per token; 100 nats already outweighs any acoustic evidence


@dataclasses.dataclass(frozen=True, eq=False)
class ContextGraph:
    """The prefix tree in the kernel's layout (node 0 is the root)."""

    child_start: np.ndarray  # (N+1,) int64: the edges of node n are child_start[n]:child_start[n+1]
    child_token: np.ndarray  # (E,) int64 token id of each edge
    child_node: np.ndarray  # (E,) int64 node it leads to
    fail: np.ndarray  # (N,) int64 longest proper suffix of the node's path that is also a path from the root
    node_score: np.ndarray  # (N,) float64 bonus of the path from the root to the node
    is_end: np.ndarray  # (N,) bool a phrase ends at the node
    phrases: tuple[str, ...] = ()  # what it was built from (for logs and DETAILS)

    @property
    def empty(self) -> bool:
        return self.child_start[1] == 0

    @property
    def nbytes(self) -> int:
        arrays = (self.child_start, self.child_token, self.child_node, self.fail, self.node_score, self.is_end)
        return sum(a.nbytes for a in arrays) + sum(len(p) for p in self.phrases)


def build_graph(phrases: Sequence[tuple[Sequence[int], float]], names: Sequence[str] = ()) -> ContextGraph:
    """phrases: (token ids, bonus per token) pairs."""
    children: list[dict[int, int]] = [{}]
    score = [0.0]
    end = [False]
    for tokens, per_token in phrases:
        node = 0
        for token in tokens:
            nxt = children[node].get(int(token))
            if nxt is None:
                nxt = len(children)
                children[node][int(token)] = nxt
                children.append({})
                score.append(score[node] + float(per_token))
                end.append(False)
            node = nxt
        if node:
            end[node] = True
    fail = [0] * len(children)
    queue = deque(children[0].values())
    while queue:  # breadth first: a node's failure link is set before its children's
        node = queue.popleft()
        for token, child in children[node].items():
            f = fail[node]
            while f and token not in children[f]:
                f = fail[f]
            fail[child] = children[f].get(token, 0) if children[f].get(token, 0) != child else 0
            queue.append(child)
    starts, tokens_out, nodes_out = [0], [], []
    for node_children in children:
        for token, child in sorted(node_children.items()):
            tokens_out.append(token)
            nodes_out.append(child)
        starts.append(len(tokens_out))
    return ContextGraph(np.array(starts, np.int64), np.array(tokens_out, np.int64), np.array(nodes_out, np.int64),
                        np.array(fail, np.int64), np.array(score, np.float64), np.array(end, np.bool_),
                        tuple(names))


EMPTY = build_graph([])


def parse_phrases(text: str, default_score: float, separators: str = "|\n") -> list[tuple[str, float]]:
    """'phrase[:score]' items separated by ``separators`` (and a tab before a score in files)."""
    items = [text]
    for sep in separators:
        items = [part for item in items for part in item.split(sep)]
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        phrase, score = item, default_score
        for mark in ("\t", ":"):
            if mark in item:
                head, _, tail = item.rpartition(mark)
                try:
                    phrase, score = head.strip(), bounded_float(tail, "score", -MAX_SCORE, MAX_SCORE)
                except ValueError as exc:
                    raise ValueError(f"hotword {item[:60]!r}: the part after {mark!r} must be a score "
                                     f"({exc})") from None
                break
        if len(phrase) > MAX_PHRASE_CHARS:
            raise ValueError(f"hotword longer than {MAX_PHRASE_CHARS} characters")
        out.append((phrase, score))
    if len(out) > MAX_PHRASES:
        raise ValueError(f"{len(out)} hotwords: at most {MAX_PHRASES}")
    total = sum(len(phrase) for phrase, _ in out)
    if total > MAX_TOTAL_CHARS:
        raise ValueError(f"hotwords of {total} characters in all: at most {MAX_TOTAL_CHARS}")
    return out


def graph_of(phrases: Sequence[tuple[str, float]], encode: Callable[[str], list[int]]) -> ContextGraph:
    """Phrases as text -> the tree over their token ids (``encode``: the model's tokenizer)."""
    return build_graph([(encode(p), s) for p, s in phrases], [p for p, _ in phrases]) if phrases else EMPTY


class Hotwords:
    """A model's hotwords and the per-request ones, with the trees of recent requests cached."""

    CACHE = 64  # distinct per-request lists kept built (and CACHE_BYTES of them at most)

    def __init__(self, encode: Callable[[str], list[int]], phrases: Sequence[tuple[str, float]] = (),
                 default_score: float = DEFAULT_SCORE) -> None:
        self.encode = encode
        self.default_score = default_score
        self.model_graph = graph_of(phrases, encode)
        self._cache: dict[tuple[str, float], ContextGraph] = {}
        self._cache_bytes = 0

    @classmethod
    def from_parameters(cls, params: Mapping[str, str], model_dir: Optional[Path],
                        encode: Callable[[str], list[int]]) -> "Hotwords":
        """The model's config parameters ``hotwords_file`` (inside ``model_dir``) and ``hotwords_score``."""
        score = bounded_float(params.get("hotwords_score", DEFAULT_SCORE), "hotwords_score", -MAX_SCORE, MAX_SCORE)
        name = params.get("hotwords_file", "")
        phrases: list[tuple[str, float]] = []
        if name:
            if model_dir is None:
                raise ValueError("hotwords_file needs the model's folder")
            path = file_in_folder(model_dir, name, "hotwords_file")
            phrases = parse_phrases(path.read_text(encoding="utf-8"), score, separators="\n")
        return cls(encode, phrases, score)

    def for_request(self, parameters: Mapping[str, Any]) -> ContextGraph:
        """The request's ``hotwords`` (replacing the model's), else the model's."""
        text = parameters.get("hotwords")
        if text is None:
            return self.model_graph
        score = bounded_float(parameters.get("hotwords_score", self.default_score), "parameter hotwords_score",
                              -MAX_SCORE, MAX_SCORE)
        key = (str(text), score)
        graph = self._cache.get(key)
        if graph is None:
            graph = graph_of(parse_phrases(str(text), score), self.encode)
            while self._cache and (len(self._cache) >= self.CACHE
                                   or self._cache_bytes + graph.nbytes > CACHE_BYTES):
                self._cache_bytes -= self._cache.pop(next(iter(self._cache))).nbytes  # oldest first
            if graph.nbytes <= CACHE_BYTES:
                self._cache[key] = graph
                self._cache_bytes += graph.nbytes
        return graph
