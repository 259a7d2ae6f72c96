"""The server's layering, read from the source: protocol -> core -> repository -> scheduling -> backends.

Two rules (asr_server/repository/__init__.py says why): no layer imports a layer above it, and only the
protocol edge (plus the server process that opens the ports) speaks the wire protocol (service_pb2, grpc).
Triton's `model_config_pb2` is the config type of every layer and may be read anywhere.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "asr_server"
LAYERS = ("protocol", "core", "repository", "scheduling", "backends")  # top to bottom
# Outside protocol/, these open the gRPC server and its credentials; they are the process, not a layer.
WIRE_ALLOWED = ("protocol", "server", "tls")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def absolute(path: Path, node: ast.ImportFrom) -> str:
    """The module an import names, relative ones ("from ..x import y") resolved against the file's package."""
    if node.level == 0:
        return node.module or ""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = absolute(path, node)
            names += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return names


def test_relative_imports_are_resolved() -> None:
    inline = PACKAGE / "asr" / "serving" / "inline_onnx.py"
    assert "asr_server.asr.graph_names" in imports(inline)  # "from ..graph_names import ..."
    assert "asr_server.asr.serving.streaming_scorer" in imports(inline)  # "from .streaming_scorer import ..."


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "asr_server" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in LAYERS else None


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_the_sources_are_found() -> None:
    assert {layer_of(module_name(p)) for p in SOURCES} >= set(LAYERS)


def test_no_layer_imports_a_layer_above_it() -> None:
    upward = {}
    for path in SOURCES:
        mine = layer_of(module_name(path))
        if mine is None:
            continue  # shared modules (messages, errors, dtypes, server_port, ...) and tools sit beside the layers
        found = [name for name in imports(path)
                 if (other := layer_of(name)) is not None and LAYERS.index(other) < LAYERS.index(mine)]
        if found:
            upward[str(path.relative_to(PACKAGE))] = found
    assert not upward


def test_only_the_protocol_edge_speaks_the_wire_protocol() -> None:
    wire = {}
    for path in SOURCES:
        if module_name(path).split(".")[1:2] and module_name(path).split(".")[1] in WIRE_ALLOWED:
            continue
        found = [name for name in imports(path) if "service_pb2" in name or name == "grpc" or name.startswith("grpc.")]
        if found:
            wire[str(path.relative_to(PACKAGE))] = found
    assert not wire


def test_the_recogniser_imports_no_server_layer() -> None:
    found = {str(p.relative_to(PACKAGE)): [n for n in imports(p) if layer_of(n)] for p in (PACKAGE / "asr").rglob("*.py")}
    assert not {path: names for path, names in found.items() if names}
