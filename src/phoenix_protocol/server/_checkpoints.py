"""Checkpoints and sessions (seed 002's session protocol)::

POST   /checkpoint/{agent_id}               checkpoint:write   take a (session) checkpoint
GET    /checkpoint/{agent_id}/latest        checkpoint:read    the newest valid checkpoint
POST   /restore/{agent_id}                  checkpoint:write   start a session from a checkpoint
GET    /sessions/{agent_id}                 checkpoint:read    every session
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, BeforeValidator, Field, WithJsonSchema

from phoenix_protocol.server._common import Served, agent_access
from phoenix_protocol.server._params import ID_PATTERN, Part, RequestBody, SessionId, json_int
from phoenix_protocol.services import _bridge

__all__ = ["router"]

router = APIRouter(tags=["checkpoints"])

# A checkpoint's file name, or its number (seq) as ``7`` or ``#7``.
CHECKPOINT_REF_PATTERN = (
    rf"^(?:{ID_PATTERN[1:-1]}_[0-9]{{17}}-[0-9]{{1,12}}_(routine|pre-operation|recovery|session)\.checkpoint"
    r"|#?[0-9]{1,12})$"
)
ShortText = Annotated[str, Field(max_length=2000)]


class ContextSection(Part):
    """Seed 002's ``context``; fields given replace what Phoenix collects."""

    current_focus: ShortText | None = None
    active_project_ids: list[Annotated[str, Field(max_length=200)]] | None = Field(default=None, max_length=100)
    conversation_summary: Annotated[str, Field(max_length=20_000)] | None = None
    pending_items: list[ShortText] | None = Field(default=None, max_length=200)


class WorkingMemorySection(Part):
    """Seed 002's ``working_memory``: temporary state that is not long-term memory."""

    scratchpad: Annotated[str, Field(max_length=100_000)] | None = None
    open_files: list[Annotated[str, Field(max_length=4096)]] | None = Field(default=None, max_length=1000)
    context_stack: list[ShortText] | None = Field(default=None, max_length=200)


class Belief(Part):
    subject: Annotated[str, Field(min_length=1, max_length=500)]
    confidence: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class Skill(Part):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    level: Annotated[str, Field(max_length=100)]


class Relationship(Part):
    entity: Annotated[str, Field(min_length=1, max_length=200)]
    type: Annotated[str, Field(max_length=100)]


class DriftChecks(Part):
    passed: Annotated[int, Field(ge=0, le=1_000_000), BeforeValidator(json_int)] = 0
    failed: Annotated[int, Field(ge=0, le=1_000_000), BeforeValidator(json_int)] = 0


class IdentityUpdatesSection(Part):
    """Seed 002's ``identity_updates``: what changed in the identity during the session."""

    new_beliefs: list[Belief] | None = Field(default=None, max_length=200)
    new_skills: list[Skill] | None = Field(default=None, max_length=200)
    new_relationships: list[Relationship] | None = Field(default=None, max_length=200)
    drift_checks: DriftChecks | None = None


class CheckpointRequest(RequestBody):
    """``POST /checkpoint/{agent_id}``: a summary, and optionally seed 002's sections."""

    summary: Annotated[str, Field(min_length=1, max_length=2000, description="What was done and what remains.")]
    checkpoint_type: Literal["session", "routine", "recovery"] = Field(
        default="session", description="A session checkpoint ends the session (seed 002's checkpoint)."
    )
    context: ContextSection | None = None
    working_memory: WorkingMemorySection | None = None
    identity_updates: IdentityUpdatesSection | None = None
    extensions: (
        Annotated[
            dict[Annotated[str, Field(pattern=ID_PATTERN)], Any],
            Field(max_length=16),
            # Only keys matching the pattern: pydantic alone would leave other keys allowed.
            WithJsonSchema(
                {
                    "type": "object",
                    "maxProperties": 16,
                    "patternProperties": {ID_PATTERN: {}},
                    "additionalProperties": False,
                }
            ),
        ]
        | None
    ) = Field(default=None, description="Extra sections, stored under `extensions`.")


class CheckpointInfoModel(BaseModel):
    name: str
    seq: int
    checkpoint_type: str
    timestamp: str
    timestamp_ms: int
    label: str | None
    operation_id: str | None
    size: int


class CheckpointResponse(BaseModel):
    agent_id: str
    checkpoint: CheckpointInfoModel


class LatestCheckpointResponse(BaseModel):
    agent_id: str
    name: str
    checkpoint: dict[str, Any] = Field(description="The checkpoint envelope (checksum verified).")
    problems: list[str] = Field(description="Damaged newer checkpoints that were skipped.")


class RestoreRequest(RequestBody):
    """``POST /restore/{agent_id}``: all optional."""

    checkpoint: Annotated[str, Field(pattern=CHECKPOINT_REF_PATTERN, max_length=255)] | None = Field(
        default=None,
        description='A checkpoint name, or its number (seq) as the string "7" or "#7" (default: the newest valid one).',
    )
    force: bool = Field(default=False, description="Overwrite the current task and notes with the checkpoint's.")
    session_id: SessionId | None = Field(default=None, description="The new session's id (default: a new UUID).")


class RestoreResponse(BaseModel):
    agent_id: str
    session_id: str
    started_at: str
    identity: dict[str, Any] | None
    checkpoint: str | None
    restored: dict[str, Any] = Field(description="What each section's restorer handed back (context, working memory).")
    problems: list[str]


class SessionModel(BaseModel):
    session_id: str
    status: Literal["open", "ended", "interrupted"] = Field(
        description="ended; open (the newest, not ended yet); interrupted (never ended, and a later session started)."
    )
    started_at: str | None = None
    ended_at: str | None = None
    duration_seconds: int | None = None
    checkpoint: str | None = None
    summary: str | None = None
    restored_from: str | None = None


class SessionsResponse(BaseModel):
    agent_id: str
    sessions: list[SessionModel]


RESTORE_REFUSED = (
    "Refused on purpose (CheckpointOwnershipError), only for a planted checkpoint: the checkpoint asked "
    "for, by a name of this agent's own (`zero_…`) or by its number, is a file in the agent's "
    "checkpoints directory whose content is another agent's checkpoint. It is never restored; a "
    "restore without `checkpoint` skips it and lists it in `problems`. (Another agent's checkpoint "
    "name is 404, as an unknown one; a file whose content is another checkpoint of this agent is "
    "damage: 500.)"
)
"""The only 409 of ``POST /restore/{agent_id}`` (the app's other error answers do not arise there)."""


@router.post("/checkpoint/{agent_id}", status_code=201, response_model=CheckpointResponse)
def post_checkpoint(
    agent_id: Annotated[str, Depends(agent_access("checkpoint:write"))], body: CheckpointRequest, served: Served
) -> dict[str, Any]:
    """Take a checkpoint (default: a session checkpoint, which ends the session: seed 002)."""
    sections = {
        name: part.model_dump(exclude_none=True)
        for name, part in (
            ("context", body.context),
            ("working_memory", body.working_memory),
            ("identity_updates", body.identity_updates),
        )
        if part is not None
    }
    info = _bridge.take_checkpoint(
        served.agent(agent_id),
        body.summary,
        sections=sections,
        extensions=body.extensions,
        checkpoint_type=body.checkpoint_type,
    )
    return {"agent_id": agent_id, "checkpoint": info}


@router.get("/checkpoint/{agent_id}/latest", response_model=LatestCheckpointResponse)
def get_latest_checkpoint(
    agent_id: Annotated[str, Depends(agent_access("checkpoint:read"))],
    served: Served,
    checkpoint_type: Annotated[
        Literal["routine", "pre-operation", "recovery", "session"] | None, Query(alias="type")
    ] = None,
) -> dict[str, Any]:
    """The newest valid checkpoint; damaged newer ones are skipped and listed in ``problems``."""
    return {"agent_id": agent_id, **_bridge.latest_checkpoint(served.agent(agent_id), checkpoint_type)}


@router.post("/restore/{agent_id}", response_model=RestoreResponse, responses={409: {"description": RESTORE_REFUSED}})
def post_restore(
    agent_id: Annotated[str, Depends(agent_access("checkpoint:write"))],
    served: Served,
    body: RestoreRequest | None = None,
) -> dict[str, Any]:
    """Start a session from the newest (or the named) checkpoint: identity, context, working memory."""
    req = body or RestoreRequest()
    agent = served.agent(agent_id)
    data = _bridge.restore(agent, checkpoint=req.checkpoint, force=req.force, session_id=req.session_id)
    return {"agent_id": agent_id, **data}


@router.get("/sessions/{agent_id}", response_model=SessionsResponse)
def get_sessions(agent_id: Annotated[str, Depends(agent_access("checkpoint:read"))], served: Served) -> dict[str, Any]:
    """Every session of the agent, oldest first."""
    return {"agent_id": agent_id, "sessions": _bridge.sessions(served.agent(agent_id))}
