"""Model instance threads: named where the OS shows thread names, in order, nothing lost at shutdown."""

from __future__ import annotations

import queue
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from asr_server.scheduling.instances import Instance, InstanceThread


def os_thread_names() -> set[str]:
    names = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            names.add((task / "comm").read_text().strip())
        except OSError:  # a thread that ended between listing and reading
            continue
    return names


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names are read from /proc (Linux)")
def test_instance_thread_has_the_instance_name_in_the_os():
    backend = SimpleNamespace(context=SimpleNamespace(instance_name="streaming_encoder_0_1"), inline_safe=True)
    instance = Instance(backend)
    names: queue.SimpleQueue = queue.SimpleQueue()
    try:
        instance.thread.submit(lambda: names.put(os_thread_names()))
        seen = names.get(timeout=10)
    finally:
        instance.shutdown()
    assert "streaming_encod" in seen  # Linux keeps the first 15 bytes


def test_work_runs_in_order_on_one_thread_and_shutdown_runs_what_was_submitted():
    thread = InstanceThread("order")
    gate = threading.Event()
    ran: list[tuple[int, int]] = []
    thread.submit(gate.wait)  # everything below queues behind this
    for i in range(50):
        thread.submit(lambda i=i: ran.append((i, threading.get_ident())))
    gate.set()
    thread.shutdown(wait=True)
    assert [i for i, _ in ran] == list(range(50))
    assert len({ident for _, ident in ran}) == 1 and ran[0][1] != threading.get_ident()


def test_submit_after_shutdown_is_refused():
    thread = InstanceThread("closed")
    thread.shutdown(wait=True)
    with pytest.raises(RuntimeError, match="shut down"):
        thread.submit(lambda: None)
    thread.shutdown(wait=True)  # a second shutdown is harmless


def test_failing_work_does_not_stop_the_thread(caplog):
    thread = InstanceThread("survivor")
    done = threading.Event()
    thread.submit(lambda: 1 / 0)
    thread.submit(done.set)
    assert done.wait(10)
    thread.shutdown(wait=True)
    assert "ZeroDivisionError" in caplog.text
