"""Training batches made ahead of the step that needs them, in one thread or in worker processes.

A CPU leg makes each batch in one thread beside the training step: the cores are torch's, and a batch costs a
tenth of a step there. A GPU step is some tens of milliseconds, while one thread needs 6-22 ms of CPU an
utterance (fbank, resampling, SpecAugment; Opus decoding of a packed GPU leg is most of the 22), seconds for a
batch of 128: there batches are made by worker processes, each with its own copy of the tokenizer.

Either way a batch is a function of its rows, its seed and its augment flag alone (`make_batch` with
``random.Random(seed)``), so how it was made does not change what a run trains on.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import random
from typing import Optional

import torch

from ..units import Tokenizer
from .batching import make_batch

# Set in each worker process by _start_worker: what every batch of the run shares.
_worker: Optional[tuple[Tokenizer, dict]] = None


def _start_worker(tokenizer: Tokenizer, options: dict) -> None:
    global _worker
    torch.set_num_threads(1)  # the workers are as many as the cores: no intra-op threads on top
    _worker = (tokenizer, options)


def _make_in_worker(items: list, seed: int, augment: bool):
    tokenizer, options = _worker
    return make_batch(items, tokenizer, random.Random(seed), augment=augment, **options)


class BatchMaker:
    """``submit`` a batch's rows; its future gives ``make_batch``'s tensors. ``depth``: how many batches to keep
    submitted ahead so the step never waits while the workers are busy."""

    def __init__(self, tokenizer: Tokenizer, workers: int = 0, **options) -> None:
        self._tokenizer, self._options = tokenizer, options
        if workers > 0:
            # spawn: the parent may already hold a CUDA context, which a forked child cannot use
            self._pool = concurrent.futures.ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
                initargs=(tokenizer, options))
            self.depth = 2 * workers
        else:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="batches")
            self.depth = 1
        self._in_processes = workers > 0

    def submit(self, items: list, seed: int, augment: bool) -> concurrent.futures.Future:
        if self._in_processes:
            return self._pool.submit(_make_in_worker, items, seed, augment)
        return self._pool.submit(make_batch, items, self._tokenizer, random.Random(seed), augment=augment,
                                 **self._options)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
