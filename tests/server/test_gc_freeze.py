"""The collector is kept off the long-lived heap: the server freezes what survives a load, and an unload lets
the collector reach the frozen objects that died since."""

from __future__ import annotations

import gc
import weakref


from asr_server import gc_freeze
from tests.conftest import BUNDLED_REPO, copy_model


class Node:
    def __init__(self):
        self.other = None


def test_settle_freezes_survivors_and_frees_frozen_cycles_later():
    gc_freeze.settle()
    a, b = Node(), Node()
    a.other, b.other = b, a  # a reference cycle: only the collector frees it
    probe = weakref.ref(a)
    gc_freeze.settle()
    assert gc.is_tracked(a) and gc.get_freeze_count() > 0
    del a, b
    gc.collect()
    assert probe() is not None, "a frozen cycle must be out of the collector's reach"
    gc_freeze.settle()  # what an unload does
    assert probe() is None, "settle must collect frozen objects that died since"
    gc.unfreeze()


async def test_server_freezes_after_start_and_after_model_control(tmp_path, running):
    copy_model(tmp_path, BUNDLED_REPO / "add_sub")
    gc.unfreeze()
    async with running(tmp_path, model_control_mode="explicit", load_models=("add_sub",)) as server:
        assert gc.get_freeze_count() > 0, "the startup heap must be frozen"
        gc.unfreeze()
        await server.core.unload_model("add_sub")
        assert gc.get_freeze_count() > 0
        gc.unfreeze()
        await server.core.load_model("add_sub")
        assert gc.get_freeze_count() > 0
    gc.unfreeze()
