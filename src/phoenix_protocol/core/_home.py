"""Where state lives: the Phoenix home and the agent directories in it.

The home is, in order: ``$PHOENIX_HOME``; ``$PHOENIX_STATE_DIR`` (seed 000's name, an alias);
``.phoenix/`` at the root of the git work tree that contains the working directory; ``.phoenix/``
in the working directory when it is not inside a git work tree. Relative paths are made
absolute against the working directory.

Layout (see docs/architecture.md)::

    <home>/
      .gitignore          "*": state stays out of git unless the user edits this file
      phoenix.toml        optional configuration
      agents/<agent_id>/  state.json, brief.md, ops.jsonl (+ .lock files, rotated ops.jsonl.N)

Hot path: ``os`` only; the work tree root is found by looking for ``.git`` upwards, without git.
"""

from __future__ import annotations

import os

from phoenix_protocol.core._durable import atomic_write, confine, ensure_dir
from phoenix_protocol.core._ids import validate_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["DEFAULT_AGENT", "Home", "find_work_tree_root", "resolve_agent_id", "resolve_home"]

DEFAULT_AGENT = "default"
HOME_DIRNAME = ".phoenix"
_GITIGNORE = (
    b"# Phoenix Protocol state: local to this machine by default.\n"
    b"# To commit it, delete this file (or list what to keep with !pattern lines).\n"
    b"*\n"
)


def find_work_tree_root(start: str) -> str | None:
    """The nearest directory at or above ``start`` that holds ``.git`` (a directory or, for
    worktrees and submodules, a file), or ``None``."""
    path = os.path.abspath(start)
    while True:
        if os.path.exists(os.path.join(path, ".git")):
            return path
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def resolve_home(cwd: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The absolute path of the Phoenix home for ``cwd`` (default: the current directory)."""
    environ = os.environ if env is None else env
    base = os.path.abspath(cwd or os.getcwd())
    for name in ("PHOENIX_HOME", "PHOENIX_STATE_DIR"):
        value = environ.get(name)
        if value:
            return os.path.normpath(os.path.join(base, os.path.expanduser(value)))
    root = find_work_tree_root(base)
    return os.path.join(root or base, HOME_DIRNAME)


def resolve_agent_id(
    explicit: str | None = None, env: Mapping[str, str] | None = None, configured: str | None = None
) -> str:
    """``explicit`` (``--agent``), else ``$PHOENIX_AGENT``, else the configured ``agent_id``
    (``paif_config``), else ``default``; always validated."""
    environ = os.environ if env is None else env
    value = explicit if explicit is not None else (environ.get("PHOENIX_AGENT") or configured or DEFAULT_AGENT)
    return validate_id(value, "agent id")


class Home:
    """A Phoenix home directory. Creating one writes nothing until ``ensure`` is called; it
    registers the home with ``_durable.confine``, so that every file below it that Phoenix reads
    or writes is a regular file of this user, reached without following a symbolic link."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        confine(self.root)  # what is below it is agent files: regular files of this user only

    @classmethod
    def resolve(cls, cwd: str | None = None, env: Mapping[str, str] | None = None) -> Home:
        """The home for ``cwd`` by the rules in the module docstring."""
        return cls(resolve_home(cwd, env))

    @property
    def project_root(self) -> str | None:
        """The git work tree the home belongs to (for ``pyproject.toml`` and git context)."""
        return find_work_tree_root(os.path.dirname(self.root))

    def agent_dir(self, agent_id: str) -> str:
        """``<home>/agents/<agent_id>`` (the id is validated)."""
        return os.path.join(self.root, "agents", validate_id(agent_id, "agent id"))

    def agent_ids(self) -> list[str]:
        """Every agent with a directory in this home, sorted."""
        try:
            names = os.listdir(os.path.join(self.root, "agents"))
        except FileNotFoundError:
            return []
        from phoenix_protocol.core._ids import is_valid_id

        return sorted(n for n in names if is_valid_id(n) and os.path.isdir(os.path.join(self.root, "agents", n)))

    def ensure(self) -> None:
        """Create the home (0700) with its ``.gitignore`` if they do not exist yet."""
        if not os.path.isdir(self.root):
            ensure_dir(self.root)
        gitignore = os.path.join(self.root, ".gitignore")
        if not os.path.exists(gitignore):
            atomic_write(gitignore, _GITIGNORE)

    def ensure_agent_dir(self, agent_id: str) -> str:
        """Create ``agents/<agent_id>/`` (and the home) if needed; return its path."""
        path = self.agent_dir(agent_id)
        if not os.path.isdir(path):
            self.ensure()
            ensure_dir(path)
        return path
