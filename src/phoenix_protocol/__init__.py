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
    from phoenix_protocol._agent import Agent
    from phoenix_protocol._checkpoints import (
        Checkpoint,
        CheckpointInfo,
        CheckpointOwnershipError,
        CheckpointStore,
        CollectContext,
        Operation,
        RestoreResult,
    )
    from phoenix_protocol._clock import Clock, ManualClock, SystemClock
    from phoenix_protocol._config import Config, load_config
    from phoenix_protocol._errors import (
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
    from phoenix_protocol._home import Home
    from phoenix_protocol._identity import Identity, IdentityCoreError, IdentityRepair, IdentityStore
    from phoenix_protocol._ids import validate_id
    from phoenix_protocol._ops import OpsLog
    from phoenix_protocol._redact import redact
    from phoenix_protocol._sessions import SessionStart, SessionStore
    from phoenix_protocol._state import AgentState, StateStore

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
    "Agent": "_agent",
    "AgentState": "_state",
    "Checkpoint": "_checkpoints",
    "CheckpointInfo": "_checkpoints",
    "CheckpointOwnershipError": "_checkpoints",
    "CheckpointStore": "_checkpoints",
    "Clock": "_clock",
    "CollectContext": "_checkpoints",
    "Config": "_config",
    "ConfigError": "_errors",
    "CorruptStateError": "_errors",
    "Home": "_home",
    "Identity": "_identity",
    "IdentityCoreError": "_identity",
    "IdentityRepair": "_identity",
    "IdentityStore": "_identity",
    "InvalidIdError": "_errors",
    "LockTimeoutError": "_errors",
    "ManualClock": "_clock",
    "NotFoundError": "_errors",
    "Operation": "_checkpoints",
    "OperationError": "_errors",
    "OpsLog": "_ops",
    "PhoenixError": "_errors",
    "RefusedError": "_errors",
    "RestoreResult": "_checkpoints",
    "SchemaVersionError": "_errors",
    "SessionStart": "_sessions",
    "SessionStore": "_sessions",
    "StateStore": "_state",
    "StatusRefusedError": "_errors",
    "StorageError": "_errors",
    "SystemClock": "_clock",
    "UsageError": "_errors",
    "load_config": "_config",
    "redact": "_redact",
    "validate_id": "_ids",
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
