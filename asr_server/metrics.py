"""Prometheus metrics with Triton's names (nv_inference_*), served on the metrics port.

Written as text exposition by hand, deliberately: prometheus_client renames every counter family to
`<name>_total`, and dashboards built for Triton query `nv_inference_count`, not `nv_inference_count_total`.
The values come from the same per-model statistics that ModelStatistics reports.
"""

from __future__ import annotations

import os
from typing import Iterable

from asr_server.gpu import devices as gpu_devices
from asr_server.repository.manager import ModelManager

_COUNTERS = (
    ("nv_inference_request_success", "Number of successful inference requests, all batch sizes"),
    ("nv_inference_request_failure", "Number of failed inference requests, all batch sizes"),
    ("nv_inference_count", "Number of inferences performed (does not include cached requests)"),
    ("nv_inference_exec_count", "Number of model executions performed (does not include cached requests)"),
    ("nv_inference_request_duration_us", "Cumulative inference request duration in microseconds"),
    ("nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds"),
    ("nv_inference_compute_input_duration_us", "Cumulative compute input duration in microseconds"),
    ("nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds"),
    ("nv_inference_compute_output_duration_us", "Cumulative inference compute output duration in microseconds"),
)
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


MAX_LABEL_CHARS = 256  # a label value a client chose (a model name) is cut to this many characters


def _label_value(value: object) -> str:
    """A label value in Prometheus' text format: backslash, double quote and newline escaped, so that a model
    name cannot close the label and forge a series or break the scrape; cut to MAX_LABEL_CHARS."""
    text = str(value)[:MAX_LABEL_CHARS]
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(labels.items())) + "}"


def _memory() -> tuple[int, int]:
    """(total, used) bytes of system memory, from /proc/meminfo."""
    info = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, value = line.split(":", 1)
                info[key] = int(value.split()[0]) * 1024
    except OSError:
        return 0, 0
    total = info.get("MemTotal", 0)
    return total, total - info.get("MemAvailable", total)


def _cpu_utilization() -> float:
    try:
        return min(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    except OSError:
        return 0.0


def render(manager: ModelManager) -> str:
    rows: dict[str, list[str]] = {name: [] for name, _ in _COUNTERS}
    pending: list[str] = []
    live: list[str] = []
    for entry in manager.models.values():
        for version in entry.versions.values():
            s = version.stats.snapshot()
            base = {"model": version.name, "version": str(version.version)}
            label = _labels(**base)
            rows["nv_inference_request_success"].append(f"nv_inference_request_success{label} {s.success.count}")
            for reason in FAILURE_REASONS:
                rows["nv_inference_request_failure"].append(
                    f"nv_inference_request_failure{_labels(**base, reason=reason)} {s.failures_by_reason.get(reason, 0)}"
                )
            rows["nv_inference_count"].append(f"nv_inference_count{label} {s.inference_count}")
            rows["nv_inference_exec_count"].append(f"nv_inference_exec_count{label} {s.execution_count}")
            for metric, duration in (
                ("nv_inference_request_duration_us", s.success.ns + s.fail.ns),
                ("nv_inference_queue_duration_us", s.queue.ns),
                ("nv_inference_compute_input_duration_us", s.compute_input.ns),
                ("nv_inference_compute_infer_duration_us", s.compute_infer.ns),
                ("nv_inference_compute_output_duration_us", s.compute_output.ns),
            ):
                rows[metric].append(f"{metric}{label} {duration // 1000}")
            pending.append(f"nv_inference_pending_request_count{label} {version.scheduler.queued}")
            sequences = version.scheduler.live_sequences
            if sequences is not None:
                live.append(f"asr_server_live_sequences{label} {sequences}")
    lines: list[str] = []
    for name, help_text in _COUNTERS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter", *rows[name]]
    lines += ["# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting "
              "execution per-model.", "# TYPE nv_inference_pending_request_count gauge", *pending]
    # Not a Triton metric (hence no nv_ prefix): sequences holding state, to see abandoned ones freed.
    lines += ["# HELP asr_server_live_sequences Sequences started and not yet ended or evicted as idle, "
              "per sequence-batched model.", "# TYPE asr_server_live_sequences gauge", *live]
    total, used = _memory()
    lines += _gauge("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", [_cpu_utilization()])
    lines += _gauge("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", [total])
    lines += _gauge("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", [used])
    lines += gpu_devices.gpu_metric_lines()  # nothing without a GPU
    return "\n".join(lines) + "\n"


def _gauge(name: str, help_text: str, values: Iterable[float]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *(f"{name} {v}" for v in values)]
