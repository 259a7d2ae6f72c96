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
import signal
from typing import Optional

import torch

from ..units import Tokenizer
from .batching import make_batch

# Set in each worker process by _start_worker: what every batch of the run shares.
_shared: Optional[tuple[Tokenizer, dict]] = None


def _start_worker(tokenizer: Tokenizer, options: dict) -> None:
    global _shared
    # Ctrl-C or a SIGTERM to the process group is the parent's to handle: it finishes its step and saves its
    # checkpoint, which a worker killed under it would prevent (the pool would break). A worker ends when the
    # parent closes the pool or dies (its pipe closes).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch.set_num_threads(1)  # the workers are as many as the cores: no intra-op threads on top
    _shared = (tokenizer, options)


def _make(tokenizer: Tokenizer, options: dict, items: list, seed: int, augment: bool) -> tuple:
    return make_batch(items, tokenizer, random.Random(seed), augment=augment, **options)


def _make_in_worker(items: list, seed: int, augment: bool) -> tuple:
    # As numpy arrays: torch tensors would travel through shared memory (/dev/shm), which a container may
    # keep too small for 2N batches; a pipe copy of a batch is cheap beside making it.
    return tuple(None if t is None else t.numpy() for t in _make(*_shared, items, seed, augment))


class _FromWorker:
    """A batch being made in a worker process: ``result()`` gives its tensors."""

    def __init__(self, future: concurrent.futures.Future) -> None:
        self._future = future

    def result(self) -> tuple:
        return tuple(None if a is None else torch.from_numpy(a) for a in self._future.result())


class BatchMaker:
    """``submit`` a batch's rows; ``.result()`` of what it returns gives ``make_batch``'s tensors. ``depth``: how
    many batches to keep submitted ahead so the step never waits while the workers are busy."""

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

    def submit(self, items: list, seed: int, augment: bool):
        if isinstance(self._pool, concurrent.futures.ProcessPoolExecutor):
            return _FromWorker(self._pool.submit(_make_in_worker, items, seed, augment))
        return self._pool.submit(_make, self._tokenizer, self._options, items, seed, augment)

    def close(self) -> None:
        """Drop the batches made ahead (a run that stops does not wait for them)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
