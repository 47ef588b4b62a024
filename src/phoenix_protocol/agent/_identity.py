"""``identity.yaml`` (seed 002, PAIF): who an agent is, with a core that does not drift.

::

    immutable:            # name, role, principles, anything the user puts here; never changed by Phoenix
      name: zero
      role: release engineer
      principles: [tests before merge, small commits]
    mutable:
      state:
        current_focus: Port the scheduler to asyncio
        last_session_at: 2026-02-02T10:00:00.000Z
      accumulated_experience: 12      # sessions started
      beliefs: [{subject: asyncio timers drift under load, confidence: 0.7}]
      skills: [{name: python, level: expert}]
      relationships: [{entity: reviewer-bot, type: reviewer}]

The immutable section is sealed by a digest stored next to it (``identity.digest``). A write that
would change it is refused (``IdentityCoreError``), and so is any write while the file's
immutable section no longer matches the digest (someone edited it by hand): the only way to
change the core is the explicit, logged ``reset_core`` (``phx identity reset-core``).

The file is rewritten atomically; comment lines at its top are kept, other comments are not.
What ``set``, ``add`` and ``reset_core`` write is redacted first (secrets never reach the file in
clear); YAML aliases are refused (``load_yaml``).
"""

from __future__ import annotations

import copy
import datetime
import functools
import hashlib
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast, overload

from phoenix_protocol.core._durable import FileLock, atomic_write, keep_damaged, read_bytes
from phoenix_protocol.core._errors import CorruptStateError, PhoenixError, RefusedError, UsageError

if TYPE_CHECKING:
    import yaml
    from yaml.nodes import MappingNode, Node

    from phoenix_protocol.agent._context import AgentContext
    from phoenix_protocol.agent._identity_pg import PgIdentity

__all__ = [
    "IDENTITY_LISTS",
    "Identity",
    "IdentityCoreError",
    "IdentityRepair",
    "IdentityStore",
    "json_problem",
    "mutable_problem",
]

_REPAIR = "fix it by hand, or run `phx doctor` to restore it from the newest checkpoint."
MAX_IDENTITY_BYTES = 16 * 1024 * 1024
"""The largest ``identity.yaml`` read (a larger one is refused: ``UnsafeFileError``)."""
MAX_DIGEST_BYTES = 64 * 1024

END_MARK = b"# end of identity.yaml"
"""How the last line Phoenix writes starts (``end_line``): a file changed since (``identity.digest``
keeps the digest of the file as written) that lost it was cut short, however well the rest still
reads; one that kept it was edited by hand."""


def end_line(seal: str, agent_id: str) -> bytes:
    """The last line of an identity.yaml Phoenix writes: ``END_MARK``, the agent and the seal it
    was written under, which stands in for ``identity.digest`` when that is gone
    (``_last_sealed``): for that agent only (a file copied from another names that one)."""
    tail = f" of agent {agent_id}, sealed {seal} (Phoenix writes this line last: without it, the file was cut short)\n"
    return END_MARK + tail.encode("ascii")


def _sealed_in(data: bytes, agent_id: str) -> str | None:
    """The seal the end line of ``data`` names for agent ``agent_id``, if it has one that reads."""
    lead = b"\n" + END_MARK + f" of agent {agent_id}, sealed ".encode("ascii")
    at = data.rfind(lead)
    if at < 0:
        return None
    seal = data[at + len(lead) :].split(b" ", 1)[0].decode("ascii", "replace")
    return seal if _well_formed(seal) else None


def _commented(data: bytes) -> bool:
    """Whether ``data`` holds a comment line (``#`` first on a line; a byte-order mark before
    the first is no matter). Every identity.yaml Phoenix writes starts with one; a YAML library's
    dump holds none (its indented lines are values, such as ``# heading`` in a text block)."""
    return data.removeprefix(b"\xef\xbb\xbf").startswith(b"#") or b"\n#" in data


def _heading(line: str) -> bool:
    """Whether ``line`` belongs to the lines above an identity's mapping that Phoenix keeps when
    it writes the file again: comments, blank lines and the document start (``---``)."""
    text = line.strip()
    return not text or text.startswith(("#", "--- #")) or text == "---"


_END_TEXT = END_MARK.decode("ascii")
_DEFAULT_HEADER = "# Agent identity (Phoenix Protocol). The immutable section is sealed."

_WRITTEN = "document sha256:"  # identity.digest's second line: the file as Phoenix last wrote it


def _seal_text(raw: bytes) -> str:
    """The seal in ``identity.digest``'s bytes: its first line."""
    return raw.decode("ascii", "replace").split("\n", 1)[0].strip()


LOGGED_VALUE_MAX = 8 * 1024
"""A value set, an entry added, a changed part of the mutable section or a new core whose JSON is
at most this many bytes goes into its ops event whole (redacted, as written), so that
``phx doctor`` can replay it over a checkpoint's copy; a larger one is logged by its size only."""

IDENTITY_LISTS = {
    "beliefs": ("subject", "confidence"),
    "skills": ("name", "level"),
    "relationships": ("entity", "type"),
}
"""The mutable lists and the keys of their entries (seed 002)."""


MAX_DEPTH = 64
"""How deep lists and mappings may nest in an identity (deeper ones are refused when written and
reported when read: Python's recursion would fail on them somewhere down the line)."""


def load_yaml(data: str | bytes) -> object:
    """YAML as ``yaml.safe_load`` reads it, without aliases (``*name``): an identity written by
    hand has no use for them, and nested ones make a few hundred bytes expand to gigabytes (a
    "billion laughs"); and nested at most ``MAX_DEPTH`` levels deep. Raises ``yaml.YAMLError``
    for an alias or a deeper document as for any invalid YAML."""
    loader = _no_aliases_loader()(data)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _redacted(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` with the secrets in its text redacted, as checkpoints and notes are, and text that
    was not UTF-8 (lone surrogates, e.g. from a command-line argument) made valid: U+FFFD."""
    from phoenix_protocol.core._jsonio import valid_text
    from phoenix_protocol.core._redact import redact_value

    def valid(item: object) -> object:
        if isinstance(item, str):
            return valid_text(item)
        if isinstance(item, dict):
            return {valid(k): valid(v) for k, v in item.items()}
        if isinstance(item, list):
            return [valid(v) for v in item]
        return item

    return cast("dict[str, Any]", redact_value(valid(value)))  # a dict comes back a dict


def redacted_core(immutable: dict[str, Any]) -> dict[str, Any]:
    """A core as Phoenix seals it: its secrets redacted (``phx doctor`` seals again a core sealed
    with one in clear, before Phoenix redacted cores written by hand)."""
    return _redacted(immutable)


@functools.cache
def _no_aliases_loader() -> type[yaml.SafeLoader]:
    import yaml

    class NoAliases(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Node | None, index: int) -> Node | None:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted here", mark)
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", mark)
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
            # A key given twice: YAML keeps the last and the next write drops the first for good
            # (and a reader of the file sees the first): refused, as a damaged file is.
            seen: set[Any] = set()
            for key_node, _value in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the base class says so
                    break
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping",
                        node.start_mark,
                        f"the key {key!r} is given twice",
                        key_node.start_mark,
                    )
            return super().construct_mapping(node, deep=deep)

    return NoAliases


def _iso(value: datetime.date) -> str:
    """A time YAML read from an unquoted value, as the ISO 8601 text Phoenix writes (a date as
    ``YYYY-MM-DD``)."""
    from phoenix_protocol.core._clock import iso_from_ms

    if isinstance(value, datetime.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
        return iso_from_ms(int(aware.timestamp() * 1000))
    return value.isoformat()


@overload
def _texts(value: dict[Any, Any], as_text: Callable[[datetime.date], str] = str) -> dict[Any, Any]: ...


@overload
def _texts(value: object, as_text: Callable[[datetime.date], str] = str) -> object: ...


def _texts(value: object, as_text: Callable[[datetime.date], str] = str) -> object:
    """``value`` with the dates and times YAML reads from unquoted values (``2026-01-01``) as
    text, so that the document stays JSON (sessions, ``--json``, the PostgreSQL store). The
    core's as ``str`` gives them (as its digest saw them: seals stay valid); the mutable
    section's as Phoenix writes times (``_iso``)."""
    from phoenix_protocol.core._jsonio import valid_text

    if isinstance(value, dict):
        return {
            (as_text(k) if isinstance(k, datetime.date) else valid_text(k) if isinstance(k, str) else k): _texts(
                v, as_text
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_texts(v, as_text) for v in value]
    if isinstance(value, str):
        return valid_text(value)  # a lone surrogate ("\ud800" in YAML) made U+FFFD, as typed text is
    return as_text(value) if isinstance(value, datetime.date) else value


def _is_time(text: str) -> bool:
    """Whether ``text`` is an ISO 8601 time Phoenix can read: as it writes them (``...Z``), with
    an offset, naive (UTC), or a date (``YYYY-MM-DD``, how an unquoted date is read)."""
    from phoenix_protocol.core._clock import ms_from_iso

    try:
        ms_from_iso(text)
    except (ValueError, OverflowError):
        return False
    return True


def json_problem(value: Any, where: str, depth: int = 0) -> str | None:
    """What in ``value`` is not a plain JSON value (``None``: nothing): text, an integer, a finite
    number, true/false, null, a list, or a mapping with text keys, all the way down (exact types,
    as YAML writes them back and JSON holds them). ``where`` names ``value`` in the answer.

    YAML reads more (``!!binary`` bytes, ``!!set``, ``!!omap`` pairs, ``.nan``, ``.inf``) and
    Python callers can pass anything; an identity travels as JSON (the session's record, ``--json``,
    checkpoints), so such a value is refused when written and reported when read, as is one nested deeper than
    ``MAX_DEPTH``."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return None
    if depth >= MAX_DEPTH and (t is list or t is dict):
        return f"{where} is nested more than {MAX_DEPTH} levels deep"
    if t is float:
        return None if value - value == 0 else f"{where} is {value!r}, which JSON cannot hold (a finite number is)"
    if t is list:
        for i, item in enumerate(value):
            problem = json_problem(item, f"{where}[{i}]", depth + 1)
            if problem is not None:
                return problem
        return None
    if t is dict:
        for key, item in value.items():
            if type(key) is not str:
                return f"{where} has the key {key!r}, which is not text (keys must be text)"
            problem = json_problem(item, f"{where}.{key}", depth + 1)
            if problem is not None:
                return problem
        return None
    return (
        f"{where} is of type {t.__name__}, which JSON cannot hold (use text, a number, true/false, null, "
        "a list or a mapping with text keys)"
    )


def _refuse_non_json(value: Any, where: str) -> None:
    problem = json_problem(value, where)
    if problem is not None:
        raise UsageError(f"{problem}; nothing was written.")


def mutable_problem(mutable: dict[str, Any]) -> str | None:
    """What is wrong with a mutable section, for Phoenix to read it back (``None``: nothing).
    The seed's fields have their types; keys of the user's own are free."""
    state = mutable.get("state")
    if not isinstance(state, dict):
        return "mutable.state must be a mapping (set one of its keys, e.g. state.current_focus)"
    focus = state.get("current_focus")
    if focus is not None and not isinstance(focus, str):
        return "mutable.state.current_focus must be text"
    last = state.get("last_session_at")
    if last is not None and not (isinstance(last, str) and _is_time(last)):
        return "mutable.state.last_session_at must be an ISO 8601 time (e.g. 2026-02-02T10:00:00.000Z) or null"
    experience = mutable.get("accumulated_experience")
    if not isinstance(experience, int) or isinstance(experience, bool) or experience < 0:
        return "mutable.accumulated_experience must be a non-negative integer"
    for key, (first, second) in IDENTITY_LISTS.items():
        items = mutable.get(key)
        if not isinstance(items, list):
            return f"mutable.{key} must be a list"
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get(first), str) or not item[first]:
                return (
                    f"each entry of mutable.{key} must be a mapping with {'an' if first[0] in 'aeiou' else 'a'} {first}"
                )
            if second == "confidence" and second in item:
                value = item[second]
                if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                    return f"the confidence of belief {item[first]!r} must be a number between 0 and 1"
    return None


class IdentityCoreError(RefusedError):
    """The immutable core would change, or was changed outside Phoenix. ``phx identity reset-core``."""


class IdentityRepair:
    """What ``IdentityStore.repair`` did: the checkpoint the identity came from (``None``: the
    PostgreSQL store's row, over this machine's copy), where the damaged
    file was kept (``None``: the file was missing), the changes made after that checkpoint that were replayed from the ops log
    (``replayed``), and those that could not be (``later_changes``: not in the restored file)."""

    def __init__(
        self, checkpoint: str | None, kept_as: str | None, later_changes: list[str], replayed: list[str] | None = None
    ) -> None:
        self.checkpoint = checkpoint
        self.kept_as = kept_as
        self.later_changes = later_changes
        self.replayed = replayed or []


def _json_size(value: Any) -> int:
    from phoenix_protocol.core._jsonio import dumps_line

    return len(dumps_line(value).encode("utf-8"))


def _logged(meta: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """``meta`` with ``value`` under ``key`` when its JSON is at most ``LOGGED_VALUE_MAX`` bytes,
    else its size under ``<key>_bytes`` (the change is then named by a repair, not replayed)."""
    size = _json_size(value)
    if size <= LOGGED_VALUE_MAX:
        meta[key] = value
    else:
        meta[key + "_bytes"] = size
    return meta


def _default_mutable() -> dict[str, Any]:
    return {
        "state": {"current_focus": "", "last_session_at": None},
        "accumulated_experience": 0,
        "beliefs": [],
        "skills": [],
        "relationships": [],
    }


def digest_of(immutable: Any) -> str:
    """``sha256:<hex>`` of the immutable section in canonical JSON."""
    canonical = json.dumps(immutable, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _well_formed(digest: str) -> bool:
    """Whether ``digest`` has the shape ``digest_of`` gives (``sha256:`` and 64 hex digits)."""
    hexpart = digest.removeprefix("sha256:")
    return len(digest) == 71 and len(hexpart) == 64 and all(c in "0123456789abcdef" for c in hexpart)


def _path_key_problem(parts: list[str], path: str) -> str | None:
    """A key of a ``set`` path that holds what looks like a secret (keys are written as they
    are: the value under them is what redaction replaces)."""
    from phoenix_protocol.core._redact import redact

    for part in parts:
        if redact(part) != part:
            return f"a key in {path!r} looks like a secret; keys are written in clear, so it is refused"
    return None


class Identity:
    """An identity as read: ``immutable`` and ``mutable`` sections (plain dicts)."""

    def __init__(self, immutable: dict[str, Any], mutable: dict[str, Any]) -> None:
        self.immutable = immutable
        self.mutable = mutable

    @property
    def current_focus(self) -> str:
        return str((self.mutable.get("state") or {}).get("current_focus") or "")

    def as_dict(self) -> dict[str, Any]:
        return {"immutable": self.immutable, "mutable": self.mutable}

    def copy(self) -> Identity:
        return Identity(copy.deepcopy(self.immutable), copy.deepcopy(self.mutable))


def _replay(identity: Identity, events: list[dict[str, Any]], ms: int) -> tuple[list[str], list[str]]:
    """Replay over ``identity`` (a copy taken at ``ms``) the changes the ops log has from ``ms``
    on, in the log's order. Every change sets values, so replaying one the copy already holds
    (logged in the same millisecond) changes nothing. Returns the changes replayed and those that
    cannot be (logged without their value), one line each; the session count and the last
    session's time are brought up to date without a line."""
    from phoenix_protocol.core._clock import ms_from_iso

    replayed: list[str] = []
    later: list[str] = []
    for event in events:
        name = event.get("event")
        if name not in _REPLAYED_EVENTS:
            continue
        ts = str(event.get("ts"))
        try:
            if ms_from_iso(ts) < ms:
                continue
        except ValueError:
            pass  # a time that does not read: taken as later, to be safe
        meta = event.get("meta")
        meta = meta if isinstance(meta, dict) else {}
        state = identity.mutable.get("state")
        state = state if isinstance(state, dict) else identity.mutable.setdefault("state", {})
        if name in ("session_restored", "session_begun"):
            count = meta.get("experience")
            if type(count) is int and count > int(identity.mutable.get("accumulated_experience") or 0):
                identity.mutable["accumulated_experience"] = count
                state["last_session_at"] = meta.get("at") if isinstance(meta.get("at"), str) else ts
            continue
        if name == "session_checkpointed":
            if isinstance(meta.get("at"), str):
                state["last_session_at"] = meta["at"]
            continue
        trial = identity.copy()
        changes = _replay_change(trial, name, meta)
        problem = (
            mutable_problem(trial.mutable)
            or json_problem(trial.mutable, "mutable")
            or json_problem(trial.immutable, "immutable")
        )
        if problem is None:
            identity.immutable, identity.mutable = trial.immutable, trial.mutable
        for what, done in changes:
            if not done:
                later.append(f"{ts} {what}")
            elif problem is not None:  # a log edited by hand: the change is named, not applied
                later.append(f"{ts} {what} (not applied: {problem})")
            else:
                replayed.append(f"{ts} {what}")
    return replayed, later


_REPLAYED_EVENTS = frozenset(
    ("identity_updated", "identity_core_reset", "session_restored", "session_begun", "session_checkpointed")
)


def _replay_change(identity: Identity, name: Any, meta: dict[str, Any]) -> list[tuple[str, bool]]:
    """Apply one logged change (``identity_updated``, ``identity_core_reset``) to ``identity``:
    what it changed, and whether that was applied, one pair per part."""
    if name == "identity_core_reset":
        core = meta.get("immutable")
        if isinstance(core, dict) and json_problem(core, "immutable") is None:
            identity.immutable = copy.deepcopy(core)
            return [("core reset", True)]
        return [("core reset", False)]
    if isinstance(meta.get("path"), str):
        path = meta["path"]
        parts = [p for p in path.split(".") if p]
        if "value" not in meta or not parts:
            return [(f"set {path}", False)]
        node: Any = identity.mutable
        for key in parts[:-1]:
            if not isinstance(node.get(key), dict):
                if node.get(key) is not None:
                    return [(f"set {path}", False)]
                node[key] = {}
            node = node[key]
        node[parts[-1]] = copy.deepcopy(meta["value"])
        return [(f"set {path}", True)]
    if isinstance(meta.get("added"), str):
        key = meta["added"]
        named = (str(v) for k, v in meta.items() if k not in ("added", "entry", "entry_bytes"))
        what = " ".join(["added", key, *named])
        entry = meta.get("entry")
        if key not in IDENTITY_LISTS or not isinstance(entry, dict) or not isinstance(identity.mutable.get(key), list):
            return [(what, False)]
        first = IDENTITY_LISTS[key][0]
        items = identity.mutable[key]
        for i, item in enumerate(items):
            if isinstance(item, dict) and item.get(first) == entry.get(first):
                items[i] = {**item, **copy.deepcopy(entry)}
                return [(what, True)]
        items.append(copy.deepcopy(entry))
        return [(what, True)]
    changed: dict[str, Any] = meta["changed"] if isinstance(meta.get("changed"), dict) else {}
    removed: list[Any] = meta["removed"] if isinstance(meta.get("removed"), list) else []
    too_big: dict[str, Any] = meta["changed_bytes"] if isinstance(meta.get("changed_bytes"), dict) else {}
    out: list[tuple[str, bool]] = []
    if changed or removed:
        for key, value in changed.items():
            identity.mutable[key] = copy.deepcopy(value)
        for key in removed:
            identity.mutable.pop(str(key), None)
        out.append(("changed " + ", ".join([*map(str, changed), *(f"{k} (removed)" for k in removed)]), True))
    if too_big:
        out.append(("changed " + ", ".join(f"{k} ({v} bytes, not logged)" for k, v in too_big.items()), False))
    return out or [("changed", False)]


class IdentityStore:
    """One agent's ``identity.yaml``. Get it as ``agent.identity``.

    On the PostgreSQL store the document and its seal are a row (``_identity_pg``); the files
    here are then this machine's copy (read by the hooks' persona check, and, when edited by
    hand, taken as the document, as on files)."""

    def __init__(self, agent: AgentContext) -> None:
        self.agent = agent
        self.path = os.path.join(agent.dir, "identity.yaml")
        self.digest_path = os.path.join(agent.dir, "identity.digest")
        self.remote: PgIdentity | None = None
        if agent.state.remote is not None:  # the PostgreSQL store
            from phoenix_protocol.agent._identity_pg import PgIdentity

            self.remote = PgIdentity(self)

    def exists(self) -> bool:
        if self.remote is not None:
            return self.remote.exists()
        return os.path.exists(self.path)

    def _parse(self, data: bytes, *, sealed: bool = False, written: str | None = None) -> tuple[Identity, list[str]]:
        """The identity in ``data`` and its header comment lines; ``CorruptStateError`` when it
        does not read. ``sealed``: the document has a seal, so Phoenix wrote it, with both
        sections as mappings: one that lacks either (``mutable:`` with nothing under it) was cut
        short or damaged, not edited (a hand edit of the core is told apart by the seal). Keys of
        the mutable section left out are taken as their defaults, as in a file written by hand.
        ``written``: the digest of the file as Phoenix last wrote it; a file that is not that one
        and lost its last line (``END_MARK``) was cut short, even where what is left reads (inside a
        list). Unless it holds no comment at all: Phoenix writes one first as well, and a cut keeps
        the start of a file, so such a file was written again by a tool that drops comments (a
        YAML library's load and dump): an edit, checked as one (``_commented``)."""
        import yaml

        header = []
        for line in data.decode("utf-8", "replace").removeprefix("\ufeff").splitlines():
            if not _heading(line):
                break
            if not line.startswith(_END_TEXT):  # an end line on top would hide every later cut: Phoenix writes its own
                header.append(line)
        try:
            raw = load_yaml(data)
        except (yaml.YAMLError, ValueError) as exc:  # ValueError: an unquoted date that is none (2026-13-45)
            raise CorruptStateError(f"{self.path} is not valid YAML ({exc}); {_REPAIR}", path=self.path) from None
        if raw is None:
            raise CorruptStateError(
                f"{self.path} is empty (no immutable or mutable section); {_REPAIR}", path=self.path
            )
        if sealed and isinstance(raw, dict):
            missing = [key for key in ("immutable", "mutable") if not isinstance(raw.get(key), dict)]
            if missing:
                raise CorruptStateError(
                    f"{self.path} has no {' and no '.join(missing)} section, which Phoenix always writes: it was "
                    f"cut short or damaged; {_REPAIR}",
                    path=self.path,
                )
        if not isinstance(raw, dict):
            raise CorruptStateError(
                f"{self.path} must hold a mapping with immutable and mutable sections; {_REPAIR}", path=self.path
            )
        immutable = _texts(raw.get("immutable") or {})
        mutable = _texts(raw.get("mutable") or {}, _iso)
        if not isinstance(immutable, dict) or not isinstance(mutable, dict):
            raise CorruptStateError(f"{self.path}: immutable and mutable must be mappings; {_REPAIR}", path=self.path)
        merged = _default_mutable()
        merged.update(mutable)
        if isinstance(merged.get("state"), dict):
            merged["state"] = {**_default_mutable()["state"], **merged["state"]}
        problem = mutable_problem(merged) or json_problem(immutable, "immutable") or json_problem(merged, "mutable")
        if problem is not None:
            raise CorruptStateError(f"{self.path}: {problem}; {_REPAIR}", path=self.path)
        if written is not None and b"\n" + END_MARK not in data and _commented(data):
            import hashlib

            if hashlib.sha256(data).hexdigest() != written:
                raise CorruptStateError(
                    f"{self.path} was cut short: its last line ({END_MARK.decode()!r} ...), which "
                    "Phoenix writes last, is gone, and it is not the file Phoenix wrote (if you edited it by hand, "
                    f"put that line back at the end); {_REPAIR}",
                    path=self.path,
                )

        return Identity(immutable, merged), header

    # -- where the document and its seal are ------------------------------------------------------

    def read_files(self) -> tuple[bytes | None, str | None]:
        """``identity.yaml`` and the seal in ``identity.digest`` in this home (``None``: absent)."""
        digest = read_bytes(self.digest_path, limit=MAX_DIGEST_BYTES)
        return read_bytes(self.path, limit=MAX_IDENTITY_BYTES), (_seal_text(digest) if digest else None)

    def write_files(self, data: bytes, digest: str) -> None:
        self.agent.ensure()
        atomic_write(self.path, data)
        self._write_seal(digest, data)

    def _write_seal(self, digest: str, data: bytes) -> None:
        """``identity.digest``: the seal, and the digest of the file as written (``END_MARK``)."""
        import hashlib

        text = f"{digest}\n{_WRITTEN}{hashlib.sha256(data).hexdigest()}\n"
        atomic_write(self.digest_path, text.encode("ascii"))

    def _written(self) -> str | None:
        """The digest of ``identity.yaml`` as Phoenix last wrote it (``identity.digest``'s second
        line; ``None``: a seal written before Phoenix kept it, or none)."""
        raw = read_bytes(self.digest_path, limit=MAX_DIGEST_BYTES)
        for line in raw.decode("ascii", "replace").split("\n")[1:] if raw else ():
            if line.startswith(_WRITTEN):
                return line[len(_WRITTEN) :].strip()
        return None

    def _raw(self, *, copy: bool = False) -> tuple[bytes | None, str | None]:
        if self.remote is not None and not copy:
            return self.remote.load()
        return self.read_files()

    def _change(
        self,
        work: Callable[[bytes | None, str | None], tuple[bytes, str]],
        logged: Callable[[], None] | None = None,
    ) -> None:
        """Read-modify-write of the document and its seal under the store's lock. ``logged``
        records the change in the ops log while the lock is still held, so that the log has the
        changes in the order they were written (``phx doctor`` replays them in that order)."""
        if self.remote is not None:
            self.remote.change(work)  # serialized on the server; the log is this machine's
            if logged is not None:
                logged()
            return
        self.agent.ensure()
        with FileLock(self.path, self.agent.config.lock_timeout):
            data, digest = work(*self.read_files())
            self.write_files(data, digest)
            if logged is not None:
                logged()

    # -- reading and changing -------------------------------------------------------------------

    def read(self, *, copy: bool = False) -> Identity:
        """The identity (a default one, named after the agent, when there is none yet). ``copy``:
        on the PostgreSQL store, this machine's copy when it has one (the hooks' persona check:
        no round trip to the server).

        Raises ``IdentityCoreError`` when the immutable section no longer matches its digest.
        """
        local = copy and self.remote is not None and os.path.exists(self.path)
        data, digest = self._raw(copy=local)
        identity, _header, exists = self._load(data, digest, files=self.remote is None or local)
        if exists:
            self._check_seal(identity, digest, data)
        return identity

    def _missing(self) -> CorruptStateError:
        return CorruptStateError(
            f"{self.path} is missing, but its seal ({os.path.basename(self.digest_path)}) is there: it was deleted "
            "or lost. Run `phx doctor` to restore it from the newest checkpoint (to start this agent's identity "
            "over instead, delete both files); until then Phoenix writes no identity.",
            path=self.path,
        )

    def _check_seal(self, identity: Identity, stored: str | None, data: bytes | None = None) -> bool:
        """Whether the document is sealed; raises ``IdentityCoreError`` when its core no longer
        matches the seal (someone edited it by hand), or when the seal is gone and the core is not
        the one the ops log says was last sealed (deleting ``identity.digest`` does not lift it)."""
        digest = digest_of(identity.immutable)
        if stored is not None and _well_formed(stored):
            if stored != digest:
                raise IdentityCoreError(
                    f"the immutable section of {self.path} was changed outside Phoenix (its digest no longer "
                    "matches). Review the change; to accept it run `phx identity reset-core`, otherwise undo it; "
                    "until then Phoenix writes nothing to it."
                )
            return True
        if stored is None and self.remote is not None:
            return False
        # The seal is missing or damaged: the last one sealed (ops log, else newest checkpoint)
        # judges the core; the next write seals it again (`phx doctor` rewrites a damaged one now).
        last = self._last_sealed(data)
        if last is not None and last != digest:
            raise IdentityCoreError(
                f"{self.digest_path}, the seal of {self.path}, is {'missing' if stored is None else 'damaged'}, "
                "and the immutable section is not the one last sealed (the ops log, or the newest checkpoint, "
                "says so). Review the change; to accept it run `phx identity reset-core`, otherwise undo it; "
                "until then Phoenix writes nothing to it."
            )
        return False

    def _last_sealed(self, data: bytes | None = None) -> str | None:
        """The digest the ops log says this core was last sealed with, else the seal the document's
        last line names for this agent (``end_line``: ``data``, the document's bytes), else the
        seal of the newest checkpoint's copy; ``None``: never sealed.
        Read only when ``identity.digest`` is missing or damaged: rare."""
        try:
            events, _problems = self.agent.ops.read()
        except PhoenixError:
            return None
        for event in reversed(events):
            meta = event.get("meta") or {}
            if event.get("event") == "identity_sealed" and isinstance(meta.get("digest"), str):
                return str(meta["digest"])
            if event.get("event") == "identity_core_reset" and isinstance(meta.get("new_digest"), str):
                return str(meta["new_digest"])
        # The record rotated out of the log (or the log is gone): the document names the seal it
        # was last written under for this agent (a file copied from another agent names that
        # one, which says nothing of this one), and every checkpoint keeps the seal of its copy.
        if data is not None and (named := _sealed_in(data, self.agent.id)) is not None:
            return named
        store = self.agent.checkpoints
        for info in store.entries():
            try:
                value = store.read(info.name).section("identity")
            except PhoenixError:
                continue
            if isinstance(value, dict) and isinstance(value.get("digest"), str) and _well_formed(value["digest"]):
                return str(value["digest"])
        return None

    def _render(self, identity: Identity, header: list[str]) -> tuple[bytes, str]:
        import yaml

        text = yaml.safe_dump(identity.as_dict(), sort_keys=False, allow_unicode=True, default_flow_style=False)
        if not any(line.startswith("#") for line in header):
            header = [_DEFAULT_HEADER, *header]  # a comment on top tells a cut from a YAML library's dump
        prefix = "\n".join(header) + "\n"
        digest = digest_of(identity.immutable)
        return (prefix + text).encode("utf-8") + end_line(digest, self.agent.id), digest

    def _load(self, data: bytes | None, stored: str | None, *, files: bool = True) -> tuple[Identity, list[str], bool]:
        """The identity in ``data`` (a default one when there is none), its header comment lines,
        and whether there was one. No seal check, but a seal (``stored``) without its document
        in this home's files (``files``) is damage (``CorruptStateError``)."""
        if data is None:
            if stored is not None and files:
                raise self._missing()
            return Identity({"name": self.agent.id}, _default_mutable()), [], False
        # Not this home's files: the server's row, or this machine's copy when that is what was read.
        written = self._written() if files or self.remote is None else self.remote.written_here(data)
        identity, header = self._parse(data, sealed=stored is not None, written=written)
        return identity, header, True

    def update(self, mutate: Callable[[Identity], Any], *, log: bool = True) -> Identity:
        """Change the mutable section under the lock. ``mutate`` edits the identity in place; if
        it touched the immutable section, nothing is written and ``IdentityCoreError`` is raised.
        What is written is redacted. ``log``: record the top-level keys of the mutable section that
        changed, with their new values (``identity_updated``, see ``LOGGED_VALUE_MAX``); callers
        whose own event carries the change (the session records) pass False."""

        def record(identity: Identity, old: dict[str, Any]) -> None:
            meta: dict[str, Any] = {}
            for key, value in identity.mutable.items():
                if key not in old or old[key] != value:
                    size = _json_size(value)
                    if size <= LOGGED_VALUE_MAX:
                        meta.setdefault("changed", {})[key] = value
                    else:
                        meta.setdefault("changed_bytes", {})[key] = size
            removed = [key for key in old if key not in identity.mutable]
            if removed:
                meta["removed"] = removed
            if meta:
                self.agent.record("identity_updated", "ok", meta, trusted=True)

        return self._update(mutate, record if log else None)

    def _update(
        self, mutate: Callable[[Identity], Any], record: Callable[[Identity, dict[str, Any]], None] | None
    ) -> Identity:
        """``update``, with ``record(identity, mutable section before)`` logging the change under
        the lock (see ``_change``)."""
        done: list[tuple[Identity, bool, dict[str, Any]]] = []

        def work(data: bytes | None, stored: str | None) -> tuple[bytes, str]:
            done.clear()  # the PostgreSQL store may run it again on a fresh connection
            identity, header, exists = self._load(data, stored, files=self.remote is None)
            sealed = self._check_seal(identity, stored, data) if exists else False
            if not sealed:  # sealed for the first time (written by hand): never sealed with a secret in clear
                identity.immutable = _redacted(identity.immutable)
            before = digest_of(identity.immutable)
            old = copy.deepcopy(identity.mutable) if record is not None else {}
            mutate(identity)
            if digest_of(identity.immutable) != before:
                raise IdentityCoreError(
                    "the immutable section of an identity cannot be changed by an update; "
                    "use `phx identity reset-core` (logged) to change the core."
                )
            problem = mutable_problem(identity.mutable) or json_problem(identity.mutable, "mutable")
            if problem is not None:
                raise UsageError(f"{problem}; nothing was written.")
            identity.mutable = _redacted(identity.mutable)
            done.append((identity, sealed, old))
            return self._render(identity, header)

        def logged() -> None:
            identity, sealed, old = done[0]
            if not sealed:
                self.agent.record("identity_sealed", "ok", {"digest": digest_of(identity.immutable)}, trusted=True)
            if record is not None:
                record(identity, old)

        self._change(work, logged)
        return done[0][0]

    def set(self, path: str, value: Any) -> Identity:
        """Set a mutable value by dotted path (``state.current_focus``; a leading ``mutable.`` is
        optional). Paths under ``immutable`` are refused (``IdentityCoreError``); a value Phoenix
        could not read back (``mutable_problem``) or that is not a plain JSON value
        (``json_problem``: bytes, a set, NaN...) is refused with ``UsageError``, nothing written,
        and so is a path with an empty part (``custom.``, ``state..x``)."""
        parts = path.split(".")
        if not all(parts):
            raise UsageError(
                f"{path!r} has an empty part (a dot at either end, or two in a row): give a path such as "
                "state.current_focus; nothing was written."
            )
        if parts[:1] == ["immutable"]:
            raise IdentityCoreError(
                f"{path} is in the immutable section; it changes only through `phx identity reset-core`."
            )
        if parts[:1] == ["mutable"]:
            parts = parts[1:]
        if not parts:
            raise UsageError("give a path in the mutable section, e.g. state.current_focus.")
        if parts[0] in IDENTITY_LISTS and (len(parts) > 1 or not isinstance(value, list)):
            raise UsageError(f"{parts[0]} is a list: use `phx identity add {parts[0][:-1]} …` to add to it.")
        problem = _path_key_problem(parts, path)
        if problem is not None:
            raise UsageError(f"{problem}; nothing was written.")
        _refuse_non_json(value, "mutable." + ".".join(parts))
        value = _redacted({parts[-1]: value})[parts[-1]]  # a password under `password` too, as in the file

        def mutate(identity: Identity) -> None:
            node: Any = identity.mutable
            for key in parts[:-1]:
                nxt = node.get(key)
                if nxt is None:
                    nxt = node[key] = {}
                if not isinstance(nxt, dict):
                    raise UsageError(f"{key} in {path} is not a mapping.")
                node = nxt
            node[parts[-1]] = value

        def record(_identity: Identity, _old: dict[str, Any]) -> None:
            meta = _logged({"path": ".".join(parts)}, "value", value)
            self.agent.record("identity_updated", "ok", meta, trusted=True)

        return self._update(mutate, record)

    def add(self, kind: str, entry: dict[str, Any]) -> Identity:
        """Add (or update, by its first key) a belief, skill or relationship. Its values must be
        plain JSON values (``json_problem``), else ``UsageError`` and nothing is written."""
        key = {"belief": "beliefs", "skill": "skills", "relationship": "relationships"}.get(kind, kind)
        if key not in IDENTITY_LISTS:
            raise UsageError(f"kind must be belief, skill or relationship, not {kind!r}.")
        if not isinstance(entry, dict):
            raise UsageError(f"a {kind} must be a mapping, e.g. {{{IDENTITY_LISTS[key][0]!r}: ...}}.")
        first, second = IDENTITY_LISTS[key]
        if not entry.get(first):
            raise UsageError(f"a {kind} needs {'an' if first[0] in 'aeiou' else 'a'} {first}.")
        if first == "subject" and second in entry:
            try:
                confidence = float(entry[second])
            except (TypeError, ValueError):
                raise UsageError("confidence must be a number between 0 and 1.") from None
            if not 0.0 <= confidence <= 1.0:
                raise UsageError("confidence must be between 0 and 1.")
            entry = {**entry, second: confidence}
        _refuse_non_json(dict(entry), kind)
        entry = _redacted(entry)

        def mutate(identity: Identity) -> None:
            items = identity.mutable[key]
            for i, item in enumerate(items):
                if isinstance(item, dict) and item.get(first) == entry[first]:
                    items[i] = {**item, **entry}
                    return
            items.append(dict(entry))

        def record(_identity: Identity, _old: dict[str, Any]) -> None:
            meta = _logged({"added": key, first: str(entry[first])[:200]}, "entry", entry)
            self.agent.record("identity_updated", "ok", meta, trusted=True)

        return self._update(mutate, record)

    def seal_problem(self) -> str | None:
        """What is wrong with ``identity.digest`` when it is there but not a digest (empty, or
        damaged); ``None`` otherwise. ``read`` then judges the core by the ops log's last seal."""
        if self.remote is not None:
            return None
        raw = read_bytes(self.digest_path, limit=MAX_DIGEST_BYTES)
        if raw is None:
            return None
        text = _seal_text(raw)
        if _well_formed(text):
            return None
        return f"{self.digest_path}, the seal of {self.path}, is {'empty' if not text else 'damaged'}"

    def reseal(self) -> bool:
        """Write ``identity.digest`` again when it is damaged (``seal_problem``) and the core is
        the one the ops log says was last sealed; logged as ``identity_seal_repaired``. False when
        that cannot be told (no seal in the log, or another core): ``phx identity reset-core``
        after a review is then the way."""
        if self.remote is not None:
            return False
        self.agent.ensure()
        with FileLock(self.path, self.agent.config.lock_timeout):
            if self.seal_problem() is None:
                return False
            data, _stored = self.read_files()
            if data is None:
                return False
            identity, _header = self._parse(data, sealed=True)
            digest = digest_of(identity.immutable)
            if self._last_sealed(data) != digest:
                return False
            self._write_seal(digest, data)
        self.agent.record("identity_seal_repaired", "warn", {"digest": digest}, trusted=True)
        return True

    def repair(self) -> IdentityRepair | None:
        """Restore a damaged ``identity.yaml`` (one that does not read: not YAML, not the shape of
        an identity, empty, cut short) or a missing one whose seal is still there, from a copy in
        this agent's checkpoints, brought up to date from the ops log. The damaged file is kept
        beside it as ``identity.yaml.corrupt-<time>``.

        The copies are tried newest first: each gets the changes logged after its checkpoint
        replayed over it (values set, entries added, parts of the mutable section changed by
        ``update``, core resets, the session count and the last session's time), and the first
        whose core then matches the seal (``identity.digest``, else the core the ops log last
        sealed) is written back. A change logged by its size only (over ``LOGGED_VALUE_MAX``) or
        by its name only (as earlier versions logged them) cannot be replayed: it is named in the
        result. Logged as ``identity_repaired``.

        ``None``: nothing to repair (neither file, or it reads; a core edited by hand is not damage:
        it is refused by ``read`` until ``reset_core`` or an undo). Raises ``CorruptStateError``
        when no copy gives the sealed core (the file is left as it is). On the PostgreSQL store
        the document is the server's row: a copy here that does not read is kept aside and the row
        written in its place (``PgIdentity.repair_copy``)."""
        if self.remote is not None:
            return self.remote.repair_copy()
        self.agent.ensure()
        with FileLock(self.path, self.agent.config.lock_timeout):
            data, stored = self.read_files()
            if data is None:
                if stored is None:
                    return None
                damage = str(self._missing())
            else:
                try:
                    self._parse(data, sealed=stored is not None, written=self._written())
                except CorruptStateError as exc:
                    damage = str(exc)
                else:
                    return None
            seal = stored if stored is not None and _well_formed(stored) else self._last_sealed(data)
            found = self._rebuild(seal)
            if found is None:
                raise CorruptStateError(
                    damage.replace(_REPAIR, "fix it by hand: no valid checkpoint holds a copy of this identity")
                    + (" that gives the sealed core" if seal is not None else "")
                    + " to restore it from.",
                    path=self.path,
                )
            identity, checkpoint, replayed, later = found
            kept = keep_damaged(self.path, data, self.agent.clock.now_ms()) if data is not None else None
            header = [
                f"# Restored by `phx doctor` from checkpoint {checkpoint} and the ops log "
                + (f"(damaged file: {os.path.basename(kept)})." if kept is not None else "(the file was missing).")
            ]
            rendered, digest = self._render(identity, header)
            self.write_files(rendered, digest)
        self.agent.record(
            "identity_repaired",
            "warn",
            {
                "checkpoint": checkpoint,
                "kept_as": os.path.basename(kept) if kept is not None else None,
                "replayed": len(replayed),
                "later_changes": later[:50],
            },
            trusted=True,
        )
        return IdentityRepair(checkpoint, kept, later, replayed)

    def _rebuild(self, seal: str | None) -> tuple[Identity, str, list[str], list[str]] | None:
        """The newest copy in this agent's checkpoints that, with the logged changes replayed over
        it, has the sealed core: (identity, checkpoint name, changes replayed, changes not)."""
        try:
            events: list[dict[str, Any]] | None = self.agent.ops.read()[0]
        except PhoenixError:
            events = None
        store = self.agent.checkpoints
        for info in store.entries():
            try:
                value = store.read(info.name).section("identity")
            except PhoenixError:  # a damaged checkpoint: try an older one
                continue
            if not isinstance(value, dict) or not isinstance(value.get("document"), dict):
                continue
            document = value["document"]
            immutable, mutable = document.get("immutable"), document.get("mutable")
            if not isinstance(immutable, dict) or not isinstance(mutable, dict):
                continue
            if mutable_problem(mutable) or json_problem(immutable, "immutable") or json_problem(mutable, "mutable"):
                continue
            identity = Identity(copy.deepcopy(immutable), copy.deepcopy(mutable))
            replayed: list[str] = []
            if events is None:
                later = ["the ops log does not read: changes made after the checkpoint are unknown"]
            else:
                # From when the copy was read (a change logged while the checkpoint was being
                # taken is in neither the copy nor, after the checkpoint's time, the log); copies
                # taken before it was recorded: from the checkpoint's time.
                read_ms = value.get("read_ms")
                since = read_ms if type(read_ms) is int and read_ms <= info.timestamp_ms else info.timestamp_ms
                replayed, later = _replay(identity, events, since)
            if mutable_problem(identity.mutable) or json_problem(identity.mutable, "mutable"):
                continue  # a replay that does not give a valid identity: an older copy may
            if seal is not None and digest_of(identity.immutable) != seal:
                continue  # e.g. a copy from before a core reset logged by its size only
            return identity, info.name, replayed, later
        return None

    def reset_core(self, immutable: dict[str, Any] | None = None) -> Identity:
        """Change the core on purpose: seal ``immutable`` (default: the section as it now is in
        the document, e.g. after an edit by hand) with a new digest. Logged with both digests.
        Its values must be plain JSON values (``json_problem``), else ``UsageError``."""
        if immutable is not None and not isinstance(immutable, dict):
            raise UsageError("the immutable section must be a mapping.")
        if immutable is not None:
            _refuse_non_json(dict(immutable), "immutable")
            immutable = _redacted(immutable)
        done: list[tuple[Identity, str | None]] = []

        def work(data: bytes | None, stored: str | None) -> tuple[bytes, str]:
            done.clear()
            identity, header, _exists = self._load(data, stored, files=self.remote is None)
            # The core given, or the one in the document (edited by hand): never sealed with a
            # secret in clear.
            identity.immutable = immutable if immutable is not None else _redacted(identity.immutable)
            if not identity.immutable:
                raise UsageError("an identity's core cannot be empty (give it at least a name); nothing was written.")
            done.append((identity, stored))
            return self._render(identity, header)

        def logged() -> None:
            identity, old = done[0]
            new = digest_of(identity.immutable)
            meta = _logged({"old_digest": old, "new_digest": new}, "immutable", _redacted(identity.immutable))
            self.agent.record("identity_core_reset", "warn", meta, trusted=True)

        self._change(work, logged)
        return done[0][0]
