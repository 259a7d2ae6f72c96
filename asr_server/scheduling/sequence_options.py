"""What the sequence batcher takes from a model's `sequence_batching` config, read once at load.

The batcher sees only `SequenceOptions`, never the protobuf. Triton fields the batcher does not honour
(and never did; each would change how streams are batched):
- `oldest.preferred_batch_size`: a group of runnable sequences that reaches a preferred size still waits
  for the rest of its instance's live sequences or for the queue delay;
- `oldest.max_candidate_sequences` and direct's batch slots (`minimum_slot_utilization`): there is no
  backlog; every live sequence is a candidate and `max_sequences` is the only cap;
- `direct` is batched like `oldest` (with direct's queue delay): sequences are not pinned to batch slots.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from asr_server.errors import invalid_argument
from asr_server.scheduling.sequence_state import ControlInput, StateSpec, control_inputs, state_specs

DEFAULT_IDLE_US = 1_000_000  # Triton's default max_sequence_idle_microseconds
DEFAULT_MAX_SEQUENCES = 100_000  # live sequences before new ones are refused (a memory bound)
MAX_SEQUENCES_PARAMETER = "max_sequences"  # the model config parameter that lowers the cap


@dataclasses.dataclass(frozen=True)
class SequenceOptions:
    """The sequence batcher's settings, checked in `sequence_options`."""

    model: str  # model name, for error messages
    batched: bool  # max_batch_size > 0: the tensors the batcher adds carry a batch dimension
    max_batch_size: int  # requests (one per sequence) in one batch; 1 when the model does not batch
    strategy: str  # "oldest" or "direct" (Triton's default when the config names neither)
    max_delay_s: float  # the strategy's max_queue_delay_microseconds, in seconds
    idle_s: float  # max_sequence_idle_microseconds in seconds: a sequence silent this long is freed
    max_sequences: int  # live sequences before a new START is refused with RESOURCE_EXHAUSTED
    controls: tuple[ControlInput, ...]  # START/END/READY/CORRID inputs the config declares, in order
    states: tuple[StateSpec, ...]  # implicit state the config declares, initial values loaded


def sequence_options(config: mc.ModelConfig, model_dir: Path,
                     max_sequences: int = DEFAULT_MAX_SEQUENCES) -> SequenceOptions:
    """Options from a (validated) config; repeats the checks the batcher relies on. `model_dir` holds the
    initial-state files (`initial_state/<data_file>`)."""
    batching = config.sequence_batching
    strategy = batching.WhichOneof("strategy_choice") or "direct"
    delay_us = (batching.oldest if strategy == "oldest" else batching.direct).max_queue_delay_microseconds
    if MAX_SEQUENCES_PARAMETER in config.parameters:
        text = config.parameters[MAX_SEQUENCES_PARAMETER].string_value
        if not text.isdigit() or int(text) < 1:
            raise invalid_argument(
                f"parameter '{MAX_SEQUENCES_PARAMETER}' must be a positive integer, got '{text}' for {config.name}")
        max_sequences = int(text)
    if max_sequences < 1:
        raise invalid_argument(f"max_sequences must be at least 1 for {config.name}, got {max_sequences}")
    return SequenceOptions(
        model=config.name,
        batched=config.max_batch_size > 0,
        max_batch_size=max(1, config.max_batch_size),
        strategy=strategy,
        max_delay_s=delay_us / 1e6,
        idle_s=(batching.max_sequence_idle_microseconds or DEFAULT_IDLE_US) / 1e6,
        max_sequences=max_sequences,
        controls=tuple(control_inputs(config)),
        states=tuple(state_specs(config, model_dir)),
    )
