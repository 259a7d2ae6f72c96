"""The knobs a search turns, and a candidate configuration built from a model's shipped one.

A `Variant` names values for some knobs; knobs it leaves out keep the shipped value. Batching knobs go where the
model batches: a sequence-batched model's oldest strategy (Triton's dynamic batcher does not apply to it), else
the dynamic batcher (added, as Triton's Model Analyzer does, when the model has none and can batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

INSTANCE_COUNT = "instance_count"  # instances in the model's first instance group
MAX_BATCH_SIZE = "max_batch_size"  # the config's max_batch_size (0: no batching, never set by a search)
PREFERRED_BATCH_SIZE = "preferred_batch_size"  # tuple of sizes for the dynamic batcher or the oldest strategy
MAX_QUEUE_DELAY_US = "max_queue_delay_us"  # max_queue_delay_microseconds (dynamic batcher or oldest strategy)
MAX_CANDIDATE_SEQUENCES = "max_candidate_sequences"  # oldest strategy only
KNOBS = (INSTANCE_COUNT, MAX_BATCH_SIZE, PREFERRED_BATCH_SIZE, MAX_QUEUE_DELAY_US, MAX_CANDIDATE_SEQUENCES)


@dataclass(frozen=True)
class Variant:
    """Knob values for one model; `values` is sorted (knob, value) pairs so a variant hashes and compares."""

    values: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, mapping: Mapping[str, Any]) -> "Variant":
        for knob in mapping:
            if knob not in KNOBS:
                raise ValueError(f"unknown knob '{knob}' (known: {', '.join(KNOBS)})")
        return cls(tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in mapping.items())))

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def describe(self) -> str:
        if not self.values:
            return "shipped"
        return " ".join(f"{k}={'/'.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in self.values)


def is_oldest_sequence(config: mc.ModelConfig) -> bool:
    return config.HasField("sequence_batching") and config.sequence_batching.HasField("oldest")


def is_sequence(config: mc.ModelConfig) -> bool:
    return config.HasField("sequence_batching")


def shipped_value(config: mc.ModelConfig, knob: str) -> Any:
    """The value a knob has in `config` (Triton's default where the config leaves it out)."""
    if knob == INSTANCE_COUNT:
        return config.instance_group[0].count if config.instance_group else 1
    if knob == MAX_BATCH_SIZE:
        return config.max_batch_size
    batcher = _batcher(config)
    if knob == MAX_CANDIDATE_SEQUENCES:
        return batcher.max_candidate_sequences if is_oldest_sequence(config) else None
    if batcher is None:
        return () if knob == PREFERRED_BATCH_SIZE else 0
    if knob == PREFERRED_BATCH_SIZE:
        return tuple(getattr(batcher, "preferred_batch_size", ()))
    return batcher.max_queue_delay_microseconds


def knobs_for(config: mc.ModelConfig) -> tuple[str, ...]:
    """The knobs that mean something for this model."""
    if config.platform == "ensemble":
        return ()
    knobs = [INSTANCE_COUNT]
    if config.max_batch_size > 0:
        knobs += [MAX_BATCH_SIZE, MAX_QUEUE_DELAY_US]
        if not is_sequence(config) or is_oldest_sequence(config):
            knobs.append(PREFERRED_BATCH_SIZE)
        if is_oldest_sequence(config):
            knobs.append(MAX_CANDIDATE_SEQUENCES)
    return tuple(knobs)


def apply_variant(config: mc.ModelConfig, variant: Variant) -> mc.ModelConfig:
    """A copy of `config` with the variant's knobs set; raises ValueError for a knob the model cannot take."""
    out = mc.ModelConfig()
    out.CopyFrom(config)
    allowed = knobs_for(config)
    values = variant.as_dict()
    for knob, value in values.items():
        if knob not in allowed:
            raise ValueError(f"model '{config.name}' has no knob '{knob}' (its knobs: {', '.join(allowed)})")
    if INSTANCE_COUNT in values:
        if not out.instance_group:
            out.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU)
        out.instance_group[0].count = int(values[INSTANCE_COUNT])
    if MAX_BATCH_SIZE in values:
        out.max_batch_size = int(values[MAX_BATCH_SIZE])
    batching = {k: values[k] for k in (PREFERRED_BATCH_SIZE, MAX_QUEUE_DELAY_US, MAX_CANDIDATE_SEQUENCES)
                if k in values}
    if batching:
        batcher = _batcher(out, create=True)
        if PREFERRED_BATCH_SIZE in batching:
            del batcher.preferred_batch_size[:]
            batcher.preferred_batch_size.extend(int(s) for s in batching[PREFERRED_BATCH_SIZE])
        if MAX_QUEUE_DELAY_US in batching:
            batcher.max_queue_delay_microseconds = int(batching[MAX_QUEUE_DELAY_US])
        if MAX_CANDIDATE_SEQUENCES in batching:
            batcher.max_candidate_sequences = int(batching[MAX_CANDIDATE_SEQUENCES])
    # Triton refuses preferred sizes above max_batch_size: a smaller max batch drops them rather than fail.
    batcher = _batcher(out)
    if batcher is not None and hasattr(batcher, "preferred_batch_size") and out.max_batch_size > 0:
        kept = [s for s in batcher.preferred_batch_size if s <= out.max_batch_size]
        del batcher.preferred_batch_size[:]
        batcher.preferred_batch_size.extend(kept)
    return out


def _batcher(config: mc.ModelConfig, create: bool = False):
    """The message holding the batching knobs: oldest strategy, direct strategy or dynamic batcher."""
    if is_sequence(config):
        if config.sequence_batching.HasField("oldest"):
            return config.sequence_batching.oldest
        return config.sequence_batching.direct
    if config.HasField("dynamic_batching") or create:
        return config.dynamic_batching
    return None


def instance_group_text(config: mc.ModelConfig) -> str:
    """Model Analyzer's 'Instance Group' cell: '<count>:<CPU|GPU>' per group."""
    if not config.instance_group:
        return "1:CPU"
    kinds = {mc.ModelInstanceGroup.KIND_GPU: "GPU"}
    return ",".join(f"{g.count or 1}:{kinds.get(g.kind, 'CPU')}" for g in config.instance_group)


def to_pbtxt(config: mc.ModelConfig) -> str:
    return text_format.MessageToString(config)
