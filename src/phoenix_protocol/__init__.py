"""Phoenix Protocol: AI-agent sessions are disposable; their state is not.

Everything an agent needs to carry on lives outside the conversation (``state.json``,
``ops.jsonl``, ``brief.md`` in a Phoenix home), is written by hooks rather than by the model's
memory, and is handed to the next session as a brief.

The public API is re-exported here and loaded on first use, so that ``import phoenix_protocol``
stays cheap on the hook hot path.
"""

from __future__ import annotations

from phoenix_protocol._version import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    from phoenix_protocol.agent._identity import Identity, IdentityCoreError, IdentityRepair, IdentityStore
    from phoenix_protocol.agent._ops import OpsLog
    from phoenix_protocol.agent._state import AgentState, StateStore
    from phoenix_protocol.core._clock import Clock, ManualClock, SystemClock
    from phoenix_protocol.core._config import Config, load_config
    from phoenix_protocol.core._errors import (
        ConfigError,
        CorruptStateError,
        InvalidIdError,
        LockTimeoutError,
        NotFoundError,
        OperationError,
        PhoenixError,
        RefusedError,
        SchemaVersionError,
        StatusRefusedError,
        StorageError,
        UsageError,
    )
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.core._ids import validate_id
    from phoenix_protocol.core._redact import redact
    from phoenix_protocol.services._agent import Agent
    from phoenix_protocol.services._checkpoints import (
        Checkpoint,
        CheckpointInfo,
        CheckpointOwnershipError,
        CheckpointStore,
        CollectContext,
        Operation,
        RestoreResult,
    )
    from phoenix_protocol.services._sessions import SessionStart, SessionStore

__all__ = [
    "Agent",
    "AgentState",
    "Checkpoint",
    "CheckpointInfo",
    "CheckpointOwnershipError",
    "CheckpointStore",
    "Clock",
    "CollectContext",
    "Config",
    "ConfigError",
    "CorruptStateError",
    "Home",
    "Identity",
    "IdentityCoreError",
    "IdentityRepair",
    "IdentityStore",
    "InvalidIdError",
    "LockTimeoutError",
    "ManualClock",
    "NotFoundError",
    "Operation",
    "OperationError",
    "OpsLog",
    "PhoenixError",
    "RefusedError",
    "RestoreResult",
    "SchemaVersionError",
    "SessionStart",
    "SessionStore",
    "StateStore",
    "StatusRefusedError",
    "StorageError",
    "SystemClock",
    "UsageError",
    "__version__",
    "load_config",
    "redact",
    "validate_id",
]

_LOCATIONS = {
    "Agent": "services._agent",
    "AgentState": "agent._state",
    "Checkpoint": "services._checkpoints",
    "CheckpointInfo": "services._checkpoints",
    "CheckpointOwnershipError": "services._checkpoints",
    "CheckpointStore": "services._checkpoints",
    "Clock": "core._clock",
    "CollectContext": "services._checkpoints",
    "Config": "core._config",
    "ConfigError": "core._errors",
    "CorruptStateError": "core._errors",
    "Home": "core._home",
    "Identity": "agent._identity",
    "IdentityCoreError": "agent._identity",
    "IdentityRepair": "agent._identity",
    "IdentityStore": "agent._identity",
    "InvalidIdError": "core._errors",
    "LockTimeoutError": "core._errors",
    "ManualClock": "core._clock",
    "NotFoundError": "core._errors",
    "Operation": "services._checkpoints",
    "OperationError": "core._errors",
    "OpsLog": "agent._ops",
    "PhoenixError": "core._errors",
    "RefusedError": "core._errors",
    "RestoreResult": "services._checkpoints",
    "SchemaVersionError": "core._errors",
    "SessionStart": "services._sessions",
    "SessionStore": "services._sessions",
    "StateStore": "agent._state",
    "StatusRefusedError": "core._errors",
    "StorageError": "core._errors",
    "SystemClock": "core._clock",
    "UsageError": "core._errors",
    "load_config": "core._config",
    "redact": "core._redact",
    "validate_id": "core._ids",
}


def __getattr__(name: str) -> object:
    module = _LOCATIONS.get(name)
    if module is None:
        raise AttributeError(f"module 'phoenix_protocol' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"phoenix_protocol.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
