"""Read-only git context for the brief: branch, HEAD and changed files.

Git is asked with ``GIT_OPTIONAL_LOCKS=0`` (``git status`` then never takes the index lock the
user's own git commands need), without a pager or prompts, and within a short deadline shared by
all the calls of one context (a git that does not answer is killed with its process group, and
not asked again by the same process for a while). Nothing
here writes to the repository or to any git configuration. Outside a work tree, or when git is
not installed, the context is ``None``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

__all__ = ["GitContext", "checkout_revision", "git_context"]

_TIMEOUT = 3.0


class GitContext:
    """Where the work tree is: branch (``None`` when detached), HEAD, and changed files."""

    __slots__ = ("branch", "changed", "changed_total", "head", "head_subject", "root")

    def __init__(
        self,
        root: str,
        branch: str | None,
        head: str | None,
        head_subject: str | None,
        changed: list[tuple[str, str]],
        changed_total: int,
    ) -> None:
        self.root = root
        self.branch = branch
        self.head = head
        self.head_subject = head_subject
        self.changed = changed
        """``(status, path)`` pairs as ``git status --porcelain`` gives them (XY codes)."""
        self.changed_total = changed_total

    def as_dict(self) -> dict[str, object]:
        return {
            "root": self.root,
            "branch": self.branch,
            "head": self.head,
            "head_subject": self.head_subject,
            "changed": [{"status": s, "path": p} for s, p in self.changed],
            "changed_total": self.changed_total,
        }


_unanswered: dict[str, float] = {}
"""Work trees whose git did not answer in time, in this process, and until when (monotonic) they
are not asked again: a hook that builds a brief and takes a checkpoint would otherwise wait for
each; a long-running process (the service, the watchdog) asks again after ``_RETRY_AFTER``."""

_RETRY_AFTER = 300.0


class _NoAnswer(Exception):
    """Git did not answer before the deadline."""


def _git(root: str, *args: str, deadline: float) -> str | None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _NoAnswer
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", LC_ALL="C")
    try:
        # Its own process group: a git that hangs is killed with what it started (hooks, helpers).
        proc = subprocess.Popen(
            ["git", "-C", root, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    except OSError:
        return None
    with proc:
        try:
            out, _ = proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.kill()
            proc.wait()
            raise _NoAnswer from None
    if proc.returncode != 0:
        return None
    return out.decode("utf-8", "replace")


def git_context(root: str, *, max_files: int = 200, timeout: float = _TIMEOUT) -> GitContext | None:
    """The git context of the work tree at ``root``, or ``None`` when there is none, or when git
    does not answer within ``timeout`` seconds in all (its four calls share it). A work tree whose
    git did not answer is not asked again by this process."""
    key = os.path.abspath(root)
    now = time.monotonic()
    if _unanswered.get(key, now) > now:
        return None
    try:
        found = _context(root, max_files, now + timeout)
    except _NoAnswer:
        _unanswered[key] = time.monotonic() + _RETRY_AFTER
        return None
    _unanswered.pop(key, None)
    return found


def checkout_revision(package_dir: str, *, timeout: float = 2.0) -> str | None:
    """The commit a Phoenix run from a clone was imported from (``git describe --tags --always
    --dirty``: ``v0.2.0-3-ga55e476``, or ``a55e476-dirty`` before the first tag), or ``None`` when
    ``package_dir`` (the folder holding ``phoenix_protocol/``) is not a clone's ``src/``: an
    installed wheel, whatever work tree the user stands in, names no commit."""
    root = os.path.dirname(os.path.abspath(package_dir))
    if os.path.basename(os.path.abspath(package_dir)) != "src" or not os.path.isfile(
        os.path.join(root, "pyproject.toml")
    ):
        return None
    if not os.path.exists(os.path.join(root, ".git")):
        return None
    try:
        described = _git(
            root, "describe", "--tags", "--always", "--dirty", "--abbrev=7", deadline=time.monotonic() + timeout
        )
    except _NoAnswer:
        return None
    return described.strip() or None if described else None


def _context(root: str, max_files: int, deadline: float) -> GitContext | None:
    top = _git(root, "rev-parse", "--show-toplevel", deadline=deadline)
    if top is None:
        return None
    branch = _git(root, "symbolic-ref", "--quiet", "--short", "HEAD", deadline=deadline)
    head_line = _git(root, "log", "-1", "--format=%h%x00%s", deadline=deadline)
    head = subject = None
    if head_line:
        head, _, subject = head_line.rstrip("\n").partition("\x00")
    status = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=normal", deadline=deadline) or ""
    changed: list[tuple[str, str]] = []
    total = 0
    entries = status.split("\x00")
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":
            i += 1  # the rename's source path follows
        total += 1
        if len(changed) < max_files:
            changed.append((code.strip() or "?", path))
    return GitContext(top.strip(), (branch or "").strip() or None, head, subject, changed, total)
