"""Bearer tokens for the memory bridge (``phx serve``): scoped to namespaces and operations.

A token is ``phx_<id>_<secret>``: ``id`` (12 hex digits) names the record, ``secret`` is 256 bits
from ``secrets``. Only ``sha256(secret)`` is stored, in the home's database (``phx_tokens``: one
row per token, its position in the listing order and its record as JSON; ``phoenix.db`` in the
home, or the PostgreSQL server ``store`` names: where the rest of the store is); the plaintext is
returned once, by ``create``, and never written, logged or shown again. A home written by an
earlier release kept them in ``<home>/tokens.json``: they are moved into the database on first
use (``store._move_memory``), the file kept aside. ``verify`` looks the record up by id and compares the digests with
``hmac.compare_digest`` (also against a dummy digest when the id is unknown, so that an unknown
id and a wrong secret take the same time), then checks revocation and expiry with the injected
clock.

A token covers:

- **namespaces**: ``agent:<agent_id>`` (that agent's checkpoints, sessions, identity and
  memory), ``team:<team_id>`` (that team's mailbox, tasks and heartbeats), or ``*`` (every
  namespace: an operator's token);
- **scopes** (operations): ``memory:read``, ``memory:write``, ``checkpoint:read``,
  ``checkpoint:write``, ``identity:read``, ``identity:write``, ``team:read``, ``team:write``,
  ``<area>:*`` for both of an area, or ``*`` for all.

Tokens are never deleted: a revoked one stays listed (with ``revoked_at``), so that a home which
ever had tokens keeps requiring them (``configured``) even after the last one is revoked.

Every stored record is checked when it is read (``_read_record``): the fields ``create`` writes,
of their types and within their bounds (an expiry at most ``MAX_LIFETIME`` after the creation, as
``create`` enforces; times that ISO 8601 can write). A record that fails (written by hand, or by an
older version that let ``--expires 99999999d`` through) is listed with status ``invalid`` and its
``problem``; it never authenticates anything and still counts for ``configured``. Reading never
rewrites a record: ``create`` and ``revoke`` keep such records as they are.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._clock import Clock, iso_from_ms, system_clock
from phoenix_protocol.core._errors import CorruptStateError, SchemaVersionError, UsageError
from phoenix_protocol.core._ids import validate_id
from phoenix_protocol.core._jsonio import JSONError, loads

if TYPE_CHECKING:
    from phoenix_protocol.core._config import Config
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.store._db import Tx

__all__ = [
    "ALL",
    "MAX_LIFETIME",
    "SCOPES",
    "TokenInfo",
    "TokenStore",
    "agent_namespace",
    "parse_duration",
    "team_namespace",
]

SCHEMA_VERSION = 1
KIND = "phoenix.tokens"
FILENAME = "tokens.json"
PREFIX = "phx_"
ALL = "*"
AREAS = ("memory", "checkpoint", "identity", "team")
SCOPES = tuple(f"{area}:{op}" for area in AREAS for op in ("read", "write"))
"""Every operation a token can be granted (``<area>:*`` and ``*`` grant several)."""
_ID_HEX = 12
_SECRET_BYTES = 32  # 256 bits
_DUMMY_DIGEST = hashlib.sha256(b"phoenix: no such token").hexdigest()
_MAX_LABEL = 200
_MAX_MS = 253_402_300_799_999
"""The last millisecond of year 9999, the last time ISO 8601 (and ``datetime``) can write."""
_HEX = frozenset("0123456789abcdef")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_Records = list[dict[str, Any]]
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
MAX_LIFETIME = 36_525 * 86_400.0
"""The longest lifetime a token can have: 100 years (36525d). Without a bound an expiry could end
past year 9999, which ISO 8601 and ``datetime`` cannot write; a token that never expires has none."""


def agent_namespace(agent_id: str) -> str:
    """The namespace of an agent: ``agent:<agent_id>``."""
    return "agent:" + validate_id(agent_id, "agent id")


def team_namespace(team_id: str) -> str:
    """The namespace of a team: ``team:<team_id>``."""
    return "team:" + validate_id(team_id, "team id")


def _check_namespace(value: str) -> str:
    if value == ALL:
        return value
    kind, sep, name = value.partition(":")
    if not sep or kind not in ("agent", "team"):
        raise UsageError(f"namespace {value!r} must be agent:<id>, team:<id> or * (every namespace).")
    validate_id(name, f"{kind} id")
    return value


def _check_scope(value: str) -> str:
    if value == ALL or value in SCOPES:
        return value
    area, sep, op = value.partition(":")
    if sep and area in AREAS and op == ALL:
        return value
    raise UsageError(f"unknown scope {value!r}; scopes: {', '.join(SCOPES)}, <area>:* or *.")


def parse_duration(text: str) -> float:
    """Seconds from ``3600``, ``90s``, ``45m``, ``12h``, ``30d`` or ``2w``; ``UsageError`` otherwise,
    and for a lifetime of zero or longer than ``MAX_LIFETIME`` (100 years)."""
    match = _DURATION.match(str(text))
    if not match:
        raise UsageError(f"{text!r} is not a duration: use seconds (3600) or a number with s, m, h, d or w (30d).")
    return _check_lifetime(float(match.group(1)) * _UNITS[match.group(2)])


def _check_lifetime(seconds: float) -> float:
    """``seconds`` when it is a lifetime a token can have (more than zero, at most ``MAX_LIFETIME``)."""
    if not seconds > 0:
        raise UsageError("a token's lifetime must be longer than zero.")
    if not seconds <= MAX_LIFETIME:
        raise UsageError(
            "a token's lifetime must be at most 100 years (36525d); "
            "leave the expiry out (no --expires) for a token that never expires."
        )
    return seconds


class TokenInfo:
    """What is known of a token, never its secret: id, namespaces, scopes, label, times."""

    __slots__ = (
        "created_ms",
        "expires_ms",
        "expiry_known",
        "id",
        "label",
        "namespaces",
        "problem",
        "revoked_ms",
        "scopes",
    )

    def __init__(
        self,
        token_id: str,
        namespaces: list[str],
        scopes: list[str],
        *,
        label: str | None = None,
        created_ms: int | None = 0,
        expires_ms: int | None = None,
        revoked_ms: int | None = None,
        problem: str | None = None,
        expiry_known: bool = True,
    ) -> None:
        self.id = token_id
        self.namespaces = list(namespaces)
        self.scopes = list(scopes)
        self.label = label
        self.created_ms = created_ms
        self.expires_ms = expires_ms
        self.revoked_ms = revoked_ms
        self.problem = problem
        """Why the stored record is invalid (then it is never active), else ``None``."""
        self.expiry_known = expiry_known
        """False when the stored record's expiry does not read (``expires_ms`` is then ``None``
        without meaning "never")."""

    def covers_namespace(self, namespace: str) -> bool:
        """Whether the token may act in ``namespace`` (``agent:<id>`` or ``team:<id>``)."""
        return ALL in self.namespaces or namespace in self.namespaces

    def allows(self, scope: str) -> bool:
        """Whether the token grants the operation ``scope`` (e.g. ``memory:write``)."""
        area = scope.partition(":")[0]
        return ALL in self.scopes or scope in self.scopes or f"{area}:{ALL}" in self.scopes

    def active(self, now_ms: int) -> bool:
        """Valid, not revoked and not expired at ``now_ms``."""
        return (
            self.problem is None and self.revoked_ms is None and (self.expires_ms is None or now_ms < self.expires_ms)
        )

    def status(self, now_ms: int) -> str:
        """``active``, ``expired``, ``revoked``, or ``invalid`` (a stored record that is not one
        Phoenix writes: see ``problem``)."""
        if self.problem is not None:
            return "invalid"
        if self.revoked_ms is not None:
            return "revoked"
        if self.expires_ms is not None and now_ms >= self.expires_ms:
            return "expired"
        return "active"

    def as_dict(self, now_ms: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "namespaces": self.namespaces,
            "scopes": self.scopes,
            "label": self.label,
            "created_at": iso_from_ms(self.created_ms) if self.created_ms is not None else None,
            "expires_at": iso_from_ms(self.expires_ms) if self.expires_ms is not None else None,
            "revoked_at": iso_from_ms(self.revoked_ms) if self.revoked_ms is not None else None,
            "problem": self.problem,
        }
        if now_ms is not None:
            out["status"] = self.status(now_ms)
        return out

    def __repr__(self) -> str:
        return f"TokenInfo({self.id!r}, namespaces={self.namespaces!r}, scopes={self.scopes!r})"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _time_ms(value: Any) -> int | None:
    """``value`` when it is a time Phoenix writes: whole milliseconds from 1970 to year 9999."""
    return value if type(value) is int and 0 <= value <= _MAX_MS else None


def _read_record(record: Any, position: int, path: str) -> TokenInfo:
    """The token a stored record describes, every field checked. A record that is not one
    ``create`` could have written comes back with ``problem`` set (status ``invalid``, never
    active), keeping the fields that are sound; ``position`` (1-based) names it when its id cannot."""
    if not isinstance(record, dict):
        where = f"record {position}"
        return TokenInfo(
            where, [], [], created_ms=None, problem=f"{path}: {where} is not an object.", expiry_known=False
        )
    problems: list[str] = []
    raw_id = record.get("id")
    if isinstance(raw_id, str) and len(raw_id) == _ID_HEX and set(raw_id) <= _HEX:
        token_id = raw_id
    else:
        token_id = f"record {position}"
        problems.append(f"id {raw_id!r} is not {_ID_HEX} hex digits")
    digest = record.get("hash")
    if not (isinstance(digest, str) and len(digest) == 64 and set(digest) <= _HEX):
        problems.append("hash is not a SHA-256 hex digest")

    def names(key: str, check: Callable[[str], str]) -> list[str]:
        values = record.get(key)
        if not isinstance(values, list) or not values:
            problems.append(f"{key} {values!r} is not a non-empty list")
            return []
        good = []
        for value in values:
            try:
                if not isinstance(value, str):
                    raise UsageError(f"{value!r} is not text")
                good.append(check(value))
            except UsageError as exc:
                problems.append(f"{key}: {exc}".rstrip("."))
        return good

    namespaces = names("namespaces", _check_namespace)
    scopes = names("scopes", _check_scope)
    label = record.get("label")
    if label is not None and not isinstance(label, str):
        problems.append(f"label {label!r} is not text")
        label = None
    created = _time_ms(record.get("created_ms"))
    if created is None:
        problems.append(f"created_ms {record.get('created_ms')!r} is not a time from 1970 to year 9999")
    raw_expires = record.get("expires_ms")
    expires: int | None = None
    if raw_expires is not None:
        if type(raw_expires) is not int:
            problems.append(f"expires_ms {raw_expires!r} is not a time in milliseconds")
        elif created is not None and not 0 < raw_expires - created <= MAX_LIFETIME * 1000:
            problems.append(
                f"expires_ms {raw_expires!r} is not after created_ms and at most 100 years (36525d) later, "
                "the longest lifetime `phx token create --expires` allows"
            )
        elif _time_ms(raw_expires) is None:
            problems.append(f"expires_ms {raw_expires!r} is not a time from 1970 to year 9999")
        else:
            expires = raw_expires
    raw_revoked = record.get("revoked_ms")
    revoked = _time_ms(raw_revoked)
    if raw_revoked is not None and revoked is None:
        problems.append(f"revoked_ms {raw_revoked!r} is not a time in milliseconds")
    problem = None
    if problems:
        fix = "revoke it (`phx token revoke ID`)" if token_id == raw_id else "delete its row of phx_tokens by hand"
        problem = (
            f"{path}: token {token_id}: {'; '.join(problems)}. It authenticates nothing: {fix} "
            "and create another (`phx token create`)."
        )
    return TokenInfo(
        token_id,
        namespaces,
        scopes,
        label=label,
        created_ms=created,
        expires_ms=expires,
        revoked_ms=revoked,
        problem=problem,
        expiry_known=raw_expires is None or expires is not None,
    )


def _split(token: str) -> tuple[str, str] | None:
    """``(id, secret)`` of a well-formed token, else ``None`` (the secret may contain ``_``)."""
    if not isinstance(token, str) or not token.startswith(PREFIX) or len(token) > 200:
        return None
    token_id, sep, secret = token[len(PREFIX) :].partition("_")
    if not sep or len(token_id) != _ID_HEX or any(c not in "0123456789abcdef" for c in token_id) or not secret:
        return None
    return token_id, secret


def parse_token_file(data: bytes, path: str) -> list[Any]:
    """The records of an earlier release's ``tokens.json`` (or of an older ``phx export``'s copy
    of it), every one as stored (an invalid one too: it is listed as such)."""
    try:
        doc = loads(data)
    except JSONError as exc:
        raise CorruptStateError(f"{path} is not valid JSON ({exc}); it was left as it is.", path=path) from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND or not isinstance(doc.get("tokens"), list):
        raise CorruptStateError(f"{path} is not a Phoenix token file; it was left as it is.", path=path)
    version = doc.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path} was written by a newer Phoenix (token schema {version!r}); upgrade phoenix-protocol.",
            path=path,
            found=version if isinstance(version, int) else 0,
            supported=SCHEMA_VERSION,
        )
    return list(doc["tokens"])


def record_json(record: Any) -> str:
    """A stored record as the ``record`` column holds it (JSON, kept as it was)."""
    return json.dumps(record, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def _decode(text: str) -> object:
    """The record a ``record`` column holds, or the text itself when it is not JSON."""
    try:
        return loads(text)
    except JSONError:
        return text  # not a record: listed as invalid


def row_keys(records: list[Any], taken: set[str]) -> list[str]:
    """The ``phx_tokens.id`` of each record appended after ``taken``: its id, or (a record whose id
    is not text, or is already used) ``#<position>-<digest>``, which the same record at the same
    position always gets again (a move run again finds its rows)."""
    keys: list[str] = []
    used = set(taken)
    for position, record in enumerate(records, 1):
        raw = record.get("id") if isinstance(record, dict) else None
        if isinstance(raw, str) and raw and not raw.startswith("#") and raw not in used:
            key = raw
        else:
            key = f"#{position}-{hashlib.sha256(record_json(record).encode()).hexdigest()[:12]}"
        used.add(key)
        keys.append(key)
    return keys


def insert_records(tx: Tx, records: list[Any], keys: list[str]) -> None:
    """Append ``records`` under ``keys`` after the tokens already stored, in their order; a key
    already there is left as it is (the move of an earlier release's home runs again safely)."""
    base = int(tx.scalar("SELECT coalesce(max(position), 0) FROM phx_tokens") or 0)
    tx.executemany(
        "INSERT INTO phx_tokens (id, position, record) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING",
        [(key, base + n, record_json(record)) for n, (key, record) in enumerate(zip(keys, records, strict=True), 1)],
    )


class TokenStore:
    """The tokens of one Phoenix home, in its database (``phx_tokens``)."""

    def __init__(self, home: Home, *, clock: Clock = system_clock, config: Config | None = None) -> None:
        from phoenix_protocol.store._db import open_database

        self.home = home
        self.clock = clock
        self.db = open_database(home, config)
        self.where = self.db.where
        """Where the tokens are, for people (a path, or ``postgresql://host:port/db``)."""

    # -- reading ---------------------------------------------------------------------------

    def _rows(self) -> list[tuple[str, Any]]:
        """``(key, record)`` of every stored token, in listing order, each record as stored."""
        from phoenix_protocol.store._move_memory import move_earlier_files

        move_earlier_files(self.home, self.db, clock=self.clock)
        if not self.db.exists():
            return []
        rows = self.db.read(lambda tx: tx.all("SELECT id, record FROM phx_tokens ORDER BY position, id"))
        return [(str(key), _decode(record)) for key, record in rows]

    def _load(self) -> tuple[list[Any], list[TokenInfo]]:
        """Every stored record, as stored, and what each says, checked (``_read_record``). A
        later record with an id an earlier one has is invalid."""
        records = [record for _key, record in self._rows()]
        return records, self._infos(records)

    def _infos(self, records: list[Any]) -> list[TokenInfo]:
        infos: list[TokenInfo] = []
        seen: set[str] = set()
        for position, record in enumerate(records, 1):
            info = _read_record(record, position, self.where)
            if info.problem is None and info.id in seen:
                info.problem = (
                    f"{self.where}: token {info.id}: record {position} repeats the id of an earlier "
                    "record. It authenticates nothing."
                )
            seen.add(info.id)
            infos.append(info)
        return infos

    def configured(self) -> bool:
        """Whether this home has (or ever had) tokens: then every request must carry a valid one.
        An invalid record counts: a damaged record never turns authentication off."""
        return bool(self._rows())

    def has_active(self) -> bool:
        """Whether at least one token is valid and neither revoked nor expired."""
        now = self.clock.now_ms()
        return any(info.active(now) for info in self._load()[1])

    def problems(self) -> list[str]:
        """Why each invalid record is invalid (empty when every record is sound)."""
        return [info.problem for info in self._load()[1] if info.problem is not None]

    def list(self) -> list[TokenInfo]:
        """Every token, oldest first (revoked, expired and invalid ones included: an invalid one
        has status ``invalid`` and says why in ``problem``)."""
        return list(self._load()[1])

    def export(self) -> builtins.list[Any]:
        """Every stored record as stored (the digest, never a secret), in order, for ``phx export``."""
        return self._load()[0]

    def verify(self, token: str) -> TokenInfo | None:
        """The token's info when ``token`` is well formed, known, matches, is not revoked and has
        not expired; ``None`` otherwise (the caller cannot tell which, on purpose)."""
        parts = _split(token)
        if parts is None:
            return None
        token_id, secret = parts
        records, infos = self._load()
        found = next((i for i, info in enumerate(infos) if info.id == token_id), None)
        record = records[found] if found is not None else None
        stored = record.get("hash") if isinstance(record, dict) else None
        if not isinstance(stored, str):
            stored = _DUMMY_DIGEST  # unknown id, or no digest: compared all the same, matches nothing
        if not hmac.compare_digest(stored.encode("ascii", "replace"), _digest(secret).encode("ascii")):
            return None
        if found is None:  # pragma: no cover - the dummy digest matches no secret
            return None
        info = infos[found]
        return info if info.active(self.clock.now_ms()) else None  # an invalid record never is

    # -- writing ---------------------------------------------------------------------------

    def create(
        self,
        namespaces: Sequence[str],
        scopes: Sequence[str],
        *,
        expires_in: float | None = None,
        label: str | None = None,
    ) -> tuple[str, TokenInfo]:
        """Create a token; returns ``(plaintext, info)``. The plaintext is not kept anywhere."""
        clean_ns = sorted({_check_namespace(n) for n in namespaces})
        if not clean_ns:
            raise UsageError("a token needs at least one namespace (--agent ID or --team ID).")
        clean_scopes = sorted({_check_scope(s) for s in scopes})
        if not clean_scopes:
            raise UsageError(f"a token needs at least one scope; scopes: {', '.join(SCOPES)}, <area>:* or *.")
        if expires_in is not None:
            _check_lifetime(expires_in)
        if label is not None:
            from phoenix_protocol.core._redact import redact

            label = " ".join(redact(label).split())[:_MAX_LABEL] or None
        from phoenix_protocol.store._move_memory import move_earlier_files

        move_earlier_files(self.home, self.db, clock=self.clock)
        secret = secrets.token_urlsafe(_SECRET_BYTES)
        now = self.clock.now_ms()

        def work(tx: Tx) -> tuple[dict[str, Any], int]:
            rows = tx.all("SELECT id, record FROM phx_tokens")
            known = {str(key) for key, _text in rows}
            known |= {str(r.get("id")) for r in (_decode(text) for _key, text in rows) if isinstance(r, dict)}
            token_id = secrets.token_hex(_ID_HEX // 2)
            while token_id in known:  # pragma: no cover - 48 random bits
                token_id = secrets.token_hex(_ID_HEX // 2)
            record: dict[str, Any] = {
                "id": token_id,
                "hash": _digest(secret),
                "namespaces": clean_ns,
                "scopes": clean_scopes,
                "label": label,
                "created_ms": now,
                "expires_ms": now + int(expires_in * 1000) if expires_in is not None else None,
                "revoked_ms": None,
            }
            insert_records(tx, [record], [token_id])
            return record, len(rows) + 1

        record, position = self.db.transaction(work)
        return f"{PREFIX}{record['id']}_{secret}", _read_record(record, position, self.where)

    def import_records(self, records: builtins.list[Any]) -> int:
        """Append exported records as they were (``phx import``), in one transaction; ``UsageError``
        for a token id already stored."""
        if not records:
            return 0

        def work(tx: Tx) -> int:
            taken = {str(key) for (key,) in tx.all("SELECT id FROM phx_tokens")}
            keys = row_keys(records, taken)
            clash = [k for k, r in zip(keys, records, strict=True) if isinstance(r, dict) and r.get("id") in taken]
            if clash:
                raise UsageError(f"token {clash[0]} is already stored: nothing was imported.")
            insert_records(tx, records, keys)
            return len(records)

        return self.db.transaction(work)

    def revoke(self, token_id: str) -> TokenInfo:
        """Revoke a token by id (idempotent); ``UsageError`` for an unknown id."""
        if not self._rows():
            raise UsageError(f"no token {token_id!r}: this home has no tokens (`phx token create`).")
        now = self.clock.now_ms()

        def work(tx: Tx) -> TokenInfo | None:
            rows = tx.all("SELECT id, record FROM phx_tokens ORDER BY position, id")
            for position, (key, text) in enumerate(rows, 1):
                record = _decode(text)
                if isinstance(record, dict) and record.get("id") == token_id:
                    if record.get("revoked_ms") is None:  # an invalid record too: it stays listed, revoked
                        record["revoked_ms"] = now
                        tx.execute("UPDATE phx_tokens SET record = ? WHERE id = ?", (record_json(record), key))
                    return _read_record(record, position, self.where)
            return None

        found = self.db.transaction(work)
        if found is None:
            raise UsageError(f"no token {token_id!r} in {self.where} (`phx token list`).")
        return found
