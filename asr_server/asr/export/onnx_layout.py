"""Where the ONNX graphs of a model are: this project's export folder, or WeNet's own export folders.

WeNet's ``wenet/bin/export_onnx_gpu.py`` writes ``encoder.onnx`` (+ ``encoder_fp16.onnx``) for the offline
encoder, or, with ``--streaming``, for the streaming one, and ``decoder.onnx`` each time; this project's
export writes encoder.onnx, streaming_encoder.onnx and decoder.onnx into one folder. The tensor names, dtypes
and layouts are the same (this project's graphs copy WeNet's), so WeNet's graphs serve as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

GRAPH_NAMES = ("encoder", "streaming_encoder", "decoder")


def _input_names(path: Path) -> list[str]:
    import onnx

    return [v.name for v in onnx.load(str(path), load_external_data=False).graph.input]


def find_graphs(onnx_dirs: Sequence[Path], fp16: bool = False) -> dict[str, Path]:
    """The offline encoder, streaming encoder and decoder graphs among ``onnx_dirs``.

    A folder is either this project's export (encoder.onnx, streaming_encoder.onnx, decoder.onnx) or one of
    WeNet's ``wenet/bin/export_onnx_gpu.py``: it writes ``encoder.onnx`` (+ ``_fp16``) for the offline
    encoder, or with ``--streaming`` for the streaming one, and ``decoder.onnx`` each time, so a WeNet user
    brings two folders. Which encoder a folder holds is read from its inputs (speech / chunk_xs). The tensor
    names, dtypes and layouts of WeNet's graphs are the ones this project's graphs copy, so the graphs are
    used as they are. ``fp16`` picks WeNet's ``*_fp16.onnx`` files.
    """
    graphs: dict[str, Path] = {}
    sfx = "_fp16" if fp16 else ""
    for folder in onnx_dirs:
        folder = Path(folder)
        if (folder / "streaming_encoder.onnx").exists():          # this project's layout
            for name in GRAPH_NAMES:
                if (folder / f"{name}.onnx").exists():
                    graphs.setdefault(name, folder / f"{name}.onnx")
            continue
        encoder = folder / f"encoder{sfx}.onnx"
        if not encoder.exists():
            raise FileNotFoundError(f"{folder}: no encoder{sfx}.onnx (neither this project's export nor "
                                    "WeNet's export_onnx_gpu.py output)")
        names = _input_names(encoder)
        kind = "streaming_encoder" if "chunk_xs" in names else "encoder" if "speech" in names else None
        if kind is None:
            raise ValueError(f"{encoder}: inputs {names} are neither an offline (speech, speech_lengths) nor a "
                             "streaming (chunk_xs, chunk_lens, offset, ...) WeNet encoder")
        if kind in graphs:
            raise ValueError(f"{encoder} and {graphs[kind]} are both {kind} graphs")
        graphs[kind] = encoder
        if (folder / f"decoder{sfx}.onnx").exists():
            graphs.setdefault("decoder", folder / f"decoder{sfx}.onnx")
    missing = [n for n in GRAPH_NAMES if n not in graphs]
    if missing:
        raise ValueError(f"no {', '.join(missing)} graph in {', '.join(str(d) for d in onnx_dirs)}: both "
                         "pipelines need WeNet's offline export and its --streaming export (pass --onnx-dir "
                         "once for each folder)")
    return graphs
