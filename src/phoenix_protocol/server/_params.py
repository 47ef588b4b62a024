"""Validated input that the routers share: JSON Phoenix can store, ids in paths and bodies, and
the strict base models of request bodies."""

from __future__ import annotations

import math
from typing import Annotated, Any, TypeVar

from fastapi import Path
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from phoenix_protocol.core._ids import MAX_ID_LENGTH, validate_id, validate_session_id

T = TypeVar("T")

__all__ = [
    "ID_PATTERN",
    "LONG_ID_PATTERN",
    "MAX_JSON_DEPTH",
    "AgentIdParam",
    "NameParam",
    "Part",
    "RequestBody",
    "SessionId",
    "Tag",
    "TeamIdParam",
    "check_json",
    "id_validator",
    "json_int",
]

MAX_JSON_DEPTH = 32
ID_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_ID_LENGTH - 1}}}$"
LONG_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


def _check_text(value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text must be valid Unicode (no lone surrogates)") from None


def check_json(value: T) -> T:
    """Refuse what JSON parsers accept but Phoenix cannot store: lone surrogates, NaN and
    infinities, nesting deeper than ``MAX_JSON_DEPTH``. Iterative: no recursion on deep input."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError("NaN and infinities are not JSON")
        elif isinstance(item, dict):
            for key, child in item.items():
                _check_text(str(key))
                stack.append((child, depth + 1))
        elif isinstance(item, (list, tuple)):
            stack.extend((child, depth + 1) for child in item)
    return value


def id_validator(kind: str, max_length: int = MAX_ID_LENGTH) -> AfterValidator:
    """``validate_id`` as a pydantic validator (its message says which ``kind`` of id)."""
    return AfterValidator(lambda value: validate_id(value, kind, max_length=max_length))


ID_DOC = "1-64 characters from A-Z a-z 0-9 . _ - starting with a letter or digit."
AgentIdParam = Annotated[
    str,
    Path(pattern=ID_PATTERN, max_length=MAX_ID_LENGTH, description="Agent id: " + ID_DOC),
    id_validator("agent id"),
]
TeamIdParam = Annotated[
    str, Path(pattern=ID_PATTERN, max_length=MAX_ID_LENGTH, description="Team id: " + ID_DOC), id_validator("team id")
]
NameParam = Annotated[
    str,
    Path(pattern=ID_PATTERN, max_length=MAX_ID_LENGTH, description="Teammate name: " + ID_DOC),
    id_validator("teammate name"),
]
SessionId = Annotated[str, Field(pattern=LONG_ID_PATTERN, max_length=128), AfterValidator(validate_session_id)]
Tag = Annotated[str, Field(min_length=1, max_length=64)]


def json_int(value: Any) -> Any:
    """JSON Schema's integer: ``3.0`` is one (strict pydantic would refuse it), ``true`` and
    ``"3"`` are not (lax pydantic would take them)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class Part(BaseModel):
    """Strict: JSON types as the schema says them (``false`` is not ``0``, ``"1"`` is not ``1``)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class RequestBody(Part):
    """A request body: unknown fields are refused, and so is JSON Phoenix cannot store."""

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: object) -> object:
        return check_json(data)
