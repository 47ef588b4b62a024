"""An agent's ``identity.yaml`` (seed 002)::

GET    /identity/{agent_id}                 identity:read      identity.yaml
PATCH  /identity/{agent_id}                 identity:write     set a value in the mutable section
POST   /identity/{agent_id}/entries         identity:write     add a belief, skill or relationship
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from phoenix_protocol.server._common import Served, agent_access
from phoenix_protocol.server._params import RequestBody
from phoenix_protocol.services import _bridge

__all__ = ["router"]

router = APIRouter(tags=["identity"])


class IdentityModel(BaseModel):
    immutable: dict[str, Any]
    mutable: dict[str, Any]


class IdentityResponse(BaseModel):
    agent_id: str
    identity: IdentityModel


class IdentitySetRequest(RequestBody):
    """``PATCH /identity/{agent_id}``: one value in the mutable section."""

    path: Annotated[
        str,
        Field(
            min_length=1,
            max_length=200,
            pattern=r"^[A-Za-z0-9_][A-Za-z0-9_-]*(\.[A-Za-z0-9_][A-Za-z0-9_-]*)*$",
            description="A dotted path in the mutable section, e.g. state.current_focus.",
        ),
    ]
    value: Any = Field(description="Any JSON value.")


class IdentityEntryRequest(RequestBody):
    """``POST /identity/{agent_id}/entries``: add (or update) a belief, skill or relationship."""

    kind: Literal["belief", "skill", "relationship"]
    name: Annotated[str, Field(min_length=1, max_length=500, description="The subject, skill or entity.")]
    confidence: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    level: Annotated[str, Field(max_length=100)] | None = None
    type: Annotated[str, Field(max_length=100)] | None = None


@router.get("/identity/{agent_id}", response_model=IdentityResponse)
def get_identity(agent_id: Annotated[str, Depends(agent_access("identity:read"))], served: Served) -> dict[str, Any]:
    """The agent's identity.yaml (refused with 409 if its sealed core was edited by hand)."""
    return {"agent_id": agent_id, "identity": _bridge.identity_get(served.agent(agent_id, must_exist=True))}


@router.patch("/identity/{agent_id}", response_model=IdentityResponse)
def patch_identity(
    agent_id: Annotated[str, Depends(agent_access("identity:write"))], body: IdentitySetRequest, served: Served
) -> dict[str, Any]:
    """Set one value in the mutable section; a path in the immutable core is refused (409)."""
    return {"agent_id": agent_id, "identity": _bridge.identity_set(served.agent(agent_id), body.path, body.value)}


@router.post("/identity/{agent_id}/entries", response_model=IdentityResponse)
def post_identity_entry(
    agent_id: Annotated[str, Depends(agent_access("identity:write"))], body: IdentityEntryRequest, served: Served
) -> dict[str, Any]:
    """Add (or update, by name) a belief, skill or relationship."""
    if body.kind == "belief":
        entry: dict[str, Any] = {
            "subject": body.name,
            "confidence": 0.5 if body.confidence is None else body.confidence,
        }
    elif body.kind == "skill":
        entry = {"name": body.name, "level": body.level or "familiar"}
    else:
        entry = {"entity": body.name, "type": body.type or "peer"}
    return {"agent_id": agent_id, "identity": _bridge.identity_add(served.agent(agent_id), body.kind, entry)}
