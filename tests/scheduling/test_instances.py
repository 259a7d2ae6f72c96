"""Model instance threads carry their instance's name where the OS shows thread names."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from asr_server.scheduling.instances import Instance


def os_thread_names() -> set[str]:
    return {(task / "comm").read_text().strip() for task in Path("/proc/self/task").iterdir()}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names are read from /proc (Linux)")
def test_instance_thread_has_the_instance_name_in_the_os():
    backend = SimpleNamespace(context=SimpleNamespace(instance_name="streaming_encoder_0_1"), inline_safe=True)
    instance = Instance(backend)
    try:
        names = instance.executor.submit(os_thread_names).result()
    finally:
        instance.shutdown()
    assert "streaming_encod" in names  # Linux keeps the first 15 bytes
