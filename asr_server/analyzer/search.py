"""Which candidates to measure: every point of a grid (brute force), or a hill climb from the shipped config.

A search space is a list of coordinates, one per (model, knob), each with the values to try. An ensemble's
composing models are coordinates of one space, so their configurations are searched together. Both searches
ask `evaluate(candidate) -> rank key` (larger is better) and never evaluate a candidate twice.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

from asr_server.analyzer.variants import Variant


@dataclass(frozen=True)
class Coordinate:
    model: str
    knob: str
    values: tuple[Any, ...]  # in the order a hill climb steps through them (ascending for numbers)


@dataclass(frozen=True)
class Candidate:
    """One configuration of the analysed model: a variant for each tuned model (an ensemble has several)."""

    variants: tuple[tuple[str, Variant], ...]  # (model, variant), sorted by model

    @classmethod
    def of(cls, settings: dict[str, dict[str, Any]]) -> "Candidate":
        return cls(tuple(sorted((m, Variant.of(k)) for m, k in settings.items())))

    def variant(self, model: str) -> Variant:
        return dict(self.variants).get(model, Variant())

    def key(self) -> str:
        return json.dumps([[m, [[k, list(v) if isinstance(v, tuple) else v] for k, v in var.values]]
                           for m, var in self.variants if var.values])

    def describe(self) -> str:
        parts = [f"{m}: {v.describe()}" for m, v in self.variants if v.values]
        return "; ".join(parts) or "shipped"


SHIPPED = Candidate(())


def candidate_at(coordinates: Sequence[Coordinate], index: Sequence[int]) -> Candidate:
    settings: dict[str, dict[str, Any]] = {}
    for coord, i in zip(coordinates, index):
        settings.setdefault(coord.model, {})[coord.knob] = coord.values[i]
    return Candidate.of(settings)


def grid(coordinates: Sequence[Coordinate]) -> Iterator[Candidate]:
    """Every combination, the shipped configuration first (the baseline every report compares with)."""
    yield SHIPPED
    for index in itertools.product(*(range(len(c.values)) for c in coordinates)):
        yield candidate_at(coordinates, index)


def brute_force(coordinates: Sequence[Coordinate], evaluate: Callable[[Candidate], tuple],
                max_candidates: Optional[int] = None) -> tuple[Candidate, tuple]:
    best, best_key, seen = SHIPPED, None, set()
    for n, candidate in enumerate(grid(coordinates)):
        if max_candidates is not None and n >= max_candidates:
            break
        if candidate.key() in seen:
            continue
        seen.add(candidate.key())
        key = evaluate(candidate)
        if best_key is None or key > best_key:
            best, best_key = candidate, key
    return best, best_key


def hill_climb(coordinates: Sequence[Coordinate], start: Sequence[int], evaluate: Callable[[Candidate], tuple],
               max_candidates: int = 20, min_gain: float = 0.02) -> tuple[Candidate, tuple]:
    """Steepest ascent: from `start` (an index per coordinate, the shipped values), measure every neighbour one
    step away on one coordinate and move to the best while it beats the current point by more than `min_gain`
    (relative: measurements on shared cores differ by a few percent from run to run). Stops at a local best or
    after `max_candidates` evaluations. A quick search: it finds a local optimum, not the grid's best."""
    cache: dict[str, tuple[Candidate, tuple]] = {SHIPPED.key(): (SHIPPED, evaluate(SHIPPED))}  # baseline first

    evaluated = [1]  # evaluations so far (the shipped config's); the cache also holds the start's alias

    def run(index: tuple[int, ...]) -> Optional[tuple]:
        candidate = candidate_at(coordinates, index)
        if candidate.key() not in cache:
            if evaluated[0] >= max_candidates:
                return None
            cache[candidate.key()] = (candidate, evaluate(candidate))
            evaluated[0] += 1
        return cache[candidate.key()][1]

    current = tuple(start)
    # The start holds the shipped values (the analyzer adds them to the grid): it is the shipped config, so its
    # measurement is the baseline's, not a second one.
    cache[candidate_at(coordinates, current).key()] = cache[SHIPPED.key()]
    best_key = cache[SHIPPED.key()][1]
    while True:
        neighbours = []
        for axis, coord in enumerate(coordinates):
            for step in (-1, 1):
                i = current[axis] + step
                if 0 <= i < len(coord.values):
                    neighbours.append(current[:axis] + (i,) + current[axis + 1:])
        results = [(k, n) for k, n in ((run(n), n) for n in neighbours) if k is not None]
        if not results:
            break
        key, index = max(results, key=lambda r: r[0])
        if not _better(key, best_key, min_gain):
            break
        current, best_key = index, key
    return max(cache.values(), key=lambda cr: cr[1])


def _better(new: tuple, old: tuple, min_gain: float) -> bool:
    if new[0] != old[0]:
        return new[0] > old[0]
    scale = max(abs(old[1]), 1e-9)
    return new[1] > old[1] + min_gain * scale
