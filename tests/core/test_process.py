"""core/_process: a process observed with its status (stopped or not), and the CPU time of a whole
process tree read from one walk of the process table, with real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from phoenix_protocol.core._process import STOPPED_STATES, ProcessTable, hostname, identity_of, liveness, observe

SPIN_CHILD = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'while True: pass'])"


def test_observe_tells_a_stopped_process_from_a_running_one() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        ident = identity_of(proc.pid)
        assert ident is not None
        alive, status = observe(proc.pid, ident.start_time, hostname())
        assert alive is True and status not in STOPPED_STATES
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while observe(proc.pid, ident.start_time, hostname())[1] not in STOPPED_STATES:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert liveness(proc.pid, ident.start_time, hostname()) is True  # stopped is not dead
        assert observe(proc.pid, ident.start_time + 100, hostname()) == (False, None)  # another process
        assert observe(proc.pid, ident.start_time, "another-host") == (None, None)
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()
    assert observe(proc.pid, ident.start_time, hostname()) == (False, None)


def test_tree_cpu_counts_the_grandchildren() -> None:
    """A parent that only waits, whose grandchild spins: the tree's CPU time moves."""
    proc = subprocess.Popen([sys.executable, "-c", SPIN_CHILD])
    try:
        deadline = time.monotonic() + 10
        while len(psutil.Process(proc.pid).children(recursive=True)) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        first = ProcessTable().tree_cpu(proc.pid)
        own = sum(psutil.Process(proc.pid).cpu_times()[:2])
        assert first is not None
        while True:  # real CPU is awaited, not time
            later = ProcessTable().tree_cpu(proc.pid)
            assert later is not None
            if later > first + 0.2:
                break
            assert time.monotonic() < deadline + 20
            time.sleep(0.02)
        assert sum(psutil.Process(proc.pid).cpu_times()[:2]) - own < 0.2  # the parent itself did nothing
        table = ProcessTable()
        assert proc.pid not in table.children(proc.pid) and table.children(proc.pid)
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()
    assert ProcessTable().tree_cpu(proc.pid) is None
