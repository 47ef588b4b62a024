"""An agent's namespaced memory::

POST   /memory/{agent_id}                   memory:write       store a memory
POST   /memory/{agent_id}/recall            memory:read        recall, ranked (BM25; optionally fused with embeddings)
GET    /memory/{agent_id}                   memory:read        list, newest first
GET    /memory/{agent_id}/{memory_id}       memory:read        one memory
DELETE /memory/{agent_id}/{memory_id}       memory:write       delete one memory
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import Response
from pydantic import BaseModel, BeforeValidator, Field, TypeAdapter
from starlette.convertors import Convertor, register_url_convertor

from phoenix_protocol.server._common import Served, agent_access
from phoenix_protocol.server._params import RequestBody, Tag, json_int
from phoenix_protocol.services import _bridge
from phoenix_protocol.store._memory import MAX_TEXT, MEMORY_ID_REGEX

__all__ = ["router"]


class _MemoryIdConvertor(Convertor[str]):
    """``{memory_id:memory_id}`` in a route: only a well-formed memory id matches, so that
    ``/memory/{agent_id}/recall`` is never read as the memory called ``recall``."""

    regex = MEMORY_ID_REGEX

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("memory_id", _MemoryIdConvertor())
MemoryIdParam = Annotated[str, Path(pattern=f"^{MEMORY_ID_REGEX}$", description="Memory id (mem-…).")]

router = APIRouter(tags=["memory"])


def _lax_time(value: Any) -> Any:
    """An ISO 8601 text read as pydantic reads it outside strict mode (the bodies are strict,
    which takes only ``datetime`` objects, never what JSON carries)."""
    return _TIME.validate_python(value) if isinstance(value, str) else value


_TIME: TypeAdapter[datetime] = TypeAdapter(datetime)
Time = Annotated[datetime, BeforeValidator(_lax_time)]


class MemoryStoreRequest(RequestBody):
    """``POST /memory/{agent_id}``."""

    text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
    tags: list[Tag] = Field(default_factory=list, max_length=32)
    metadata: dict[str, Any] | None = None


class MemoryModel(BaseModel):
    id: str
    namespace: str
    text: str
    tags: list[str]
    metadata: dict[str, Any]
    created_at: str


class ScoredMemoryModel(MemoryModel):
    score: float = Field(
        description="Relevance, higher is better, the same on both engines: lexical, the share of the query's "
        "BM25 weight matched (0 to 1); semantic, the reciprocal rank fusion of that and the embeddings' "
        "ranking (1: first in both)."
    )


class MemoryResponse(BaseModel):
    agent_id: str
    memory: MemoryModel


class RecallRequest(RequestBody):
    """``POST /memory/{agent_id}/recall``."""

    query: Annotated[str, Field(min_length=1, max_length=1000)]
    k: Annotated[int, Field(ge=1, le=100), BeforeValidator(json_int)] = 5
    tags: list[Tag] | None = Field(default=None, max_length=32)
    since: Time | None = Field(default=None, description="Only memories stored at or after this time (ISO 8601).")
    until: Time | None = Field(default=None, description="Only memories stored before this time (ISO 8601).")
    mode: Literal["lexical", "semantic"] | None = Field(
        default=None,
        description="lexical (BM25), or semantic (fused with sentence embeddings; the [persona] extra on the "
        "server); default: the server's memory_recall setting.",
    )


class RecallResponse(BaseModel):
    agent_id: str
    query: str
    results: list[ScoredMemoryModel]


class MemoryListResponse(BaseModel):
    agent_id: str
    memories: list[MemoryModel]
    limit: int
    offset: int


@router.post("/memory/{agent_id}", status_code=201, response_model=MemoryResponse)
def post_memory(
    agent_id: Annotated[str, Depends(agent_access("memory:write"))], body: MemoryStoreRequest, served: Served
) -> dict[str, Any]:
    """Store a memory; its id joins the open session's ``recent_memories``."""
    agent = served.agent(agent_id)
    record = _bridge.memory_store(served.memory, agent, body.text, tags=body.tags, metadata=body.metadata)
    return {"agent_id": agent_id, "memory": record}


@router.post("/memory/{agent_id}/recall", response_model=RecallResponse)
def post_recall(
    agent_id: Annotated[str, Depends(agent_access("memory:read"))], body: RecallRequest, served: Served
) -> dict[str, Any]:
    """Recall the best matches, best first (BM25 with stop words and a minimum score, or fused with
    embeddings: ``mode``), stored in ``[since, until)``; the query becomes ``last_recall_query``."""
    results = _bridge.memory_recall(
        served.memory,
        served.agent(agent_id),
        body.query,
        k=body.k,
        tags=body.tags,
        since=body.since,
        until=body.until,
        mode=body.mode,
    )
    from phoenix_protocol.core._redact import redact

    return {"agent_id": agent_id, "query": redact(body.query), "results": results}


@router.get("/memory/{agent_id}", response_model=MemoryListResponse)
def get_memories(
    agent_id: Annotated[str, Depends(agent_access("memory:read"))],
    served: Served,
    tag: Annotated[list[Tag] | None, Query(max_length=32, description="Only memories with every tag.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
    since: Annotated[datetime | None, Query(description="Only memories stored at or after this time.")] = None,
    until: Annotated[datetime | None, Query(description="Only memories stored before this time.")] = None,
) -> dict[str, Any]:
    """The agent's memories, newest first."""
    records = _bridge.memory_list(
        served.memory, served.agent(agent_id), tags=tag, limit=limit, offset=offset, since=since, until=until
    )
    return {"agent_id": agent_id, "memories": records, "limit": limit, "offset": offset}


@router.get("/memory/{agent_id}/{memory_id:memory_id}", response_model=MemoryResponse)
def get_memory(
    agent_id: Annotated[str, Depends(agent_access("memory:read"))], memory_id: MemoryIdParam, served: Served
) -> dict[str, Any]:
    """One memory."""
    return {"agent_id": agent_id, "memory": _bridge.memory_get(served.memory, served.agent(agent_id), memory_id)}


@router.delete("/memory/{agent_id}/{memory_id:memory_id}", status_code=204)
def delete_memory(
    agent_id: Annotated[str, Depends(agent_access("memory:write"))], memory_id: MemoryIdParam, served: Served
) -> Response:
    """Delete one memory."""
    _bridge.memory_delete(served.memory, served.agent(agent_id), memory_id)
    return Response(status_code=204)
