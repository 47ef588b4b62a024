"""phx checkpoint / restore / sessions / identity: JSON answers and exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import change_checkpoint, plant_checkpoint
from phoenix_protocol.cli._main import cli
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent


def phx_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()  # drop what earlier commands printed
    code = cli([*args, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture(autouse=True)
def _in_project(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)


def test_a_checkpoint_over_a_damaged_identity_says_which_sections_it_could_not_collect(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli(["identity", "set", "state.current_focus", "ship it"])
    code, data = phx_json(capsys, "checkpoint", "--type", "routine")
    assert code == 0 and data["failed_sections"] == []
    Path(Agent.open().dir, "identity.yaml").write_text("mutable: [\n")
    code, data = phx_json(capsys, "checkpoint", "--type", "routine")
    assert code == 0 and data["failed_sections"] == ["identity"]
    capsys.readouterr()
    assert cli(["checkpoint", "--type", "routine"]) == 0
    printed = capsys.readouterr().out
    assert "sections not collected: identity" in " ".join(printed.split())


def test_checkpoint_cycle(capsys: pytest.CaptureFixture[str]) -> None:
    cli(["state", "working", "Implement namespace isolation"])
    code, data = phx_json(capsys, "checkpoint", "--type", "routine")
    assert code == 0 and data["checkpoint"]["checkpoint_type"] == "routine"
    code, data = phx_json(capsys, "checkpoint", "--summary", "Namespaces isolated")
    assert code == 0 and data["checkpoint"]["checkpoint_type"] == "session"
    code, data = phx_json(capsys, "checkpoint", "list")
    assert [c["checkpoint_type"] for c in data["checkpoints"]] == ["session", "routine"]
    newest = data["checkpoints"][0]["name"]
    code, data = phx_json(capsys, "checkpoint", "latest")
    assert data["checkpoint"]["summary"] == "Namespaces isolated" and data["problems"] == []
    assert data["name"] == newest and data["path"].endswith(newest)  # the name, as `--server` gives it
    code, shown = phx_json(capsys, "checkpoint", "show", newest)
    assert code == 0 and shown["name"] == newest and shown["checkpoint"] == data["checkpoint"]
    name = data["checkpoint"]["state"]["current_task"]["id"]
    assert name and name.startswith("task-")
    code, data = phx_json(capsys, "sessions")
    assert code == 0 and len(data["sessions"]) == 1 and data["sessions"][0]["summary"] == "Namespaces isolated"


def test_operations(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = phx_json(capsys, "checkpoint", "begin-op", "migrate db")
    op = data["operation"]["id"]
    code, data = phx_json(capsys, "checkpoint", "end-op", op)
    assert code == 0 and data["succeeded"] is True and len(data["removed"]) == 1
    code, data = phx_json(capsys, "checkpoint", "end-op", "op-unknown")
    assert code == 2 and data["ok"] is False


def test_restore_and_its_refusals(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    cli(["state", "working", "Task A", "--agent", "a"])
    cli(["checkpoint", "--summary", "end of A", "--agent", "a"])
    code, data = phx_json(capsys, "restore", "--agent", "a")
    assert code == 0 and data["checkpoint"].endswith("_session.checkpoint")
    assert data["identity"]["mutable"]["accumulated_experience"] == 1
    # Another agent's checkpoint, planted in b's checkpoints, is refused.
    home = Home(str(project / ".phoenix"))
    agent_a = Agent.open("a", home=home)
    name = agent_a.checkpoints.entries()[0].name
    planted = name.replace("a_", "b_", 1)
    plant_checkpoint(agent_a, name, Agent.open("b", home=home), planted)
    code, data = phx_json(capsys, "restore", "--agent", "b", "--checkpoint", planted)
    assert code == 4 and data["error"]["type"] == "CheckpointOwnershipError"
    # So is one named by another agent's name: the name says whose it is.
    code, data = phx_json(capsys, "restore", "--agent", "b", "--checkpoint", name)
    assert (
        code == 4 and data["error"]["type"] == "CheckpointOwnershipError" and "belongs to a" in data["error"]["message"]
    )
    code, data = phx_json(capsys, "checkpoint", "show", name, "--agent", "b")  # as `restore` refuses it
    assert code == 4 and data["error"]["type"] == "CheckpointOwnershipError"
    # Any limit above the count lists them all (found in review: a traceback past 2**63).
    code, data = phx_json(capsys, "checkpoint", "list", "--agent", "a", "--limit", str(2**63))
    assert code == 0 and len(data["checkpoints"]) == 1
    # A damaged checkpoint is a data problem.
    change_checkpoint(agent_a, name, lambda content: content.replace("end of A", "end of B"))
    code, data = phx_json(capsys, "checkpoint", "show", name, "--agent", "a")
    assert code == 3 and "checksum mismatch" in data["error"]["message"]


def test_identity_commands(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    code, data = phx_json(capsys, "identity", "set", "state.current_focus", "Isolation")
    assert code == 0 and data["identity"]["mutable"]["state"]["current_focus"] == "Isolation"
    code, data = phx_json(capsys, "identity", "add", "belief", "small commits help", "--confidence", "0.8")
    assert data["identity"]["mutable"]["beliefs"] == [{"subject": "small commits help", "confidence": 0.8}]
    code, data = phx_json(capsys, "identity", "add", "belief", "x", "--confidence", "2")
    assert code == 2
    code, data = phx_json(capsys, "identity", "set", "immutable.name", "other")
    assert code == 4 and data["error"]["type"] == "IdentityCoreError"
    # A path with an empty part is refused, nothing written (found in review: `custom.` replaced
    # the whole `custom` mapping, `state..x` set state.x).
    cli(["identity", "set", "custom.a.b", "1"])
    for bad in ("custom.", "state..x", ".state.current_focus"):
        code, data = phx_json(capsys, "identity", "set", bad, "2")
        assert code == 2 and "empty part" in data["error"]["message"]
    code, data = phx_json(capsys, "identity", "show")
    assert data["identity"]["mutable"]["custom"] == {"a": {"b": 1}} and "x" not in data["identity"]["mutable"]["state"]
    path = project / ".phoenix/agents/default/identity.yaml"
    path.write_text(path.read_text().replace("name: default", "name: impostor"))
    code, data = phx_json(capsys, "identity", "show")
    assert code == 4 and "changed outside Phoenix" in data["error"]["message"]
    code, data = phx_json(capsys, "identity", "reset-core")
    assert code == 0 and data["identity"]["immutable"]["name"] == "impostor"
    code, data = phx_json(capsys, "identity", "show")
    assert code == 0


def test_identity_set_keeps_text_as_typed_and_refuses_what_could_not_be_read_back(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    def set_value(path: str, text: str) -> tuple[int, dict[str, Any]]:
        capsys.readouterr()
        code = cli(["identity", "set", "--json", path, "--", text])  # `--`: a value may start with "-"
        return code, json.loads(capsys.readouterr().out)

    for text in ("Port: the scheduler", "yes", "42", "- draft", "-1"):
        code, data = set_value("state.current_focus", text)
        assert code == 0 and data["identity"]["mutable"]["state"]["current_focus"] == text
    values: dict[str, Any] = {
        "a: b": "a: b",
        "- x": "- x",
        "2026-11-24": "2026-11-24",
        "[1, 2]": [1, 2],
        "{k: v}": {"k": "v"},
    }
    values |= {"3": 3, "0.5": 0.5, "true": True, "null": None}
    for text, expected in values.items():
        code, data = set_value("notes.value", text)
        assert code == 0 and data["identity"]["mutable"]["notes"]["value"] == expected, text
    path = project / ".phoenix/agents/default/identity.yaml"
    before = path.read_bytes()
    refused = [
        ("state", "busy"),
        ("accumulated_experience", "many"),
        ("accumulated_experience", "-1"),
        ("state.last_session_at", "5"),
        ("beliefs", "[1, 2]"),
        ("beliefs.0.subject", "x"),
        ("skills", "[{level: expert}]"),
        ("beliefs", "[{subject: x, confidence: 3}]"),
        ("state.current_focus.deeper", "x"),
    ]
    for path_arg, text in refused:
        code, data = set_value(path_arg, text)
        assert code == 2 and data["error"]["type"] == "UsageError", (path_arg, text, data)
    assert path.read_bytes() == before
    code, data = phx_json(capsys, "identity", "set", "skills", "[{name: sql, level: expert}]")
    assert code == 0 and data["identity"]["mutable"]["skills"] == [{"name": "sql", "level": "expert"}]
    code, data = phx_json(capsys, "restore")
    assert code == 0 and data["problems"] == []  # no checkpoint yet: a first session, not a problem


def test_an_identity_edited_by_hand_into_a_wrong_shape_is_reported_and_sessions_still_start(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    phx_json(capsys, "identity", "set", "state.current_focus", "x")
    path = project / ".phoenix/agents/default/identity.yaml"
    text = path.read_text()
    for broken in ("accumulated_experience: many", "accumulated_experience: -3"):
        path.write_text(text.replace("accumulated_experience: 0", broken))
        code, data = phx_json(capsys, "identity", "show")
        assert code == 3 and "accumulated_experience must be a non-negative integer" in data["error"]["message"]
        code, data = phx_json(capsys, "restore")  # the session starts anyway, with the problem reported
        assert code == 0 and any("accumulated_experience" in p for p in data["problems"])
        assert path.read_text().count(broken) == 1  # nothing was reset


def test_the_sessions_table_keeps_its_times_whole_in_80_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    cli(["restore", "--agent", "w", "--session", "5d234d65-b3b2-415c-8885-c505125beea2"])
    cli(["checkpoint", "--agent", "w", "--summary", "Parser done; tests remain"])
    capsys.readouterr()
    assert cli(["sessions", "--agent", "w"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    header, row = lines[0].split(), lines[1]
    assert header == ["started", "ended", "duration", "session", "summary"]
    _day, started, _day2, ended = row.split()[:4]
    assert len(started) == len(ended) == 8 and started.count(":") == ended.count(":") == 2  # HH:MM:SS, not cut
    assert "5d234d65" in row and "Parser" in row  # the id cut, if at all, after its start; the summary there


def test_checkpoint_list_numbers_its_rows_and_show_and_restore_take_the_number(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cli(["checkpoint", "--agent", "w", "--type", "routine"])
    cli(["checkpoint", "--agent", "w", "--summary", "Parser done"])
    _code, data = phx_json(capsys, "checkpoint", "list", "--agent", "w")
    session, routine = data["checkpoints"]
    monkeypatch.setenv("COLUMNS", "80")
    assert cli(["checkpoint", "list", "--agent", "w"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80 and lines[0].split()[:3] == ["#", "type", "taken"]
    assert lines[1].split()[:2] == [str(session["seq"]), "session"] and "Parser done" in lines[1]
    assert session["name"] not in "".join(lines)  # no room for it: the number stands for it
    monkeypatch.setenv("COLUMNS", "160")
    cli(["checkpoint", "list", "--agent", "w"])
    assert routine["name"] in capsys.readouterr().out
    code, shown = phx_json(capsys, "checkpoint", "show", str(routine["seq"]), "--agent", "w")
    assert code == 0 and shown["name"] == routine["name"]
    code, restored = phx_json(capsys, "restore", "--agent", "w", "--checkpoint", f"#{routine['seq']}")
    assert code == 0 and restored["checkpoint"] == routine["name"]
    # Found in review: the session was recorded as restored from nothing (the restore came first).
    code, listed = phx_json(capsys, "sessions", "--agent", "w")
    assert listed["sessions"][-1]["restored_from"] == routine["name"]
    events, _ = Agent.open("w", home=Home.resolve()).ops.read()
    begun = [e for e in events if e["event"] in ("session_begun", "session_restored")][-1]
    assert begun["event"] == "session_restored" and begun["meta"]["checkpoint"] == routine["name"]
    code, data = phx_json(capsys, "checkpoint", "show", "7", "--agent", "w")
    assert code == 2 and data["error"]["type"] == "NotFoundError" and "#7" in data["error"]["message"]


def test_a_session_checkpoint_with_no_session_started_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert cli(["checkpoint", "--agent", "n", "--summary", "before any session"]) == 0
    assert "no session was started" in capsys.readouterr().out
    cli(["restore", "--agent", "n"])
    capsys.readouterr()
    assert cli(["checkpoint", "--agent", "n", "--summary", "in a session"]) == 0
    assert "no session was started" not in capsys.readouterr().out
    _code, data = phx_json(capsys, "sessions", "--agent", "n")
    assert [s["started_at"] is None for s in data["sessions"]] == [True, False]


def test_lists_clip_a_long_summary_that_show_and_json_keep_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    summary = "Parser done; " + "then the long story of the day " * 60
    cli(["restore", "--agent", "w"])
    cli(["checkpoint", "--agent", "w", "--summary", summary])
    for command in (["sessions"], ["checkpoint", "list"]):
        capsys.readouterr()
        assert cli([*command, "--agent", "w"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) <= 10 and "Parser" in lines[1] and "\u2026" in "".join(lines), command
    _code, data = phx_json(capsys, "checkpoint", "latest", "--agent", "w")
    assert data["checkpoint"]["summary"] == summary.strip()


def test_show_prints_each_section_in_a_line_or_two(
    capsys: pytest.CaptureFixture[str], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    cli(["restore", "--agent", "s", "--session", "0c0ffee0-1111-4222-8333-444455556666"])
    cli(["state", "working", "Implement the [parser]", "--agent", "s"])
    cli(["note", "next-action", "Write the parser tests", "--agent", "s"])
    cli(["note", "open-loop", "Is [the grammar] LL(1)?", "--agent", "s"])
    agent = Agent.open("s", home=Home(str(project / ".phoenix")))
    mailbox = {"last_processed_id": "msg-41", "pending_count": 2}
    info = agent.checkpoints.create("session", summary="parser [half] done", extra={"mailbox": mailbox})
    capsys.readouterr()
    assert cli(["checkpoint", "show", info.name, "--agent", "s"]) == 0
    text = capsys.readouterr().out
    rows = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in text.splitlines()[1:] if "  " in line}
    assert text.splitlines()[0].startswith(info.name) and "checksum ok" in text.splitlines()[0]
    assert rows["summary"] == "parser [half] done"  # square brackets are text, not markup
    assert rows["task"] == "Implement the [parser] (in_progress)"
    assert rows["goals"] == "Implement the [parser]; Write the parser tests"
    assert rows["mailbox"] == "last processed msg-41, 2 pending"
    assert rows["context stack"] == "Implement the [parser] > Write the parser tests"
    assert "Is [the grammar] LL(1)?" in text and rows["identity"].endswith("drift checks 0 passed, 0 failed")
    assert rows["session"].startswith("0c0ffee0-1111-4222-8333-444455556666 (from ")


def test_show_takes_sections_a_collector_shaped_its_own_way(
    capsys: pytest.CaptureFixture[str], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    agent = Agent.open("t", home=Home(str(project / ".phoenix")))
    agent.checkpoints.register("current_task", collector=lambda ctx: "a plain string")
    agent.checkpoints.register("working_memory", collector=lambda ctx: ["not", "a", "dict"])
    agent.checkpoints.register("notes", collector=lambda ctx: {"n": 1})
    info = agent.checkpoints.create("routine")
    capsys.readouterr()
    assert cli(["checkpoint", "show", info.name, "--agent", "t"]) == 0
    text = capsys.readouterr().out
    assert "task " not in text
    rows = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in text.splitlines()[1:] if "  " in line}
    assert rows["extensions"] == "notes"  # no state.json, no identity.yaml: their extensions hold nothing


def test_end_op_with_an_error_is_a_failure_and_keeps_the_checkpoint(capsys: pytest.CaptureFixture[str]) -> None:
    _code, data = phx_json(capsys, "checkpoint", "begin-op", "migrate db")
    op = data["operation"]["id"]
    code, data = phx_json(capsys, "checkpoint", "end-op", op, "--error", "lock timeout")  # no --failed
    assert code == 0 and data["succeeded"] is False and data["removed"] == []
    _code, data = phx_json(capsys, "checkpoint", "list", "--type", "pre-operation")
    assert len(data["checkpoints"]) == 1
    _code, data = phx_json(capsys, "log")
    failed = [e for e in data["events"] if e["event"] == "operation_failed"]
    assert len(failed) == 1 and failed[0]["meta"]["error"] == "lock timeout"


def test_a_pre_operation_checkpoint_without_an_operation_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = phx_json(capsys, "checkpoint", "--type", "pre-operation")
    assert code == 2 and data["error"]["type"] == "UsageError" and "begin-op NAME" in data["error"]["message"]
    _code, data = phx_json(capsys, "checkpoint", "list")
    assert data["checkpoints"] == []


def test_latest_when_every_checkpoint_is_damaged_is_corrupt_data(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    for args in (["checkpoint", "latest"], ["checkpoint", "show", "latest"]):
        code, data = phx_json(capsys, *args)  # none at all: a usage error, as before
        assert code == 2 and data["error"]["type"] == "UsageError", args
    cli(["checkpoint", "--type", "routine"])
    agent = Agent.open(home=Home(str(project / ".phoenix")))
    (only,) = agent.checkpoints.entries()
    change_checkpoint(agent, only.name, lambda content: content.replace('"routine"', '"session"'))
    for args in (["checkpoint", "latest"], ["checkpoint", "show", "latest"]):
        code, data = phx_json(capsys, *args)
        assert code == 3 and data["error"]["type"] == "CorruptStateError", args
        assert only.name in data["error"]["message"] and "phx doctor" in data["error"]["message"]
    code, data = phx_json(capsys, "checkpoint", "latest", "--type", "session")  # none of that type
    assert code == 2 and data["error"]["type"] == "UsageError"


@pytest.mark.parametrize(
    "content",
    [
        ": : :\n",
        "name: [unclosed\n",
        "name: zero\nsince: 2026-13-45\n",  # a date that is none
        b"\xff\xfe\xfa",
        "",
        "# nothing\n",
        "- a list\n",
        "plain text\n",
        "immutable:\n",
        "{}\n",
    ],
)
def test_reset_core_from_a_file_that_holds_no_core_is_refused(
    capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, content: str | bytes
) -> None:
    phx_json(capsys, "identity", "set", "state.current_focus", "x")
    identity = project / ".phoenix/agents/default/identity.yaml"
    before = identity.read_bytes()
    core = tmp_path / "core.yaml"
    core.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, data = phx_json(capsys, "identity", "reset-core", "--from-file", str(core))
    assert code == 2 and data["error"]["type"] == "UsageError" and str(core) in data["error"]["message"]
    assert identity.read_bytes() == before
    _code, log = phx_json(capsys, "log")
    assert not any(e["event"] == "identity_core_reset" for e in log["events"])


def test_reset_core_from_a_file_with_dates_seals_them_as_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    core = tmp_path / "core.yaml"
    core.write_text("immutable:\n  name: zero\n  since: 2025-01-01\n")
    code, data = phx_json(capsys, "identity", "reset-core", "--from-file", str(core))
    assert code == 0 and data["identity"]["immutable"] == {"name": "zero", "since": "2025-01-01"}
    code, data = phx_json(capsys, "identity", "show")
    assert code == 0 and data["identity"]["immutable"]["since"] == "2025-01-01"


def test_last_session_at_must_be_a_time(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    for text in ("2026-02-02T10:00:00.000Z", "2026-02-02T12:00:00+02:00", "2026-11-24", "null"):
        code, data = phx_json(capsys, "identity", "set", "state.last_session_at", text)
        assert code == 0, (text, data)
    path = project / ".phoenix/agents/default/identity.yaml"
    before = path.read_bytes()
    for text in ("notadate", "2026-13-45", "yesterday", "''"):
        code, data = phx_json(capsys, "identity", "set", "state.last_session_at", text)
        assert code == 2 and "ISO 8601" in data["error"]["message"], text
    assert path.read_bytes() == before
    code, data = phx_json(capsys, "identity", "set", "notes.when", "2026-13-45")  # elsewhere: text as typed
    assert code == 0 and data["identity"]["mutable"]["notes"]["when"] == "2026-13-45"
    text = path.read_text()
    for broken, message in (
        ("last_session_at: notadate", "last_session_at must be an ISO 8601 time"),
        ("last_session_at: 2026-13-45", "not valid YAML"),  # YAML's date, and none
    ):
        path.write_text(text.replace("last_session_at: null", broken))
        code, data = phx_json(capsys, "identity", "show")  # written by hand: reported as other wrong shapes
        assert code == 3 and data["error"]["type"] == "CorruptStateError" and message in data["error"]["message"]
        code, data = phx_json(capsys, "restore")
        assert code == 0 and any(message in p for p in data["problems"]), data["problems"]
        assert broken in path.read_text()  # left as it is


def test_options_given_to_the_checkpoint_group_apply_to_its_subcommand(
    capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path
) -> None:
    cli(["checkpoint", "--agent", "zero", "--type", "routine"])
    code, data = phx_json(capsys, "checkpoint", "--agent", "zero", "list")  # --json after the subcommand
    assert code == 0 and data["agent"] == "zero" and len(data["checkpoints"]) == 1
    capsys.readouterr()
    assert cli(["checkpoint", "--json", "--agent", "zero", "list"]) == 0  # --json before it
    assert json.loads(capsys.readouterr().out)["agent"] == "zero"
    code, data = phx_json(capsys, "checkpoint", "--agent", "zero", "list", "--agent", "other")  # its own wins
    assert code == 0 and data["agent"] == "other" and data["checkpoints"] == []
    elsewhere = tmp_path / "elsewhere"
    cli(["checkpoint", "--home", str(elsewhere), "--agent", "e", "--type", "routine"])
    code, data = phx_json(capsys, "checkpoint", "--home", str(elsewhere), "latest", "--agent", "e")
    assert code == 0 and data["path"].startswith(str(elsewhere))
    op = json.loads(_run(capsys, "checkpoint", "--agent", "zero", "--json", "begin-op", "migrate"))["operation"]["id"]
    code, data = phx_json(capsys, "checkpoint", "--agent", "zero", "end-op", op)
    assert code == 0 and data["agent"] == "zero" and data["succeeded"] is True


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    cli(list(args))
    return capsys.readouterr().out


@pytest.mark.parametrize(
    "subcommand", [["list"], ["show", "1"], ["latest"], ["prune"], ["begin-op", "x"], ["end-op", "x"]]
)
@pytest.mark.parametrize("option", [["--summary", "done"], ["--type", "routine"], ["--type", "session"]])
def test_the_checkpoint_groups_own_options_with_a_subcommand_are_a_usage_error(
    capsys: pytest.CaptureFixture[str], project: Path, subcommand: list[str], option: list[str]
) -> None:
    code, data = phx_json(capsys, "checkpoint", *option, *subcommand)
    message = data["error"]["message"]
    assert code == 2 and data["error"]["type"] == "UsageError" and f"{option[0]} applies to" in message
    capsys.readouterr()
    assert cli(["checkpoint", *option, *subcommand]) == 2  # without --json: one line on stderr
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error:") and option[0] in captured.err
    assert not (project / ".phoenix/agents/default/checkpoints").exists()  # nothing was taken


def test_errors_opening_the_agent_of_a_checkpoint_subcommand_follow_its_json(
    capsys: pytest.CaptureFixture[str], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHOENIX_AGENT", "../x")
    code, data = phx_json(capsys, "checkpoint", "list", "--agent", "a")  # the explicit --agent wins
    assert code == 0 and data["agent"] == "a"
    code, data = phx_json(capsys, "checkpoint", "list")
    assert code == 2 and data["error"]["type"] == "InvalidIdError"
    monkeypatch.delenv("PHOENIX_AGENT")
    (project / ".phoenix").mkdir()
    (project / ".phoenix/phoenix.toml").write_text("keep_routine = 0\n")
    for args in (["checkpoint", "list"], ["checkpoint", "--json", "list"], ["checkpoint", "--type", "routine"]):
        capsys.readouterr()
        code = cli(args if "--json" in args else [*args, "--json"])
        captured = capsys.readouterr()
        data = json.loads(captured.out)
        assert code == 2 and data["ok"] is False and "keep_routine" in data["error"]["message"], args
        assert captured.err == "", args


def test_server_given_to_the_checkpoint_group_applies_to_latest_and_is_refused_by_local_subcommands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    unreachable = "http://127.0.0.1:9"
    code, data = phx_json(capsys, "checkpoint", "--server", unreachable, "latest")
    assert code == 1 and data["error"]["type"] == "ServerError" and unreachable in data["error"]["message"]
    code, data = phx_json(capsys, "checkpoint", "--server", unreachable, "list")
    assert code == 2 and data["error"]["type"] == "UsageError" and "--server" in data["error"]["message"]


@pytest.mark.parametrize("group", ["identity", "memory", "team", "state", "note", "db", "token", "clinic"])
def test_other_groups_refuse_options_before_their_subcommand(capsys: pytest.CaptureFixture[str], group: str) -> None:
    code = cli([group, "--agent", "zero", "list", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 2 and data["error"]["type"] == "UsageError" and "No such option" in data["error"]["message"]


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_summary_is_as_none_the_default_one(capsys: pytest.CaptureFixture[str], blank: str) -> None:
    cli(["state", "working", "Port the scheduler"])
    code, data = phx_json(capsys, "checkpoint", "--summary", blank)
    assert code == 0 and data["checkpoint"]["label"] == "Port the scheduler (0 open items remain)"
    code, data = phx_json(capsys, "checkpoint", "--type", "routine", "--summary", blank)
    assert code == 0 and data["checkpoint"]["label"] is None
    code, data = phx_json(capsys, "checkpoint", "--summary", blank, "--server", "http://127.0.0.1:9")
    assert code == 2 and "--summary is required" in data["error"]["message"]


def test_problems_quoted_in_a_message_end_in_one_full_stop(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    cli(["checkpoint", "--type", "routine"])
    cli(["checkpoint", "--type", "routine"])
    agent = Agent.open(home=Home(str(project / ".phoenix")))
    for info in agent.checkpoints.entries():
        change_checkpoint(agent, info.name, lambda content: '{"torn": ')
    code, data = phx_json(capsys, "checkpoint", "latest")
    message = data["error"]["message"]
    assert code == 3 and message.count("checksum mismatch (the body was damaged or edited)") == 2
    assert ".;" not in message and ".)" not in message
    code, data = phx_json(capsys, "restore")
    [problem] = data["problems"]
    assert problem.count("checksum mismatch") == 2 and ".;" not in problem and ".)" not in problem


def test_doctor_names_the_file_of_a_newer_schema_once(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    cli(["state", "working", "Port the scheduler"])
    path = project / ".phoenix/agents/default/state.json"
    path.write_text(path.read_text().replace('"schema_version": 1', '"schema_version": 9'))
    code, data = phx_json(capsys, "doctor", "--check")
    [finding] = [f for f in data["findings"] if f["path"] == str(path)]
    assert code == 3 and str(path) not in finding["message"]
    assert finding["message"].startswith("this file was written by a newer Phoenix")


def test_end_op_failed_twice_is_refused_and_logged_once(capsys: pytest.CaptureFixture[str]) -> None:
    _code, data = phx_json(capsys, "checkpoint", "begin-op", "drop table")
    op = data["operation"]["id"]
    code, data = phx_json(capsys, "checkpoint", "end-op", op, "--failed")
    assert code == 0 and data["succeeded"] is False
    code, data = phx_json(capsys, "checkpoint", "end-op", op, "--error", "again")
    assert code == 2 and "already ended as failed" in data["error"]["message"]
    _code, data = phx_json(capsys, "log")
    assert [e["event"] for e in data["events"]].count("operation_failed") == 1


def test_list_and_show_say_whether_an_operation_is_open_or_failed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    cli(["checkpoint", "--type", "routine"])
    _code, data = phx_json(capsys, "checkpoint", "begin-op", "drop table")
    failed = data["operation"]["id"]
    phx_json(capsys, "checkpoint", "end-op", failed, "--failed")
    _code, data = phx_json(capsys, "checkpoint", "begin-op", "migrate db")
    still_open = data["operation"]["id"]
    _code, data = phx_json(capsys, "checkpoint", "list")
    assert [(c["operation_id"], c["operation_status"]) for c in data["checkpoints"]] == [
        (still_open, "open"),
        (failed, "failed"),
        (None, None),
    ]
    capsys.readouterr()
    cli(["checkpoint", "list"])
    rows = capsys.readouterr().out.splitlines()[1:]
    assert "pre-operation (open)" in rows[0] and "pre-operation (failed)" in rows[1]
    for seq, status in ((3, "open"), (2, "failed")):
        code, shown = phx_json(capsys, "checkpoint", "show", str(seq))
        assert code == 0 and shown["operation_status"] == status
        capsys.readouterr()
        cli(["checkpoint", "show", str(seq)])
        assert f"{status})" in next(
            line for line in capsys.readouterr().out.splitlines() if line.startswith("operation")
        )
    _code, shown = phx_json(capsys, "checkpoint", "show", "1")
    assert shown["operation_status"] is None


def test_the_json_of_a_session_checkpoint_says_whether_a_session_was_started(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, data = phx_json(capsys, "checkpoint", "--agent", "n", "--summary", "before any session")
    assert code == 0 and data["session_started"] is False and "no session was started" in data["note"]
    cli(["restore", "--agent", "n"])
    code, data = phx_json(capsys, "checkpoint", "--agent", "n", "--summary", "in a session")
    assert code == 0 and data["session_started"] is True and "note" not in data
    code, data = phx_json(capsys, "checkpoint", "--agent", "n", "--type", "routine")
    assert code == 0 and "session_started" not in data and "note" not in data
