"""Triton's sequence batcher: requests of one sequence run in order; requests of different sequences
share a batch.

- Every request of a sequence runs on the instance its START was assigned to (`sequence_table`).
- A sequence starts with START and a non-zero id, and ends with END or after the idle time without a
  request (its state is then freed).
- Control inputs (START/END/READY/CORRID) and implicit state are added to each request on its way to the
  backend, and the state outputs taken from its response (`sequence_state`).
- Batches: for each idle instance, the next request of each of its runnable sequences, oldest first, up to
  max_batch_size. A batch leaves when it is full, when its oldest request has waited the queue delay, or at
  once when no other live sequence of that instance could still send. `sequence_options` lists the Triton
  settings this does not honour (preferred sizes, candidate limits, direct's slots).

No task polls: the sequences are examined (`_pump`) on the loop's next turn after a request arrives or a
batch finishes, and when a timer set for the next deadline (queue delay or idle time) fires. Deadlines use
`clock` (the loop's monotonic clock unless a test injects one; after moving an injected clock a test calls
`poke()`, which examines them at once).
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Callable, Optional

from asr_server.errors import ErrorCode, ServerError, as_server_error, invalid_argument, unavailable
from asr_server.heap import HeapTrimmer
from asr_server.messages import SequenceId
from asr_server.scheduling.base import Scheduler
from asr_server.scheduling.instances import Instance, InstancePool
from asr_server.scheduling.pending import Pending
from asr_server.scheduling.sequence_options import SequenceOptions
from asr_server.scheduling.sequence_state import SharedControlTensors, add_sequence_inputs, keep_states
from asr_server.scheduling.sequence_table import Sequence, SequenceTable

log = logging.getLogger(__name__)

Clock = Callable[[], float]  # seconds, monotonic

# Consecutive failures of the batching step that free no request before it gives up and the model is
# reported not ready (a step that fails without making progress would otherwise retry for ever).
MAX_LOOP_FAILURES = 3


class SequenceBatcher(Scheduler):
    def __init__(self, pool: InstancePool, options: SequenceOptions, clock: Optional[Clock] = None) -> None:
        super().__init__(pool)
        self.options = options
        self._controls = SharedControlTensors(options.controls, options.batched)
        self._clock_override = clock
        self.table = SequenceTable(options.model, pool.instances)
        self._forming: list[Pending] = []  # taken from their queues, not yet handed to an instance
        self._failures = 0  # consecutive failed steps that freed no request
        self.failure: Optional[str] = None  # set when batching could not go on (the model is then not ready)
        self._stopped = False  # unloaded: nothing is batched any more
        self._pump_soon: Optional[asyncio.Handle] = None
        self._timer: Optional[asyncio.TimerHandle] = None
        self._timer_at = math.inf
        self._changed: Optional[asyncio.Event] = None  # set whenever a batch finishes (for draining)
        self.trimmer = HeapTrimmer()  # gives freed sequence state back to the system once all are gone

    # ---- public -------------------------------------------------------------------------------
    @property
    def sequences(self) -> dict[SequenceId, Sequence]:
        """The live sequences by id."""
        return self.table.live

    @property
    def live_sequences(self) -> int:
        return len(self.table.live)

    @property
    def healthy(self) -> bool:
        return self.failure is None

    @property
    def queued(self) -> int:
        return self.table.queued

    def clock(self) -> float:
        return self._clock_override() if self._clock_override is not None else asyncio.get_running_loop().time()

    def poke(self) -> None:
        """Examine the sequences now (after an injected clock moved, or a test changed the options)."""
        self._pump()

    # ---- admission -----------------------------------------------------------------------------
    def _submit(self, pending: Pending) -> None:
        control = pending.request.sequence
        model = self.options.model
        if self.failure is not None:
            self._refuse(pending, unavailable(f"model '{model}' is not ready: {self.failure}"))
            return
        if pending.batch_size != 1:
            # Each row would be its own sequence step; Triton refuses rather than run only the first.
            self._refuse(pending, invalid_argument(
                f"inference request to model '{model}' must specify batch-size 1 due to requirements "
                "of sequence batcher"))
            return
        if not control.active:
            self._refuse(pending, invalid_argument(
                f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID"))
            return
        now = self.clock()
        try:
            sequence = self.table.admit(control, now, self.options.max_sequences)
        except ServerError as error:
            self._refuse(pending, error)
            return
        pending.deadline = now + self.options.max_delay_s
        sequence.queue.append(pending)
        if not self._armed_for(sequence, pending.deadline):
            self._schedule_pump()

    def _armed_for(self, sequence: Sequence, deadline: float) -> bool:
        """Whether a request just queued on `sequence` can wait for the wake-up already armed: under paced load
        requests arrive one by one, and examining the sequences for each (a pump per arrival) cost about as
        much as converting the request. True only when no batch can have become due with it: it is not a new
        head (its sequence runs or has an earlier request queued: the step that finishes those examines it),
        or it is one but fewer sequences may be runnable than fill a batch, another sequence of its instance
        may still send, and the armed timer fires by its deadline."""
        if sequence.running or len(sequence.queue) > 1:
            return True
        return (self._timer is not None and self._timer_at <= deadline
                and not self.table.may_fill(self.options.max_batch_size)
                and self.table.more_may_come(sequence.instance))

    def _refuse(self, pending: Pending, error: ServerError) -> None:
        """Fail a request the batcher will not run (nv_inference_request_failure{reason="OTHER"})."""
        self.pool.stats.record_request(False, total_ns=0, reason="OTHER")
        pending.fail(error)

    # ---- the scheduling step --------------------------------------------------------------------
    def _schedule_pump(self) -> None:
        # On the loop's next turn, not now: requests that arrive together (one read of a gRPC stream, the
        # steps an ensemble fans out) are then seen by one pump and can share a batch.
        if self._pump_soon is None:
            self._pump_soon = asyncio.get_running_loop().call_soon(self._pump)

    def _pump(self) -> None:
        """Hand batches to idle instances while one is due, then arm the timer for the next deadline.
        Runs on the loop thread, never blocks. A failure fails the requests it had taken (not the model):
        only MAX_LOOP_FAILURES failures in a row that free no request stop the batcher."""
        if self._pump_soon is not None:
            self._pump_soon.cancel()
            self._pump_soon = None
        if self._stopped or self.failure is not None:
            return
        try:
            while self.pool.idle_count and self._step():
                pass
            self._failures = 0
        except Exception as exc:  # noqa: BLE001 - a bug here must fail requests, not the model
            failed = self._fail_forming(exc)
            log.exception("sequence batcher of model '%s' failed; %d request(s) failed with it",
                          self.options.model, failed)
            self._failures = 0 if failed else self._failures + 1
            if self._failures >= MAX_LOOP_FAILURES:
                self._give_up(exc)
            else:
                self._schedule_pump()  # try again: the failed step may have been the only one due

    def _step(self) -> bool:
        """Start one batch on an idle instance: the runnable sequences of that instance, as soon as they fill
        a batch, their oldest request's queue delay has passed, or no other may come. Returns False (after
        arming the timer) when no batch is due."""
        now = self.clock()
        options = self.options
        if self.table.evict_idle(now, options.idle_s) and not self.table.live:
            self.trimmer.request()
        wake_at = self.table.next_idle_deadline(options.idle_s)
        for instance, group in self.table.heads_by_instance().items():
            deadline = group[0].queue[0].deadline or 0.0
            if len(group) < options.max_batch_size and now < deadline and self.table.more_may_come(instance):
                wake_at = min(wake_at, deadline)
                continue
            if self.pool.try_acquire(lambda idle: idle is instance) is None:
                continue  # busy: its batch finishing pumps again
            self._start(group[: options.max_batch_size], instance)
            return True
        self._arm(wake_at, now)
        return False

    def _start(self, heads: list[Sequence], instance: Instance) -> None:
        """Take the next request of each of `heads` and run them on `instance` (acquired)."""
        try:
            batch = self._take(heads)
        except BaseException:
            self.pool.release(instance)
            raise
        if not batch:
            self._forming = []
            self.pool.release(instance)
            return
        done = asyncio.get_running_loop().create_future()
        self._track(done)
        done.add_done_callback(lambda _done: self._finished(batch))
        try:
            self.pool.dispatch(batch, instance, done)
        except BaseException:
            if not done.done():  # never leave draining waiting for a batch that did not start
                done.set_result(None)
            raise  # `_pump` fails what `_forming` still holds
        self._forming = []

    def _take(self, heads: list[Sequence]) -> list[Pending]:
        batch = []
        self._forming = []  # every request taken off a queue, so that a failure here fails them all
        for sequence in heads:
            pending = self.table.take(sequence)
            self._forming.append(pending)
            if pending.request.cancelled():
                self.pool.stats.record_request(False, total_ns=0, reason="CANCELED")
                pending.fail(ServerError("request cancelled", ErrorCode.CANCELLED))
                continue
            try:
                self._prepare(sequence, pending)
            except Exception as exc:  # noqa: BLE001 - this request fails alone, the batch goes on
                log.warning("model '%s': request for sequence %r failed before execution: %s: %s",
                            self.options.model, sequence.id, type(exc).__name__, exc)
                self._refuse(pending, invalid_argument(
                    f"inference request for sequence {sequence.id!r} to model '{self.options.model}' cannot be "
                    f"prepared: {type(exc).__name__}: {exc}") if isinstance(exc, (OverflowError, ValueError,
                                                                                   TypeError))
                    else as_server_error(exc))
                self._forget(sequence.id)
                continue
            sequence.running = True
            batch.append(pending)
        return batch

    def _prepare(self, sequence: Sequence, pending: Pending) -> None:
        options = self.options
        add_sequence_inputs(pending.request, sequence.states, self._controls, options.states, options.batched)
        if options.states:
            # Runs in the instance thread, before the response is delivered: the next step of this sequence
            # cannot be taken before (it waits for `running` to clear on the loop).
            pending.on_result = lambda _pending, result: keep_states(result, sequence.states, options.states,
                                                                     options.batched)

    def _finished(self, batch: list[Pending]) -> None:
        """On the loop, once every response of `batch` is delivered and its instance is free."""
        freed = False
        for pending in batch:
            freed = self.table.finished(pending.request.sequence.id) or freed
        if freed and not self.table.live:
            self.trimmer.request()
        if self._changed is not None:
            self._changed.set()
        self._schedule_pump()

    def _arm(self, when: float, now: float) -> None:
        """Make sure the sequences are examined again at `when` (clock time)."""
        if self._timer is not None and self._timer_at <= when:
            return  # an earlier wake-up is armed; it re-arms for this one
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, math.inf
        if when < math.inf:
            self._timer_at = when
            self._timer = asyncio.get_running_loop().call_later(max(0.0, when - now), self._on_timer)

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, math.inf
        self._pump()

    # ---- failures ------------------------------------------------------------------------------
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
        sequence = self.table.pop(sequence_id)
        if sequence is None:
            return
        error = ServerError(f"sequence {sequence_id} of model '{self.options.model}' failed on an earlier "
                            "request", ErrorCode.INTERNAL)
        while sequence.queue:
            sequence.queue.popleft().fail(error)

    def _give_up(self, exc: BaseException) -> None:
        """Batching cannot go on: the model is reported not ready and every queued request fails."""
        self.failure = f"its sequence batcher stopped ({type(exc).__name__}: {exc})"
        log.error("model '%s' is not ready: %s", self.options.model, self.failure)
        self._fail_all(unavailable(f"model '{self.options.model}' is not ready: {self.failure}"))

    def _fail_all(self, error: ServerError) -> None:
        for sequence in self.table.clear():
            while sequence.queue:
                sequence.queue.popleft().fail(error)
        # Nothing is left to wait for: drop the pending wake-ups, which would otherwise keep this batcher (and
        # an unloaded model) alive until the next idle deadline. (_arm keeps an earlier timer, so it cannot.)
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, math.inf
        if self._pump_soon is not None:
            self._pump_soon.cancel()
            self._pump_soon = None

    # ---- shutdown -----------------------------------------------------------------------------
    def _fail_queued(self, error: ServerError) -> None:
        self._stopped = True
        self._fail_all(error)

    async def _drain(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        self._changed = asyncio.Event()
        while self.queued and loop.time() < end:
            self._changed.clear()
            self._pump()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=max(0.0, end - loop.time()))
            except asyncio.TimeoutError:
                break
        await super()._drain(max(0.0, end - loop.time()))
