"""The openvino backend's config parameters (Triton's openvino backend's names and value checks), read once.

Kept apart from openvino.py so that reading them needs no `openvino` import.
"""

from __future__ import annotations

import os
from typing import Mapping

from asr_server.errors import invalid_argument

# Per instance: a quarter of the CPUs, at most 4 (as the onnxruntime backend), since several instances of
# several models share the CPUs; Triton's default is every core per instance.
DEFAULT_INFERENCE_THREADS = max(1, min(4, (os.cpu_count() or 1) // 4))
_PERFORMANCE_HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")


class OpenVINOOptions:
    """The config parameters of Triton's openvino backend, checked as it checks them."""

    def __init__(self, device: str, properties: dict, static_batch: bool, batch_padding: bool,
                 reshape_io_layers: bool) -> None:
        self.device = device  # OpenVINO device name: CPU unless TARGET_DEVICE says otherwise
        self.properties = properties  # OpenVINO compile properties, keyed by their OpenVINO names
        self.static_batch = static_batch  # SKIP_OV_DYNAMIC_BATCHSIZE: compile batch = max_batch_size
        self.batch_padding = batch_padding  # ENABLE_BATCH_PADDING: pad smaller batches up to it
        self.reshape_io_layers = reshape_io_layers  # RESHAPE_IO_LAYERS: inputs take the config dims

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, str]) -> "OpenVINOOptions":
        properties: dict = {
            "INFERENCE_NUM_THREADS": DEFAULT_INFERENCE_THREADS,
            "NUM_STREAMS": 1,
            # Pinned threads of several instances and models would contend for the same cores.
            "ENABLE_CPU_PINNING": False,
            # OpenVINO's CPU plugin computes in bf16 by default where the CPU has bf16 instructions (AMX,
            # AVX512_BF16), which moved encoder outputs by up to 2e-2; Triton's backend makes bf16 opt-in
            # (HINT_BF16), so f32 is asked for unless it is given.
            "INFERENCE_PRECISION_HINT": "f32",
        }
        for key in ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"):
            if key in parameters:
                properties[key] = _count(key, parameters[key])
        if "NUM_STREAMS" in parameters:
            value = parameters["NUM_STREAMS"].strip().upper()
            if value in ("AUTO", "NUMA"):
                properties["NUM_STREAMS"] = value
            elif value.isdigit():
                properties["NUM_STREAMS"] = int(value)
            else:
                raise invalid_argument(
                    f"expected the parameter 'NUM_STREAMS' to be either AUTO/NUMA/<int_value>, got {value.lower()}"
                )
        if "PERFORMANCE_HINT" in parameters:
            value = parameters["PERFORMANCE_HINT"].strip().upper()
            if value not in _PERFORMANCE_HINTS:
                raise invalid_argument(
                    "expected the parameter 'PERFORMANCE_HINT' to be LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, "
                    f"got {value.lower()}"
                )
            properties["PERFORMANCE_HINT"] = value
        if "HINT_BF16" in parameters:
            if parameters["HINT_BF16"].strip().lower() != "yes":
                raise invalid_argument(
                    f"expected the parameter 'HINT_BF16' to be YES, got {parameters['HINT_BF16'].strip().lower()}"
                )
            properties["INFERENCE_PRECISION_HINT"] = "bf16"
        device = parameters.get("TARGET_DEVICE", "").strip().upper() or "CPU"
        if device != "CPU":
            properties.pop("ENABLE_CPU_PINNING")  # CPU plugin properties
            if properties["INFERENCE_PRECISION_HINT"] == "f32":
                properties.pop("INFERENCE_PRECISION_HINT")
        return cls(
            device=device,
            properties=properties,
            static_batch=_yes(parameters, "SKIP_OV_DYNAMIC_BATCHSIZE"),
            batch_padding=_yes(parameters, "ENABLE_BATCH_PADDING"),
            reshape_io_layers=_yes(parameters, "RESHAPE_IO_LAYERS"),
        )


def _count(key: str, value: str) -> int:
    value = value.strip()
    if not value.isdigit():
        raise invalid_argument(f"expected the parameter '{key}' to be a non-negative number, got {value.lower()}")
    return int(value)


def _yes(parameters: Mapping[str, str], key: str) -> bool:
    return parameters.get(key, "").strip().lower() in ("yes", "true", "1")
