"""A team's mailbox, tasks and heartbeats (seed 004)::

POST   /teams/{team_id}/messages            team:write         send (idempotent by msg_id)
GET    /teams/{team_id}/inbox/{name}        team:read          messages not yet handed to NAME
POST   /teams/{team_id}/inbox/{name}/delivered  team:write     confirm they were handed over
POST   /teams/{team_id}/messages/{seq}/ack  team:write         acknowledge a message
GET    /teams/{team_id}/tasks               team:read          every task
POST   /teams/{team_id}/tasks/{task_id}/claim  team:write      claim a task (atomic)
POST   /teams/{team_id}/heartbeat/{name}    team:write         record a heartbeat
GET    /teams/{team_id}/sent/{name}         team:read          delivery state of NAME's messages
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from phoenix_protocol.core._ids import MAX_ID_LENGTH
from phoenix_protocol.server._common import Served, team_access
from phoenix_protocol.server._params import (
    ID_PATTERN,
    LONG_ID_PATTERN,
    NameParam,
    RequestBody,
    SessionId,
    id_validator,
    json_int,
)
from phoenix_protocol.services import _bridge

__all__ = ["router"]

router = APIRouter(tags=["teams"])

TaskIdParam = Annotated[
    str, Path(pattern=ID_PATTERN, max_length=MAX_ID_LENGTH, description="Task id."), id_validator("task id")
]
TeammateName = Annotated[str, Field(pattern=ID_PATTERN, max_length=MAX_ID_LENGTH), id_validator("teammate name")]
MessageId = Annotated[str, Field(pattern=LONG_ID_PATTERN, max_length=128), id_validator("message id", 128)]


class SendRequest(RequestBody):
    """``POST /teams/{team_id}/messages``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    sender: TeammateName = Field(alias="from")
    to: Annotated[str, Field(pattern=rf"^(\*|{ID_PATTERN[1:-1]})$", max_length=MAX_ID_LENGTH)] = Field(
        description="A teammate, or * for every teammate but the sender."
    )
    type: Literal["info", "question", "challenge", "resolution"] = "info"
    subject: Annotated[str, Field(min_length=1, max_length=1024)]
    body: Annotated[str, Field(max_length=65536)]
    msg_id: MessageId | None = Field(default=None, description="Idempotency key: the same id is stored once.")


class MessageModel(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    seq: int
    msg_id: str
    sender: str = Field(alias="from")
    to: str
    type: str
    subject: str
    body: str
    ts: str
    ts_ms: int
    acked_by: list[str]


class SendResponse(BaseModel):
    team_id: str
    message: MessageModel
    duplicate: bool


class InboxResponse(BaseModel):
    team_id: str
    name: str
    messages: list[MessageModel]
    through_seq: int = Field(description="Confirm with POST …/delivered once the messages are handed over.")


class DeliveredRequest(RequestBody):
    through_seq: Annotated[int, Field(ge=0, le=2**53), BeforeValidator(json_int)]


class DeliveredResponse(BaseModel):
    team_id: str
    name: str
    through_seq: int


class AckRequest(RequestBody):
    name: TeammateName


class AckResponse(BaseModel):
    team_id: str
    seq: int
    acked_by: list[str]


class TaskModel(BaseModel):
    model_config = ConfigDict(extra="allow")

    task_id: str
    title: str
    status: str
    assigned_to: str | None = None
    dependencies: list[str] = Field(default_factory=list)


class TasksResponse(BaseModel):
    team_id: str
    tasks: list[TaskModel]


class ClaimRequest(RequestBody):
    name: TeammateName


class ClaimResponse(BaseModel):
    team_id: str
    task: TaskModel


class HeartbeatRequest(RequestBody):
    session_id: SessionId | None = None


class HeartbeatResponse(BaseModel):
    team_id: str
    name: str
    heartbeat: dict[str, Any]


@router.post("/teams/{team_id}/messages", status_code=201, response_model=SendResponse)
def post_message(
    team_id: Annotated[str, Depends(team_access("team:write"))], body: SendRequest, served: Served
) -> dict[str, Any]:
    """Send a message to a teammate or to every teammate (``*``); idempotent by ``msg_id``."""
    sent = _bridge.team_send(
        served.team(team_id),
        body.sender,
        body.to,
        type=body.type,
        subject=body.subject,
        body=body.body,
        msg_id=body.msg_id,
    )
    return {"team_id": team_id, **sent}


@router.get("/teams/{team_id}/inbox/{name}", response_model=InboxResponse)
def get_inbox(
    team_id: Annotated[str, Depends(team_access("team:read"))],
    name: NameParam,
    served: Served,
    limit: Annotated[int | None, Query(ge=1, le=1000)] = None,
) -> dict[str, Any]:
    """Messages NAME has not been handed yet. Nothing moves until ``…/delivered`` confirms them."""
    return {"team_id": team_id, "name": name, **_bridge.team_inbox(served.team(team_id), name, limit=limit)}


@router.post("/teams/{team_id}/inbox/{name}/delivered", response_model=DeliveredResponse)
def post_delivered(
    team_id: Annotated[str, Depends(team_access("team:write"))],
    name: NameParam,
    body: DeliveredRequest,
    served: Served,
) -> dict[str, Any]:
    """Confirm that the messages up to ``through_seq`` were handed to NAME (the cursor never moves back)."""
    return {"team_id": team_id, **_bridge.team_delivered(served.team(team_id), name, body.through_seq)}


@router.post("/teams/{team_id}/messages/{seq}/ack", response_model=AckResponse)
def post_ack(
    team_id: Annotated[str, Depends(team_access("team:write"))],
    seq: Annotated[int, Path(ge=1, le=2**53)],
    body: AckRequest,
    served: Served,
) -> dict[str, Any]:
    """Acknowledge message SEQ as ``name`` (it must have been delivered to ``name``)."""
    return {"team_id": team_id, **_bridge.team_ack(served.team(team_id), seq, body.name)}


@router.get("/teams/{team_id}/tasks", response_model=TasksResponse)
def get_tasks(team_id: Annotated[str, Depends(team_access("team:read"))], served: Served) -> dict[str, Any]:
    """Every task of the team."""
    return {"team_id": team_id, "tasks": _bridge.team_tasks(served.team(team_id))}


@router.post("/teams/{team_id}/tasks/{task_id}/claim", response_model=ClaimResponse)
def post_claim(
    team_id: Annotated[str, Depends(team_access("team:write"))],
    task_id: TaskIdParam,
    body: ClaimRequest,
    served: Served,
) -> dict[str, Any]:
    """Claim a ready task: of concurrent claimers exactly one wins, the others get 409."""
    return {"team_id": team_id, "task": _bridge.team_claim(served.team(team_id), task_id, body.name)}


@router.post("/teams/{team_id}/heartbeat/{name}", response_model=HeartbeatResponse)
def post_heartbeat(
    team_id: Annotated[str, Depends(team_access("team:write"))],
    name: NameParam,
    served: Served,
    body: HeartbeatRequest | None = None,
) -> dict[str, Any]:
    """Record a heartbeat of NAME."""
    session_id = body.session_id if body is not None else None
    record = _bridge.team_heartbeat(served.team(team_id), name, session_id=session_id)
    return {"team_id": team_id, "name": name, "heartbeat": record}


class DeliveryModel(MessageModel):
    state: Literal["delivered", "read", "acked"]
    delivered: bool
    recipients: list[str]
    read_by: list[str]


class DeliveryResponse(BaseModel):
    team_id: str
    name: str
    messages: list[DeliveryModel]


@router.get("/teams/{team_id}/sent/{name}", response_model=DeliveryResponse)
def get_sent(
    team_id: Annotated[str, Depends(team_access("team:read"))],
    name: NameParam,
    served: Served,
    msg_id: Annotated[list[str] | None, Query(max_length=500)] = None,
    last: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> dict[str, Any]:
    """Seed 004 §4.3: the delivery state of the messages NAME sent (``msg_id``, repeatable, else
    the newest ``last``): stored, read (handed over by each recipient's inbox), acknowledged."""
    messages = _bridge.team_delivery(served.team(team_id), name, msg_ids=msg_id, last=last)
    return {"team_id": team_id, "name": name, "messages": messages}
