"""scripts/gpu_wheels.py: each wheel set, with the GPU image's packages, holds everything its work imports (a
static walk of the imports from the set's entry points through the project's own modules) and everything those
wheels require."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path
from typing import Optional

import pytest
from packaging.requirements import Requirement

from tests.conftest import ROOT
from tests.helpers.scripts import load_script


# Imported lazily (or guarded) by a module the work reaches, never on its path; each with why.
NOT_ON_THE_PATH = {
    "kaldifeat": "batched fbank on a GPU, optional (asr_server.asr.features.fbank); built from source, not on PyPI",
}
# The image's interpreter, for the environment markers of requirements (extras are not installed).
GPU_PYTHON = {"python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
              "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
              "os_name": "posix", "platform_machine": "x86_64", "extra": ""}
# Optional modules not installed here (no GPU), so their distribution cannot be looked up: the image has them.
NOT_INSTALLED_HERE = {"pynvml": "nvidia-ml-py"}  # NVML, preferred by asr_server.gpu.devices where present


def _third_party_imports(*scripts: Path) -> set[str]:
    """Top-level modules outside the standard library that `scripts` and the project modules they reach import
    (anywhere in them, lazily too), except third-party imports guarded by `except ImportError` (optional ones)."""
    own = {"asr_server", "asr_data", "asr_client", "bench"}

    def module_file(dotted: str) -> Optional[Path]:
        base = ROOT.joinpath(*dotted.split("."))
        return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.exists()), None)

    def optional(tree: ast.AST) -> set[int]:
        guarded = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Try) and any(
                isinstance(caught, ast.Name) and caught.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers
                for caught in (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type])
            ):
                guarded |= {id(n) for statement in node.body for n in ast.walk(statement)}
        return guarded

    found, seen, todo = set(), set(), list(scripts)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        tree = ast.parse(path.read_text())
        guarded = optional(tree)
        package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package, up level - 1
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, *([base] if base else [])])
                names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in own:
                    todo += [f for f in (module_file(".".join(name.split(".")[:i]))
                                         for i in range(1, name.count(".") + 2)) if f]
                elif top and top != "__future__" and top not in sys.stdlib_module_names and id(node) not in guarded:
                    found.add(top)
    return found


@pytest.mark.parametrize("kind, reached", [("relay", {"torch", "kaldi-native-fbank", "soundfile", "soxr"}),
                                           ("check", {"tritonclient", "grpcio", "onnxruntime", "jiwer"})])
def test_the_gpu_image_and_a_wheel_set_hold_everything_its_work_imports(kind, reached):
    """What a set's entry points import is on the GPU image or among the set's wheels, and so is everything those
    wheels require: a module missing there would end a GPU window at its first line."""
    wheels = load_script("gpu_wheels")
    distributions = importlib.metadata.packages_distributions()
    on_image = {_canonical(d) for d in wheels.IMAGE_PACKAGES}
    carried = {_canonical(d) for d in wheels.WHEEL_SETS[kind]}
    needed, missing = set(), []
    for module in _third_party_imports(*(ROOT / path for path in wheels.ENTRY_POINTS[kind])):
        if module in NOT_ON_THE_PATH:
            continue
        dists = {_canonical(d) for d in distributions.get(module, [NOT_INSTALLED_HERE.get(module, module)])}
        needed |= dists
        if not dists & (on_image | carried):  # a namespace (google) is several distributions: one must be there
            missing.append(f"{module} ({', '.join(sorted(dists))})")
    assert reached <= needed  # the walk reaches what the work is about
    assert not missing, missing
    for wheel in carried:
        for text in importlib.metadata.requires(wheel) or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(GPU_PYTHON):
                continue  # an extra, or another Python or platform than the image's
            name = _canonical(requirement.name)
            assert name in on_image | carried, f"{wheel} requires {name}, neither on the image nor carried"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
