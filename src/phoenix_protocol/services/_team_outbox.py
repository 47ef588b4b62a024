"""Sending to a team on a server through the local outbox (seed 004 §4.3), and the delivery
state of what was sent.

``send_queued`` writes the message to the outbox of the sender's own home (``store._team_outbox``),
then posts every queued message of that team, oldest first, with its own id: a server that cannot
be reached leaves them queued (``retryable`` says which errors mean that), and a later send or
``flush`` posts them again (the server stores an id once, so a message posted twice is stored
once). ``delivery`` joins the outbox (queued, refused) with what the server reports (delivered,
read, acknowledged). The HTTP transport is given (``post``, ``status``): the CLI passes
``phoenix_protocol.client``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._errors import PhoenixError, RefusedError
from phoenix_protocol.store._team_store import MessageConflictError

if TYPE_CHECKING:
    from phoenix_protocol.store._team_outbox import Outbox

__all__ = ["delivery", "flush", "outbox_message", "send_queued"]

Post = Callable[[dict[str, Any]], dict[str, Any]]
"""Post one queued message (``{"msg_id", "message"}``) to the server: its stored message (``seq``)."""


def flush(
    outbox: Outbox, target: str, team_id: str, post: Post, retryable: Callable[[Exception], bool]
) -> dict[str, Any]:
    """Post the queued messages of ``target``'s team in order; stop at the first the server cannot
    be reached for (``retryable``), and raise any other error but a refusal, the message kept
    queued. A refusal (``RefusedError``: a reused id, a completed team) marks the message
    ``refused`` and goes on. Returns ``{"sent": [...], "refused": [...], "queued": n, "error":
    str | None}``."""
    sent: list[str] = []
    refused: list[dict[str, Any]] = []
    for row in outbox.queued(target, team_id):
        try:
            stored = post(row)
        except RefusedError as exc:  # for good (a reused id, a completed team): not posted again
            outbox.refused(target, team_id, row["msg_id"], f"{type(exc).__name__}: {exc}")
            refused.append({"msg_id": row["msg_id"], "error": exc})
            continue
        except PhoenixError as exc:
            outbox.attempted(target, team_id, row["msg_id"], error=f"{type(exc).__name__}: {exc}")
            if retryable(exc):
                queued = len(outbox.queued(target, team_id))
                return {"sent": sent, "refused": refused, "queued": queued, "error": str(exc)}
            raise  # the caller's to fix (a token, a team id): it stays queued meanwhile
        outbox.sent(target, team_id, row["msg_id"], int(stored["seq"]))
        sent.append(row["msg_id"])
    return {"sent": sent, "refused": refused, "queued": 0, "error": None}


def send_queued(
    outbox: Outbox,
    target: str,
    team_id: str,
    fields: dict[str, Any],
    post: Post,
    retryable: Callable[[Exception], bool],
) -> dict[str, Any]:
    """Queue ``fields`` (``Mailbox.prepare``'s), then flush. Returns the message's outbox row
    (``state`` queued or sent) with ``error`` when the server could not be reached; raises the
    server's refusal of this message (a ``MessageConflictError``, say)."""
    queued = outbox.enqueue(target, team_id, fields)
    if queued["state"] == "refused":
        raise MessageConflictError(
            f"message {fields['msg_id']} was refused by {target} ({queued['last_error']}): give a new message a new id."
        )
    result = flush(outbox, target, team_id, post, retryable)
    for item in result["refused"]:
        if item["msg_id"] == fields["msg_id"]:
            raise item["error"]
    row = outbox.get(target, team_id, fields["msg_id"])
    assert row is not None  # noqa: S101 - queued above
    return {**row, "error": result["error"]}


def delivery(
    outbox: Outbox,
    target: str,
    team_id: str,
    sender: str,
    status: Callable[[list[str]], list[dict[str, Any]]],
    *,
    last: int = 50,
) -> list[dict[str, Any]]:
    """The delivery state of ``sender``'s newest ``last`` messages through the outbox: the
    server's (``status(msg_ids)``: ``Team.delivery``'s records) for those it stored, ``queued``
    or ``refused`` for the others."""
    rows = outbox.listing(target, team_id, sender, last=last)
    stored = {m["msg_id"]: m for m in status([r["msg_id"] for r in rows if r["state"] == "sent"])} if rows else {}
    out = []
    for row in rows:
        base = {"attempts": row["attempts"], "queued_at": row["queued_at"], "last_error": row["last_error"]}
        if row["msg_id"] in stored:
            out.append({**stored[row["msg_id"]], **base})
            continue
        out.append(
            {
                **outbox_message(row),
                "state": row["state"] if row["state"] != "sent" else "delivered",
                "delivered": row["state"] == "sent",
                "recipients": [],
                "read_by": [],
                "acked_by": [],
                **base,
            }
        )
    return out


def outbox_message(row: dict[str, Any]) -> dict[str, Any]:
    """An outbox row's message in the shape of the server's messages (``seq`` ``None`` until the
    server stored it)."""
    message = row["message"]
    return {
        "seq": row.get("seq"),
        "msg_id": row["msg_id"],
        "from": message.get("sender"),
        "to": message.get("to"),
        "type": message.get("type"),
        "subject": message.get("subject"),
        "body": message.get("body"),
        "ts": message.get("ts"),
        "ts_ms": message.get("ts_ms"),
    }
