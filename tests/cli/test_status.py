"""``phx status``: every agent and lane of a home, and of every home this user used (``--all``),
with real processes (one alive, one SIGKILLed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.cli._main import cli
from phoenix_protocol.core._clock import system_clock
from phoenix_protocol.core._errors import SchemaVersionError
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._homes import known_homes, register_home, registry_path
from phoenix_protocol.core._process import hostname, identity_of
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._lanes import start_placed

A = "0b6f3c1e-7a2d-4e95-8c41-2f9d6a0b7e53"
B = "1c7a4d2f-8b3e-4fa6-9d52-3a0e7b1c8f64"
C = "2d8b5e3a-9c4f-4ab7-8e63-4b1f8c2d9a75"


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) for _ in range(3)]
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _process(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    ident = identity_of(proc.pid)
    assert ident is not None
    return {"pid": proc.pid, "start_time": ident.start_time, "host": hostname()}


def _status(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    capsys.readouterr()
    code = cli(["status", *args])
    out = capsys.readouterr().out
    return code, json.loads(out) if "--json" in args else out


@pytest.fixture
def busy_home(home: Home, sleepers: list[subprocess.Popen[bytes]]) -> Home:
    """Agent "default": A in its primary lane (alive), B beside it (alive), C beside it
    (SIGKILLed while working); agent "other": idle."""
    for sid, proc, task in zip((A, B, C), sleepers, ("Serve the API", "Write docs", "Port the scheduler"), strict=True):
        agent = Agent.open("default", home=home)
        placed = start_placed(agent, sid, process=_process(proc))
        agent.state.set_status("working", task, session_id=sid)
        if sid == A:
            assert placed.lane is None
            agent.state.add_note("next_action", "Add rate limits")
        else:
            assert placed.lane == sid
    os.kill(sleepers[2].pid, signal.SIGKILL)
    sleepers[2].wait()
    other = Agent.open("other", home=home)
    other.state.set_status("idle")
    return home


def test_status_json_shows_every_agent_and_lane(busy_home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _status(capsys, "--home", busy_home.root, "--json")
    assert code == 0 and report["ok"] is True and report["schema_version"] == 1
    assert report["homes"] == [{"path": busy_home.root, "exists": True, "error": None}]
    rows = {(r["agent"], r["lane"]): r for r in report["lanes"]}
    assert list(rows) == [("default", None), ("default", B), ("default", C), ("other", None)]
    a, b, c, other = rows.values()
    assert (a["status"], a["verdict"], a["process"], a["task"], a["next_action"]) == (
        "working",
        "alive",
        "running",
        "Serve the API",
        "Add rate limits",
    )
    assert a["session_id"] == A and a["recover"] is False and a["idle_seconds"] is not None
    assert (b["verdict"], b["process"], b["task"], b["recover"]) == ("alive", "running", "Write docs", False)
    # The dead lane: the watchdog's rules say grace (it marks it stalled after watchdog_grace);
    # the next session started here recovers it.
    assert (c["status"], c["verdict"], c["process"], c["recover"]) == ("working", "grace", "gone", True)
    assert c["path"].endswith(os.path.join("lanes", C, "state.json"))
    assert (other["status"], other["verdict"], other["recover"]) == ("idle", "idle", False)
    assert report["recover"] == 1 and report["counts"] == {"alive": 2, "grace": 1, "idle": 1}
    # Reading acts on nothing.
    state = json.loads(Path(c["path"]).read_text())
    assert state["status"] == "working"


def test_status_text_is_one_screen(
    busy_home: Home, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")  # the text folds in narrower terminals
    code, text = _status(capsys, "--home", busy_home.root)
    assert code == 0
    for expected in (
        "primary",
        B[:8],
        C[:8],
        "Serve the API",
        "Port the scheduler",
        "Add rate limits",
        "the next session recovers it",
    ):
        assert expected in text, text


def test_status_all_reads_the_homes_this_user_used(
    busy_home: Home, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    second = Home(str(tmp_path / "second" / ".phoenix"))
    Agent.open("solo", home=second).state.set_status("working", "Solo work")
    gone = tmp_path / "gone" / ".phoenix"
    for root in (second.root, str(gone)):
        register_home(root, now_ms=system_clock.now_ms())
    code, report = _status(capsys, "--home", busy_home.root, "--all", "--json")
    assert code == 0
    homes = {h["path"]: h for h in report["homes"]}
    assert set(homes) == {busy_home.root, second.root, str(gone)}  # phx status recorded the one it was run in
    assert homes[str(gone)]["exists"] is False
    solo = [r for r in report["lanes"] if r["home"] == second.root]
    assert [(r["agent"], r["task"], r["verdict"], r["recover"]) for r in solo] == [
        ("solo", "Solo work", "unknown", True)
    ]
    assert {h["path"] for h in known_homes()} == set(homes)
    code, text = _status(capsys, "--all")
    assert code == 0 and "no such home" in text and "Solo work" in text


def test_status_of_a_home_that_does_not_exist_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "nothing" / ".phoenix"
    code, report = _status(capsys, "--home", str(root), "--json")
    assert code == 0 and report["lanes"] == [] and report["homes"][0]["exists"] is False
    assert not root.exists() and not os.path.exists(registry_path())


def test_the_list_of_homes_survives_damage_and_refuses_a_newer_one(tmp_path: Path) -> None:
    path = Path(registry_path())
    assert path.is_relative_to(os.environ["XDG_STATE_HOME"])
    register_home(str(tmp_path / "one"), now_ms=1_000)
    path.write_text("{not json")
    assert register_home(str(tmp_path / "two"), now_ms=2_000)
    assert [h["path"] for h in known_homes()] == [str(tmp_path / "two")]
    assert [p.name for p in path.parent.iterdir() if ".corrupt-" in p.name]  # the damaged bytes kept
    path.write_text(json.dumps({"schema_version": 9, "homes": [{"path": "/x"}]}))
    with pytest.raises(SchemaVersionError):
        register_home(str(tmp_path / "three"), now_ms=3_000)
    assert json.loads(path.read_text())["schema_version"] == 9
    assert [h["path"] for h in known_homes()] == ["/x"]
