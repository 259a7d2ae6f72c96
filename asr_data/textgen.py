"""Draw one utterance's text of a given kind from the text pools: sentences of public-domain text, random
word sequences over a frequency-ranked vocabulary (with numbers, dates, times and names mixed in), digit
strings, and the old corpus's templates. Every draw is a function of the `random.Random` it is given.
"""

from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import dataclass, field
from typing import Callable

from asr_data import spoken
from asr_data.normalise import label as to_label
from asr_data.real_speech import is_banned
from asr_data.text_sources import Line

# Share of each kind in the training text. Templates stay a small minority (<= 10%).
TRAIN_KINDS = {"sentence": 0.42, "words": 0.24, "mixed": 0.13, "digits": 0.07, "date_time": 0.04,
               "template": 0.10}
# Sentences: fortunes are 10x fewer than WordNet glosses but closer to speech, so each family gets half.
SENTENCE_FAMILIES = {"fortunes": 0.5, "wordnet": 0.5}


@dataclass(frozen=True)
class Text:
    kind: str
    source: str
    speak: str
    label: str


@dataclass
class Pools:
    """Text pools; `sentences` keyed by family (fortunes / wordnet)."""
    sentences: dict[str, list[Line]]
    vocab: list[str]
    names: list[str]
    template: Callable[[random.Random], str] | None = None
    banned_templates: frozenset[str] = frozenset()
    _cum: list[float] = field(default_factory=list, repr=False)

    def word(self, rng: random.Random) -> str:
        """A vocabulary word, drawn with weight rank^-0.5: common words often, the long tail still often."""
        if not self._cum:
            self._cum = list(itertools.accumulate((r + 1) ** -0.5 for r in range(len(self.vocab))))
        return self.vocab[bisect.bisect_left(self._cum, rng.random() * self._cum[-1])]

    @classmethod
    def from_lines(cls, lines: list[Line], vocab: list[str], names: list[str], **kw) -> "Pools":
        by_family: dict[str, list[Line]] = {}
        for ln in lines:
            by_family.setdefault(ln.source.split("/")[0], []).append(ln)
        return cls(by_family, vocab, names, **kw)


def _weighted(rng: random.Random, weights: dict[str, float]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def _filler(rng: random.Random, pools: Pools) -> str:
    kind = rng.random()
    if kind < 0.4:
        return spoken.random_number(rng)
    if kind < 0.6:
        return spoken.random_date(rng)
    if kind < 0.75:
        return spoken.random_time(rng)
    return rng.choice(pools.names) if pools.names else spoken.random_number(rng)


def _draw(rng: random.Random, kind: str, pools: Pools) -> Text:
    if kind == "sentence":
        family = _weighted(rng, {f: w for f, w in SENTENCE_FAMILIES.items() if pools.sentences.get(f)})
        ln = rng.choice(pools.sentences[family])
        return Text(kind, ln.source, ln.speak, ln.label)
    if kind == "words":
        words = " ".join(pools.word(rng) for _ in range(rng.randint(2, 12)))
        return Text(kind, "wordfreq", words, words)
    if kind == "mixed":
        parts = [" ".join(pools.word(rng) for _ in range(rng.randint(1, 5))) for _ in range(2)]
        words = f"{parts[0]} {_filler(rng, pools)} {parts[1]}"
        return Text(kind, "wordfreq+spoken", words, words)
    if kind == "digits":
        words = spoken.random_digits(rng)
        return Text(kind, "spoken", words, words)
    if kind == "date_time":
        words = spoken.random_date(rng) if rng.random() < 0.6 else spoken.random_time(rng)
        return Text(kind, "spoken", words, words)
    if kind == "template":
        if pools.template is None:
            raise ValueError("no template function")
        words = pools.template(rng)
        return Text(kind, "templates", words, to_label(words) or words)
    raise ValueError(f"unknown text kind {kind!r}")


def draw(rng: random.Random, kinds: dict[str, float], pools: Pools, training: bool) -> Text:
    """One text of a kind drawn from `kinds`. Training texts never hold a real recording's sentence nor a
    held-out template sentence: such a draw is replaced by the next one from the same generator."""
    for _ in range(1000):
        text = _draw(rng, _weighted(rng, kinds), pools)
        if not training:
            return text
        if is_banned(text.label) or (text.kind == "template" and text.label in pools.banned_templates):
            continue
        return text
    raise RuntimeError("no admissible text in 1000 draws")
