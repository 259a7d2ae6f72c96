"""Stopping a server started as a child command, the way every caller here needs it."""

from __future__ import annotations

import subprocess


def stop_process(process: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """SIGTERM first, so that the server drains (a supervisor drains its workers), then SIGKILL if it is still
    there after ``timeout_s``. Does nothing to a process that has already exited."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
