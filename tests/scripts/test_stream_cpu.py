"""bench/stream_cpu.py's CPU accounting by thread (the benchmark itself runs a server; see its docstring)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.stream_cpu import thread_cpu


def test_thread_cpu_counts_this_process_and_its_child_processes():
    """A model instance in a process of its own is a child of the server: its threads count, named apart."""
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.5: pass\ntime.sleep(30)"])
    def children_and_ours() -> tuple[float, float]:
        by_thread = thread_cpu(os.getpid())
        children = sum(v for k, v in by_thread.items() if k.startswith("instance process "))
        return children, sum(by_thread.values()) - children

    try:
        deadline = time.monotonic() + 20
        children, ours = children_and_ours()
        while children < 0.3 and time.monotonic() < deadline:
            time.sleep(0.1)  # the child has not burnt its half second yet
            children, ours = children_and_ours()
        assert children >= 0.3 and ours > 0
    finally:
        child.kill()
        child.wait()
