"""Every graph of a model into one folder, each checked, with a report line per graph."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..nn.model import U2Model
from .decoder import export_decoder
from .encoders import export_encoder, export_streaming_encoder
from .options import FP16_ATOL, ExportOptions
from .parity import ParityReport
from .sherpa import export_sherpa


@dataclass
class ExportResult:
    files: list[Path]
    reports: list[ParityReport]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.reports)


def export_all(model: U2Model, out_dir: Path, opts: ExportOptions = ExportOptions(), fp16: bool = False,
               sherpa_symbols=None, log=print) -> ExportResult:
    """Write every graph into out_dir (sherpa/ when ``sherpa_symbols`` is given) and check each one."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model.eval()
    res = ExportResult([], [])

    def run(name: str, fn, half: bool = False) -> None:
        try:
            report = fn()
        except Exception as e:  # noqa: BLE001 - only ORT's own errors are tolerated, and only for fp16
            if not (half and type(e).__module__.startswith("onnxruntime")):
                raise
            report = ParityReport(name, float("nan"), FP16_ATOL, note=f"(ONNX Runtime CPU cannot run it: {e})",
                                  checked=False)
        res.files.append(out_dir / name)
        res.reports.append(report)
        log(report.line())

    for half in ([False, True] if fp16 else [False]):
        sfx = "_fp16" if half else ""
        run(f"encoder{sfx}.onnx", lambda: export_encoder(model, out_dir / f"encoder{sfx}.onnx", opts, half), half)
        run(f"streaming_encoder{sfx}.onnx",
            lambda: export_streaming_encoder(model, out_dir / f"streaming_encoder{sfx}.onnx", opts, half), half)
        run(f"decoder{sfx}.onnx", lambda: export_decoder(model, out_dir / f"decoder{sfx}.onnx", opts, fp16=half),
            half)
    if sherpa_symbols is not None:
        run("sherpa/model.onnx", lambda: export_sherpa(model, out_dir / "sherpa", sherpa_symbols, opts))
    return res
