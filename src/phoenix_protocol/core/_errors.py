"""The exception hierarchy of Phoenix Protocol.

Every error the library raises on purpose is a ``PhoenixError``::

    PhoenixError
    ├── UsageError              the caller asked for something invalid; nothing was written
    │   ├── InvalidIdError      an agent/team/session id outside the safe alphabet
    │   ├── ConfigError         a configuration file or variable that cannot be used
    │   └── NotFoundError       the thing named does not exist (or is not the caller's, on the server)
    │       └── TeamNotFoundError   no such team in the home (_teams)
    └── OperationError          a valid request that could not be carried out
        ├── StorageError        the file system refused a read or a write (wraps the OSError)
        │   └── LockTimeoutError  another process held the lock for too long
        ├── CorruptStateError   a file exists but cannot be parsed; run ``phx doctor``
        │   └── UnsafeFileError   not a regular file of this user in the home (a FIFO, a symlink, ...), or too large
        ├── SchemaVersionError  a record written by a newer Phoenix than this one
        ├── RefusedError        a request Phoenix declines on purpose, and why
        │   ├── StatusRefusedError        precedence watchdog > hook > model
        │   ├── IdentityCoreError         the sealed immutable core of an identity (_identity)
        │   ├── CheckpointOwnershipError  another agent's checkpoint (_checkpoints)
        │   ├── ClaimConflictError        a task another teammate holds (_teams)
        │   └── TeamReadOnlyError         a completed team (_teams)
        └── ClinicGaveUp        the Clinic exhausted its recoveries (clinic; carries every trauma)

Messages say what happened and what to do next, in one line.

This module is on the hook hot path: it imports nothing.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CorruptStateError",
    "InvalidIdError",
    "LockTimeoutError",
    "NotFoundError",
    "OperationError",
    "PhoenixError",
    "RefusedError",
    "SchemaVersionError",
    "StatusRefusedError",
    "StorageError",
    "UnsafeFileError",
    "UsageError",
]


class PhoenixError(Exception):
    """Base of every error Phoenix Protocol raises on purpose."""


class UsageError(PhoenixError):
    """The request itself is invalid (bad id, bad value, bad option); nothing was changed."""


class InvalidIdError(UsageError, ValueError):
    """An id (agent, team, session, ...) is empty, too long, or has characters outside the safe set."""


class ConfigError(UsageError):
    """A configuration file or ``PHOENIX_*`` variable has a value Phoenix cannot use."""


class NotFoundError(UsageError):
    """What the request names (a checkpoint, a memory, a task, a team) does not exist; nothing changed."""


class OperationError(PhoenixError):
    """A valid request failed while it was being carried out."""


class StorageError(OperationError):
    """The file system refused an operation. ``path`` names the file; the cause is chained."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class LockTimeoutError(StorageError):
    """A cross-process lock stayed held by another process for longer than the timeout."""


class CorruptStateError(OperationError):
    """A file exists but its content cannot be read as what it should be.

    The file is left as it is. ``phx doctor`` rebuilds it from the ops log.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class UnsafeFileError(CorruptStateError):
    """A path Phoenix reads or writes is something it must not touch: not a regular file (a FIFO,
    a device, a socket, a directory), a symbolic link, a file or directory in the home owned by
    another user, or a file larger than Phoenix reads from it. Refused without blocking and
    without following it; the entry is left as it is. ``phx doctor`` moves it aside.

    ``kind``: ``symlink``, ``fifo``, ``socket``, ``device``, ``directory``, ``not-directory``,
    ``foreign-owner`` or ``too-large``."""

    def __init__(self, message: str, *, path: str | None = None, kind: str = "") -> None:
        super().__init__(message, path=path)
        self.kind = kind


class SchemaVersionError(OperationError):
    """A record carries a ``schema_version`` newer than this version of Phoenix understands."""

    def __init__(self, message: str, *, path: str | None = None, found: int = 0, supported: int = 0) -> None:
        super().__init__(message)
        self.path = path
        self.found = found
        self.supported = supported


class RefusedError(OperationError):
    """Phoenix declined the request on purpose (precedence, a sealed core, ownership); nothing changed."""


class StatusRefusedError(RefusedError):
    """A status change refused because a higher-precedence source set the current status.

    Precedence is watchdog > hook > model: a verdict about a session (the watchdog judging its
    process dead, the SessionEnd hook closing it) cannot be contradicted by a lower-ranked write
    from that same session. ``--force`` overrides it, and says so in the ops log.
    """
