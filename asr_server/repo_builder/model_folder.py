"""What the builder reads from a WeNet model folder and its exported graphs."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Sequence

from asr_server.asr.export.onnx_layout import find_graphs
from asr_server.asr.nn.embedding import subsampling_geometry
from asr_server.asr.units import SymbolTable
from asr_server.repo_builder.pipelines import BuildOptions, build

REQUIRED_FILES = ("units.txt", "train.yaml")


def check_model_folder(model_dir: Path) -> None:
    """ValueError naming what is missing when ``model_dir`` is not a WeNet model folder."""
    missing = [name for name in REQUIRED_FILES if not (model_dir / name).is_file()]
    if missing:
        raise ValueError(f"{model_dir} is not a WeNet model folder: {' and '.join(missing)} missing (a WeNet "
                         "experiment folder holds train.yaml, units.txt and the checkpoint)")
    SymbolTable.load(model_dir / "units.txt")


def model_subsampling(model_dir: Path) -> tuple[int, int]:
    """(subsampling rate, right context) of the model's encoder, from train.yaml's encoder_conf.input_layer
    (WeNet's default conv2d: 4 and 6 when the folder has no train.yaml)."""
    conf_path = model_dir / "train.yaml"
    if not conf_path.exists():
        return subsampling_geometry("conv2d")
    import yaml

    conf = yaml.safe_load(conf_path.read_text()) or {}
    return subsampling_geometry((conf.get("encoder_conf") or {}).get("input_layer", "conv2d"))


def exports_up_to_date(model_dir: Path, onnx_dir: Path) -> bool:
    checkpoint = model_dir / "final.pt"
    graphs = [onnx_dir / f"{name}.onnx" for name in ("encoder", "streaming_encoder", "decoder")]
    return all(g.exists() and g.stat().st_mtime >= checkpoint.stat().st_mtime for g in graphs)


def build_from_graph_folders(model_dir: Path, onnx_dirs: Sequence[Path], out: Path, options: BuildOptions) -> None:
    """``build`` on this project's export folder, or on WeNet's two export_onnx_gpu.py folders (one offline,
    one --streaming), which call both encoders encoder.onnx: the graphs are linked under the names build reads."""
    with tempfile.TemporaryDirectory() as staging:
        for name, path in find_graphs(onnx_dirs).items():
            os.symlink(path.resolve(), Path(staging) / f"{name}.onnx")
        build(model_dir, Path(staging), out, options)
