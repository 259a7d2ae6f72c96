"""What changes with the training step: the learning rate and the encoder's attention chunk.

Both are functions of the step (and the run's seed) alone, so a resumed run repeats them exactly.
"""

from __future__ import annotations

import math
import random

FULL_CONTEXT = -1  # attention chunk meaning "the whole utterance"


def lr_at(step: int, peak: float, warmup: int) -> float:
    """WeNet's WarmupLR: linear warm-up to ``peak`` then inverse square-root decay."""
    step = max(step, 1)
    return peak * min(step / warmup, math.sqrt(warmup / step))


def attention_chunk(step: int, seed: int, curriculum_steps: int, full_context_share: float,
                    chunk_range: tuple[int, int]) -> int:
    """The encoder's attention chunk for this step's batch, in encoder frames (-1: full context).

    Dynamic chunk training as in WeNet's U2++: some batches see the whole utterance, the others a random
    chunk, so one model decodes offline and streaming. WeNet draws full context about half the time and
    chunks of 1-25 frames otherwise; ``full_context_share`` and ``chunk_range`` (inclusive, encoder frames)
    narrow that towards the chunk the server streams with. The first ``curriculum_steps`` steps are full
    context. The draw depends on (seed, step) only.
    """
    if step < curriculum_steps:
        return FULL_CONTEXT
    rng = random.Random(seed * 104729 + step)
    if rng.random() < full_context_share:
        return FULL_CONTEXT
    return rng.randint(chunk_range[0], chunk_range[1])
