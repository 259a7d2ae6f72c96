"""ONNX Runtime vs PyTorch: the largest difference per output, collected into a report per graph."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .options import ExportMismatch


@dataclass
class ParityReport:
    """ORT vs torch for one graph."""

    graph: str                                   # file name
    max_abs_diff: float                          # over every float output compared
    tolerance: float
    details: dict[str, float] = field(default_factory=dict)   # output name -> max |diff|
    note: str = ""
    checked: bool = True    # False: ORT could not run the graph here (fp16 kernels missing on CPU)

    @property
    def ok(self) -> bool:
        return not self.checked or (np.isfinite(self.max_abs_diff) and self.max_abs_diff <= self.tolerance)

    def line(self) -> str:
        if not self.checked:
            return f"{self.graph}: NOT CHECKED {self.note}"
        worst = ", ".join(f"{k} {v:.2e}" for k, v in self.details.items())
        status = "OK" if self.ok else "MISMATCH"
        return (f"{self.graph}: {status} max|ort-torch| {self.max_abs_diff:.2e} (tol {self.tolerance:.0e})"
                f"{' [' + worst + ']' if worst else ''}{' ' + self.note if self.note else ''}")


class Diff:
    """Collects max |a - b| per output name."""

    def __init__(self):
        self.worst: dict[str, float] = {}

    def add(self, name: str, ort: np.ndarray, ref: torch.Tensor | np.ndarray) -> None:
        ref = ref.detach().float().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
        ort = np.asarray(ort)
        if ort.shape != ref.shape:
            raise ExportMismatch(f"{name}: ORT shape {ort.shape} != torch {ref.shape}")
        if ort.dtype.kind in "iub":
            d = float(np.abs(ort.astype(np.int64) - ref.astype(np.int64)).max()) if ort.size else 0.0
            d = 0.0 if d == 0 else float("inf")   # integers must match exactly
        else:
            d = float(np.abs(ort.astype(np.float64) - ref.astype(np.float64)).max()) if ort.size else 0.0
            if not np.isfinite(ort).all():
                d = float("inf")
        self.worst[name] = max(self.worst.get(name, 0.0), d)

    def add_topk(self, name: str, values: np.ndarray, idx: np.ndarray, ref_lp: torch.Tensor,
                 ref_values: torch.Tensor) -> None:
        """Top-k indices may swap between near-equal log-probs: check that ORT's indices pick the values
        torch ranks there instead of comparing the indices themselves."""
        self.add(name, values, ref_values)
        picked = torch.gather(ref_lp, 2, torch.from_numpy(np.asarray(idx, dtype=np.int64)))
        self.add(name + "_idx", picked.numpy(), ref_values)

    def report(self, graph: str, tol: float, note: str = "") -> ParityReport:
        return ParityReport(graph, max(self.worst.values(), default=0.0), tol, dict(self.worst), note)


def session(path_or_bytes) -> "ort.InferenceSession":  # noqa: F821
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1   # parity, not speed; leave the cores to whatever else runs
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    src = str(path_or_bytes) if isinstance(path_or_bytes, Path) else path_or_bytes
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()
