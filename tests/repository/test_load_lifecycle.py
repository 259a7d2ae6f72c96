"""What a load leaves behind: a version that fails after its instances exist (its scheduler cannot be made), or
after other versions of the model loaded, stops their threads and unloads their backends; a load records the
model folder as it was before it read it, so that a change made while it ran is loaded by the next poll."""

from __future__ import annotations

import os
import threading
import time
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


async def test_a_config_changed_while_its_model_loads_is_loaded_by_the_next_poll(tmp_path: Path, monkeypatch):
    """The edit lands after the load read the config and before it finished: the next poll must see the
    folder as changed (it once recorded the folder's state after the load, so the edit was never loaded)."""
    copy_model(tmp_path, BUNDLED_REPO / "identity_fp32")
    config = tmp_path / "identity_fp32" / "config.pbtxt"
    manager = ModelManager([tmp_path])
    original_prepare = ModelManager._prepare
    edits = []

    def prepare_then_edit(self, model_dir, name, override):
        prepared = original_prepare(self, model_dir, name, override)
        if not edits:  # the first load only
            config.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: 4"))
            # the same size, and within one tick of the file system's clock it could keep its mtime: move it on
            os.utime(config, (time.time() + 5, time.time() + 5))
            edits.append(True)
        return prepared

    monkeypatch.setattr(ModelManager, "_prepare", prepare_then_edit)
    await manager.load("identity_fp32")
    assert manager.get("identity_fp32", "").config.max_batch_size == 8  # loaded as read, before the edit
    assert await manager.poll()  # the edit is a change
    assert manager.get("identity_fp32", "").config.max_batch_size == 4
    assert not await manager.poll()  # and nothing more
    await manager.shutdown()


async def test_when_one_version_fails_the_versions_loaded_before_it_are_unloaded(tmp_path: Path):
    model = copy_model(tmp_path, BUNDLED_REPO / "add_sub")
    config = model / "config.pbtxt"
    config.write_text(config.read_text() + "\nversion_policy: { all {} }\n")
    (model / "2").mkdir()
    (model / "2" / "model.py").write_text(
        "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('version 2 breaks')\n")
    manager = ModelManager([tmp_path])
    with pytest.raises(ServerError, match="version 2 breaks"):
        await manager.load("add_sub")
    assert not manager.entry("add_sub").versions
    assert not [t.name for t in threading.enumerate() if t.name.startswith("add_sub")]  # version 1's thread too
