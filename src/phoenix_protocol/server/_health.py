"""``GET /healthz`` and ``GET /readyz``: served without a token."""

from __future__ import annotations

import os
from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel

from phoenix_protocol._version import __version__
from phoenix_protocol.core._errors import PhoenixError
from phoenix_protocol.server._common import Answer, Served, problem

__all__ = ["router"]

router = APIRouter(tags=["health"])


class HealthResponse(BaseModel):
    status: Literal["ok"]
    version: str


class ReadyResponse(BaseModel):
    status: Literal["ready"]


@router.get("/healthz", response_model=HealthResponse)
def healthz() -> dict[str, Any]:
    """The process is up."""
    return {"status": "ok", "version": __version__}


@router.get("/readyz", response_model=ReadyResponse)
def readyz(served: Served) -> Answer | dict[str, str]:
    """Ready when the home exists and is writable, and its token store can be read."""
    root = served.home.root
    ok = os.path.isdir(root) and os.access(root, os.W_OK | os.X_OK)
    if ok:
        try:
            served.tokens.configured()
        except PhoenixError:
            ok = False
    if not ok:
        return problem(
            503, "The Phoenix home is not writable or not readable.", instance="/readyz", error="StorageError"
        )
    return {"status": "ready"}
