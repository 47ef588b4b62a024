"""Write-behind: work that follows a durable write, done by one worker thread per process.

A checkpoint is durable once its transaction committed; what follows from it (its
``checkpoint_created`` ops event, ``OpsLog.record_later``) need not delay the caller. ``submit(key, task,
delay=...)`` hands such a task to a daemon thread, to run after ``delay`` seconds; the caller
goes on at once.

- One task per ``key`` is queued at a time: submitting a key already queued does nothing (the
  task looks at everything pending for its key when it runs). With a delay, what a busy writer
  submits meanwhile is done in one batch (events appended in a burst rather than one by one).
- ``wait(key)`` runs the queued task of that key at once in the calling thread (or waits for
  the worker to finish it, if it started) and returns once none is queued or running (``wait()``:
  none at all), and re-raises the first error a task of that key raised since the last ``wait``.
  Stores call it from their ``flush()``.
- At interpreter exit every queued task runs to completion (``atexit``); code that leaves with
  ``os._exit`` (the hooks' detached children) calls ``drain()`` first. A process killed before
  its tasks ran loses the events, never a checkpoint.
- A forked child starts with an empty queue (the parent does its own tasks).

The library never prints: a task's error is kept for ``wait`` to raise; tasks are written to
leave nothing half done (each one is repeatable from the durable record).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

__all__ = ["drain", "pending", "submit", "wait"]

_ERRORS_KEPT = 64


class _Worker:
    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.queue: dict[Hashable, tuple[Callable[[], None], float]] = {}  # key -> (task, when due)
        self.running: Hashable | None = None
        self.errors: dict[Hashable, BaseException] = {}
        self.thread: threading.Thread | None = None
        self.pid = os.getpid()

    def submit(self, key: Hashable, task: Callable[[], None], delay: float) -> None:
        with self.cond:
            due = time.monotonic() + delay
            queued = self.queue.get(key)
            if queued is not None:
                if due < queued[1]:  # wanted sooner: the queued task comes sooner
                    self.queue[key] = (queued[0], due)
                    self.cond.notify_all()
                return
            self.queue[key] = (task, due)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="phoenix-write-behind", daemon=True)
                self.thread.start()
            else:
                self.cond.notify_all()

    def _take(self) -> tuple[Hashable, Callable[[], None]]:
        with self.cond:
            while True:
                if self.queue:
                    key = min(self.queue, key=lambda k: self.queue[k][1])
                    task, due = self.queue[key]
                    wait = due - time.monotonic()
                    if wait <= 0:
                        del self.queue[key]
                        self.running = key
                        return key, task
                    self.cond.wait(wait)
                else:
                    self.cond.wait()

    def _keep_error(self, key: Hashable, error: BaseException) -> None:
        """Keep the first error of ``key`` for ``wait`` (caller holds ``cond``); a few dozen at
        most, so that a long-running process whose keys nobody waits for holds on to nothing."""
        if key in self.errors:
            return
        if len(self.errors) >= _ERRORS_KEPT:
            self.errors.pop(next(iter(self.errors)))
        self.errors[key] = error

    def _call(self, key: Hashable, task: Callable[[], None]) -> None:
        """Run ``task`` (in whichever thread); an error is kept for ``wait``, the durable record stands."""
        try:
            task()
        except BaseException as exc:  # noqa: BLE001 - kept for wait()
            with self.cond:
                self._keep_error(key, exc)

    def _run(self) -> None:
        while True:
            key, task = self._take()
            self._call(key, task)
            with self.cond:
                self.running = None
                self.cond.notify_all()

    def busy(self, key: Hashable | None) -> bool:
        if key is None:
            return bool(self.queue) or self.running is not None
        return key in self.queue or self.running == key

    def wait(self, key: Hashable | None) -> None:
        # What is queued runs here, in the waiting thread (no hand-over to the worker); a task the
        # worker is running already is waited for.
        self.drain_inline(key)
        if threading.current_thread() is not self.thread:
            with self.cond:
                while self.busy(key):
                    self.cond.wait()
        with self.cond:
            error = self.errors.pop(key, None) if key is not None else None
            if key is None and self.errors:
                error = self.errors.pop(next(iter(self.errors)))
        if error is not None:
            raise error

    def drain_inline(self, key: Hashable | None) -> None:
        """Run queued tasks (of ``key``, or all) in the calling thread."""
        while True:
            with self.cond:
                if key is None:
                    if not self.queue:
                        return
                    taken = next(iter(self.queue))
                elif key in self.queue:
                    taken = key
                else:
                    return
                task, _due = self.queue.pop(taken)
            self._call(taken, task)
            with self.cond:
                self.cond.notify_all()  # others waiting for this key


_worker = _Worker()


def submit(key: Hashable, task: Callable[[], None], *, delay: float = 0.0) -> None:
    """Queue ``task`` under ``key``, to run ``delay`` seconds from now. If a task of ``key`` is
    queued already, it will see this work too: it only comes sooner, if this asks for sooner."""
    _worker.submit(key, task, delay)


def pending(key: Hashable | None = None) -> bool:
    """Whether a task (of ``key``) is queued or running."""
    with _worker.cond:
        return _worker.busy(key)


def wait(key: Hashable | None = None) -> None:
    """Block until no task of ``key`` (or none at all) is queued or running; re-raise the first
    error such a task raised since the last ``wait``."""
    _worker.wait(key)


def drain() -> None:
    """Finish every queued task now (before ``os._exit``); errors are swallowed (the durable
    records stand, and the next process repeats the work)."""
    if _worker.pid != os.getpid():
        return
    with contextlib.suppress(BaseException):  # leaving the process: nothing left to tell
        _worker.wait(None)


def _after_fork_in_child() -> None:
    global _worker
    _worker = _Worker()


atexit.register(drain)
os.register_at_fork(after_in_child=_after_fork_in_child)
