"""Child server processes: stopping one the way every caller here needs it, and tying one's life to its
parent's."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess


def die_with_parent() -> None:
    """In a child: SIGTERM when its parent dies, however it died, so that no server outlives the process that
    started it (Linux's PR_SET_PDEATHSIG; elsewhere nothing). A `preexec_fn`, or the first call of a
    multiprocessing target."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


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
