"""``AgentContext``: what an agent's stores in this layer take from whoever opens them.

``IdentityStore``, ``PgAgentRecord`` and ``PgIdentity`` are opened by the ``Agent`` front door
(``services._agent``), a layer above; they are typed on this protocol, which ``Agent``
satisfies, so that nothing here imports upwards. It holds just what they use: the agent's id and
directory, its settings, clock, state and ops log, whether a hook may fall back to this machine's
copy, and a read-only view of its checkpoints (the identity's repair reads the copies they keep).

Typing only: nothing imports this module at run time (the hooks' hot path loads no more).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from phoenix_protocol.agent._ops import OpsLog
    from phoenix_protocol.agent._state import StateStore
    from phoenix_protocol.core._clock import Clock
    from phoenix_protocol.core._config import Config
    from phoenix_protocol.store._checkpoints import CheckpointInfo

__all__ = ["AgentContext", "CheckpointSections", "CheckpointSource"]


class CheckpointSections(Protocol):
    """One checkpoint, as far as its sections (``services._checkpoints.Checkpoint``)."""

    def section(self, name: str) -> object: ...


class CheckpointSource(Protocol):
    """An agent's checkpoints, read only (``services._checkpoints.CheckpointStore``)."""

    def entries(self) -> list[CheckpointInfo]:
        """Newest first."""
        ...

    def read(self, name: str) -> CheckpointSections: ...


class AgentContext(Protocol):
    """One agent, as its stores in this layer see it (``services._agent.Agent``)."""

    @property
    def id(self) -> str: ...

    @property
    def dir(self) -> str:
        """The agent's directory in its home (``Home.agent_dir``)."""
        ...

    @property
    def config(self) -> Config: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def state(self) -> StateStore: ...

    @property
    def ops(self) -> OpsLog: ...

    @property
    def store_fallback(self) -> bool:
        """On the PostgreSQL store: whether a change goes to this machine's copy alone when the
        server cannot be reached (the hooks)."""
        ...

    @property
    def checkpoints(self) -> CheckpointSource: ...

    def ensure(self) -> None:
        """Create the home and the agent's directory if they do not exist."""
        ...

    def record(
        self, event: str, status: str = "ok", meta: dict[str, Any] | None = None, *, trusted: bool = False
    ) -> int:
        """Append an event to the ops log (creating the agent's directory if needed)."""
        ...
