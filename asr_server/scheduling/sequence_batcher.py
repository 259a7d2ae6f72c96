"""Triton's sequence batcher: requests of one sequence run in order; requests of different sequences
share a batch (the `oldest` strategy; `direct` is treated the same way, without padding slots).

- Every request of a sequence runs on the same model instance (assigned at START, round robin), as in
  Triton: a model that keeps per-sequence state in its instance (python models do) can have several
  instances, and they run batches of their own sequences concurrently.

- A sequence starts with START and a non-zero id, and ends with END or after
  max_sequence_idle_microseconds without a request (its state is then freed).
- Control inputs (START/END/READY/CORRID) are added to each request as the config declares them.
- Implicit state: the state outputs of step i become the state inputs of step i+1 of the same sequence;
  they are gathered into the batch as one more batched input and scattered back from the outputs.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from pathlib import Path
from typing import Optional

from tritonclient.grpc import model_config_pb2 as mc

from asr_server.errors import ErrorCode, ServerError, as_server_error, invalid_argument, unavailable
from asr_server.heap import HeapTrimmer
from asr_server.scheduling import sequence_state as ss
from asr_server.scheduling.base import Scheduler
from asr_server.scheduling.instances import Instance, InstancePool
from asr_server.scheduling.pending import Delivery, Pending
from asr_server.messages import InferResponse, SequenceId, Tensor

log = logging.getLogger(__name__)

DEFAULT_IDLE_US = 1_000_000  # Triton's default max_sequence_idle_microseconds
DEFAULT_MAX_SEQUENCES = 100_000  # live sequences before new ones are refused (memory bound)
# Consecutive failures of the batching loop that free no request before it gives up and the model is
# reported not ready (a loop that fails without making progress would otherwise spin).
MAX_LOOP_FAILURES = 3


@dataclasses.dataclass
class Sequence:
    id: SequenceId
    last_seen: float  # loop time of the last request
    queue: collections.deque = dataclasses.field(default_factory=collections.deque)
    running: bool = False
    ended: bool = False
    states: dict = dataclasses.field(default_factory=dict)  # input_name -> array (no batch dim)
    instance: Optional[Instance] = None  # the model instance that runs every request of this sequence


class SequenceBatcher(Scheduler):
    def __init__(self, pool: InstancePool, config: mc.ModelConfig, model_dir: Path,
                 max_sequences: int = DEFAULT_MAX_SEQUENCES) -> None:
        super().__init__(pool)
        batching = config.sequence_batching
        self.model_name = config.name
        self.batched = config.max_batch_size > 0
        self.max_batch = max(1, config.max_batch_size)
        strategy = batching.WhichOneof("strategy_choice")
        oldest = batching.oldest
        self.max_delay_s = (oldest.max_queue_delay_microseconds if strategy == "oldest"
                            else batching.direct.max_queue_delay_microseconds) / 1e6
        self.max_candidates = oldest.max_candidate_sequences if strategy == "oldest" else 0
        self.idle_s = (batching.max_sequence_idle_microseconds or DEFAULT_IDLE_US) / 1e6
        if "max_sequences" in config.parameters:  # the model's own cap, checked by repository validation
            max_sequences = int(config.parameters["max_sequences"].string_value)
        self.max_sequences = max_sequences
        self.controls = ss.control_inputs(config)
        self.states = ss.state_specs(config, model_dir)
        self.sequences: dict[SequenceId, Sequence] = {}
        self._ready = asyncio.Event()
        self._batch_done = asyncio.Event()  # set whenever a batch finishes (draining waits on it)
        self._loop_task: Optional[asyncio.Task] = None
        self._forming: list[Pending] = []  # taken from their queues, not yet handed to an instance
        self.failure: Optional[str] = None  # set when the batching loop could not go on (model not ready)
        self.trimmer = HeapTrimmer()  # gives freed sequence state back to the system once all are gone
        self._assigned = 0  # sequences assigned to instances so far (round robin)

    @property
    def healthy(self) -> bool:
        return self.failure is None

    @property
    def queued(self) -> int:
        return sum(len(s.queue) for s in self.sequences.values())

    # ---- admission -----------------------------------------------------------------------------
    def _submit(self, pending: Pending) -> None:
        loop = asyncio.get_running_loop()
        control = pending.request.sequence
        if self.failure is not None:
            self._refuse(pending, unavailable(f"model '{self.model_name}' is not ready: {self.failure}"))
            return
        if pending.batch_size != 1:
            # Each row would be its own sequence step; Triton refuses rather than run only the first.
            self._refuse(pending, invalid_argument(
                f"inference request to model '{self.model_name}' must specify batch-size 1 due to requirements "
                "of sequence batcher"))
            return
        if not control.active:
            self._refuse(pending, invalid_argument(
                f"inference request to model '{self.model_name}' must specify a non-zero or non-empty correlation ID"))
            return
        sequence = self.sequences.get(control.id)
        if control.start:
            instance = None
            if sequence is not None and not sequence.queue and not sequence.running:
                instance = sequence.instance  # a new START restarts the sequence, on the same instance
                del self.sequences[control.id]
                sequence = None
            if sequence is None:
                if len(self.sequences) >= self.max_sequences:
                    self._refuse(pending, ServerError(
                        f"model '{self.model_name}' has reached its limit of {self.max_sequences} live sequences",
                        ErrorCode.RESOURCE_EXHAUSTED))
                    return
                sequence = Sequence(control.id, loop.time(), instance=instance or self._next_instance())
                self.sequences[control.id] = sequence
        elif sequence is None or sequence.ended:
            self._refuse(pending, invalid_argument(
                f"inference request for sequence {control.id} to model '{self.model_name}' must specify the "
                "START flag on the first request of the sequence"))
            return
        if control.end:
            sequence.ended = True
        sequence.last_seen = loop.time()
        pending.deadline = loop.time() + self.max_delay_s
        sequence.queue.append(pending)
        self._ready.set()
        if self._loop_task is None:
            self._loop_task = loop.create_task(self._batch_loop())
            self._loop_task.add_done_callback(self._loop_ended)

    def _next_instance(self) -> Instance:
        instances = self.pool.instances
        self._assigned += 1
        return instances[self._assigned % len(instances)]

    def _refuse(self, pending: Pending, error: ServerError) -> None:
        """Fail a request the batcher will not run (nv_inference_request_failure{reason="OTHER"})."""
        self.pool.stats.record_request(False, total_ns=0, reason="OTHER")
        pending.fail(error)

    # ---- batching ------------------------------------------------------------------------------
    def _heads(self) -> list[Sequence]:
        """Sequences whose next request can run now, oldest request first."""
        heads = [s for s in self.sequences.values() if s.queue and not s.running]
        heads.sort(key=lambda s: s.queue[0].enqueued_ns)
        return heads

    async def _batch_loop(self) -> None:
        failures = 0
        while True:
            try:
                await self._step()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a bug here must fail requests, not the model
                failed = self._fail_forming(exc)
                log.exception("sequence batcher of model '%s' failed; %d request(s) failed with it",
                              self.model_name, failed)
                failures = 0 if failed else failures + 1
                if failures >= MAX_LOOP_FAILURES:
                    raise

    async def _step(self) -> None:
        """Wait for work, then hand one batch to an instance: the sequences of an idle instance, as soon
        as they fill a batch, their oldest request's queue delay has passed, or no other may come."""
        if not self.pool.idle_count:
            await self.pool.wait_for_idle()  # nothing can start before; arrivals just queue meanwhile
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._evict_idle(now)
        wake_at = self._next_idle_deadline(now)
        for instance, group in self._heads_by_instance().items():
            deadline = group[0].queue[0].deadline or 0.0
            if len(group) < self.max_batch and now < deadline and self._more_may_come(instance):
                wake_at = deadline if wake_at is None else min(wake_at, deadline)
                continue
            if self.pool.try_acquire(lambda idle: idle is instance) is None:
                continue  # busy: its batch finishing sets _ready
            try:
                batch = self._take(group[: self.max_batch])
            except BaseException:
                self.pool.release(instance)
                raise
            self._forming = []
            if not batch:
                self.pool.release(instance)
                return
            self._spawn(self._run(batch, instance))
            return
        self._ready.clear()
        await self._wait(wake_at)

    def _heads_by_instance(self) -> dict[Instance, list[Sequence]]:
        """The runnable sequences of each instance, oldest request first; instances in the order of their
        oldest request."""
        groups: dict[Instance, list[Sequence]] = {}
        for sequence in self._heads():
            groups.setdefault(sequence.instance, []).append(sequence)
        return groups

    def _fail_forming(self, exc: BaseException) -> int:
        """Fail the requests the failed step had taken (each exactly once) and forget their sequences,
        whose state is now unknown; returns how many."""
        error = as_server_error(exc)
        forming, self._forming = [p for p in self._forming if not p.channel.closed], []
        for pending in forming:
            pending.fail(error)
            self._forget(pending.request.sequence.id)
        return len(forming)

    def _forget(self, sequence_id: SequenceId) -> None:
        """Drop a sequence and fail whatever it still has queued (its later steps cannot run without it)."""
        sequence = self.sequences.pop(sequence_id, None)
        if sequence is None:
            return
        error = ServerError(f"sequence {sequence_id} of model '{self.model_name}' failed on an earlier request",
                            ErrorCode.INTERNAL)
        while sequence.queue:
            sequence.queue.popleft().fail(error)

    def _loop_ended(self, task: asyncio.Task) -> None:
        """The loop only ends by cancellation (unload) or by giving up: then the model is not ready."""
        if task.cancelled():
            return
        exc = task.exception()
        self.failure = f"its sequence batcher stopped ({type(exc).__name__}: {exc})"
        log.error("model '%s' is not ready: %s", self.model_name, self.failure)
        error = unavailable(f"model '{self.model_name}' is not ready: {self.failure}")
        for sequence in self.sequences.values():
            while sequence.queue:
                sequence.queue.popleft().fail(error)
        self.sequences.clear()

    def _more_may_come(self, instance: Instance) -> bool:
        """Waiting for the queue delay only helps while other live sequences of the instance might send."""
        return any(s.instance is instance and not s.queue and not s.running for s in self.sequences.values())

    async def _wait(self, deadline: Optional[float]) -> None:
        loop = asyncio.get_running_loop()
        try:
            timeout = None if deadline is None else max(0.0, deadline - loop.time())
            await asyncio.wait_for(self._ready.wait(), timeout=timeout)
        except asyncio.TimeoutError:
            pass

    def _take(self, heads: list[Sequence]) -> list[Pending]:
        batch = []
        self._forming = []  # every request taken off a queue, so that a failure here fails them all
        for sequence in heads:
            pending = sequence.queue.popleft()
            self._forming.append(pending)
            if pending.request.cancelled():
                self.pool.stats.record_request(False, total_ns=0, reason="CANCELED")
                pending.fail(ServerError("request cancelled", ErrorCode.CANCELLED))
                continue
            try:
                self._prepare(sequence, pending)
            except Exception as exc:  # noqa: BLE001 - this request fails alone, the batch goes on
                log.warning("model '%s': request for sequence %r failed before execution: %s: %s",
                            self.model_name, sequence.id, type(exc).__name__, exc)
                self._refuse(pending, invalid_argument(
                    f"inference request for sequence {sequence.id!r} to model '{self.model_name}' cannot be "
                    f"prepared: {type(exc).__name__}: {exc}") if isinstance(exc, (OverflowError, ValueError,
                                                                                   TypeError))
                    else as_server_error(exc))
                self._forget(sequence.id)
                continue
            sequence.running = True
            batch.append(pending)
        return batch

    def _prepare(self, sequence: Sequence, pending: Pending) -> None:
        request = pending.request
        request.inputs = list(request.inputs) + ss.control_tensors(self.controls, request, self.batched)
        for spec in self.states:
            if request.sequence.start or spec.input_name not in sequence.states:
                sequence.states[spec.input_name] = ss.initial_state(spec)
            value = sequence.states[spec.input_name]
            request.inputs.append(Tensor(spec.input_name, spec.datatype, value[None] if self.batched else value))
        if self.states:
            pending.on_result = lambda p, result, seq=sequence: self._keep_states(seq, result)

    def _keep_states(self, sequence: Sequence, result: Delivery) -> Delivery:
        if not isinstance(result, InferResponse):
            return result
        names = {spec.output_name: spec for spec in self.states}
        kept = []
        for tensor in result.outputs:
            spec = names.get(tensor.name)
            if spec is None:
                kept.append(tensor)
            else:
                sequence.states[spec.input_name] = tensor.data[0] if self.batched else tensor.data
        result.outputs = kept
        return result

    async def _run(self, batch: list[Pending], instance) -> None:
        try:
            await self.pool.run(batch, instance)
        finally:
            for pending in batch:
                sequence = self.sequences.get(pending.request.sequence.id)
                if sequence is None:
                    continue
                sequence.running = False
                if sequence.ended and not sequence.queue:
                    del self.sequences[sequence.id]
                    if not self.sequences:
                        self.trimmer.request()
            self._ready.set()
            self._batch_done.set()

    # ---- idle sequences ------------------------------------------------------------------------
    def _evict_idle(self, now: float) -> None:
        evicted = False
        for sequence in list(self.sequences.values()):
            if not sequence.queue and not sequence.running and now - sequence.last_seen > self.idle_s:
                del self.sequences[sequence.id]
                evicted = True
        if evicted and not self.sequences:
            self.trimmer.request()

    def _next_idle_deadline(self, now: float) -> Optional[float]:
        idle = [s.last_seen + self.idle_s for s in self.sequences.values() if not s.queue and not s.running]
        return min(idle) + 1e-3 if idle else None

    def _fail_queued(self, error: ServerError) -> None:
        for sequence in self.sequences.values():
            while sequence.queue:
                sequence.queue.popleft().fail(error)
        self.sequences.clear()
        if self._loop_task is not None:
            self._loop_task.cancel()

    async def _drain(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while self.queued and loop.time() < end:
            self._batch_done.clear()
            self._ready.set()
            try:
                await asyncio.wait_for(self._batch_done.wait(), timeout=max(0.0, end - loop.time()))
            except asyncio.TimeoutError:
                break
        await super()._drain(max(0.0, end - loop.time()))
