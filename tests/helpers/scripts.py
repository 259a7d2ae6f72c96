"""The command-line scripts under scripts/ as modules, for tests of their functions (scripts/ is not a package)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.conftest import ROOT


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py imported under its own name (a fresh module each call)."""
    spec = importlib.util.spec_from_file_location(f"script_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look their module up by name
    spec.loader.exec_module(module)
    return module
