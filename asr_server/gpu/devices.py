"""The GPUs this server sees, and Triton's GPU metrics for them, without making GPUs a dependency.

Detection is cheap on machines without an NVIDIA driver (no /proc/driver/nvidia/gpus: no GPU, nothing
imported). With a driver, NVML (`pynvml`, from nvidia-ml-py) is preferred since it needs no CUDA context;
else torch's CUDA runtime. CUDA_VISIBLE_DEVICES is honoured either way (device ids are 0..n-1 of the visible
ones, as CUDA numbers them). Metrics (`nv_gpu_utilization`, `nv_gpu_memory_total_bytes`,
`nv_gpu_memory_used_bytes`, labelled by `gpu_uuid` as Triton labels them) need NVML for utilisation; without
NVML only memory is reported, and only once torch has initialised CUDA in this process (reading it would
otherwise create a CUDA context of ~300 MB per GPU just for a metric).
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any, Optional

NVIDIA_PROC = Path("/proc/driver/nvidia/gpus")  # one folder per GPU when the NVIDIA driver is loaded


def _nvml() -> Optional[Any]:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # not installed, or no driver / library: NVML is optional
        return None


def _visible_indices(physical: int) -> list[int]:
    """Physical NVML indices of the devices CUDA exposes (CUDA_VISIBLE_DEVICES given as indices)."""
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return list(range(physical))
    indices = []
    for item in spec.split(","):
        item = item.strip()
        if not item.isdigit() or int(item) >= physical:
            break  # CUDA stops at the first invalid entry; UUID forms are not mapped here
        indices.append(int(item))
    return indices


@functools.lru_cache(maxsize=1)
def visible_gpus() -> tuple[int, ...]:
    """CUDA device ids this process may use: () on a machine without NVIDIA GPUs."""
    if not NVIDIA_PROC.is_dir() or not any(NVIDIA_PROC.iterdir()):
        return ()
    nvml = _nvml()
    if nvml is not None:
        return tuple(range(len(_visible_indices(nvml.nvmlDeviceGetCount()))))
    try:
        import torch
    except ImportError:
        return ()
    return tuple(range(torch.cuda.device_count())) if torch.cuda.is_available() else ()


def describe_gpus() -> list[str]:
    """One line per visible GPU for the start-up log: 'GPU 0: <name>, <memory> MiB'."""
    gpus = visible_gpus()
    nvml = _nvml() if gpus else None
    lines = []
    for device in gpus:
        if nvml is not None:
            handle = nvml.nvmlDeviceGetHandleByIndex(_visible_indices(nvml.nvmlDeviceGetCount())[device])
            name = nvml.nvmlDeviceGetName(handle)
            total = nvml.nvmlDeviceGetMemoryInfo(handle).total
        else:
            import torch

            properties = torch.cuda.get_device_properties(device)
            name, total = properties.name, properties.total_memory
        lines.append(f"GPU {device}: {name.decode() if isinstance(name, bytes) else name}, {total >> 20} MiB")
    return lines


def gpu_metric_lines() -> list[str]:
    """Prometheus lines for Triton's GPU gauges; [] when no GPU or nothing can be read cheaply."""
    gpus = visible_gpus()
    if not gpus:
        return []
    rows: dict[str, list[str]] = {"nv_gpu_utilization": [], "nv_gpu_memory_total_bytes": [],
                                  "nv_gpu_memory_used_bytes": []}
    nvml = _nvml()
    if nvml is not None:
        physical = _visible_indices(nvml.nvmlDeviceGetCount())
        for device in gpus:
            handle = nvml.nvmlDeviceGetHandleByIndex(physical[device])
            uuid = nvml.nvmlDeviceGetUUID(handle)
            label = f'{{gpu_uuid="{uuid.decode() if isinstance(uuid, bytes) else uuid}"}}'
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            rows["nv_gpu_utilization"].append(
                f"nv_gpu_utilization{label} {nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0}")
            rows["nv_gpu_memory_total_bytes"].append(f"nv_gpu_memory_total_bytes{label} {memory.total}")
            rows["nv_gpu_memory_used_bytes"].append(f"nv_gpu_memory_used_bytes{label} {memory.used}")
    else:
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_initialized():
            return []
        for device in gpus:
            free, total = torch.cuda.mem_get_info(device)
            label = f'{{gpu_uuid="{_torch_uuid(torch, device)}"}}'
            rows["nv_gpu_memory_total_bytes"].append(f"nv_gpu_memory_total_bytes{label} {total}")
            rows["nv_gpu_memory_used_bytes"].append(f"nv_gpu_memory_used_bytes{label} {total - free}")
    helps = {"nv_gpu_utilization": "GPU utilization rate [0.0 - 1.0)",
             "nv_gpu_memory_total_bytes": "GPU total memory, in bytes",
             "nv_gpu_memory_used_bytes": "GPU used memory, in bytes"}
    lines = []
    for name, values in rows.items():
        if values:
            lines += [f"# HELP {name} {helps[name]}", f"# TYPE {name} gauge", *values]
    return lines


def _torch_uuid(torch: Any, device: int) -> str:
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    return f"GPU-{uuid}" if uuid is not None else f"GPU-{device}"
