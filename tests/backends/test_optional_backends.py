"""Backends whose framework is an optional extra: without it, a model on them fails to load with the reason."""

from __future__ import annotations

import sys

import pytest

from asr_server.backends.base import backend_class
from asr_server.errors import ServerError


@pytest.mark.parametrize(("backend", "package"), [("openvino", "openvino"), ("tensorflow", "tensorflow")])
def test_missing_framework_is_named(monkeypatch: pytest.MonkeyPatch, backend: str, package: str) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # makes `import <package>` fail as if not installed
    monkeypatch.delitem(sys.modules, f"asr_server.backends.{backend}", raising=False)
    with pytest.raises(ServerError) as caught:
        backend_class(backend)
    assert caught.value.message == f"backend '{backend}' needs the '{package}' package, which is not installed"
