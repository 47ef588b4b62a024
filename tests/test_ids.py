"""The one id validator."""

from __future__ import annotations

import pytest

from phoenix_protocol._agent import Agent
from phoenix_protocol._errors import InvalidIdError, UsageError
from phoenix_protocol._home import Home, resolve_agent_id
from phoenix_protocol._ids import MAX_ID_LENGTH, is_valid_id, validate_id


@pytest.mark.parametrize("value", ["default", "zero", "agent-1", "a.b_c", "A" * MAX_ID_LENGTH, "0"])
def test_accepts_safe_ids(value: str) -> None:
    assert validate_id(value) == value
    assert is_valid_id(value)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("..", "must start with an ASCII letter"),
        (".", "must start"),
        ("a/b", "path separator"),
        ("/etc/passwd", "path separator"),
        ("", "must not be empty"),
        ("a\x00b", "control character"),
        ("tab\there", "control character"),
        ("a" * (MAX_ID_LENGTH + 1), "characters long"),
        ("-rf", "must start"),
        ("héllo", "contains 'é'"),
        ("a b", "contains ' '"),
    ],
)
def test_refuses_unsafe_ids_with_a_clear_reason(value: str, reason: str) -> None:
    with pytest.raises(InvalidIdError, match=reason):
        validate_id(value, "agent id")
    assert not is_valid_id(value)


def test_non_strings_are_refused() -> None:
    with pytest.raises(InvalidIdError, match="must be a string"):
        validate_id(7)


def test_invalid_id_is_a_usage_error_and_a_value_error() -> None:
    assert issubclass(InvalidIdError, UsageError)
    assert issubclass(InvalidIdError, ValueError)


def test_agent_ids_go_through_the_validator(home: Home) -> None:
    with pytest.raises(InvalidIdError):
        Agent.open("../escape", home=home)
    with pytest.raises(InvalidIdError):
        home.agent_dir("a/b")
    with pytest.raises(InvalidIdError):
        resolve_agent_id(None, {"PHOENIX_AGENT": ".."})
    assert resolve_agent_id(None, {}) == "default"
    assert resolve_agent_id(None, {"PHOENIX_AGENT": "zero"}) == "zero"
    assert resolve_agent_id("one", {"PHOENIX_AGENT": "zero"}) == "one"


def test_messages_read_well_for_odd_values() -> None:
    with pytest.raises(InvalidIdError, match=r"^invalid agent id 'éa': it must start with an ASCII letter"):
        validate_id("éa", "agent id")
    with pytest.raises(InvalidIdError, match=r"^invalid agent id: it is 81 characters long"):
        validate_id("a" * 81, "agent id", max_length=64)
