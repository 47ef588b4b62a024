"""FileLock waiting: in the kernel from the main thread (SIGALRM-bounded), polling elsewhere."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from phoenix_protocol.core._durable import FileLock
from phoenix_protocol.core._errors import LockTimeoutError

HOLDER = (
    "import sys, time\n"
    "from phoenix_protocol.core._durable import FileLock\n"
    "lock = FileLock(sys.argv[1]); lock.acquire(); print('held', flush=True)\n"
    "time.sleep(float(sys.argv[2]))\n"
)


def _hold(path: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


MAIN_THREAD = r"""
import signal, subprocess, sys
from phoenix_protocol.core._durable import FileLock
from phoenix_protocol.core._errors import LockTimeoutError

target, holder_code = sys.argv[1], sys.argv[2]

def hold(seconds):
    proc = subprocess.Popen([sys.executable, "-c", holder_code, target, str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc

def mine(signum, frame):
    raise AssertionError("the program's handler must not fire")

signal.signal(signal.SIGALRM, mine)
assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
holder = hold(0.3)
with FileLock(target, timeout=10):
    pass
holder.wait()
assert signal.getsignal(signal.SIGALRM) is mine
assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
holder = hold(30)
try:
    FileLock(target, timeout=0.2).acquire()
    raise AssertionError("acquired a held lock")
except LockTimeoutError as exc:
    assert "within 0.2s" in str(exc)
holder.kill()
holder.wait()
assert signal.getsignal(signal.SIGALRM) is mine
assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)

# A program that already runs ITIMER_REAL keeps its timer: the lock polls instead.
fired = []
signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
signal.setitimer(signal.ITIMER_REAL, 5.0)
holder = hold(0.3)
with FileLock(target, timeout=10):
    pass
holder.wait()
assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 5.0 and fired == []
print("ok")
"""


def test_main_thread_waits_in_the_kernel_and_leaves_signals_as_they_were(tmp_path: Path) -> None:
    """In a process of its own: pytest-timeout runs ITIMER_REAL in the test process."""
    proc = subprocess.run(
        [sys.executable, "-c", MAIN_THREAD, str(tmp_path / "f"), HOLDER], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_other_threads_poll(tmp_path: Path) -> None:
    target = tmp_path / "f"
    holder = _hold(target, 0.3)
    results: list[object] = []

    def worker() -> None:
        try:
            with FileLock(str(target), timeout=10):
                results.append("acquired")
        except Exception as exc:
            results.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(20)
    holder.wait()
    assert results == ["acquired"]
    holder = _hold(target, 30)
    try:
        results.clear()

        def timeout_worker() -> None:
            try:
                FileLock(str(target), timeout=0.2).acquire()
            except LockTimeoutError as exc:
                results.append(exc)

        started = time.monotonic()
        thread = threading.Thread(target=timeout_worker)
        thread.start()
        thread.join(20)
        assert isinstance(results[0], LockTimeoutError) and time.monotonic() - started < 5
    finally:
        holder.kill()
        holder.wait()


def test_threads_of_one_process_take_turns(tmp_path: Path) -> None:
    """A flock belongs to the process: without the per-path thread lock two threads would both
    'hold' it. Each thread increments a shared counter in a file under the lock."""
    target = tmp_path / "counter"
    target.write_text("0")
    errors: list[BaseException] = []

    def bump() -> None:
        try:
            for _ in range(200):
                with FileLock(str(target), timeout=30):
                    value = int(target.read_text())
                    time.sleep(0)  # invite a switch inside the critical section
                    target.write_text(str(value + 1))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and target.read_text() == "800"
