"""Property-based tests (hypothesis): the state round trip, the id validator, and hooks fed
arbitrary stdin."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st

from conftest import HOOK_PREFIX
from phoenix_protocol.agent._ops import OpsLog
from phoenix_protocol.agent._state import _FIELDS, SOURCES, STATUSES, AgentState, StateStore
from phoenix_protocol.core._errors import InvalidIdError
from phoenix_protocol.core._ids import is_valid_id, validate_id
from phoenix_protocol.core._jsonio import dumps_line, loads
from phoenix_protocol.integrations._hooks import EVENTS
from phoenix_protocol.integrations._hooks import run as run_hook
from phoenix_protocol.services._agent import Agent


def examples(n: int) -> settings:
    """Hypothesis settings: ``n`` examples, no deadline (subprocesses and fsync vary), and
    function-scoped fixtures allowed (each example overwrites what it needs)."""
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# -- (a) the state round trip ---------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
texts = st.text(max_size=200)  # any unicode, control characters and NUL included
opt_texts = st.none() | texts
notes = st.lists(  # as written since issue 30: each note names its task (untagged ones: test_task_facts)
    st.fixed_dictionaries({"id": st.integers(min_value=1), "text": texts, "task": texts}, optional={"added_at": texts}),
    max_size=4,
)
unknown_fields = st.dictionaries(st.text(max_size=20).filter(lambda k: k not in _FIELDS), json_values, max_size=5)


@st.composite
def agent_states(draw: st.DrawFn) -> AgentState:
    state = AgentState(
        status=draw(st.sampled_from(STATUSES)),
        current_task=draw(texts),
        last_active=draw(opt_texts),
        last_active_ms=draw(st.none() | st.integers(min_value=0, max_value=2**53)),
        last_output=draw(opt_texts),
        error_message=draw(opt_texts),
        updated_by=draw(st.sampled_from(SOURCES)),
        status_event=draw(opt_texts),
        session_id=draw(opt_texts),
        session_started_at=draw(opt_texts),
        host=draw(opt_texts),
        pid=draw(st.none() | st.integers(min_value=1, max_value=2**22)),
        pid_start_time=draw(st.none() | st.integers(min_value=0) | st.floats(min_value=0, allow_infinity=False)),
        heartbeat_seq=draw(st.integers(min_value=0)),
        last_tool=draw(st.none() | st.dictionaries(st.text(max_size=10), json_values, max_size=4)),
        open_loops=draw(notes),
        next_actions=draw(notes),
        note_seq=draw(st.integers(min_value=0)),
        last_heartbeat_logged_ms=draw(st.none() | st.integers(min_value=0)),
    )
    state.extra = draw(unknown_fields)
    return state


def make_store(directory: Path) -> StateStore:
    directory.mkdir(parents=True, exist_ok=True)
    return StateStore(str(directory), agent_id="prop", ops=OpsLog(str(directory / "ops.jsonl")))


@examples(150)
@given(state=agent_states())
def test_state_round_trip_preserves_every_field(tmp_path: Path, state: AgentState) -> None:
    store = make_store(tmp_path / "agent")
    original = state.to_dict()
    with store.lock():
        store.write_locked(state)
    raw = Path(store.path).read_bytes()
    raw.decode("ascii")  # state.json is plain ASCII whatever the text
    back = store.read()
    assert back.to_dict() == original
    assert back == state
    assert back.extra == state.extra, "unknown fields must be kept"
    assert loads(raw) == original
    # A change that edits nothing else keeps the unknown fields too.
    after = store.change(lambda s: None)
    assert after.to_dict() == original
    assert store.read().to_dict() == original


# -- (b) id validation ----------------------------------------------------------------------

ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ID_ALPHABET = (
    "abcXYZ019._-/\\ \x00\n\t\x7f.é٣ＡİK"  # look-alikes: Arabic-Indic digit, fullwidth A, dotted I, Kelvin sign
)


def assert_validator_agrees(value: str) -> None:
    expected = ID_RE.fullmatch(value) is not None
    assert is_valid_id(value) is expected
    if expected:
        assert validate_id(value) == value
    else:
        with pytest.raises(InvalidIdError) as info:
            validate_id(value, "agent id")
        assert "agent id" in str(info.value)


@examples(300)
@given(st.text() | st.text(alphabet=ID_ALPHABET, max_size=70) | st.from_regex(ID_RE, fullmatch=True))
@example("")
@example("..")
@example(".")
@example("a/b")
@example("/abs")
@example("a\\b")
@example("\x00")
@example("a\x00")
@example("a\n")
@example(".hidden")
@example("-dash")
@example("a" * 64)
@example("a" * 65)
@example("a" * 10_000)
@example("ok.name_1-2")
@example("٣")
@example("K")
def test_validate_id_accepts_exactly_the_safe_alphabet(value: str) -> None:
    assert_validator_agrees(value)


@given(st.none() | st.integers() | st.binary() | st.lists(st.text()) | st.floats())
def test_validate_id_refuses_non_strings(value: object) -> None:
    assert not is_valid_id(value)
    with pytest.raises(InvalidIdError):
        validate_id(value)


# -- (c) hooks never break, whatever arrives on stdin ---------------------------------------

HOOK_EVENTS = [*EVENTS, "PostToolUse", "post_tool_use", "", "bogus", "ＳＴＯＰ"]
unknown_events = st.text(max_size=20).filter(lambda e: not e.startswith("-"))  # "--home=x" is an option

VALID_STATE = AgentState(status="working", current_task="keep me parseable", session_id="s-0", updated_by="hook")
CORRUPT_STATES = [
    b"",
    b"{not json",
    b'{"status": "working", "current_task": "tru',
    b"\x00\x00\x00",
    b'{"schema_version": 1, "status": "bogus"}',
    b'{"schema_version": 99, "status": "working"}',
    b"[1, 2, 3]",
    b"\xff\xfe{}",
]

tool_payloads = st.fixed_dictionaries(
    {
        "hook_event_name": st.sampled_from(["PostToolUse", "PostToolUseFailure"]),
        "tool_name": st.text(max_size=40),
        "tool_input": json_values,
    },
    optional={
        "session_id": st.text(max_size=40) | st.from_regex(r"[a-f0-9-]{8,36}", fullmatch=True),
        "tool_response": json_values
        | st.fixed_dictionaries(
            {},
            optional={
                "is_error": st.booleans(),
                "success": st.booleans(),
                "interrupted": st.booleans(),
                "error": json_values,
                "stderr": st.text(max_size=50),
            },
        ),
        "error": json_values,
        "transcript_path": st.text(max_size=40),
        "source": st.sampled_from(["startup", "resume", "clear", "compact"]) | st.text(max_size=10),
        "reason": st.text(max_size=20),
        "trigger": st.text(max_size=20),
    },
)
stdins = (
    st.binary(max_size=300)
    | st.dictionaries(st.text(max_size=15), json_values, max_size=6).map(lambda d: dumps_line(d).encode())
    | json_values.map(lambda v: dumps_line(v).encode())
    | tool_payloads.map(lambda d: dumps_line(d).encode())
)


@pytest.fixture
def hook_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Agent:
    """A Phoenix home in $PHOENIX_HOME; the hooks' working directory is a scratch directory."""
    home = tmp_path / "phoenix-home"
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("PHOENIX_HOME", str(home))
    monkeypatch.chdir(work)
    agent = Agent.open(home=str(home))
    agent.ensure()
    return agent


def check_hook_result(code: int, out: str, err: str) -> None:
    assert code == 0
    assert "Traceback" not in err
    assert err == "" or (err.startswith("phoenix: ") and err.count("\n") == 1), err
    if out:
        assert out.endswith("\n") and out.count("\n") == 1
        output = loads(out)
        # the model's context, and/or the user's line when the hook failed (once per session)
        assert "hookSpecificOutput" in output or list(output) == ["systemMessage"]
        assert "systemMessage" not in output or (err and "phx doctor" in output["systemMessage"])


@pytest.mark.parametrize("event", HOOK_EVENTS)
@examples(30)
@given(data=stdins, flags=st.sampled_from([(), ("--agent", "other")]))
def test_hook_with_any_stdin_exits_0_and_keeps_a_valid_state_parseable(
    hook_home: Agent, event: str, data: bytes, flags: tuple[str, ...]
) -> None:
    agent = hook_home if not flags else Agent.open("other", home=hook_home.home)
    with agent.state.lock():
        agent.state.write_locked(VALID_STATE.copy())
    code, out, err = run_hook([event, *flags], data)
    check_hook_result(code, out, err)
    hypothesis_event("hook ran" if not err else "hook refused: " + err.split(":")[2].split("(")[0].strip()[:40])
    agent.state.read()  # must not raise
    records, problems = agent.ops.read()
    assert problems == []
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))


@pytest.mark.parametrize("event", HOOK_EVENTS)
@examples(15)
@given(data=stdins, corrupt=st.sampled_from(CORRUPT_STATES))
def test_hook_never_rewrites_a_corrupt_state(hook_home: Agent, event: str, data: bytes, corrupt: bytes) -> None:
    path = Path(hook_home.state.path)
    path.write_bytes(corrupt)
    check_hook_result(*run_hook([event], data))
    assert path.read_bytes() == corrupt, "a state file the hook could not read must stay as it was"
    assert not [n for n in os.listdir(hook_home.dir) if n.endswith(".tmp")]


@examples(100)
@given(payload=tool_payloads, event=st.sampled_from(["post-tool-use", "post-tool-use-failure", "stop"]))
def test_tool_hooks_count_every_heartbeat(hook_home: Agent, payload: dict[str, Any], event: str) -> None:
    """A well-formed PostToolUse payload (random tool names and inputs) is always recorded."""
    before = hook_home.state.read().heartbeat_seq
    code, out, err = run_hook([event], dumps_line(payload).encode())
    assert (code, out, err) == (0, "", "")
    state = hook_home.state.read()
    assert state.heartbeat_seq == before + 1
    if event != "stop":
        assert state.last_tool is not None
        name = state.last_tool["name"]
        assert isinstance(name, str) and 0 < len(name) <= 100 and re.fullmatch(r"[A-Za-z0-9_.:\[\]-]+", name)


HOOK = HOOK_PREFIX  # the command phx install writes


@examples(12)
@given(event=st.sampled_from([*EVENTS, "bogus"]) | unknown_events.filter(lambda e: "\x00" not in e), data=stdins)
def test_hook_subprocess_with_random_stdin_exits_0(hook_home: Agent, event: str, data: bytes) -> None:
    proc = subprocess.run([*HOOK, event], input=data, capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert b"Traceback" not in proc.stderr
    hook_home.state.read()  # whatever happened, the state (if any) parses
