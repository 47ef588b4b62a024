"""The one id validator."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phoenix_protocol.core._errors import InvalidIdError, UsageError
from phoenix_protocol.core._home import Home, resolve_agent_id
from phoenix_protocol.core._ids import (
    MAX_ID_LENGTH,
    is_valid_id,
    lane_id_of,
    secret_in_id,
    session_id_of,
    validate_id,
    validate_session_id,
)
from phoenix_protocol.services._agent import Agent


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


# -- session ids: they come from agents' payloads and callers, and are stored in clear ----------

TOKEN = "ghp_" + "x7Yq2Lm9Pz4Rt6Vb8Nc1Kd3Fg5Hj0Ws2Ea4Ub"


@pytest.mark.parametrize(
    "value", ["5f0c2a1e-8d3b-4c7a-9e21-6b4d8f3a7c10", "sess-1", "s", "sid-0123abcd", "lead-9f8e", "A" * 128]
)
def test_session_ids_that_hold_no_secret_are_kept_as_they_are(value: str) -> None:
    assert validate_session_id(value) == value
    assert session_id_of(value) == value
    assert secret_in_id(value) is None


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (TOKEN, "github-token"),
        ("AKIAIOSFODNN7EXAMPLE", "aws-access-key"),
        ("xoxb-1234567890-abcdefghij", "slack-token"),
    ],
)
def test_a_session_id_that_is_a_secret_is_refused_without_showing_it(value: str, kind: str) -> None:
    assert secret_in_id(value) == kind
    with pytest.raises(InvalidIdError, match=f"looks like a secret \\({kind}\\)") as refused:
        validate_session_id(value)
    assert value not in str(refused.value)


def test_hooks_keep_a_hash_for_a_session_id_they_cannot_keep() -> None:
    """Hooks must never fail on the agent's session id: a secret, a path or an id too long
    becomes ``sid-`` and a hash, the same every time, so the session's hooks still meet."""
    for value in (TOKEN, "a/b", "x" * 200, "héllo"):
        kept = session_id_of(value)
        assert kept is not None and kept.startswith("sid-") and kept == session_id_of(value)
        assert validate_session_id(kept) == kept
    assert session_id_of(TOKEN) != session_id_of("a/b")
    for nothing in (None, "", 42):
        assert session_id_of(nothing) is None
    with pytest.raises(InvalidIdError, match="characters long"):
        validate_session_id("x" * 129)


@given(
    st.one_of(
        st.uuids().map(str), st.text(min_size=1, max_size=200), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,130}")
    )
)
def test_a_lane_id_names_a_folder_and_is_the_same_for_the_raw_and_the_kept_session_id(raw: str) -> None:
    """docs/lanes.md: a hook reads the raw id, the model's `phx state` has the kept one
    ($PHOENIX_SESSION_ID); both must find the same lane, whose id is a safe folder name."""
    lane = lane_id_of(raw)
    assert is_valid_id(lane)
    kept = session_id_of(raw)
    assert kept is not None and lane_id_of(kept) == lane


def test_a_lane_id_is_the_uuid_itself_and_hashes_anything_else() -> None:
    uuid = "0b6f3c1e-7a2d-4e95-8c41-2f9d6a0b7e53"
    assert lane_id_of(uuid) == uuid and lane_id_of(uuid.upper()) == uuid.upper()
    assert lane_id_of("sid-0123abcd") == "sid-0123abcd"
    for other in ("a/b", "..", "ghp_" + "x7Yq2Lm9Pz4Rt6Vb8Nc1Kd3Fg5Hj0Ws2Ea4Ub", "my session", "x" * 65, "-" * 36):
        assert lane_id_of(other).startswith("sid-") and len(lane_id_of(other)) == 28
