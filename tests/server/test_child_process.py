"""stop_process: SIGTERM first (a server drains on it), SIGKILL only for a child that outlives the timeout."""

import signal
import subprocess
import sys
import time

from asr_server.child_process import stop_process


def _child(code: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert process.stdout.readline() == b"ready\n"  # its signal handlers are in place
    finally:
        process.stdout.close()
    return process


def test_a_child_that_honours_sigterm_ends_by_it():
    process = _child("import sys, time\nprint('ready', flush=True)\ntime.sleep(60)")
    stop_process(process, 10)
    assert process.returncode == -signal.SIGTERM


def test_a_child_that_ignores_sigterm_is_killed_after_the_timeout():
    process = _child("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                     "print('ready', flush=True)\ntime.sleep(60)")
    start = time.monotonic()
    stop_process(process, 0.5)
    assert process.returncode == -signal.SIGKILL
    assert 0.5 <= time.monotonic() - start < 10


def test_a_child_that_already_exited_is_left_alone():
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    process.wait()
    stop_process(process, 1)
    assert process.returncode == 3
