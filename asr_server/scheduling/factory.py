"""Picks the scheduler a model's config asks for."""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from asr_server.backends.base import Backend
from asr_server.scheduling.base import DirectScheduler, Scheduler
from asr_server.scheduling.dynamic_batcher import DynamicBatcher
from asr_server.scheduling.instances import InstancePool


def make_scheduler(
    config: mc.ModelConfig, pool: InstancePool, backend: type[Backend], model_dir: Path
) -> Scheduler:
    choice = config.WhichOneof("scheduling_choice")
    if choice == "sequence_batching":
        from asr_server.scheduling.sequence_batcher import SequenceBatcher
        from asr_server.scheduling.sequence_options import sequence_options

        return SequenceBatcher(pool, sequence_options(config, model_dir))
    if choice == "dynamic_batching" and config.max_batch_size > 0:
        return DynamicBatcher(pool, config, ragged=backend.ragged_batching)
    return DirectScheduler(pool)
