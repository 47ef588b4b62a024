"""Read-only git context for the brief: branch, HEAD and changed files.

Git is asked with ``GIT_OPTIONAL_LOCKS=0`` (``git status`` then never takes the index lock the
user's own git commands need), without a pager or prompts, and with a short timeout. Nothing
here writes to the repository or to any git configuration. Outside a work tree, or when git is
not installed, the context is ``None``.
"""

from __future__ import annotations

import os
import subprocess

__all__ = ["GitContext", "git_context"]

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


def _git(root: str, *args: str, timeout: float = _TIMEOUT) -> str | None:
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", LC_ALL="C")
    try:
        proc = subprocess.run(
            ["git", "-C", root, *args],
            capture_output=True,
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.decode("utf-8", "replace")


def git_context(root: str, *, max_files: int = 200, timeout: float = _TIMEOUT) -> GitContext | None:
    """The git context of the work tree at ``root``, or ``None`` when there is none (or when git
    does not answer within ``timeout`` seconds per call)."""
    top = _git(root, "rev-parse", "--show-toplevel", timeout=timeout)
    if top is None:
        return None
    branch = _git(root, "symbolic-ref", "--quiet", "--short", "HEAD", timeout=timeout)
    head_line = _git(root, "log", "-1", "--format=%h%x00%s", timeout=timeout)
    head = subject = None
    if head_line:
        head, _, subject = head_line.rstrip("\n").partition("\x00")
    status = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=normal", timeout=timeout) or ""
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
