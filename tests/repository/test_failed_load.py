"""A version that fails after its instances exist (its scheduler cannot be made) leaves nothing behind: its
instances' threads stop and its backends are unloaded."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from asr_server.errors import ServerError
from asr_server.repository import manager as manager_module
from asr_server.repository.manager import ModelManager
from tests.conftest import BUNDLED_REPO, copy_model


async def test_a_version_whose_scheduler_fails_stops_its_threads_and_unloads(tmp_path: Path, monkeypatch):
    copy_model(tmp_path, BUNDLED_REPO / "add_sub")
    unloaded = []

    def no_scheduler(*args, **kwargs):
        raise ServerError("no scheduler for this config")

    monkeypatch.setattr(manager_module, "make_scheduler", no_scheduler)
    original_unload = manager_module.backend_class("python").unload
    monkeypatch.setattr(manager_module.backend_class("python"), "unload",
                        lambda self: (unloaded.append(self.context.instance_name), original_unload(self)))
    manager = ModelManager([tmp_path])
    with pytest.raises(ServerError, match="no scheduler"):
        await manager.load("add_sub")
    assert unloaded == ["add_sub_0_0"]
    assert not [t.name for t in threading.enumerate() if t.name.startswith("add_sub")]  # its thread stopped
