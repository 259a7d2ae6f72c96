"""The dynamic batcher's options: what it takes from `config.dynamic_batching`, read and checked once."""

from __future__ import annotations

import dataclasses

from tritonclient.grpc import model_config_pb2 as mc

from asr_server.errors import invalid_argument


@dataclasses.dataclass(frozen=True)
class QueuePolicy:
    """One priority level's ModelQueuePolicy."""

    reject: bool  # timeout_action REJECT (True) or DELAY (False)
    timeout_s: float  # default_timeout_microseconds in seconds; 0: requests never time out
    allow_override: bool  # a request's own timeout_us may shorten the default (never lengthen it)
    max_queue_size: int  # requests this level may hold; 0: unbounded

    def timeout_for(self, request_timeout_us: int) -> float:
        """Seconds the request may wait in the queue (0: forever)."""
        timeout = self.timeout_s
        if self.allow_override and request_timeout_us > 0:
            own = request_timeout_us / 1e6
            if timeout == 0 or own < timeout:
                timeout = own
        return timeout


@dataclasses.dataclass(frozen=True)
class BatcherOptions:
    """What the batcher takes from `config.dynamic_batching`, checked in `batcher_options`."""

    model: str  # model name, for error messages
    max_batch_size: int  # the model's max_batch_size (>= 1)
    preferred: frozenset[int]  # preferred_batch_size values <= max_batch_size
    max_delay_s: float  # max_queue_delay_microseconds in seconds
    preserve_ordering: bool  # deliver responses in arrival order
    priority_levels: int  # as configured; 0: priorities are ignored
    default_level: int  # 1-based level of requests with priority 0
    policies: tuple[QueuePolicy, ...]  # one per level, index 0 = level 1
    ragged: bool  # the backend takes requests of different non-batch shapes in one batch


def _policy(policy: mc.ModelQueuePolicy) -> QueuePolicy:
    return QueuePolicy(
        reject=policy.timeout_action == mc.ModelQueuePolicy.REJECT,
        timeout_s=policy.default_timeout_microseconds / 1e6,
        allow_override=policy.allow_timeout_override,
        max_queue_size=max(0, int(policy.max_queue_size)),
    )


def batcher_options(config: mc.ModelConfig, ragged: bool = False) -> BatcherOptions:
    """Options from a (validated) config; repeats the checks the batcher relies on."""
    batching = config.dynamic_batching
    max_batch_size = max(1, config.max_batch_size)
    levels = int(batching.priority_levels)
    default_level = int(batching.default_priority_level) if levels else 1
    if levels and not 1 <= default_level <= levels:
        raise invalid_argument(f"default priority level must be in range [1, {levels}] for {config.name}")
    default_policy = _policy(batching.default_queue_policy)
    policies = tuple(
        _policy(batching.priority_queue_policy[level]) if level in batching.priority_queue_policy else default_policy
        for level in range(1, max(1, levels) + 1)
    )
    return BatcherOptions(
        model=config.name,
        max_batch_size=max_batch_size,
        preferred=frozenset(s for s in batching.preferred_batch_size if 0 < s <= max_batch_size),
        max_delay_s=batching.max_queue_delay_microseconds / 1e6,
        preserve_ordering=batching.preserve_ordering,
        priority_levels=levels,
        default_level=default_level,
        policies=policies,
        ragged=ragged,
    )
