"""Checkpoints (seed 003, with seed 002's session sections): typed, verified snapshots of an agent.

Each checkpoint is named by seed 003's convention
``<agent_id>_<timestamp>_<checkpoint_type>.checkpoint``; the timestamp is
``YYYYmmddHHMMSSmmm-<seq>`` (milliseconds plus a per-agent sequence number), so names are unique
even when many are taken within one second, and order is by ``seq``, never by clock.

Its body is one JSON envelope, indented by two spaces (so each top-level key starts a line with
exactly two spaces; a long list inside a section, such as a conversation's messages, is written on
one line, see ``redact_sections``)::

    {
      "kind": "phoenix.checkpoint", "schema_version": 1, "agent_id": "zero", "seq": 42,
      "timestamp": "...Z", "timestamp_ms": ..., "checkpoint_type": "routine", "version": "1.0",
      "summary": ..., "operation": {...} | null,
      "state": {"current_task": {...}, "mailbox": {...}, "operational_context": {...}, "memory": {...}},
      "metadata": {...}, "context": {...}, "recent_memories": {...}, "identity_updates": {...},
      "working_memory": {...}, "extensions": {...}
    }

and its checksum, ``xxh3-128:<hex>`` of those bytes, is kept beside it.

Every read verifies the checksum and the schema version; ``latest`` never returns a torn or
corrupt checkpoint: it reports it and falls back to the newest valid one.

Sections are filled by *providers*: ``store.register(section, collector, restorer)``. Default
providers (``_checkpoint_providers``) collect from the agent's state.json, ops log, brief, git
and identity, so a checkpoint works out of the box for any agent.

Retention is enforced on every write: routine keeps the newest ``keep_routine`` (3); a
pre-operation checkpoint lives until its operation completes successfully and is kept if it fails
(``with store.pre_operation("migrate db"):``); recovery checkpoints are kept
``recovery_retention_days`` (7); session checkpoints the newest ``keep_session_checkpoints``.

Where they are kept: rows of the home's database (``store._checkpoints.CheckpointRows``), on
SQLite (``phoenix.db``, the default) or PostgreSQL, whichever the ``store`` setting names. The
body is the envelope below without its checksum, which has a column of its own; a write is one
transaction, durable when ``create`` returns. A crash leaves the old or the new checkpoint as
``latest``, never a torn one. ``export`` writes them as seed 003's named files.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

import xxhash

from phoenix_protocol.core._clock import iso_from_ms
from phoenix_protocol.core._errors import (
    CorruptStateError,
    NotFoundError,
    PhoenixError,
    RefusedError,
    SchemaVersionError,
    UsageError,
)
from phoenix_protocol.core._ids import validate_id
from phoenix_protocol.core._jsonio import (
    JSONError,
    dumps_indented_bytes,
    dumps_indented_exact,
    loads,
    loads_large,
    valid_text,
)
from phoenix_protocol.store._checkpoints import (
    CHECKPOINT_TYPES,
    LEGACY,
    SUFFIX,
    CheckpointInfo,
    CheckpointRows,
    Stored,
    View,
    make_name,
    parse_name,
)

if TYPE_CHECKING:
    from phoenix_protocol.agent._state import AgentState
    from phoenix_protocol.core._jsonio import JSON
    from phoenix_protocol.services._agent import Agent

__all__ = [
    "CHECKPOINT_TYPES",
    "SECTIONS",
    "Checkpoint",
    "CheckpointInfo",
    "CheckpointOwnershipError",
    "CheckpointStore",
    "CollectContext",
    "Operation",
    "RestoreResult",
    "checkpoint_number",
    "clean_reason",
    "joined_problems",
    "make_name",
    "parse_name",
]

T = TypeVar("T")

SCHEMA_VERSION = 1
KIND = "phoenix.checkpoint"
FORMAT_VERSION = "1.0"
STATE_SECTIONS = ("current_task", "mailbox", "operational_context", "memory")
"""Seed 003's sections, stored under ``state``."""
SESSION_SECTIONS = ("context", "recent_memories", "identity_updates", "working_memory")
"""Seed 002's (PAIF) sections, stored at the top level (``metadata`` is written by the store)."""
SECTIONS = STATE_SECTIONS + SESSION_SECTIONS
RESERVED_NAMES = frozenset(
    {
        "kind",
        "schema_version",
        "agent_id",
        "seq",
        "timestamp",
        "timestamp_ms",
        "checkpoint_type",
        "version",
        "summary",
        "operation",
        "state",
        "metadata",
        "extensions",
        "checksum",
        "exact_numbers",
    }
)
"""The envelope's own fields: no section may take one of these names (``metadata`` would be
stored under ``extensions`` and read back as the envelope's)."""
EXACT_NUMBERS = "exact_numbers"
"""Envelope key set (``true``) when the body holds numbers the fast JSON reader would not read
exactly (integers beyond 64 bits): such a body is read with the standard library's reader."""
KEPT_COPIES = ("identity", "phoenix_state")
"""Sections Phoenix repairs from (``phx doctor`` writes identity.yaml back from the newest copy;
``restore`` puts the task and notes back): while identity.yaml or state.json does not read, so
that Phoenix's own collector fails its section, retention keeps the newest checkpoint that holds a
good copy (``_holders``), whatever its type or age, so that the last one is never pruned away.
Not for a collector of the user's own under those names, nor for the identity on the PostgreSQL
store (the server's record is what ``phx doctor`` restores from there)."""
SECTION_FAILED = "collector_failed"
"""The key that marks a section's content as the error its collector met, not its data:
``{"error": "...", "collector_failed": true}``. ``restore`` does not hand such a section to its
restorer (it reports it); ``create`` reports it in its ops event."""
_CHECKSUM_MARK = b'\n  "checksum": "'


class CheckpointOwnershipError(RefusedError):
    """A checkpoint of another agent was asked to be restored (seed 003 refuses it)."""


class Checkpoint:
    """A checkpoint read from disk, checksum and schema verified. ``data`` is the envelope."""

    def __init__(self, path: str, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def agent_id(self) -> str:
        return str(self.data["agent_id"])

    @property
    def seq(self) -> int:
        return int(self.data["seq"])

    @property
    def checkpoint_type(self) -> str:
        return str(self.data["checkpoint_type"])

    @property
    def timestamp(self) -> str:
        return str(self.data["timestamp"])

    @property
    def summary(self) -> str | None:
        value = self.data.get("summary")
        return value if isinstance(value, str) else None

    def section(self, name: str) -> JSON:
        """A section's content: seed 003's under ``state``, the others at the top level,
        registered custom sections under ``extensions``."""
        if name in STATE_SECTIONS:
            return (self.data.get("state") or {}).get(name)
        if name in SESSION_SECTIONS or name == "metadata":
            return self.data.get(name)
        return (self.data.get("extensions") or {}).get(name)

    def info(self) -> CheckpointInfo:
        op = self.data.get("operation") or {}
        return CheckpointInfo(
            self.name,
            self.seq,
            self.checkpoint_type,
            int(self.data["timestamp_ms"]),
            label=self.data.get("summary"),
            operation_id=op.get("id") if isinstance(op, dict) else None,
        )


class CollectContext:
    """What a collector gets: the agent, the checkpoint being built, and the call's arguments."""

    def __init__(self, agent: Agent, checkpoint_type: str, summary: str | None, extra: dict[str, Any]) -> None:
        self.agent = agent
        self.checkpoint_type = checkpoint_type
        self.summary = summary
        self.extra = extra
        self._cache: dict[str, object] = {}

    def cached(self, key: str, compute: Callable[[], T]) -> T:
        """Compute something once per checkpoint (state, ops tail, git) for every collector
        (one key, one kind of value: the value computed first is returned)."""
        if key not in self._cache:
            self._cache[key] = compute()
        return cast("T", self._cache[key])


class RestoreResult:
    """What a restore did: the checkpoint, and what each restorer reported."""

    def __init__(self, checkpoint: Checkpoint, applied: dict[str, Any], problems: list[str]) -> None:
        self.checkpoint = checkpoint
        self.applied = applied
        self.problems = problems

    def as_dict(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint.name, "applied": self.applied, "problems": self.problems}


class Operation:
    """A risky operation guarded by a pre-operation checkpoint (see ``CheckpointStore.pre_operation``)."""

    def __init__(self, op_id: str, name: str, checkpoint: CheckpointInfo) -> None:
        self.id = op_id
        self.name = name
        self.checkpoint = checkpoint


Collector = Callable[[CollectContext], Any]
Restorer = Callable[[Any, "Agent", bool], Any]


# -- secret redaction of the sections, with long lists a slice at a time -------------------------

LONG_LIST = 128
"""A list of at least this many items inside the sections is redacted and encoded in slices."""
_SLICE = 64
_CLEAN_SLICES_MAX = 100_000
_clean_slices: dict[bytes, None] = {}  # xxh3-128 of the JSON of slices found clean (plain JSON only)


def redact_sections(sections: dict[str, Any]) -> dict[str, Any]:
    """``redact_value(sections)``, except that each list of ``LONG_LIST`` items or more found
    among dict values comes back as an ``orjson.Fragment`` of its redacted JSON (compact, one
    line in the body).

    Such a list is encoded ``_SLICE`` items at a time; a slice whose encoding was found clean
    before (the same bytes, plain JSON types only) is not walked again. An agent's state is
    mostly what its previous checkpoint held (a conversation grows at its end), and encoding a
    slice in C costs a fraction of walking its strings in Python: for a 1 MB conversation the
    walk took 0.72 ms and the envelope's encoding 0.46 ms, this 0.42-0.58 ms, its encoding being
    the body's (measured with the codecs line of an earlier bench/checkpoints_vs_langgraph.py;
    not encoded twice).
    Equivalent to ``redact_value``: a list item's redaction never depends on where the list is
    (only a string directly under a secret-named key is redacted for its key), and a slice
    holding anything but dicts with string keys, lists, strings, numbers, booleans and null is
    walked every time. Raises what ``redact_value`` raises (NaN and the infinities).
    """
    from phoenix_protocol.core._redact import redact_value

    if not any(_holds_long_list(v) for v in sections.values()):
        return redact_value(sections)  # type: ignore[return-value]  # the common, small case
    return _redact_long_lists(sections, _DEPTH)  # type: ignore[return-value]


_DEPTH = 4  # how deep below the sections long lists are looked for (deeper ones: the usual walk)


SUMMARY_LIMIT = 2000
"""Characters a checkpoint's summary keeps (what was done and what remains, not a transcript)."""


def _cut(summary: str) -> str:
    """``summary`` within ``SUMMARY_LIMIT`` characters, saying so when it was longer."""
    if len(summary) <= SUMMARY_LIMIT:
        return summary
    marker = f" \u2026 [cut: {len(summary):,} characters]"
    return summary[: SUMMARY_LIMIT - len(marker)].rstrip() + marker


REASON_LIMIT = 500
"""The longest reason of a forced refresh or an emergency recovery kept (``clean_reason``)."""


def clean_reason(reason: str) -> str:
    """The reason of a forced refresh or an emergency recovery as it is stored everywhere
    (``refresh_requested`` in state.json, the ops events, the checkpoint's summary, the report to
    the team lead): on one line, secrets redacted, at most ``REASON_LIMIT`` characters."""
    from phoenix_protocol.core._redact import redact

    if not isinstance(reason, str):
        raise UsageError(f"a recovery's reason must be text, not {type(reason).__name__}.")
    clean = redact(" ".join(valid_text(reason).split()))
    return clean if len(clean) <= REASON_LIMIT else clean[: REASON_LIMIT - 1] + "\u2026"


def _identity_files(agent: Agent) -> tuple[Any, ...] | None:
    """identity.yaml and identity.digest as they are now (inode, size, times; ``None``: missing):
    what ``_failing_now`` found to read before, it does not read again."""
    out: list[Any] = []
    for path in (agent.identity.path, agent.identity.digest_path):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            out.append(None)
            continue
        except OSError:
            return None  # a file that cannot be looked at: read it (and fail) every time
        out.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(out)


def good_copy(section: str, value: object) -> bool:
    """Whether ``value`` is a copy of ``section`` Phoenix can repair from (``KEPT_COPIES``): the
    identity's document and seal, or the state's snapshot (not a collector's error)."""
    if type(value) is not dict or failed_section(value):
        return False
    if section == "identity":
        return isinstance(value.get("document"), dict) and isinstance(value.get("digest"), str)
    return True


def failed_section(value: object) -> bool:
    """Whether a section's content is the error its collector met (``SECTION_FAILED``)."""
    return type(value) is dict and value.get(SECTION_FAILED) is True and "error" in value


def writable_sections(sections: dict[str, Any], *, redacted: bool) -> dict[str, Any]:
    """``sections`` (redacted first unless ``redacted``) with each one JSON cannot hold (NaN or an
    infinity, a set, bytes, an object, a cycle) replaced by ``{"error": ...}``, as a collector
    that raised is: one provider's bad value does not cost the checkpoint the other sections."""
    from phoenix_protocol.core._redact import redact

    out: dict[str, Any] = {}
    for key, value in sections.items():
        try:
            clean = value if redacted else redact_sections({key: value})[key]
            dumps_indented_bytes({key: clean})
        except (TypeError, ValueError, RecursionError) as exc:
            message = f"{type(exc).__name__}: {exc} (the collector returned what JSON cannot hold)"
            clean = {"error": redact(message), SECTION_FAILED: True}
        out[key] = clean
    return out


def _apart(value: object) -> bool:
    """Walked on its own rather than by ``redact_value``: a dict (it may hold a long list) or a
    long list."""
    return type(value) is dict or (type(value) is list and len(value) >= LONG_LIST)


def _holds_long_list(value: object) -> bool:
    """A long list is the value or one of its dict's values (a quick look before the walk)."""
    if type(value) is list:
        return _apart(value)
    if type(value) is dict:
        return any(_apart(v) for v in value.values())
    return False


def _redact_long_lists(value: object, depth: int) -> object:
    from phoenix_protocol.core._redact import redact_value

    if type(value) is list and len(value) >= LONG_LIST:
        return _redact_long_list(value)
    if type(value) is not dict or depth <= 0:
        return redact_value(value)
    nested = [k for k, v in value.items() if _apart(v)]
    if not nested:
        return redact_value(value)
    out: dict[Any, Any] = dict(value)
    skip = set(nested)
    rest: dict[Any, Any] = redact_value({k: v for k, v in value.items() if k not in skip})  # type: ignore[assignment]
    out.update(rest)  # keys and strings as usual
    for key in nested:
        out[key] = _redact_long_lists(value[key], depth - 1)
    return out


def _redact_long_list(items: list[Any]) -> object:
    import orjson

    from phoenix_protocol.core._redact import redact_value

    option = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
    parts: list[bytes | memoryview] = [b"["]
    for start in range(0, len(items), _SLICE):
        piece = items[start : start + _SLICE]
        try:
            encoded = orjson.dumps(piece, option=option)
        except (TypeError, orjson.JSONEncodeError):
            return redact_value(items)  # not plain JSON (or not JSON at all): the usual walk, as a list
        digest = xxhash.xxh3_128_digest(encoded)
        if digest not in _clean_slices:
            redacted = redact_value(piece)
            if redacted is not piece:
                encoded = orjson.dumps(redacted, option=option)
            elif _plain(piece):
                if len(_clean_slices) >= _CLEAN_SLICES_MAX:
                    _clean_slices.clear()
                _clean_slices[digest] = None
        parts += (memoryview(encoded)[1:-1], b",")
    parts[-1] = b"]"
    return orjson.Fragment(b"".join(parts))  # one copy (a large buffer costs its page faults)


def _plain(value: object) -> bool:
    """Only dicts with string keys, lists, strings, ints, floats, booleans and None, all the way
    down (exact types): what a slice's JSON says it is."""
    t = type(value)
    if t is str or t is int or t is float or t is bool or value is None:
        return True
    if t is list:
        return all(_plain(v) for v in value)  # type: ignore[attr-defined]
    if t is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())  # type: ignore[attr-defined]
    return False


def encode(envelope: dict[str, Any]) -> tuple[bytes, str]:
    """The body for ``envelope`` (seed 003's JSON document, indented by two spaces) and its
    checksum, ``xxh3-128:<hex>`` of those bytes."""
    if "checksum" in envelope:
        envelope = {k: v for k, v in envelope.items() if k != "checksum"}
    body, exact = dumps_indented_exact(envelope)
    if exact and envelope.get(EXACT_NUMBERS) is not True:
        # Written by the standard library (an integer beyond 64 bits, say): readers are told to
        # read it with it too (the fast reader would turn such an integer into a float).
        body, _ = dumps_indented_exact({**envelope, EXACT_NUMBERS: True})
    return body, "xxh3-128:" + xxhash.xxh3_128_hexdigest(body)


def _hexdigest(algorithm: str, parts: tuple[bytes | memoryview, ...]) -> str | None:
    """The hex digest of ``parts`` by a checksum's algorithm (``None``: not one we know)."""
    if algorithm == "xxh3-128":
        xx = xxhash.xxh3_128()
        for part in parts:
            xx.update(part)
        return xx.hexdigest()
    if algorithm == "sha256":  # checkpoints written before Phoenix 0.1 moved to xxh3
        sha = hashlib.sha256()
        for part in parts:
            sha.update(part)
        return sha.hexdigest()
    return None


def _digest(algorithm: bytes, head: memoryview) -> bytes | None:
    found = _hexdigest(algorithm.decode("ascii", "replace"), (head,))
    return None if found is None else found.encode()


def decode(data: bytes, path: str) -> dict[str, Any]:
    """Verify a checkpoint file of an earlier release (the document, then a checksum line over
    every byte before it) and return the envelope."""
    mark = data.rfind(_CHECKSUM_MARK)
    if mark < 0:
        raise CorruptStateError(f"{path}: no checksum line (torn or not a checkpoint).", path=path)
    head = memoryview(data)[: mark + 1]
    start = mark + len(_CHECKSUM_MARK)
    end = data.find(b'"', start, start + 256)
    algorithm, _, stored = data[start : max(end, start)].partition(b":")
    expected = _digest(algorithm, head)
    if expected is None:
        raise CorruptStateError(
            f"{path}: checksum algorithm {algorithm.decode('ascii', 'replace')!r} is unknown (damaged, or "
            "written by a newer Phoenix).",
            path=path,
        )
    if expected != stored:
        raise CorruptStateError(f"{path}: checksum mismatch (the file was damaged or edited).", path=path)
    return _envelope(data, path)


def from_file(data: bytes, path: str) -> tuple[Stored, dict[str, Any] | None]:
    """A checkpoint file of an earlier release as it is stored now: its document as the content,
    its checksum line's checksum as ``line:<algorithm>:<hex>``, and its envelope; a file that
    does not verify is kept as it is (``legacy``: reported on every read), with ``None``."""
    try:
        envelope = decode(data, path)
    except (CorruptStateError, SchemaVersionError):
        return Stored(b"", LEGACY, data), None
    mark = data.rfind(_CHECKSUM_MARK)
    start = mark + len(_CHECKSUM_MARK)
    end = data.find(b'"', start)
    if data[mark - 1 : mark] != b",":
        return Stored(b"", LEGACY, data), envelope
    content = data[: mark - 1] + b"\n}"
    return Stored(content, "line:" + data[start:end].decode("ascii"), None), envelope


def verify(stored: Stored, path: str) -> dict[str, Any]:
    """Verify a stored body against its checksum and its schema version; return the envelope."""
    checksum = stored.checksum
    if checksum == LEGACY:
        if stored.legacy is None:
            raise CorruptStateError(f"{path}: no body kept (damaged).", path=path)
        return decode(stored.legacy, path)
    content = stored.content
    line = checksum.startswith("line:")
    algorithm, _, expected = checksum.removeprefix("line:").partition(":")
    if line:
        if not content.endswith(b"\n}"):
            raise CorruptStateError(f"{path}: checksum mismatch (the body was damaged or edited).", path=path)
        parts: tuple[bytes | memoryview, ...] = (memoryview(content)[:-2], b",\n")
    else:
        parts = (content,)
    found = _hexdigest(algorithm, parts)
    if found is None:
        raise CorruptStateError(
            f"{path}: checksum algorithm {algorithm!r} is unknown (damaged, or written by a newer Phoenix).", path=path
        )
    if found != expected:
        raise CorruptStateError(f"{path}: checksum mismatch (the body was damaged or edited).", path=path)
    return _envelope(content, path)


def _envelope(data: bytes, path: str) -> dict[str, Any]:
    """The envelope of verified bytes, its kind, schema version and keys checked."""
    try:
        envelope = loads_large(data)
    except JSONError as exc:
        raise CorruptStateError(f"{path}: not valid JSON ({exc}).", path=path) from None
    if not isinstance(envelope, dict) or envelope.get("kind") != KIND:
        raise CorruptStateError(f"{path}: not a Phoenix checkpoint.", path=path)
    if envelope.get(EXACT_NUMBERS) is True:
        exact = loads(data)  # integers beyond 64 bits, read exactly (see ``encode``)
        if isinstance(exact, dict):
            envelope = exact
    version = envelope.get("schema_version")
    if not isinstance(version, int) or version < 1:
        raise CorruptStateError(f"{path}: schema_version {version!r} is not a version number.", path=path)
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path} was written by a newer Phoenix (checkpoint schema {version}; this one reads up to "
            f"{SCHEMA_VERSION}). Upgrade phoenix-protocol to read it.",
            path=path,
            found=version,
            supported=SCHEMA_VERSION,
        )
    for key in ("agent_id", "seq", "checkpoint_type", "timestamp_ms"):
        if key not in envelope:
            raise CorruptStateError(f"{path}: missing {key!r}.", path=path)
    envelope.pop("checksum", None)
    return envelope


def joined_problems(problems: Iterable[str]) -> str:
    """Problems met reading checkpoints (sentences, most ending in a full stop) on one line, for
    a message that quotes them: separated by "; ", without their full stops."""
    return "; ".join(problem.rstrip(". ") for problem in problems)


MARK_LOCK_TIMEOUT = 0.25
"""Seconds ``create`` waits for the state's lock to note when a checkpoint was taken."""


def checkpoint_number(ref: str) -> int | None:
    """The number (seq) ``ref`` gives a checkpoint by, written ``7`` or ``#7``; ``None``: ``ref``
    is not a number (a name, perhaps)."""
    digits = ref.removeprefix("#")
    return int(digits) if digits.isascii() and digits.isdecimal() else None


def _named(name: str, path: str, envelope: dict[str, Any]) -> Checkpoint:
    """The checkpoint read as ``name``, once its content is found to be that checkpoint: the number
    and the type its name gives (the catalogue lists it by its name). A checkpoint renamed, or another
    checkpoint of the same agent copied under this name, is damage; another agent's checkpoint is
    refused as such by ``restore`` and ``latest``."""
    seq, kind = envelope["seq"], envelope["checkpoint_type"]
    if type(seq) is not int or not name.endswith(f"-{seq:08d}_{kind}{SUFFIX}"):
        if not name.startswith(f"{envelope['agent_id']}_"):
            return Checkpoint(path, envelope)  # another agent's: its owner is what is wrong
        raise CorruptStateError(
            f"{path}: its content is checkpoint #{seq} ({kind}), not the one its name says (renamed, or "
            "copied over by hand).",
            path=path,
        )
    return Checkpoint(path, envelope)


class CheckpointStore:
    """One agent's checkpoints. Get it as ``agent.checkpoints``."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._collectors: dict[str, Collector] = {}
        self._restorers: dict[str, Restorer] = {}
        self._taking = threading.RLock()  # one checkpoint at a time per process (see ``create``)
        # The identity files as last found to read (``_failing_now``).
        self._identity_read_fine: tuple[Any, ...] | None = None
        self._backend: CheckpointRows | None = None
        from phoenix_protocol.services._checkpoint_providers import register_defaults

        register_defaults(self)

    @property
    def backend(self) -> CheckpointRows:
        """The agent's rows in the home's database (opened on first use; an agent's checkpoint
        files left by an earlier release are imported first: ``_checkpoint_import``)."""
        if self._backend is None:
            from phoenix_protocol.services._checkpoint_import import importer
            from phoenix_protocol.store._db import open_database

            config = self.agent.config
            rows = CheckpointRows(
                open_database(self.agent.home, config),
                self.agent.id,
                keep_routine=config.keep_routine,
                keep_session=config.keep_session_checkpoints,
            )
            rows.before_use = importer(self.agent, rows.db)
            self._backend = rows
        return self._backend

    # -- providers ------------------------------------------------------------------------

    def register(self, section: str, collector: Collector | None = None, restorer: Restorer | None = None) -> None:
        """Register (or replace) the collector and/or restorer of a section.

        ``collector(ctx) -> value`` returns the section's JSON content; ``restorer(value, agent,
        force) -> report`` applies it and returns what it did (``force`` means overwrite current
        state). Sections other than the seed's are stored under ``extensions``.
        """
        validate_id(section, "section name")
        if section in RESERVED_NAMES:
            raise UsageError(
                f"{section!r} is a field of the checkpoint itself, not a section: choose another name "
                f"(reserved: {', '.join(sorted(RESERVED_NAMES))})."
            )
        # Copied, not changed in place: a checkpoint being taken in another thread goes on with
        # the providers it started with.
        if collector is not None:
            self._collectors = {**self._collectors, section: collector}
        if restorer is not None:
            self._restorers = {**self._restorers, section: restorer}

    def unregister(self, section: str) -> None:
        """Remove the collector and the restorer of a section (the default ones too); checkpoints
        taken from then on do not hold it. Unknown sections are ignored."""
        self._collectors = {k: v for k, v in self._collectors.items() if k != section}
        self._restorers = {k: v for k, v in self._restorers.items() if k != section}

    def sections(self) -> list[str]:
        """Every section with a collector."""
        return list(self._collectors)

    # -- reading ---------------------------------------------------------------------------

    def flush(self) -> None:
        """Write this process's ``checkpoint_created`` events to the ops log now (they follow the
        checkpoint, which is durable when ``create`` returns)."""
        self.agent.ops.flush_later()

    def entries(self, checkpoint_type: str | None = None, *, limit: int | None = None) -> list[CheckpointInfo]:
        """Checkpoints stored, newest first (the catalogue's columns; no body is read); at most ``limit``
        (at least 1; any number above the count lists them all)."""
        if checkpoint_type is not None and checkpoint_type not in CHECKPOINT_TYPES:
            raise UsageError(f"checkpoint type must be one of {', '.join(CHECKPOINT_TYPES)}, not {checkpoint_type!r}.")
        if limit is not None:
            if type(limit) is not int or limit < 1:
                raise UsageError(f"a limit must be a whole number of at least 1, not {limit!r}.")
            limit = min(limit, sys.maxsize)  # islice and SQL take no more
        return list(self.backend.newest(checkpoint_type, limit))

    def check_name(self, name: str) -> str:
        """``name`` if it is a checkpoint's name, else a ``UsageError``."""
        if os.path.basename(name) != name or parse_name(name) is None:
            raise UsageError(f"{name!r} is not a checkpoint name (see `phx checkpoint list`).")
        return name

    def resolve(self, ref: str) -> str:
        """The name of the checkpoint ``ref`` designates: its name (returned as it is, once
        validated), or its number (``seq``: the ``#`` column of ``phx checkpoint list``) written
        ``7`` or ``#7``. A number no checkpoint of this agent holds is a ``NotFoundError``."""
        seq = checkpoint_number(ref)
        if seq is not None:
            for info in self.backend.newest(None, None):  # newest first: seqs go down
                if info.seq <= seq:
                    if info.seq == seq:
                        return info.name
                    break
            raise NotFoundError(f"agent {self.agent.id!r} has no checkpoint #{seq} (see `phx checkpoint list`).")
        return self.check_name(ref)

    def read(self, name: str) -> Checkpoint:
        """Read and verify one checkpoint by name or number (see ``resolve``). A name that says it
        is another agent's is refused (``CheckpointOwnershipError``), as ``restore`` refuses its
        content."""
        name = self.resolve(name)
        parsed = parse_name(name)
        if parsed is not None and parsed[0] != self.agent.id:  # the name says whose it is
            raise CheckpointOwnershipError(
                f"checkpoint {name} belongs to {parsed[0]}, not {self.agent.id}; "
                "reading or restoring another agent's checkpoint is refused."
            )
        return self._read(name)

    def _read(self, name: str) -> Checkpoint:
        """``read`` of a name known to be well formed (from the catalogue)."""
        path = self.backend.where(name)
        stored = self.backend.read(name)
        if stored is None:
            raise NotFoundError(f"no checkpoint {name!r} for agent {self.agent.id!r} (see `phx checkpoint list`).")
        return _named(name, path, verify(stored, path))

    def latest(self, checkpoint_type: str | None = None) -> tuple[Checkpoint | None, list[str]]:
        """The newest valid checkpoint (of a type), and the problems met on the way: torn or
        corrupt ones are reported and skipped, never returned."""
        problems: list[str] = []
        if checkpoint_type is not None and checkpoint_type not in CHECKPOINT_TYPES:
            raise UsageError(f"checkpoint type must be one of {', '.join(CHECKPOINT_TYPES)}, not {checkpoint_type!r}.")
        for info in self.backend.newest(checkpoint_type, None, reading=True):
            try:
                checkpoint = self._read(info.name)
                if checkpoint.agent_id == self.agent.id:
                    return checkpoint, problems
                problems.append(f"{info.name}: belongs to agent {checkpoint.agent_id!r}, not {self.agent.id!r}")
            except (CorruptStateError, SchemaVersionError) as exc:
                problems.append(str(exc))
            except UsageError:
                problems.append(f"{info.name}: listed but gone (dropped meanwhile)")
        return None, problems

    def export(self, directory: str) -> tuple[list[str], list[str]]:
        """Write each checkpoint, oldest first, as seed 003's named file in ``directory``: its
        JSON document, ``<agent_id>_<timestamp>_<checkpoint_type>.checkpoint`` (0600, replaced
        atomically if there; the directory made 0700 if missing; no other file touched). Each is
        verified first: a damaged one is not written but reported. Returns the names written and
        the problems."""
        from phoenix_protocol.core._durable import atomic_write, ensure_dir

        ensure_dir(directory)
        written: list[str] = []
        problems: list[str] = []
        for info in reversed(list(self.backend.newest(None, None))):
            try:
                checkpoint = self._read(info.name)
                stored = self.backend.read(info.name)
            except (CorruptStateError, SchemaVersionError, NotFoundError) as exc:
                problems.append(str(exc))
                continue
            if stored is None or checkpoint.agent_id != self.agent.id:
                continue
            content = stored.content
            if stored.checksum == LEGACY and stored.legacy is not None:
                content = stored.legacy  # an earlier release's file, verified: written as it was
            atomic_write(os.path.join(directory, info.name), content if content.endswith(b"\n") else content + b"\n")
            written.append(info.name)
        return written, problems

    # -- writing ---------------------------------------------------------------------------

    def collect(self, ctx: CollectContext) -> dict[str, Any]:
        """Run every collector; a failing collector is recorded in the section, not fatal."""
        out: dict[str, Any] = {}
        for section, collector in self._collectors.items():  # a dict registration replaces, never changes
            try:
                out[section] = collector(ctx)
            except Exception as exc:  # noqa: BLE001 - a provider's bug must not cost the checkpoint
                out[section] = {"error": f"{type(exc).__name__}: {exc}", SECTION_FAILED: True}
        return out

    def create(
        self,
        checkpoint_type: str = "routine",
        *,
        summary: str | None = None,
        operation: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        now_ms: int | None = None,
    ) -> CheckpointInfo:
        """Take a checkpoint now; enforce retention; return what was written.

        ``summary`` is stored on one line, redacted, cut to ``SUMMARY_LIMIT`` characters; a blank
        one is stored as none (``None``), as when it is left out.

        The threads of a process take their checkpoints one at a time (collecting included), so
        that a checkpoint's number and time follow the order in which its sections were
        collected: a slow collector in one thread cannot give older data a newer number."""
        if checkpoint_type not in CHECKPOINT_TYPES:
            raise UsageError(f"checkpoint type must be one of {', '.join(CHECKPOINT_TYPES)}, not {checkpoint_type!r}.")
        if summary is not None and not isinstance(summary, str):
            raise UsageError(f"a checkpoint's summary must be text, not {type(summary).__name__}.")
        with self._taking:
            return self._create(checkpoint_type, summary, operation, extra, now_ms)

    def _create(
        self,
        checkpoint_type: str,
        summary: str | None,
        operation: dict[str, Any] | None,
        extra: dict[str, Any] | None,
        now_ms: int | None,
    ) -> CheckpointInfo:
        clean_summary = None
        if summary is not None:
            from phoenix_protocol.core._redact import redact

            clean_summary = _cut(redact(" ".join(valid_text(summary).split()))) or None  # blank: none
        ctx = CollectContext(self.agent, checkpoint_type, clean_summary, dict(extra or {}))
        collected = self.collect(ctx)  # outside the lock: collectors may take their time
        try:
            sections = redact_sections(collected)
        except (TypeError, ValueError, RecursionError):  # a section JSON cannot hold (NaN, a cycle)
            sections = writable_sections(collected, redacted=False)
        state = self.agent.state.read_or_none()
        return self.write_collected(
            checkpoint_type, sections, summary=clean_summary, operation=operation, now_ms=now_ms, state=state
        )

    def write_collected(
        self,
        checkpoint_type: str,
        sections: dict[str, Any],
        *,
        summary: str | None = None,
        operation: dict[str, Any] | None = None,
        now_ms: int | None = None,
        state: AgentState | None = None,
    ) -> CheckpointInfo:
        """The store's part of ``create``: write ``sections``, already collected and redacted
        (``redact_sections``), with ``summary`` already clean, as a checkpoint of
        ``checkpoint_type``: envelope, checksum, one transaction with retention, the ops event.
        ``state``: the agent's state for the session metadata (``None``: none)."""
        clean_summary = summary
        failed = {k for k in KEPT_COPIES if failed_section(sections.get(k))}
        if failed:  # rare: the write path asks nothing more otherwise
            failed.intersection_update(self._kept_copies())
        keep = self._holders(failed) if failed else frozenset()

        def build(
            view: View, completed: Callable[[], set[str]]
        ) -> tuple[CheckpointInfo, bytes, str, list[CheckpointInfo]]:
            nonlocal sections
            next_seq = view.next_seq
            ms = self.agent.clock.now_ms() if now_ms is None else now_ms
            name = make_name(self.agent.id, next_seq, ms, checkpoint_type)
            try:
                data, checksum = encode(envelope_of(next_seq, ms))
            except (TypeError, ValueError, RecursionError):  # a section JSON cannot hold (a set, bytes...)
                sections = writable_sections(sections, redacted=True)
                data, checksum = encode(envelope_of(next_seq, ms))
            info = CheckpointInfo(
                name,
                next_seq,
                checkpoint_type,
                ms,
                label=clean_summary,
                operation_id=(operation or {}).get("id"),
                size=len(data),
            )
            return info, data, checksum, self._retain(view, completed, now_ms=ms, new=info, keep=keep)

        def envelope_of(next_seq: int, ms: int) -> dict[str, Any]:
            envelope: dict[str, Any] = {
                "kind": KIND,
                "schema_version": SCHEMA_VERSION,
                "agent_id": self.agent.id,
                "seq": next_seq,
                "timestamp": iso_from_ms(ms),
                "timestamp_ms": ms,
                "checkpoint_type": checkpoint_type,
                "version": FORMAT_VERSION,
                "summary": clean_summary,
                "operation": operation,
                "state": {k: sections.get(k) for k in STATE_SECTIONS},
                "metadata": self._metadata(ms, state),
            }
            for key in SESSION_SECTIONS:
                envelope[key] = sections.get(key)
            envelope["extensions"] = {k: v for k, v in sections.items() if k not in SECTIONS}
            return envelope

        info, drop = self.backend.write(build)  # one transaction: durable when it returns
        failed_now = sorted(k for k, v in sections.items() if failed_section(v))
        # The event about the checkpoint is written behind (the database holds the record).
        with contextlib.suppress(PhoenixError, OSError):
            self.agent.ensure()
            self.agent.ops.record_later(
                "checkpoint_created",
                "warn" if failed_now else "ok",
                {
                    "name": info.name,
                    "type": checkpoint_type,
                    "seq": info.seq,
                    "size": info.size,
                    "pruned": len(drop),
                    **({"failed_sections": failed_now} if failed_now else {}),
                },
                trusted=True,
                delay=self.agent.config.checkpoint_files_delay,
            )
        self._mark_taken(checkpoint_type, info.timestamp_ms, state)  # not fsynced (see _mark_taken)
        info.failed_sections = tuple(failed_now)
        return info

    def _metadata(self, ms: int, state: AgentState | None) -> dict[str, Any]:
        started = state.session_started_at if state else None
        duration = None
        if state and state.session_started_at:
            from phoenix_protocol.core._clock import ms_from_iso

            with contextlib.suppress(ValueError):
                duration = max(0, (ms - ms_from_iso(state.session_started_at)) // 1000)
        return {
            "agent_id": self.agent.id,
            "session_id": state.session_id if state else None,
            "started_at": started,
            "ended_at": iso_from_ms(ms),
            "duration_seconds": duration,
            "checkpoint_version": FORMAT_VERSION,
            "host": state.host if state else None,
        }

    def _mark_taken(self, checkpoint_type: str, ms: int, current: AgentState | None) -> None:
        """Remember when routine/recovery checkpoints were taken (for ``maybe_checkpoint``).

        Only a working agent's state is written: ``due_checkpoints`` looks at the time only while
        the agent works, and work that starts later starts its own clock (``work_started_ms``).
        """
        if checkpoint_type not in ("routine", "recovery", "session"):
            return
        if current is None or current.status != "working" or current.work_started_ms is None:
            return
        if (current.last_checkpoint_ms or 0) >= ms:
            return  # the heartbeat that asked for this checkpoint already set it

        def mutate(state: Any) -> None:
            state.last_checkpoint_ms = ms

        # A corrupt state.json must not fail the checkpoint, nor a state held locked (a session
        # ending while it is, see ``end_session``) make it wait the whole timeout again: the mark
        # only spares a routine checkpoint, and a state lock is held for milliseconds.
        wait = min(self.agent.config.lock_timeout, MARK_LOCK_TIMEOUT)
        with contextlib.suppress(PhoenixError):
            self.agent.state.change(mutate, durable=False, lock_timeout=wait)

    def _kept_copies(self) -> list[str]:
        """The sections of ``KEPT_COPIES`` this store keeps a last copy of: those Phoenix's own
        collector fills (the identity's only on the file store)."""
        from phoenix_protocol.services import _checkpoint_providers as providers

        own = {"identity": providers.collect_identity, "phoenix_state": providers.collect_state_snapshot}
        return [
            k
            for k in KEPT_COPIES
            if self._collectors.get(k) is own[k] and not (k == "identity" and self.agent.identity.remote is not None)
        ]

    def _failing_now(self) -> set[str]:
        """The sections of ``_kept_copies`` whose file does not read now (what ``prune`` asks,
        instead of reading the newest checkpoint)."""
        from phoenix_protocol.services import _checkpoint_providers as providers

        kept = self._kept_copies()
        if not kept:
            return set()
        ctx = CollectContext(self.agent, "routine", None, {})
        failing = set()
        for section in kept:
            try:
                if section == "identity":
                    files = _identity_files(self.agent)
                    if files is None or files != self._identity_read_fine:  # a YAML parse and a seal check: 2 ms
                        providers.collect_identity(ctx)
                        self._identity_read_fine = files
                else:
                    self.agent.state.read_if_any()
            except PhoenixError:
                failing.add(section)
        return failing

    def _holders(self, missing: set[str]) -> frozenset[str]:
        """The newest checkpoint that holds a good copy of each section of ``missing``
        (``good_copy``), newest first, stopping once each has one: what retention keeps while those
        sections fail (``KEPT_COPIES``). Checkpoints that do not read are passed over. Reads every
        checkpoint newer than the copies kept: only while a file is damaged."""
        keep: set[str] = set()
        wanted = set(missing)
        for info in self.entries():
            if not wanted:
                break
            try:
                checkpoint = self._read(info.name)
            except PhoenixError:
                continue
            if checkpoint.agent_id != self.agent.id:
                continue
            held = {k for k in wanted if good_copy(k, checkpoint.section(k))}
            if held:
                keep.add(info.name)
                wanted -= held
        return frozenset(keep)

    def _retain(
        self,
        view: View,
        completed: Callable[[], set[str]],
        *,
        now_ms: int,
        new: CheckpointInfo | None = None,
        keep: frozenset[str] = frozenset(),
    ) -> list[CheckpointInfo]:
        """What the retention policy drops from the catalogue (plus ``new``, about to be written):
        routine beyond the newest ``keep_routine``, session beyond the newest
        ``keep_session_checkpoints``, recovery older than ``recovery_retention_days``,
        pre-operation whose operation succeeded. Looks only at the types that can drop. Never
        the checkpoints named in ``keep`` (``_holders``)."""
        config = self.agent.config
        groups = view.by_type()

        def of(kind: str) -> list[CheckpointInfo]:
            found = groups.get(kind, [])
            return [*found, new] if new is not None and new.checkpoint_type == kind else found

        def beyond(kind: str, keep: int) -> list[CheckpointInfo]:
            # The oldest past the newest ``keep`` (a partial view holds at least those); the
            # lists stay as they are (a thousand session checkpoints are not copied per write).
            found = groups.get(kind, [])
            extra = int(new is not None and new.checkpoint_type == kind)
            excess = view.count(kind) + extra - keep
            if excess <= 0:
                return []
            dropped = found[:excess]
            if len(dropped) < excess and extra and new is not None:
                dropped.append(new)
            return dropped

        drop = beyond("routine", config.keep_routine) + beyond("session", config.keep_session_checkpoints)
        horizon = now_ms - int(config.recovery_retention_days * 86_400_000)
        drop += [e for e in of("recovery") if e.timestamp_ms < horizon]
        operations = [e for e in of("pre-operation") if e.operation_id is not None]
        if operations:
            done = completed()
            drop += [e for e in operations if e.operation_id in done]
        if keep:
            drop = [e for e in drop if e.name not in keep]
        return sorted(drop, key=lambda e: e.seq) if len(drop) > 1 else drop

    def prune(self) -> list[CheckpointInfo]:
        """Enforce retention now (it is also enforced on every write); returns what was removed.
        While the file of a section of ``KEPT_COPIES`` does not read, the newest checkpoint that
        holds a good copy of it is kept (``_holders``)."""
        now = self.agent.clock.now_ms()
        failed = self._failing_now()
        keep = self._holders(failed) if failed else frozenset()
        drop = self.backend.prune(lambda view, completed: self._retain(view, completed, now_ms=now, keep=keep))
        if drop:
            self.agent.record("checkpoints_pruned", "ok", {"names": [d.name for d in drop]}, trusted=True)
        return drop

    # -- operations --------------------------------------------------------------------------

    def begin_operation(self, name: str) -> Operation:
        """Take a pre-operation checkpoint for operation ``name``; returns the operation to end."""
        from phoenix_protocol.core._redact import redact

        clean = redact(" ".join(name.split()))[:200]
        if not clean:
            raise UsageError("an operation needs a name.")
        ms = self.agent.clock.now_ms()
        op_id = f"op-{ms}-{os.getpid()}-{self._counter()}"
        info = self.create("pre-operation", summary=clean, operation={"id": op_id, "name": clean}, now_ms=ms)
        self.agent.record(
            "operation_started", "ok", {"id": op_id, "name": clean, "checkpoint": info.name}, trusted=True
        )
        return Operation(op_id, clean, info)

    _count = 0

    @classmethod
    def _counter(cls) -> int:
        cls._count += 1
        return cls._count

    def operation_outcomes(self) -> dict[str, str]:
        """The outcome of each ended operation by its id: ``failed`` (its pre-operation checkpoint
        is kept) or ``succeeded`` (released). An operation whose checkpoint is listed and that is
        not in it is still open."""
        return dict(self.backend.operation_outcomes())

    def end_operation(self, op_id: str, *, success: bool, error: str | None = None) -> list[CheckpointInfo]:
        """Record the outcome of an operation. Success releases its pre-operation checkpoint;
        failure keeps it (and says so). Returns what retention removed. Failing an operation that
        already failed is refused (``UsageError``), nothing recorded twice; a success after a
        failure releases the checkpoint kept."""
        entries = [e for e in self.entries("pre-operation") if e.operation_id == op_id]
        if not entries:
            raise UsageError(f"no open operation {op_id!r} (see `phx checkpoint list --type pre-operation`).")
        if not success and self.backend.operation_outcomes().get(op_id) == "failed":
            raise UsageError(
                f"operation {op_id} has already ended as failed; nothing was recorded again. Its checkpoint "
                f"{entries[0].name} is kept: `phx checkpoint end-op {op_id}` without --failed releases it."
            )
        outcome = "succeeded" if success else "failed"
        self.backend.record_operation({"id": op_id, "outcome": outcome, "at": self.agent.clock.now_iso()})
        meta: dict[str, Any] = {"id": op_id, "checkpoint": entries[0].name}
        if error:
            from phoenix_protocol.core._redact import clip

            meta["error"] = clip(error, 500)  # redacted before it is cut: a cut token would not match
        self.agent.record(f"operation_{outcome}", "ok" if success else "warn", meta)
        return self.prune() if success else []

    @contextlib.contextmanager
    def pre_operation(self, name: str) -> Iterator[Operation]:
        """``with store.pre_operation("migrate db"):`` — a checkpoint before, released on success,
        kept (and reported) when the block raises."""
        op = self.begin_operation(name)
        try:
            yield op
        except BaseException as exc:
            try:
                self.end_operation(op.id, success=False, error=f"{type(exc).__name__}: {exc}")
            except (PhoenixError, OSError) as bookkeeping:
                # The block's own exception is what the caller must see; its checkpoint is kept.
                exc.add_note(f"Phoenix could not record that operation {op.id} failed: {bookkeeping}")
            raise
        try:
            self.end_operation(op.id, success=True)
        except (PhoenixError, OSError) as exc:
            # The operation succeeded; only releasing its checkpoint did not (a lock held too long,
            # a full disk): the checkpoint is kept, as for a failed one, and the success stands.
            from phoenix_protocol.core._redact import clip

            with contextlib.suppress(PhoenixError, OSError):
                self.agent.record(
                    "operation_not_released",
                    "warn",
                    {"id": op.id, "checkpoint": op.checkpoint.name, "error": clip(f"{type(exc).__name__}: {exc}", 500)},
                )

    # -- restoring ----------------------------------------------------------------------------

    def restore(self, name: str | None = None, *, force: bool = False) -> RestoreResult:
        """Restore from checkpoint ``name``, a name or a number (see ``resolve``; default:
        the newest valid one).

        Refuses another agent's checkpoint (``CheckpointOwnershipError``), a damaged one
        (``CorruptStateError``) and a newer one (``SchemaVersionError``). Each section with a
        restorer is applied; ``force`` lets restorers overwrite current state.
        """
        problems: list[str] = []
        if name is None:
            checkpoint, problems = self.latest()
            if checkpoint is None:
                raise UsageError(
                    f"agent {self.agent.id!r} has no valid checkpoint to restore"
                    + (f" ({joined_problems(problems)})" if problems else "")
                    + "."
                )
        else:
            checkpoint = self.read(name)  # refuses a name that says it is another agent's
        if checkpoint.agent_id != self.agent.id:
            raise CheckpointOwnershipError(
                f"checkpoint {checkpoint.name} belongs to {checkpoint.agent_id}, not {self.agent.id}; "
                "restoring another agent's checkpoint is refused."
            )
        applied: dict[str, Any] = {}
        for section, restorer in self._restorers.items():
            value = checkpoint.section(section)
            if value is None:
                continue
            if failed_section(value):
                problems.append(
                    f"{section}: not restored, its collector failed when the checkpoint was taken: {value['error']}"
                )
                continue
            try:
                applied[section] = restorer(value, self.agent, force)
            except Exception as exc:  # noqa: BLE001 - a restorer's bug: report, go on with the others
                problems.append(f"{section}: {type(exc).__name__}: {exc}")
        self.agent.record(
            "checkpoint_restored",
            "warn" if problems else "ok",
            {"name": checkpoint.name, "type": checkpoint.checkpoint_type, "sections": sorted(applied)},
            trusted=True,
        )
        return RestoreResult(checkpoint, applied, problems)

    # -- time-based ---------------------------------------------------------------------------

    def due(self, now_ms: int | None = None) -> list[str]:
        """Which time-based checkpoints are due now: ``routine`` after
        ``checkpoint_interval_minutes`` of work since the last one, ``recovery`` (with a forced
        refresh) after ``refresh_after_minutes`` of continuous work."""
        from phoenix_protocol.agent._state import due_checkpoints

        state = self.agent.state.read_or_none()
        if state is None:
            return []
        return due_checkpoints(state, self.agent.config, self.agent.clock.now_ms() if now_ms is None else now_ms)

    def maybe_checkpoint(self, now_ms: int | None = None) -> list[CheckpointInfo]:
        """Take whatever time-based checkpoint is due (call it from an agent's loop). A due
        checkpoint is claimed under the state's lock first, as the PostToolUse hook does, so that
        of several threads or processes working for the agent one takes it. Cheap when nothing
        is due: one read of ``state.json``."""
        from phoenix_protocol.agent._state import (
            Transition,
            abandoned_claim,
            claim_due_checkpoints,
            claim_meta,
            clock_stepped_back,
            due_checkpoints,
        )

        now = self.agent.clock.now_ms() if now_ms is None else now_ms
        state = self.agent.state.read_or_none()
        if state is None or not (
            due_checkpoints(state, self.agent.config, now)
            or clock_stepped_back(state, now)
            or abandoned_claim(state, now)
        ):
            return []
        claimed: list[str] = []

        def claim(current: Any) -> list[Any]:
            claimed.extend(claim_due_checkpoints(current, self.agent.config, now))
            return [Transition("checkpoint_due", "ok", claim_meta(current), trusted=True)] if claimed else []

        self.agent.state.change(claim)
        taken = self.take_claimed(claimed, now, now_ms=now_ms)
        if claimed:
            self.release_claim(now)
        return taken

    def take_claimed(self, kinds: list[str], claimed_ms: int, *, now_ms: int | None = None) -> list[CheckpointInfo]:
        """Take the time-based checkpoints ``claim_due_checkpoints`` claimed at ``claimed_ms``: a
        routine one, or for ``recovery`` the forced refresh (whose flag the claim set)."""
        taken = []
        for kind in kinds:
            if kind == "recovery":
                minutes = self.agent.config.refresh_after_minutes
                reason = f"{minutes:g} minutes of continuous work"
                taken.append(self.force_refresh(reason, now_ms=now_ms, claimed_ms=claimed_ms))
            else:
                taken.append(
                    self.create(
                        "routine", summary="every-interval checkpoint", now_ms=now_ms, extra={"git_timeout": 1.0}
                    )
                )
        return taken

    def release_claim(self, started_ms: int) -> None:
        """Release the time-based checkpoint claim once its checkpoints are taken, by a claimant
        that started at ``started_ms`` (a claim made since is left: another claimant's). Not
        fsynced: a release lost in a crash only makes the claim be taken again after
        ``CHECKPOINT_CLAIM_LEASE_MS`` (one checkpoint too many, never one too few)."""
        from phoenix_protocol.agent._state import release_checkpoint_claim

        current = self.agent.state.read_or_none()
        if current is None or current.checkpoint_claim is None:
            return

        def mutate(state: Any) -> None:
            release_checkpoint_claim(state, started_ms)

        self.agent.state.change(mutate, durable=False)

    def emergency_recovery(self, reason: str, *, now_ms: int | None = None) -> CheckpointInfo:
        """Seed 003's emergency recovery, when drift is detected or reported: a recovery
        checkpoint, a forced refresh (the next session starts from a clean brief), and an
        ``emergency_recovery`` ops event that reports it. When the agent belongs to a team (it is
        ``$PHOENIX_TEAMMATE`` of ``$PHOENIX_TEAM``, or a teammate of that name in a team of the
        home), the report also goes to the lead's inbox (idempotent: once per checkpoint)."""
        reason = clean_reason(reason)  # the same redacted text in state.json, the ops log and the report
        info = self.force_refresh(reason, now_ms=now_ms)
        leads = self._report_to_leads(reason, info)
        meta: dict[str, Any] = {"reason": reason, "checkpoint": info.name}
        if leads:
            meta["reported_to"] = leads
        self.agent.record("emergency_recovery", "warn", meta)
        return info

    def _report_to_leads(self, reason: str, info: CheckpointInfo) -> list[str]:
        from phoenix_protocol.core._errors import PhoenixError
        from phoenix_protocol.store._teams import Team, list_teams

        bound_team = os.environ.get("PHOENIX_TEAM")
        name = os.environ.get("PHOENIX_TEAMMATE") if bound_team else None
        candidates = [bound_team] if bound_team else list_teams(self.agent.home, config=self.agent.config)
        sender = name or self.agent.id
        reported = []
        for team_id in candidates:
            try:
                team = Team.open(self.agent.home, team_id, clock=self.agent.clock, config=self.agent.config)
                data = team.read()
                if data["status"] == "completed" or sender not in team.teammate_names() or sender == data["lead"]:
                    continue
                team.send(
                    sender,
                    data["lead"],
                    type="info",
                    subject=f"Emergency recovery: {sender}",
                    body=f"{reason}. Recovery checkpoint {info.name}; the next session starts from a fresh brief.",
                    msg_id=f"emergency-{self.agent.id}-{info.seq}",
                )
                reported.append(f"{team_id}:{data['lead']}")
            except PhoenixError:
                continue  # the recovery itself stands; the report is best effort
        return reported

    def force_refresh(self, reason: str, *, now_ms: int | None = None, claimed_ms: int | None = None) -> CheckpointInfo:
        """Seed 003's forced refresh: a recovery checkpoint, an ops event, and a state flag so
        that the next session starts from a fresh brief. ``claimed_ms``: the time of the claim
        (``claim_due_checkpoints``) that already set the flag and started a new stretch of work;
        the flag then only gets the checkpoint's name, and only if it is still that claim's (a
        session start since has cleared it: the refresh took place). ``reason`` is free text: it is
        redacted (``clean_reason``) before it goes anywhere."""
        reason = clean_reason(reason)
        info = self.create("recovery", summary=f"forced refresh: {reason}", now_ms=now_ms)
        ms = self.agent.clock.now_ms() if now_ms is None else now_ms

        def mutate(state: Any) -> list[Any]:
            from phoenix_protocol.agent._state import Transition

            if claimed_ms is None:
                state.refresh_requested = {"at": iso_from_ms(ms), "reason": reason, "checkpoint": info.name}
                state.work_started_ms = ms  # a new stretch of work starts after the refresh
            else:
                request = state.refresh_requested
                if isinstance(request, dict) and request.get("at") == iso_from_ms(claimed_ms):
                    request["checkpoint"] = info.name
            meta = {"reason": reason, "checkpoint": info.name, "claimed": claimed_ms is not None}
            return [Transition("forced_refresh", "warn", meta)]

        self.agent.state.change(mutate)
        return info
