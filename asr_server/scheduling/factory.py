"""Picks the scheduler a model's config asks for: the one place every Scheduler is made."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from tritonclient.grpc import model_config_pb2 as mc

from asr_server.backends.base import Backend
from asr_server.model_stats import ModelStatistics
from asr_server.scheduling.base import DirectScheduler, Scheduler
from asr_server.scheduling.dynamic_batcher import DynamicBatcher
from asr_server.scheduling.ensemble import EnsembleScheduler
from asr_server.scheduling.instances import InstancePool
from asr_server.server_port import ServerPort


def make_scheduler(
    config: mc.ModelConfig,
    model_dir: Path,
    stats: ModelStatistics,
    *,
    pool: Optional[InstancePool] = None,
    backend: Optional[type[Backend]] = None,
    port: Optional[ServerPort] = None,
) -> Scheduler:
    """An ensemble (no instances of its own) takes the server's `port`, through which its steps run; every
    other model takes its instance `pool` and its `backend` class (whose ragged_batching the dynamic
    batcher needs)."""
    choice = config.WhichOneof("scheduling_choice")
    if choice == "ensemble_scheduling":
        return EnsembleScheduler(config, port, stats)
    if pool is None or backend is None:
        raise ValueError(f"model '{config.name}' needs its instance pool and backend class to be scheduled")
    if choice == "sequence_batching":
        from asr_server.scheduling.sequence_batcher import SequenceBatcher
        from asr_server.scheduling.sequence_options import sequence_options

        return SequenceBatcher(pool, sequence_options(config, model_dir))
    if choice == "dynamic_batching" and config.max_batch_size > 0:
        return DynamicBatcher(pool, config, ragged=backend.ragged_batching)
    return DirectScheduler(pool)
