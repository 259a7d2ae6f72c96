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
    try:
        deadline = time.monotonic() + 20
        by_thread = thread_cpu(os.getpid())
        while by_thread["instance process python"] < 0.3 and time.monotonic() < deadline:
            time.sleep(0.1)  # the child has not burnt its half second yet
            by_thread = thread_cpu(os.getpid())
        assert by_thread["instance process python"] >= 0.3
        assert sum(v for k, v in by_thread.items() if not k.startswith("instance process ")) > 0  # ours
    finally:
        child.kill()
        child.wait()
