"""The write-behind worker (``_background``): delays, batching by key, waiting, errors, forks, exit."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from phoenix_protocol.core import _background


def test_a_task_runs_after_its_delay_on_the_worker_thread() -> None:
    ran: list[tuple[str, float]] = []
    started = time.monotonic()
    _background.submit("late", lambda: ran.append((threading.current_thread().name, time.monotonic())), delay=0.2)
    assert _background.pending("late")
    deadline = time.monotonic() + 5
    while not ran and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ran and ran[0][0] == "phoenix-write-behind"
    assert ran[0][1] - started >= 0.19
    assert not _background.pending("late")


def test_one_task_per_key_is_queued() -> None:
    calls: list[int] = []
    for i in range(5):
        _background.submit("same", lambda i=i: calls.append(i), delay=60)  # type: ignore[misc]
    _background.wait("same")
    assert calls == [0]  # the first one queued; the later submits found it waiting


def test_wait_runs_what_is_queued_in_the_caller_at_once() -> None:
    where: list[str] = []
    _background.submit("now", lambda: where.append(threading.current_thread().name), delay=60)
    started = time.monotonic()
    _background.wait("now")
    assert time.monotonic() - started < 5  # not the 60 s delay
    assert where == [threading.current_thread().name]


def test_wait_waits_for_a_task_the_worker_is_running() -> None:
    gate = threading.Event()
    done: list[bool] = []

    def slow() -> None:
        gate.wait(5)
        done.append(True)

    _background.submit("running", slow)
    deadline = time.monotonic() + 5
    while _background._worker.running != "running" and time.monotonic() < deadline:
        time.sleep(0.005)
    threading.Timer(0.1, gate.set).start()
    _background.wait("running")
    assert done == [True]


def test_a_failed_task_is_raised_by_the_next_wait_of_its_key_only() -> None:
    def broken() -> None:
        raise OSError("disk full")

    _background.submit("broken", broken, delay=0)
    _background.wait("other")  # another key: nothing to raise
    with pytest.raises(OSError, match="disk full"):
        _background.wait("broken")
    _background.wait("broken")  # reported once


def test_exit_finishes_what_is_queued(tmp_path: Path) -> None:
    """A process that leaves normally runs its queued tasks first (atexit), however long their delay."""
    code = (
        "import sys\n"
        "from phoenix_protocol.core import _background\n"
        "_background.submit('exit', lambda: open(sys.argv[1], 'w').write('done'), delay=3600)\n"
    )
    out = tmp_path / "done"
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", code, str(out)], check=True, timeout=60)
    assert time.monotonic() - started < 30
    assert out.read_text() == "done"


def test_a_forked_child_starts_with_an_empty_queue() -> None:
    ran: list[int] = []
    _background.submit("parent's", lambda: ran.append(os.getpid()), delay=3600)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's task is not its own
        try:
            os.write(write, b"1" if not _background.pending() else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.close(read)
    os.waitpid(pid, 0)
    _background.wait("parent's")
    assert ran == [os.getpid()]
