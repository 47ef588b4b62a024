"""A Python client for the memory bridge (``phx serve``): the standard library only.

An agent on another machine uses the service the way it would use the local home::

    from phoenix_protocol.client import PhoenixClient

    with PhoenixClient("http://10.0.0.5:8765", token="phx_…") as phx:
        phx.restore("zero")                                  # session start
        phx.memory_store("zero", "Timers drift under load", tags=["asyncio"])
        hits = phx.memory_recall("zero", "why do timers drift", k=3)
        phx.checkpoint("zero", "Implemented namespace isolation")   # session end

``PhoenixClient.from_env()`` reads ``$PHOENIX_SERVER`` and ``$PHOENIX_TOKEN``.

Errors are the library's: a problem detail from the server becomes the ``PhoenixError`` subclass
it names (``UsageError``, ``InvalidIdError``, ``RefusedError``, ``ClaimConflictError``,
``IdentityCoreError``, ``LockTimeoutError``, ``CorruptStateError`` ...), or by its status:
401 ``AuthenticationError``, 404 ``NotFoundError``, 409 ``RefusedError``, 503 ``LockTimeoutError``,
other 4xx ``UsageError``, 5xx ``ServerError``. A server that cannot be reached, or that does not
answer within ``timeout``, is a ``ServerError`` too; a write that timed out may have been applied.
The error's ``status`` and ``problem`` attributes hold the HTTP status and the problem document.

One client keeps one HTTP/1.1 connection alive and is safe to share between threads (requests take
turns on it); use one client per thread for parallel requests.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import urllib.parse
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from phoenix_protocol._version import __version__
from phoenix_protocol.core._errors import (
    CorruptStateError,
    InvalidIdError,
    LockTimeoutError,
    OperationError,
    PhoenixError,
    RefusedError,
    SchemaVersionError,
    StatusRefusedError,
    StorageError,
    UsageError,
)
from phoenix_protocol.services._bridge import NotFoundError

if TYPE_CHECKING:
    from phoenix_protocol.core._jsonio import JSON

__all__ = ["AuthenticationError", "NotFoundError", "PhoenixClient", "ServerError"]


class AuthenticationError(UsageError):
    """The server wants a valid bearer token: it was missing, malformed, unknown, revoked or expired."""


class ServerError(OperationError):
    """The server failed (5xx), or could not be reached or did not answer in time."""


_BY_NAME: dict[str, type[PhoenixError]] = {
    "AuthenticationError": AuthenticationError,
    "NotFoundError": NotFoundError,
    "UsageError": UsageError,
    "ValidationError": UsageError,
    "InvalidIdError": InvalidIdError,
    "RefusedError": RefusedError,
    "StatusRefusedError": StatusRefusedError,
    "LockTimeoutError": LockTimeoutError,
    "CorruptStateError": CorruptStateError,
    "SchemaVersionError": SchemaVersionError,
    "StorageError": StorageError,
    "OperationError": ServerError,
    "ConfigError": ServerError,  # the server's configuration, not the caller's
}


def _class_for(name: str, status: int) -> type[PhoenixError]:
    if name in _BY_NAME:
        return _BY_NAME[name]
    if name in ("IdentityCoreError",):
        from phoenix_protocol.agent._identity import IdentityCoreError

        return IdentityCoreError
    if name == "MessageConflictError":
        from phoenix_protocol.store._team_store import MessageConflictError

        return MessageConflictError
    if name in ("ClaimConflictError", "TeamReadOnlyError"):
        from phoenix_protocol.store import _teams

        return _teams.ClaimConflictError if name == "ClaimConflictError" else _teams.TeamReadOnlyError
    if name == "CheckpointOwnershipError":
        from phoenix_protocol.services._checkpoints import CheckpointOwnershipError

        return CheckpointOwnershipError
    if status == 401:
        return AuthenticationError
    if status == 404:
        return NotFoundError
    if status == 409:
        return RefusedError
    if status == 503:
        return LockTimeoutError
    return UsageError if status < 500 else ServerError


def error_from_problem(status: int, problem: dict[str, Any]) -> PhoenixError:
    """The ``PhoenixError`` a problem detail stands for (``status`` and ``problem`` attached)."""
    detail = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
    cls = _class_for(str(problem.get("error") or ""), status)
    if status < 500 and not issubclass(cls, (UsageError, RefusedError, LockTimeoutError)):
        cls = UsageError  # a 4xx is the caller's mistake, whatever the name says
    exc = NotFoundError(detail) if cls is NotFoundError else cls(detail)
    exc.status = status  # type: ignore[attr-defined]
    exc.problem = problem  # type: ignore[attr-defined]
    return exc


def _segment(value: object) -> str:
    return urllib.parse.quote(str(value), safe="")


class PhoenixClient:
    """A client of one memory bridge. ``base_url`` is ``http://host:port`` (``https`` works too)."""

    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 10.0) -> None:
        parts = urllib.parse.urlsplit(base_url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"server URL {base_url!r} must look like http://host:port.")
        self.base_url = base_url.strip().rstrip("/")
        self.timeout = timeout
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._token = token or None
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, *, timeout: float = 10.0) -> PhoenixClient:
        """A client for ``$PHOENIX_SERVER`` with ``$PHOENIX_TOKEN``."""
        url = os.environ.get("PHOENIX_SERVER")
        if not url:
            raise UsageError("set PHOENIX_SERVER to the memory bridge's URL (http://host:port).")
        return cls(url, os.environ.get("PHOENIX_TOKEN"), timeout=timeout)

    def __repr__(self) -> str:
        return f"PhoenixClient({self.base_url!r})"  # never the token

    # -- transport -------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the kept-alive connection (a later request opens a new one)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> PhoenixClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        if self._conn is not None:
            return self._conn, False
        if self._scheme == "https":
            self._conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout)
        else:
            self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
        return self._conn, True

    def request(
        self, method: str, path: str, *, body: object = None, query: dict[str, Any] | None = None
    ) -> tuple[int, JSON]:
        """Send one request; returns ``(status, decoded JSON or None)`` for a 2xx, raises otherwise."""
        target = self._prefix + path
        if query:
            clean = {k: v for k, v in query.items() if v is not None}
            if clean:
                target += "?" + urllib.parse.urlencode(clean, doseq=True)
        data = json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8") if body is not None else None
        headers = {
            "Accept": "application/json, application/problem+json",
            "User-Agent": f"phoenix-protocol/{__version__}",
        }
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        with self._lock:
            for attempt in (1, 2):
                conn, fresh = self._connection()
                try:
                    conn.request(method, target, body=data, headers=headers)
                    response = conn.getresponse()
                    raw = response.read()
                except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                    self.close()
                    # A kept-alive connection the server had closed: the request never reached it.
                    if fresh or attempt == 2:
                        raise ServerError(f"{self.base_url} closed the connection: {exc}.") from exc
                    continue
                except (OSError, http.client.HTTPException) as exc:
                    self.close()
                    reason = (
                        "did not answer in time" if isinstance(exc, TimeoutError) else f"could not be reached ({exc})"
                    )
                    raise ServerError(f"the Phoenix server at {self.base_url} {reason}.") from exc
                if response.will_close:
                    self.close()
                break
        status = response.status
        decoded: JSON = None
        if raw:
            try:
                decoded = json.loads(raw)
            except ValueError:
                decoded = None
        if status >= 400:
            problem = decoded if isinstance(decoded, dict) else {"detail": raw[:200].decode("utf-8", "replace")}
            raise error_from_problem(status, problem)
        return status, decoded

    def _get(self, path: str, **query: Any) -> dict[str, Any]:
        return self._object(path, self.request("GET", path, query=query)[1])

    def _post(self, path: str, body: object = None) -> dict[str, Any]:
        return self._object(path, self.request("POST", path, body=body if body is not None else {})[1])

    def _object(self, path: str, value: JSON) -> dict[str, Any]:
        """``value``, the JSON object the server answers ``path`` with; else a ``ServerError``
        (not a Phoenix server, or not the version this client speaks)."""
        if not isinstance(value, dict):
            raise ServerError(f"{self.base_url} answered {path} with no JSON object.")
        return value

    def _field(self, answer: dict[str, Any], key: str) -> dict[str, Any]:
        """``answer[key]``, a JSON object; else a ``ServerError`` (as ``_object``)."""
        value = answer.get(key)
        if not isinstance(value, dict):
            raise ServerError(f"{self.base_url} answered with no JSON object under {key!r}.")
        return value

    def _items(self, answer: dict[str, Any], key: str) -> list[dict[str, Any]]:
        """``answer[key]``, a list of JSON objects; else a ``ServerError`` (as ``_object``)."""
        items = answer.get(key)
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise ServerError(f"{self.base_url} answered with no list of JSON objects under {key!r}.")
        return items

    # -- health ----------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``{"status": "ok", "version": ...}`` when the server is up."""
        return self._get("/healthz")

    def ready(self) -> bool:
        """Whether the server's home is writable."""
        try:
            self._get("/readyz")
        except PhoenixError as exc:
            if getattr(exc, "status", None) == 503:
                return False
            raise
        return True

    # -- checkpoints and sessions ----------------------------------------------------------------

    def checkpoint(
        self,
        agent_id: str,
        summary: str,
        *,
        checkpoint_type: str = "session",
        context: dict[str, Any] | None = None,
        working_memory: dict[str, Any] | None = None,
        identity_updates: dict[str, Any] | None = None,
        extensions: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Take a checkpoint (default: a session checkpoint, ending the session); returns its info."""
        body: dict[str, Any] = {"summary": summary, "checkpoint_type": checkpoint_type}
        for key, value in (
            ("context", context),
            ("working_memory", working_memory),
            ("identity_updates", identity_updates),
            ("extensions", extensions),
        ):
            if value is not None:
                body[key] = value
        return self._field(self._post(f"/checkpoint/{_segment(agent_id)}", body), "checkpoint")

    def latest_checkpoint(self, agent_id: str, *, checkpoint_type: str | None = None) -> dict[str, Any]:
        """``{"name", "checkpoint", "problems"}`` of the newest valid checkpoint."""
        return self._get(f"/checkpoint/{_segment(agent_id)}/latest", type=checkpoint_type)

    def restore(
        self, agent_id: str, *, checkpoint: str | None = None, force: bool = False, session_id: str | None = None
    ) -> dict[str, Any]:
        """Start a session from the newest checkpoint, or the one ``checkpoint`` names (its name, or
        its number as ``"7"`` or ``"#7"``); returns what was restored."""
        body: dict[str, Any] = {"force": force}
        if checkpoint is not None:
            body["checkpoint"] = checkpoint
        if session_id is not None:
            body["session_id"] = session_id
        return self._post(f"/restore/{_segment(agent_id)}", body)

    def sessions(self, agent_id: str) -> list[dict[str, Any]]:
        """Every session of the agent, oldest first."""
        return self._items(self._get(f"/sessions/{_segment(agent_id)}"), "sessions")

    # -- memory ----------------------------------------------------------------------------------

    def memory_store(
        self, agent_id: str, text: str, *, tags: Iterable[str] = (), metadata: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Store a memory; returns it with its ``id``."""
        body: dict[str, Any] = {"text": text, "tags": list(tags)}
        if metadata is not None:
            body["metadata"] = metadata
        return self._field(self._post(f"/memory/{_segment(agent_id)}", body), "memory")

    def memory_recall(
        self,
        agent_id: str,
        query: str,
        *,
        k: int = 5,
        tags: Iterable[str] | None = None,
        since: str | None = None,
        until: str | None = None,
        mode: str | None = None,
    ) -> list[dict[str, Any]]:
        """The ``k`` best matches, best first, each with a ``score``; ``since``/``until``: ISO 8601
        times (stored at or after ``since``, before ``until``); ``mode``: ``lexical`` or
        ``semantic`` (default: the server's ``memory_recall`` setting)."""
        body: dict[str, Any] = {"query": query, "k": k}
        for key, value in (("since", since), ("until", until), ("mode", mode)):
            if value is not None:
                body[key] = value
        if tags is not None:
            body["tags"] = list(tags)
        return self._items(self._post(f"/memory/{_segment(agent_id)}/recall", body), "results")

    def memory_list(
        self,
        agent_id: str,
        *,
        tags: Iterable[str] | None = None,
        limit: int = 50,
        offset: int = 0,
        since: str | None = None,
        until: str | None = None,
    ) -> list[dict[str, Any]]:
        """The agent's memories, newest first (``since``/``until`` as in ``memory_recall``)."""
        query = {
            "tag": list(tags) if tags is not None else None,
            "limit": limit,
            "offset": offset,
            "since": since,
            "until": until,
        }
        return self._items(self._get(f"/memory/{_segment(agent_id)}", **query), "memories")

    def memory_get(self, agent_id: str, memory_id: str) -> dict[str, Any]:
        """One memory."""
        return self._field(self._get(f"/memory/{_segment(agent_id)}/{_segment(memory_id)}"), "memory")

    def memory_delete(self, agent_id: str, memory_id: str) -> None:
        """Delete one memory (``NotFoundError`` when there is none)."""
        self.request("DELETE", f"/memory/{_segment(agent_id)}/{_segment(memory_id)}")

    # -- identity --------------------------------------------------------------------------------

    def identity_get(self, agent_id: str) -> dict[str, Any]:
        """``{"immutable": ..., "mutable": ...}``."""
        return self._field(self._get(f"/identity/{_segment(agent_id)}"), "identity")

    def identity_set(self, agent_id: str, path: str, value: Any) -> dict[str, Any]:
        """Set a value in the mutable section (``state.current_focus``); returns the identity."""
        target = f"/identity/{_segment(agent_id)}"
        _status, data = self.request("PATCH", target, body={"path": path, "value": value})
        return self._field(self._object(target, data), "identity")

    def identity_add(
        self,
        agent_id: str,
        kind: str,
        name: str,
        *,
        confidence: float | None = None,
        level: str | None = None,
        type: str | None = None,
    ) -> dict[str, Any]:
        """Add (or update) a belief, skill or relationship; returns the identity."""
        body: dict[str, Any] = {"kind": kind, "name": name}
        for key, value in (("confidence", confidence), ("level", level), ("type", type)):
            if value is not None:
                body[key] = value
        return self._field(self._post(f"/identity/{_segment(agent_id)}/entries", body), "identity")

    # -- teams -----------------------------------------------------------------------------------

    def team_send(
        self,
        team_id: str,
        sender: str,
        to: str,
        *,
        subject: str,
        body: str,
        type: str = "info",
        msg_id: str | None = None,
    ) -> dict[str, Any]:
        """Send a message (``to`` a teammate or ``*``): ``{"message", "duplicate"}``."""
        payload: dict[str, Any] = {"from": sender, "to": to, "type": type, "subject": subject, "body": body}
        if msg_id is not None:
            payload["msg_id"] = msg_id
        data = self._post(f"/teams/{_segment(team_id)}/messages", payload)
        return {"message": data["message"], "duplicate": data["duplicate"]}

    def team_inbox(
        self, team_id: str, name: str, *, limit: int | None = None, confirm: bool = True
    ) -> list[dict[str, Any]]:
        """Messages ``name`` has not received yet, oldest first. With ``confirm`` (needs
        ``team:write``) they are then marked delivered, once this client has them, as the CLI
        does; without it the same messages come back next time."""
        data = self.team_inbox_page(team_id, name, limit=limit)
        if confirm and data["messages"]:
            self.team_mark_delivered(team_id, name, data["through_seq"])
        return self._items(data, "messages")

    def team_inbox_page(self, team_id: str, name: str, *, limit: int | None = None) -> dict[str, Any]:
        """``{"messages", "through_seq"}``: what ``team_inbox`` returns, not yet marked delivered
        (``team_mark_delivered`` once it is handed over, as ``phx team inbox --server`` does)."""
        return self._get(f"/teams/{_segment(team_id)}/inbox/{_segment(name)}", limit=limit)

    def team_mark_delivered(self, team_id: str, name: str, through_seq: int) -> None:
        """Mark ``name``'s messages up to ``through_seq`` (a page's) delivered (needs ``team:write``)."""
        self._post(f"/teams/{_segment(team_id)}/inbox/{_segment(name)}/delivered", {"through_seq": through_seq})

    def team_ack(self, team_id: str, seq: int, name: str) -> dict[str, Any]:
        """Acknowledge message ``seq`` as ``name``: ``{"seq", "acked_by"}``."""
        data = self._post(f"/teams/{_segment(team_id)}/messages/{int(seq)}/ack", {"name": name})
        return {"seq": data["seq"], "acked_by": data["acked_by"]}

    def team_tasks(self, team_id: str) -> list[dict[str, Any]]:
        """Every task of the team."""
        return self._items(self._get(f"/teams/{_segment(team_id)}/tasks"), "tasks")

    def team_claim(self, team_id: str, task_id: str, name: str) -> dict[str, Any]:
        """Claim a ready task for ``name`` (``ClaimConflictError`` when another holds it)."""
        path = f"/teams/{_segment(team_id)}/tasks/{_segment(task_id)}/claim"
        return self._field(self._post(path, {"name": name}), "task")

    def team_heartbeat(self, team_id: str, name: str, *, session_id: str | None = None) -> dict[str, Any]:
        """Record a heartbeat of ``name``; returns the heartbeat record."""
        body = {"session_id": session_id} if session_id is not None else {}
        return self._field(self._post(f"/teams/{_segment(team_id)}/heartbeat/{_segment(name)}", body), "heartbeat")

    def team_delivery(
        self, team_id: str, name: str, *, msg_ids: list[str] | None = None, last: int = 50
    ) -> list[dict[str, Any]]:
        """The delivery state of the messages ``name`` sent (``msg_ids``, else the newest
        ``last``): ``state`` delivered, read or acked, ``read_by``, ``acked_by``."""
        path = f"/teams/{_segment(team_id)}/sent/{_segment(name)}"
        return self._items(self._get(path, msg_id=msg_ids, last=last), "messages")
