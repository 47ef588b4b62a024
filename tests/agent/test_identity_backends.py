"""One conformance suite for agents' identities (seed 002), on both stores: the home's files (the
``sqlite`` store keeps them as files) and PostgreSQL (a fresh schema per test). On files
"elsewhere" is another process on the same home; on PostgreSQL another machine: another home on
the same server, with its own copy."""

from __future__ import annotations

import datetime
import decimal
import json
import os
from pathlib import Path

import pytest

from phoenix_protocol.agent._identity import IdentityCoreError, digest_of
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import CorruptStateError, StorageError, UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.services import _sessions
from phoenix_protocol.services._agent import Agent

UNREACHABLE = "postgresql://postgres@127.0.0.1:5499/test"


@pytest.fixture
def agent(backend: str, home: Home, clock: ManualClock) -> Agent:
    return Agent.open("zero", home=home, clock=clock)


def elsewhere(agent: Agent, backend: str, tmp_path: Path) -> Agent:
    home = agent.home if backend == "sqlite" else Home(str(tmp_path / "elsewhere" / ".phoenix"))
    return Agent.open(agent.id, home=home, clock=agent.clock)


def seeded(agent: Agent) -> None:
    agent.identity.reset_core({"name": "zero", "role": "release engineer", "principles": ["tests first"]})
    agent.identity.set("state.current_focus", "ship 1.2")
    agent.identity.add("skill", {"name": "python", "level": "expert"})


def test_changes_are_seen_elsewhere(backend: str, agent: Agent, tmp_path: Path) -> None:
    seeded(agent)
    other = elsewhere(agent, backend, tmp_path)
    seen = other.identity.read()
    assert seen.as_dict() == agent.identity.read().as_dict()
    assert seen.immutable["role"] == "release engineer" and seen.current_focus == "ship 1.2"
    other.identity.add("belief", {"subject": "small commits", "confidence": 0.8})
    assert [b["subject"] for b in agent.identity.read().mutable["beliefs"]] == ["small commits"]
    assert agent.identity.exists() and other.identity.exists()


def test_the_core_is_sealed_on_either_store(backend: str, agent: Agent, tmp_path: Path) -> None:
    seeded(agent)
    with pytest.raises(IdentityCoreError):
        agent.identity.update(lambda identity: identity.immutable.update(role="anything"))
    with pytest.raises(IdentityCoreError):
        agent.identity.set("immutable.role", "anything")
    assert elsewhere(agent, backend, tmp_path).identity.read().immutable["role"] == "release engineer"


def test_a_value_phoenix_could_not_read_back_is_refused_on_either_store(
    backend: str, agent: Agent, tmp_path: Path
) -> None:
    seeded(agent)
    before = agent.identity.read().as_dict()
    for path, value in (
        ("state", "busy"),
        ("state.current_focus", {"Port": "the scheduler"}),
        ("accumulated_experience", -1),
        ("accumulated_experience", True),
        ("state.last_session_at", "notadate"),
        ("state.last_session_at", ""),
        ("skills", [{"level": "expert"}]),
        ("beliefs", [{"subject": "x", "confidence": 1.5}]),
    ):
        with pytest.raises(UsageError, match="nothing was written"):
            agent.identity.set(path, value)
    with pytest.raises(UsageError, match="not a mapping"):
        agent.identity.set("state.current_focus.deeper", "x")
    with pytest.raises(UsageError, match="must be a non-negative integer"):
        agent.identity.update(lambda identity: identity.mutable.update(accumulated_experience="many"))
    assert elsewhere(agent, backend, tmp_path).identity.read().as_dict() == before
    agent.identity.set("beliefs", [])  # a whole list of valid entries (here: none) is taken
    assert agent.identity.read().mutable["beliefs"] == []


def test_a_hand_written_time_without_quotes_is_read_as_text(backend: str, agent: Agent) -> None:
    """YAML reads ``last_session_at: 2026-02-02T10:00:00.000Z`` (no quotes) as a datetime."""
    agent.ensure()
    Path(agent.identity.path).write_text(
        "immutable:\n  name: zero\nmutable:\n  state:\n    last_session_at: 2026-02-02T10:00:00.000Z\n"
    )
    assert agent.identity.read().mutable["state"]["last_session_at"] == "2026-02-02T10:00:00.000Z"
    agent.identity.set("state.current_focus", "x")  # and written back as text
    assert "last_session_at: '2026-02-02T10:00:00.000Z'" in Path(agent.identity.path).read_text()


def test_last_session_at_takes_the_times_phoenix_writes_and_reads(backend: str, agent: Agent) -> None:
    for value in ("2026-02-02T10:00:00.000Z", "2026-02-02T10:00:00+02:00", "2026-02-02T10:00:00", "2026-02-02", None):
        assert agent.identity.set("state.last_session_at", value).mutable["state"]["last_session_at"] == value
    agent.ensure()
    Path(agent.identity.path).write_text("immutable:\n  name: zero\nmutable:\n  state:\n    last_session_at: soon\n")
    with pytest.raises(CorruptStateError, match="last_session_at must be an ISO 8601 time"):
        agent.identity.read()


def test_dates_anywhere_in_a_hand_written_identity_are_text_and_the_seal_holds(backend: str, agent: Agent) -> None:
    """Unquoted dates (YAML makes them date objects) in the core and in keys of the user's own:
    read as text, so sessions, ``--json`` and the PostgreSQL store can take the document."""
    agent.ensure()
    Path(agent.identity.path).write_text(
        "immutable:\n  name: zero\n  since: 2025-01-01\n  milestones: {2025-06-01: first release}\n"
        "mutable:\n  notes:\n    when: 2026-01-01\n    at: 2026-01-01T12:00:00Z\n"
    )
    identity = agent.identity.read()
    assert identity.immutable["since"] == "2025-01-01" and identity.immutable["milestones"] == {
        "2025-06-01": "first release"
    }
    assert identity.mutable["notes"] == {"when": "2026-01-01", "at": "2026-01-01T12:00:00.000Z"}
    json.dumps(identity.as_dict())
    started = _sessions.begin(agent, "s-1")  # wrote current.json with the identity at the start
    assert started.problems == [] and started.identity is not None
    assert agent.identity.read().immutable == identity.immutable  # sealed as read: no core error
    assert digest_of({"since": datetime.date(2025, 1, 1)}) == digest_of({"since": "2025-01-01"})


def test_an_edit_by_hand_is_treated_as_on_files(backend: str, agent: Agent, tmp_path: Path) -> None:
    """The file in this home edited by hand: a mutable change is taken (and reaches elsewhere with
    the next change); a changed core is refused until reset-core, which seals it everywhere."""
    seeded(agent)
    agent.identity.read()  # the PostgreSQL store refreshes this machine's copy
    path = agent.identity.path
    text = Path(path).read_text()
    Path(path).write_text(text.replace("ship 1.2", "ship 1.3"))
    assert agent.identity.read().current_focus == "ship 1.3"
    agent.identity.add("skill", {"name": "sql", "level": "good"})
    other = elsewhere(agent, backend, tmp_path)
    assert other.identity.read().current_focus == "ship 1.3"
    assert [s["name"] for s in other.identity.read().mutable["skills"]] == ["python", "sql"]

    Path(path).write_text(Path(path).read_text().replace("release engineer", "anything goes"))
    with pytest.raises(IdentityCoreError):
        agent.identity.read()
    with pytest.raises(IdentityCoreError):
        agent.identity.set("state.current_focus", "x")
    if backend == "postgres":
        assert other.identity.read().immutable["role"] == "release engineer"  # nothing reached the server
    else:
        with pytest.raises(IdentityCoreError):  # the same file
            other.identity.read()
    agent.identity.reset_core()
    assert other.identity.read().immutable["role"] == "anything goes"
    assert [e["event"] for e in agent.ops.read()[0]].count("identity_core_reset") == 2


@pytest.mark.parametrize(
    "top",
    [
        "# zero's identity: ask Ada before changing the core\n\n# (kept in git)\n---\n",
        "---\n",
        "\n\n",
        "\ufeff# with a byte-order mark\n",
    ],
    ids=["comments-blank-start", "document-start", "blank-lines", "bom"],
)
def test_the_lines_a_user_put_above_the_identity_are_kept_when_phoenix_writes_it(
    backend: str, agent: Agent, top: str
) -> None:
    """Comments, blank lines and ``---`` above the mapping survive Phoenix's next write; a file
    written with no comment on top still gets Phoenix's first line (which tells a cut later)."""
    seeded(agent)
    agent.identity.read()  # the PostgreSQL store refreshes this machine's copy
    path = Path(agent.identity.path)
    body = path.read_text(encoding="utf-8").split("\n", 1)[1]  # without Phoenix's first line
    path.write_text(top + body, encoding="utf-8")
    assert agent.identity.read().current_focus == "ship 1.2"
    agent.identity.set("state.current_focus", "ship 1.3")
    written = path.read_text(encoding="utf-8")
    kept = top.removeprefix("\ufeff")
    if "#" in top:
        assert written.startswith(kept)
    else:
        assert written.startswith("# Agent identity (Phoenix Protocol).") and written.split("\n", 1)[1].startswith(kept)
    assert agent.identity.read().current_focus == "ship 1.3"
    cut = written.encode("utf-8")
    path.write_bytes(cut[: cut.index(b"# end of identity.yaml")])  # reads as YAML; only the end line is gone
    with pytest.raises(CorruptStateError, match="cut short"):
        agent.identity.read()


@pytest.mark.parametrize("above", ["---\n", "\n", "#\n"])
def test_an_end_line_moved_above_the_mapping_is_not_kept_there(backend: str, agent: Agent, above: str) -> None:
    """Found in review: an end line among the lines kept on top made every later file hold the
    end mark, so a cut read as an edit (and, on PostgreSQL, reached the server)."""
    seeded(agent)
    agent.identity.add("skill", {"name": "rust", "level": "good"})
    agent.identity.read()  # the PostgreSQL store refreshes this machine's copy
    path = Path(agent.identity.path)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    end = lines.pop()
    path.write_text(above + end + "".join(lines[1:]), encoding="utf-8")
    agent.identity.set("state.current_focus", "ship 1.3")
    written = path.read_bytes()
    assert written.count(b"# end of identity.yaml") == 1 and written.rstrip().splitlines()[-1].startswith(b"# end")
    path.write_bytes(written[: written.index(b"- name: rust")])
    with pytest.raises(CorruptStateError, match="cut short"):
        agent.identity.read()
    with pytest.raises(CorruptStateError):
        agent.identity.set("state.current_focus", "over the cut")


def test_a_copy_cut_short_is_damage_and_never_reaches_elsewhere(backend: str, agent: Agent, tmp_path: Path) -> None:
    """This home's file cut inside a list (its first line kept, its last lost) is damage on either
    store: refused, nothing passed on; `phx doctor` keeps it aside and restores the identity (on
    PostgreSQL from the server's row, which the cut never reached)."""
    from phoenix_protocol.services._doctor import check_agent

    seeded(agent)
    for name in ("rust", "go"):
        agent.identity.add("skill", {"name": name, "level": "good"})
    agent.checkpoints.create("routine")  # the file store restores from a checkpoint's copy
    before = agent.identity.read().as_dict()
    path = Path(agent.identity.path)
    text = path.read_bytes()
    path.write_bytes(text[: text.index(b"- name: go")])
    with pytest.raises(CorruptStateError, match="cut short"):
        agent.identity.read()
    with pytest.raises(CorruptStateError, match="cut short"):
        agent.identity.set("state.current_focus", "over the cut")
    if backend == "postgres":
        assert elsewhere(agent, backend, tmp_path).identity.read().as_dict() == before
    found = [f for f in check_agent(agent) if f.path == str(path)]
    assert [f.level for f in found] == ["error", "warn"] and all(f.repaired for f in found)
    assert ("PostgreSQL" in found[1].message) == (backend == "postgres")
    assert agent.identity.read().as_dict() == before
    assert [p.name for p in path.parent.glob("identity.yaml.corrupt-*")] != []


def test_secrets_never_reach_the_identity_in_clear(backend: str, agent: Agent, tmp_path: Path) -> None:
    token = "ghp_" + "a1B2c3D4e5" * 4
    agent.identity.reset_core({"name": "zero", "notes": f"deploys with {token}"})
    agent.identity.set("state.current_focus", f"push with {token}")
    agent.identity.add("belief", {"subject": "my password=hunter2 works", "confidence": 0.5})
    agent.identity.set("state.extra", {"keys": [f"token {token}"]})
    stored = elsewhere(agent, backend, tmp_path).identity.read()
    everything = json.dumps(stored.as_dict())
    assert token not in everything and "hunter2" not in everything
    assert "REDACTED" in stored.current_focus and "REDACTED" in stored.immutable["notes"]
    assert token not in Path(agent.identity.path).read_text() and "hunter2" not in Path(agent.identity.path).read_text()


def test_text_that_was_not_utf8_is_stored_as_valid_text(backend: str, agent: Agent, tmp_path: Path) -> None:
    typed = b"caf\xe9 \xff".decode("utf-8", "surrogateescape")  # as a Latin-1 terminal's argv gives it
    agent.identity.set("state.current_focus", typed)
    agent.identity.add("skill", {"name": typed, "level": "good"})
    stored = elsewhere(agent, backend, tmp_path).identity.read()
    assert stored.current_focus == "caf\ufffd \ufffd" and stored.mutable["skills"][0]["name"] == "caf\ufffd \ufffd"
    json.dumps(stored.as_dict(), ensure_ascii=False).encode("utf-8")  # what the HTTP service sends


def test_yaml_aliases_in_a_hand_written_identity_are_refused(backend: str, agent: Agent) -> None:
    """Nested aliases make a few hundred bytes expand to gigabytes ("billion laughs")."""
    seeded(agent)
    agent.identity.read()
    lines = ["immutable:", "  name: zero", "mutable:", "  a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"  a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 12)]
    Path(agent.identity.path).write_text("\n".join(lines) + "\n")
    with pytest.raises(CorruptStateError, match="aliases"):
        agent.identity.read()
    with pytest.raises(CorruptStateError, match="aliases"):
        agent.identity.set("state.current_focus", "x")


def test_deleting_the_seal_does_not_lift_it(home: Home, clock: ManualClock) -> None:
    agent = Agent.open("zero", home=home, clock=clock)  # files: the seal is identity.digest
    seeded(agent)
    digest = Path(agent.identity.digest_path)
    digest.unlink()  # the core as sealed: nothing is wrong, the next write seals it again
    assert agent.identity.read().immutable["role"] == "release engineer"
    agent.identity.set("state.current_focus", "ship 1.3")
    assert digest.exists()
    path = Path(agent.identity.path)
    path.write_text(path.read_text().replace("release engineer", "anything goes"))
    digest.unlink()  # an edited core and no seal: refused, as with the seal there
    with pytest.raises(IdentityCoreError, match="is missing"):
        agent.identity.read()
    with pytest.raises(IdentityCoreError, match="is missing"):
        agent.identity.set("state.current_focus", "x")
    assert not digest.exists()
    agent.identity.reset_core()  # the explicit, logged way
    assert agent.identity.read().immutable["role"] == "anything goes"


def test_a_session_started_elsewhere_carries_the_identity(backend: str, agent: Agent, tmp_path: Path) -> None:
    seeded(agent)
    _sessions.begin(agent, "s-1")
    _sessions.end(agent, "s-1", summary="first")
    other = elsewhere(agent, backend, tmp_path)
    restored = _sessions.begin(other, "s-2")
    assert restored.identity is not None and restored.identity.immutable["role"] == "release engineer"
    identity = other.identity.read()
    assert identity.mutable["accumulated_experience"] == 2 and identity.current_focus == "ship 1.2"


def test_an_identity_written_before_the_move_to_postgresql_is_taken(
    home: Home, clock: ManualClock, pg_url: str, tmp_path: Path
) -> None:
    on_files = Agent.open("zero", home=home, clock=clock, config_overrides={"store": "files"})
    seeded(on_files)
    moved = Agent.open("zero", home=home, clock=clock, config_overrides={"store": pg_url})
    assert moved.identity.read().immutable["role"] == "release engineer"  # the file, sealed as it was
    moved.identity.set("state.current_focus", "after the move")
    far = Agent.open("zero", home=Home(str(tmp_path / "far")), clock=clock, config_overrides={"store": pg_url})
    identity = far.identity.read()
    assert identity.current_focus == "after the move" and identity.immutable["role"] == "release engineer"
    assert os.path.exists(far.identity.path)  # the far machine's copy, refreshed by the read


def test_hooks_read_the_copy_and_others_fail_clearly(home: Home, clock: ManualClock, pg_url: str) -> None:
    agent = Agent.open("zero", home=home, clock=clock, config_overrides={"store": pg_url})
    seeded(agent)
    gone = Agent.open("zero", home=home, clock=clock, config_overrides={"store": UNREACHABLE})
    assert gone.identity.read(copy=True).immutable["role"] == "release engineer"  # no server needed
    with pytest.raises(StorageError, match=r"127\.0\.0\.1:5499"):
        gone.identity.read()
    gone.store_fallback = True  # as in a hook
    assert gone.identity.read().current_focus == "ship 1.2"


class _Text(str):
    """A str subclass: YAML's safe dumper cannot write it."""


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (b"\x00\xff", "mutable.fingerprint is of type bytes"),
        ({"a", "b"}, "mutable.fingerprint is of type set"),
        (("a", "b"), "mutable.fingerprint is of type tuple"),
        (decimal.Decimal("1.5"), "mutable.fingerprint is of type Decimal"),
        (object(), "mutable.fingerprint is of type object"),
        (_Text("x"), "mutable.fingerprint is of type _Text"),
        (float("nan"), "mutable.fingerprint is nan"),
        (float("inf"), "mutable.fingerprint is inf"),
        ({"ok": [1, {"deep": b"x"}]}, r"mutable.fingerprint.ok\[1\].deep is of type bytes"),
        ({1: "one"}, "mutable.fingerprint has the key 1, which is not text"),
    ],
)
def test_values_json_cannot_hold_are_refused_naming_the_key(
    backend: str, agent: Agent, tmp_path: Path, value: object, named: str
) -> None:
    """identity.yaml took bytes and sets (as !!binary, !!set), and every later session start then
    crashed; Decimal, other objects and NaN leaked yaml's and _jsonio's own errors."""
    seeded(agent)
    before = agent.identity.read().as_dict()
    with pytest.raises(UsageError, match=f"{named}.*nothing was written"):
        agent.identity.set("fingerprint", value)
    with pytest.raises(UsageError, match=named.replace("mutable.fingerprint", "skill.level")):
        agent.identity.add("skill", {"name": "python", "level": value})
    with pytest.raises(UsageError, match=named.replace("mutable.fingerprint", "immutable.seal")):
        agent.identity.reset_core({"name": "zero", "seal": value})
    with pytest.raises(UsageError, match=named):
        agent.identity.update(lambda identity: identity.mutable.update(fingerprint=value))
    assert elsewhere(agent, backend, tmp_path).identity.read().as_dict() == before
    started = _sessions.begin(agent, "s-1")
    assert started.problems == [] and agent.identity.read().mutable["accumulated_experience"] == 1


@pytest.mark.parametrize(
    ("written", "named"),
    [
        ("  fingerprint: !!binary AP8=", "mutable.fingerprint is of type bytes"),
        ("  fingerprint: !!set {a: null}", "mutable.fingerprint is of type set"),
        ("  fingerprint: !!omap [{a: 1}]", r"mutable.fingerprint\[0\] is of type tuple"),
        ("  fingerprint: .nan", "mutable.fingerprint is nan"),
        ("  fingerprint: {1: one}", "mutable.fingerprint has the key 1"),
    ],
)
def test_a_hand_written_value_json_cannot_hold_is_reported_and_sessions_still_start(
    backend: str, agent: Agent, written: str, named: str
) -> None:
    """The session starts with the problem in its report, and is recorded; the identity is left as
    it is (no count of a session that did not start: it was incremented before the start crashed)."""
    seeded(agent)
    agent.identity.read()  # the PostgreSQL store refreshes this machine's copy
    path = Path(agent.identity.path)
    path.write_text(path.read_text() + written + "\n")
    text = path.read_text()
    with pytest.raises(CorruptStateError, match=f"{named}.*fix it by hand"):
        agent.identity.read()
    for n in (1, 2):
        started = _sessions.begin(agent, f"s-{n}")
        assert started.identity is None and any(named.replace("\\", "") in p for p in started.problems)
        assert started.as_dict()["session_id"] == f"s-{n}"
    assert [row["session_id"] for row in _sessions.list_sessions(agent)] == ["s-1", "s-2"]
    assert path.read_text() == text and "accumulated_experience: 0" in text
    _sessions.end(agent, "s-2", summary="done")
    assert _sessions.list_sessions(agent)[-1]["status"] == "ended"


def test_a_session_start_that_fails_is_not_counted(
    home: Home, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start is recorded before accumulated_experience counts it: a start that cannot be
    recorded (here the database refuses the session's record) leaves the count as it was."""
    agent = Agent.open("zero", home=home, clock=clock)
    seeded(agent)

    def refuse(self: object, record: object) -> None:
        raise StorageError("disk full")

    from phoenix_protocol.store._sessions import SessionRows

    monkeypatch.setattr(SessionRows, "set_current", refuse)
    with pytest.raises(StorageError):
        _sessions.begin(agent, "s-1")
    assert agent.identity.read().mutable["accumulated_experience"] == 0
    monkeypatch.undo()
    _sessions.begin(agent, "s-1")
    assert agent.identity.read().mutable["accumulated_experience"] == 1


def test_a_value_set_under_a_secret_key_is_logged_redacted_and_a_secret_key_is_refused(
    backend: str, agent: Agent, tmp_path: Path
) -> None:
    """The value goes into the ops log (for `phx doctor` to replay) as the file has it: redacted
    for its key too. A key that is itself a secret is refused (keys are written as they are)."""
    agent.identity.set("custom.password", "hunter22X9")
    assert agent.identity.read().mutable["custom"]["password"] == "[REDACTED:password]"  # noqa: S105
    token = "ghp_" + "a1B2c3D4e5" * 4
    with pytest.raises(UsageError, match="looks like a secret"):
        agent.identity.set(f"custom.{token}", "x")
    logged = json.dumps(agent.ops.read()[0])
    assert "hunter22X9" not in logged and token not in logged
    assert (
        "hunter22X9" not in Path(agent.identity.path).read_text() and token not in Path(agent.identity.path).read_text()
    )
    agent.checkpoints.create("routine")  # the log and the identity are in the checkpoint's sections
    for root, _dirs, files in os.walk(agent.dir):
        for name in files:
            data = Path(root, name).read_bytes()
            assert b"hunter22X9" not in data and token.encode() not in data, name


def test_values_nested_too_deep_are_refused_and_a_deep_hand_written_file_is_reported(
    backend: str, agent: Agent
) -> None:
    from phoenix_protocol.agent._identity import MAX_DEPTH

    deep: object = "x"
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(UsageError, match="nested more than"):
        agent.identity.set("custom.deep", deep)
    agent.identity.set("custom.ok", [[["x"]]])
    agent.ensure()
    Path(agent.identity.path).write_text("immutable:\n  name: zero\nmutable:\n  d: " + "[" * 400 + "]" * 400 + "\n")
    with pytest.raises(CorruptStateError, match="nested more than"):
        agent.identity.read()


def test_a_core_cannot_be_reset_to_nothing(backend: str, agent: Agent) -> None:
    seeded(agent)
    with pytest.raises(UsageError, match="cannot be empty"):
        agent.identity.reset_core({})
    assert agent.identity.read().immutable["role"] == "release engineer"


def test_a_key_given_twice_in_a_hand_written_identity_is_refused(backend: str, agent: Agent) -> None:
    """YAML keeps the last of two equal keys: the next write would drop the first block for good."""
    seeded(agent)
    agent.identity.read()
    Path(agent.identity.path).write_text(
        "immutable:\n  name: zero\n  role: release engineer\n  principles: [tests first]\n"
        "mutable:\n  skills: [{name: python}]\n  skills: [{name: rust}]\n"
    )
    with pytest.raises(CorruptStateError, match="'skills' is given twice"):
        agent.identity.read()
    with pytest.raises(CorruptStateError, match="given twice"):
        agent.identity.set("state.current_focus", "x")


def test_a_lone_surrogate_in_a_hand_written_identity_is_text_not_a_crash(backend: str, agent: Agent) -> None:
    agent.ensure()
    Path(agent.identity.path).write_text('immutable:\n  name: "zero \\ud800"\nmutable:\n  note: "\\udcff"\n')
    identity = agent.identity.read()
    assert identity.immutable["name"] == "zero \ufffd" and identity.mutable["note"] == "\ufffd"
    agent.identity.set("state.current_focus", "x")  # sealed as read
    assert agent.identity.read().immutable["name"] == "zero \ufffd"


def test_a_hand_written_core_is_redacted_when_first_sealed(backend: str, agent: Agent) -> None:
    token = "ghp_" + "a1B2c3D4e5" * 4
    agent.ensure()
    Path(agent.identity.path).write_text(f"immutable:\n  name: zero\n  notes: deploys with {token}\n")
    agent.identity.set("state.current_focus", "x")
    assert token not in Path(agent.identity.path).read_text()
    assert "REDACTED" in agent.identity.read().immutable["notes"]


def test_a_core_edited_by_hand_is_redacted_when_reset(backend: str, agent: Agent) -> None:
    """`phx identity reset-core` after an edit by hand seals the core as it is in the document:
    never with a secret in clear (it used to be sealed, and so written, as it was)."""
    token = "ghp_" + "a1B2c3D4e5" * 4
    seeded(agent)
    path = Path(agent.identity.path)
    if backend == "sqlite":
        path.write_text(path.read_text().replace("role: release engineer", f"role: deploys with {token}"))
        agent.identity.reset_core()
    else:  # the document is the server's: the same edit through the store's own read-modify-write
        agent.identity.remote.change(  # type: ignore[union-attr]
            lambda data, _seal: (
                (data or b"").replace(b"role: release engineer", f"role: deploys with {token}".encode()),
                _seal or "",
            )
        )
        agent.identity.reset_core()
    assert "REDACTED" in agent.identity.read().immutable["role"]
    if path.exists():  # this machine's file (on PostgreSQL: its copy, if any)
        assert token not in path.read_text()


def test_the_seal_outlives_the_ops_log_in_the_checkpoints(home: Home, clock: ManualClock) -> None:
    """With the seal's record rotated out of the ops log, the newest checkpoint's copy still holds
    the seal: deleting identity.digest and editing the core is refused all the same."""
    os.makedirs(home.root, exist_ok=True)
    Path(home.root, "phoenix.toml").write_text("ops_max_bytes = 4096\nops_keep = 1\n")
    agent = Agent.open("zero", home=home, clock=clock)
    seeded(agent)
    agent.checkpoints.create("session")
    for _ in range(200):
        agent.record("note", "ok", {"text": "x" * 40})
    assert not any(e["event"] == "identity_core_reset" for e in agent.ops.read()[0])  # rotated out
    path = Path(agent.identity.path)
    path.write_text(path.read_text().replace("release engineer", "anything goes"))
    Path(agent.identity.digest_path).unlink()
    with pytest.raises(IdentityCoreError, match="is missing"):
        agent.identity.read()


def test_the_seal_outlives_the_ops_log_without_a_checkpoint(home: Home, clock: ManualClock) -> None:
    """The seal's record rotated out of the ops log and no checkpoint taken yet: the document's
    last line names the seal it was written under, so deleting identity.digest and editing the
    core is still refused."""
    os.makedirs(home.root, exist_ok=True)
    Path(home.root, "phoenix.toml").write_text("ops_max_bytes = 4096\nops_keep = 1\n")
    agent = Agent.open("zero", home=home, clock=clock)
    seeded(agent)
    for _ in range(200):
        agent.record("note", "ok", {"text": "x" * 40})
    assert not any(e["event"] == "identity_core_reset" for e in agent.ops.read()[0])  # rotated out
    assert agent.checkpoints.entries() == []
    path = Path(agent.identity.path)
    path.write_text(path.read_text().replace("release engineer", "anything goes"))
    Path(agent.identity.digest_path).unlink()
    with pytest.raises(IdentityCoreError, match="is missing"):
        agent.identity.read()
    with pytest.raises(IdentityCoreError, match="is missing"):
        agent.identity.set("state.current_focus", "x")
    path.write_text(path.read_text().replace("anything goes", "release engineer"))  # undone
    assert agent.identity.read().immutable["role"] == "release engineer"


def test_an_identity_copied_from_another_agent_is_sealed_as_its_own(home: Home, clock: ManualClock) -> None:
    """Found in review: the last line of a file copied from another agent (a template) names that
    agent's seal; for an agent never sealed, it must not stand in for this one's."""
    alpha = Agent.open("alpha", home=home, clock=clock)
    alpha.identity.set("state.current_focus", "review")
    beta = Agent.open("beta", home=home, clock=clock)
    beta.ensure()
    Path(beta.identity.path).write_text(Path(alpha.identity.path).read_text().replace("name: alpha", "name: beta"))
    beta.identity.set("state.current_focus", "start")
    assert beta.identity.read().immutable == {"name": "beta"}
    # The same into an agent whose ops log rotated (so the log cannot tell it was never sealed).
    os.makedirs(home.root, exist_ok=True)
    gamma = Agent.open("gamma", home=home, clock=clock, config_overrides={"ops_max_bytes": 4096, "ops_keep": 1})
    for _ in range(200):
        gamma.record("note", "ok", {"text": "x" * 40})
    assert gamma.ops.read()[0][0]["seq"] > 1
    Path(gamma.identity.path).write_text(Path(alpha.identity.path).read_text().replace("name: alpha", "name: gamma"))
    gamma.identity.set("state.current_focus", "start")
    assert gamma.identity.read().immutable == {"name": "gamma"}


def test_deleting_the_seal_and_the_ops_log_does_not_lift_it(home: Home, clock: ManualClock) -> None:
    """Found in review: with the ops log gone too (and no checkpoint), the file's last line still
    names the seal this agent's core was written under."""
    agent = Agent.open("zero", home=home, clock=clock)
    seeded(agent)
    path = Path(agent.identity.path)
    path.write_text(path.read_text().replace("release engineer", "anything goes"))
    Path(agent.identity.digest_path).unlink()
    for log in agent.ops.log.files():
        os.unlink(log)
    with pytest.raises(IdentityCoreError, match="is missing"):
        agent.identity.read()
