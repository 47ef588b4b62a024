"""Secret redaction of checkpoint sections with long lists redacted a slice at a time
(``_checkpoints.redact_sections``): the same result as ``redact_value``, whatever was cached."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import phoenix_protocol.services._checkpoints as checkpoints_mod
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._jsonio import dumps_indented_bytes, loads
from phoenix_protocol.core._redact import redact_value
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._checkpoints import LONG_LIST, CollectContext, redact_sections

TOKEN = "ghp_" + "k9L" * 12


def as_json(value: object) -> Any:
    """What ends up in the file: Fragments become their JSON."""
    return orjson.loads(orjson.dumps(value))


def conversation(n: int, tag: str = "") -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 else "assistant", "id": f"m{i}{tag}", "content": f"step {i}\nok"} for i in range(n)
    ]


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    checkpoints_mod._clean_slices.clear()


def test_a_long_list_comes_back_as_one_fragment_with_the_same_json() -> None:
    messages = conversation(LONG_LIST + 70)
    sections = {"payload": {"step": 1, "messages": messages, "plan": ["a", "b"]}}
    out = redact_sections(sections)
    assert isinstance(out["payload"]["messages"], orjson.Fragment)
    assert as_json(out) == as_json(sections)
    assert len(checkpoints_mod._clean_slices) == 4  # 198 items: slices of 64, 64, 64, 6
    assert sections["payload"]["messages"] is messages  # the input is not modified


def test_a_secret_in_a_slice_seen_clean_before_is_redacted() -> None:
    messages = conversation(LONG_LIST * 2)
    redact_sections({"s": {"messages": messages}})  # every slice cached clean
    assert len(checkpoints_mod._clean_slices) == 4
    messages[70]["content"] = f"export GITHUB_TOKEN={TOKEN}"  # same slice position, new content
    messages[200] = {"role": "tool", "password": "Tr0ub4dor&3xyz"}  # a secret-named key in a list item
    out = as_json(redact_sections({"s": {"messages": messages}}))
    assert out == as_json(redact_value({"s": {"messages": messages}}))
    assert out["s"]["messages"][70]["content"] == "export GITHUB_TOKEN=[REDACTED:github-token]"
    assert out["s"]["messages"][200]["password"] == "[REDACTED:password]"  # noqa: S105
    assert TOKEN not in orjson.dumps(out).decode()
    assert len(checkpoints_mod._clean_slices) == 4  # slices with a secret are never cached


class Kind(enum.Enum):
    TOKEN = TOKEN


@dataclasses.dataclass
class Note:
    text: str


def test_slices_of_other_than_plain_json_are_walked_every_time() -> None:
    """An enum or a dataclass encodes like a string or a dict, but ``redact_value`` treats it as
    an opaque value: such a slice is never cached, so a later plain copy of it is still checked."""
    with_enum: list[Any] = [*conversation(LONG_LIST), Kind.TOKEN]
    out = redact_sections({"s": {"items": with_enum}})
    assert as_json(out) == as_json(redact_value({"s": {"items": with_enum}}))
    plain = [*conversation(LONG_LIST), TOKEN]  # the same JSON, now a plain string: redacted
    assert as_json(redact_sections({"s": {"items": plain}}))["s"]["items"][-1] == "[REDACTED:github-token]"
    with_dataclass: list[Any] = [Note("x")] * LONG_LIST  # orjson would take it; the walk does not
    assert redact_sections({"s": {"items": with_dataclass}})["s"]["items"] == with_dataclass


def test_nan_in_a_long_list_is_refused_as_by_redact_value() -> None:
    items: list[Any] = [*conversation(LONG_LIST), {"x": float("nan")}]
    with pytest.raises(ValueError, match="not valid JSON"):
        redact_sections({"s": {"items": items}})
    with pytest.raises(ValueError, match="not valid JSON"):  # again: nothing was cached
        redact_sections({"s": {"items": items}})


def test_the_standard_library_fallback_encodes_fragments() -> None:
    """An envelope orjson refuses (an integer beyond 64 bits) goes through the standard library,
    which gets each pre-encoded list's value."""
    out = redact_sections({"s": {"items": conversation(LONG_LIST)}})
    envelope = {"big": 1 << 70, "state": out}
    assert loads(dumps_indented_bytes(envelope)) == {"big": 1 << 70, "state": as_json(out)}


_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["plain", "password", TOKEN, "Tr0ub4dor&3", "https://u:pa55pa55pa55@h/x"])
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["password", "api_key", "note", "token", "x"]), children, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_VALUES, min_size=LONG_LIST, max_size=LONG_LIST + 80), min_size=1, max_size=3))
def test_same_result_as_redact_value_whatever_was_cached(states: list[list[Any]]) -> None:
    """Successive states (the cache filled by each) come out as ``redact_value`` has them."""
    for items in states:
        sections = {"a": {"items": items, "password": "Tr0ub4dor&3", "n": [items[:3]]}, "b": items}
        assert as_json(redact_sections(sections)) == as_json(redact_value(sections))


def test_a_checkpoint_with_a_long_conversation_reads_back_whole(tmp_path: Path) -> None:
    agent = Agent.open("cat", home=Home(str(tmp_path)), clock=ManualClock(1_767_225_600_000))
    store = agent.checkpoints
    store._collectors.clear()
    messages = conversation(LONG_LIST * 3)
    messages[5]["content"] = f"token: {TOKEN}"

    def payload(ctx: CollectContext) -> dict[str, Any]:
        return {"messages": messages}

    store.register("payload", payload)
    info = store.create("session")
    stored = store.backend.read(info.name)
    assert stored is not None
    text = stored.content.decode()
    assert TOKEN not in text
    got = store.read(info.name).data["extensions"]["payload"]["messages"]
    assert len(got) == len(messages) and got[6] == messages[6]
    assert got[5]["content"] == "token: [REDACTED:github-token]"
