"""metrics-model-inference.csv as Triton's Model Analyzer writes it.

Its default inference columns, in its order and with its header names (model_analyzer
config_defaults.DEFAULT_INFERENCE_OUTPUT_FIELDS and the record types' headers), "Request Rate" in place of
"Concurrency" when the load is a request rate, then columns it offers as options ("Avg Latency (ms)",
"p95 Latency (ms)", "RAM Usage (MB)") and two of ours at the end ("Final p99 Latency (ms)" for paced streams,
"Load Generator"). Cells holding several values (an ensemble's steps) are comma-joined and quoted, as there.
Rows are sorted best first.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

MODEL_ANALYZER_COLUMNS = ("Model", "Batch", "Concurrency", "Model Config Path", "Instance Group", "Max Batch Size",
                          "Satisfies Constraints", "Throughput (infer/sec)", "p99 Latency (ms)")
OPTIONAL_COLUMNS = ("Avg Latency (ms)", "p95 Latency (ms)", "RAM Usage (MB)")
OUR_COLUMNS = ("Final p99 Latency (ms)", "Load Generator")
FILENAME = "metrics-model-inference.csv"


@dataclass(frozen=True)
class Row:
    model: str
    batch: int
    load: str  # the concurrency (or paced stream count), or the request rate
    config_path: str  # "<model>_config_<n>", or "<ensemble>_config_<n>: <step>_config_<k>, ..."
    instance_group: str  # "1:CPU" or, for an ensemble, one per step
    max_batch_size: str
    satisfies: bool
    throughput: float
    p99_ms: float
    avg_ms: Optional[float]
    p95_ms: Optional[float]
    memory_mb: Optional[float]
    final_p99_ms: Optional[float]
    generator: str


def _num(x: Optional[float]) -> str:
    if x is None or x != x or x in (float("inf"), float("-inf")):
        return ""
    return f"{x:.1f}"


def write_csv(rows: Sequence[Row], path: Path, request_rate: bool = False) -> Path:
    header = list(MODEL_ANALYZER_COLUMNS)
    if request_rate:
        header[2] = "Request Rate"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header + list(OPTIONAL_COLUMNS) + list(OUR_COLUMNS))
        for r in rows:
            writer.writerow([r.model, r.batch, r.load, r.config_path, r.instance_group, r.max_batch_size,
                             "Yes" if r.satisfies else "No", _num(r.throughput), _num(r.p99_ms),
                             _num(r.avg_ms), _num(r.p95_ms), _num(r.memory_mb), _num(r.final_p99_ms), r.generator])
    return path
