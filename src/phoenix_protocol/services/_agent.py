"""``Agent``: one agent's state, ops log and brief in one Phoenix home.

This is the library's front door; the CLI, the hooks and (later) the HTTP service all call it::

    from phoenix_protocol import Agent

    agent = Agent.open("zero")                 # home found from the working directory
    agent.state.set_status("working", "Implementing user authentication")
    agent.state.add_note("next_action", "Write integration tests for auth endpoints")
    print(agent.render_brief())

Nothing is created on disk until the first write.
"""

from __future__ import annotations

import os

from phoenix_protocol.agent._ops import OpsLog
from phoenix_protocol.agent._state import AgentState, StateStore
from phoenix_protocol.core._clock import Clock, system_clock
from phoenix_protocol.core._config import Config, load_config
from phoenix_protocol.core._durable import atomic_write
from phoenix_protocol.core._home import Home, resolve_agent_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from contextlib import AbstractContextManager
    from typing import Any

    from phoenix_protocol.agent._identity import IdentityStore
    from phoenix_protocol.agent._state_pg import PgAgentRecord
    from phoenix_protocol.services._checkpoints import CheckpointStore
    from phoenix_protocol.services._sessions import SessionStart, SessionStore

__all__ = ["Agent"]

LANES_DIR = "lanes"
"""In an agent's directory: the lanes of sessions that run beside the one ``state.json`` holds."""


class Agent:
    """One agent (``agent_id``) in one Phoenix home."""

    def __init__(
        self,
        agent_id: str,
        home: Home,
        *,
        config: Config | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self.id = resolve_agent_id(agent_id)
        self.home = home
        self.config = config if config is not None else load_config(home.root, project_root=home.project_root)
        self.clock = clock
        self.dir = home.agent_dir(self.id)
        self.ops = OpsLog(
            os.path.join(self.dir, "ops.jsonl"),
            clock=clock,
            max_bytes=self.config.ops_max_bytes,
            keep=self.config.ops_keep,
            lock_timeout=self.config.lock_timeout,
            prepare=self.ensure,
        )
        self.state = StateStore(
            self.dir, agent_id=self.id, ops=self.ops, config=self.config, clock=clock, prepare=self.ensure
        )
        self.brief_path = os.path.join(self.dir, "brief.md")
        self.lane: str | None = None
        """``None``: this object reads and writes the agent's primary lane (``state.json`` in its
        directory); else the id of the lane it is a view of (``use_lane``, docs/lanes.md)."""
        self._ensured = False
        self._checkpoints: CheckpointStore | None = None
        self._identity: IdentityStore | None = None
        self._sessions: SessionStore | None = None
        self._record: PgAgentRecord | None = None
        self.store_fallback = False
        """On the PostgreSQL store: when the server cannot be reached, change this machine's copy
        alone (passed on by the next sync). The hooks set it; elsewhere such a change fails."""
        if str(self.config.store).startswith(("postgresql://", "postgres://")):
            # State and ops events go through the server; psycopg is loaded on first use only.
            self.state.remote = self.ops.remote = self.store_record

    def store_record(self) -> PgAgentRecord:
        """This agent's record on the PostgreSQL store (``_state_pg``); only on that store."""
        if self._record is None:
            from phoenix_protocol.agent._state_pg import PgAgentRecord

            self._record = PgAgentRecord(self)
        return self._record

    def sync_store(self) -> dict[str, Any] | None:
        """Pass this machine's copy of the state and its new ops events on to the PostgreSQL
        store (or take the server's newer record): what the PostToolUse hook leaves to a detached
        process. ``None`` on the file store, where there is nothing to pass on."""
        if self.state.remote is None:
            return None
        return self.store_record().sync()

    @property
    def checkpoints(self) -> CheckpointStore:
        """This agent's checkpoints (loaded on first use: not on the hook's hot path)."""
        if self._checkpoints is None:
            from phoenix_protocol.services._checkpoints import CheckpointStore

            self._checkpoints = CheckpointStore(self)
        return self._checkpoints

    @property
    def identity(self) -> IdentityStore:
        """This agent's ``identity.yaml``."""
        if self._identity is None:
            from phoenix_protocol.agent._identity import IdentityStore

            self._identity = IdentityStore(self)
        return self._identity

    @property
    def sessions(self) -> SessionStore:
        """This agent's sessions: ``begin``, ``end``, ``entries`` (see ``session`` for a block)."""
        if self._sessions is None:
            from phoenix_protocol.services._sessions import SessionStore

            self._sessions = SessionStore(self)
        return self._sessions

    def session(
        self,
        session_id: str | None = None,
        *,
        restore: bool | None = None,
        force: bool = False,
        summary: str | None = None,
        checkpoint: bool | None = None,
    ) -> AbstractContextManager[SessionStart]:
        """``with agent.session() as started:`` — a session for the block: begun as
        ``agent.sessions.begin`` does (restored per ``restore``, default ``restore_on_start``;
        ``started`` says from what), ended when the block ends, also when it raises, as
        ``agent.sessions.end`` does (the session checkpoint per ``checkpoint``, default
        ``checkpoint_on_exit``, with ``started.summary`` if the block set it, else ``summary``)."""
        from phoenix_protocol.services._sessions import session_scope

        return session_scope(
            self.sessions, session_id, restore=restore, force=force, summary=summary, checkpoint=checkpoint
        )

    @classmethod
    def open(
        cls,
        agent_id: str | None = None,
        *,
        home: str | Home | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        config_overrides: Mapping[str, Any] | None = None,
        clock: Clock = system_clock,
    ) -> Agent:
        """Open an agent: ``agent_id`` or ``$PHOENIX_AGENT`` or ``default``, in ``home`` or the
        home resolved from ``cwd`` and the environment (see ``Home.resolve``)."""
        if home is None:
            resolved = Home.resolve(cwd, env)
        elif isinstance(home, Home):
            resolved = home
        else:
            resolved = Home(os.path.join(os.path.abspath(cwd or os.getcwd()), home))
        config = load_config(resolved.root, project_root=resolved.project_root, env=env, overrides=config_overrides)
        return cls(resolve_agent_id(agent_id, env, config.agent_id), resolved, config=config, clock=clock)

    def lane_of_session(self, session_id: str | None) -> str | None:
        """The id of the lane of session ``session_id`` (as its agent CLI gave it, or as Phoenix
        keeps it) when that session has a lane of its own in this agent, else ``None``: one
        ``stat``, the cost of lanes on the hook's hot path (docs/lanes.md)."""
        if not session_id:
            return None
        from phoenix_protocol.core._ids import lane_id_of

        lane = lane_id_of(session_id)
        return lane if os.path.isfile(os.path.join(self.dir, LANES_DIR, lane, "state.json")) else None

    def follow_session(self, session_id: str | None) -> Agent:
        """Make this object a view of session ``session_id``'s lane when it has one (``lane_of_session``:
        one ``stat``), else leave it on the primary lane; returns it. What every entry point that
        acts for a session calls (the hooks, ``state-update``, the model's ``phx`` commands)."""
        lane = self.lane_of_session(session_id)
        return self if lane is None else self.use_lane(lane)

    def use_lane(self, lane: str, directory: str | None = None) -> Agent:
        """Make this object a view of lane ``lane``: its ``state``, ``ops`` and ``brief_path`` are
        the lane's files (``<agent>/lanes/<lane>/``, or ``directory``: a retired lane's). Nothing
        creates the lane's directory on a write (the session start that opens a lane does): a
        write to a lane retired meanwhile fails. Lanes are this machine's files on every store.
        Returns ``self``."""
        from phoenix_protocol.core._ids import validate_id

        self.lane = validate_id(lane, "lane id")
        where = directory or os.path.join(self.dir, LANES_DIR, lane)
        self.ops = OpsLog(
            os.path.join(where, "ops.jsonl"),
            clock=self.clock,
            max_bytes=self.config.ops_max_bytes,
            keep=self.config.ops_keep,
            lock_timeout=self.config.lock_timeout,
        )
        self.state = StateStore(where, agent_id=self.id, ops=self.ops, config=self.config, clock=self.clock)
        self.brief_path = os.path.join(where, "brief.md")
        self._checkpoints = None
        return self

    def in_lane(self, lane: str, directory: str | None = None) -> Agent:
        """A new view of this agent's lane ``lane`` (see ``use_lane``); this object is unchanged."""
        return Agent(self.id, self.home, config=self.config, clock=self.clock).use_lane(lane, directory)

    def ensure(self) -> None:
        """Create the home and this agent's directory (0700) if they do not exist."""
        if self._ensured:
            return
        if not os.path.isdir(self.dir):
            self.home.ensure_agent_dir(self.id)
        self._ensured = True

    def exists(self) -> bool:
        """Whether this agent has any state on disk yet."""
        return os.path.isdir(self.dir)

    def record(self, event: str, status: str = "ok", meta: dict[str, Any] | None = None, **kwargs: Any) -> int:
        """Append an event to the ops log (creating the agent directory if needed)."""
        self.ensure()
        return self.ops.record(event, status, meta, **kwargs)

    def render_brief(
        self,
        state: AgentState | None = None,
        *,
        notices: list[str] | None = None,
        max_chars: int | None = None,
        git_timeout: float = 3.0,
    ) -> str:
        """Generate the brief from the current state and git (not written). ``git_timeout``
        bounds git's answer, all its calls together (hooks with a short budget pass less)."""
        from phoenix_protocol.agent._brief import render_brief
        from phoenix_protocol.core._git import git_context

        if state is None:
            state = self.state.read()
        root = self.home.project_root
        git = git_context(root, timeout=git_timeout) if root else None
        return render_brief(
            state,
            agent_id=self.id,
            git=git,
            generated_at=self.clock.now_iso(),
            max_chars=max_chars or self.config.brief_max_chars,
            notices=list(notices or []),
            work_limit=self.config.brief_recent_events,
        )

    def write_brief(
        self, state: AgentState | None = None, *, notices: list[str] | None = None, git_timeout: float = 3.0
    ) -> str:
        """Generate the brief and write it to ``brief.md`` atomically; returns the text."""
        from phoenix_protocol.core._jsonio import valid_text

        text = valid_text(self.render_brief(state, notices=notices, git_timeout=git_timeout))
        self.ensure()
        atomic_write(self.brief_path, text.encode("utf-8"))
        return text

    def read_brief(self) -> str | None:
        """The last written ``brief.md``, or ``None``."""
        from phoenix_protocol.core._durable import read_bytes

        # brief_max_chars characters of UTF-8 (4 bytes at most each): a larger file is refused
        data = read_bytes(self.brief_path, limit=max(1 << 20, 4 * self.config.brief_max_chars))
        return None if data is None else data.decode("utf-8", "replace")


def sync_copies(
    home: Home, *, progress: Callable[[str], None] | None = None, config: Config | None = None
) -> list[dict[str, Any]]:
    """Pass every agent copy in ``home`` on to the PostgreSQL store ``config`` names (default: the
    home's configuration) or take the newer records: ``phx db sync``, and ``phx export`` before it
    reads the server. One report per agent (``Agent.sync_store``)."""
    if config is None:
        config = load_config(home.root, project_root=home.project_root)
    reports = []
    for agent_id in home.agent_ids():
        if progress is not None:
            progress(f"agent {agent_id}")
        report = Agent(agent_id, home, config=config).sync_store()
        if report is not None:
            reports.append({"agent": agent_id, **report})
    return reports
