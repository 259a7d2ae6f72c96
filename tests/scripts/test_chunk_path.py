"""bench/chunk_path.py drives our real ModelStreamInfer in process: every chunk of every stream is answered
with the fixed-answer model's transcript, through the sequence batcher, in batches."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.chunk_path import mean_batch, run
from bench.stream_overhead import no_op_repository


def test_every_chunk_of_every_stream_is_answered_rightly_and_batched(tmp_path: Path):
    result = asyncio.run(run(no_op_repository(tmp_path), streams=12, rounds=5, group=4, profile=None))
    assert result["answered"] == 12 * 5 and result["errors"] == 0
    assert result["chunks"] == 12 * 3  # two warm-up rounds are not measured
    assert mean_batch(result["stats"]) > 1.0  # streams that send together share executions
    assert result["cpu_ms_per_chunk"] > 0
