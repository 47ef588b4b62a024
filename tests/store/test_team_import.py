"""A home written by Phoenix 0.1.0 (``tests/data/homes/home-0.1.0.tar.gz``) keeps its teams in
folders; the first open moves them into the database, on both engines, with nothing lost: every
task, message (with who acknowledged it), reader cursor, teammate and team checkpoint that the old
code read back (``expected-0.1.0.json``) comes back, and the folders are kept aside, not deleted.
A process killed in the middle of the move leaves it to the next open."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from phoenix_protocol.core._errors import CorruptStateError
from phoenix_protocol.core._home import Home
from phoenix_protocol.store._teams import Team, list_teams

DATA = Path(__file__).parents[1] / "data" / "homes"
EXPECTED: dict[str, Any] = json.loads((DATA / "expected-0.1.0.json").read_text())
TEAM = EXPECTED["team_id"]


@pytest.fixture
def old_home(tmp_path: Path) -> Home:
    with tarfile.open(DATA / "home-0.1.0.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return Home(str(tmp_path / "home"))


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _check_everything_came_back(home: Home) -> None:
    team = Team.open(home, TEAM)
    assert team.read()["tasks"] == EXPECTED["tasks"]["tasks"]
    assert team.read() == EXPECTED["status"]["team"]
    box = team.mailbox
    assert [m.as_dict() for m in box.replay(100)] == EXPECTED["replay"]["messages"]  # acked_by included
    alice = box.cursor_state("alice")
    assert alice["delivered_seq"] == 4 and alice["acked_through"] == 2 and alice["acked_ranges"] == []
    assert [m.seq for m in box.fetch("alice")] == [5, 6]  # 1-4 delivered; 7 is her own broadcast
    lead = box.cursor_state("lead")
    assert lead["delivered_seq"] == 8 and box.unread_count("lead") == 0 and list(box.fetch("lead")) == []
    assert box.unread_count("bob") == 1  # alice's broadcast, never fetched
    probe = {m["name"]: m for m in EXPECTED["probe"]["steps"][3]["teammates"]}
    roster = team.roster()
    assert [m["name"] for m in roster] == list(probe)
    assert {m["name"]: m["current_task"] for m in roster} == {n: m["current_task"] for n, m in probe.items()}
    assert {m["name"]: m["role"] for m in roster} == {n: m["role"] for n, m in probe.items()}
    kept = next(Path(home.root).glob("teams.migrated-*")) / TEAM / "checkpoints"
    assert team.store.checkpoint_names() == sorted(p.name for p in kept.iterdir())
    for path in kept.iterdir():
        assert team.store.read_checkpoint(path.name) == json.loads(path.read_text())
    assert team.latest_checkpoint(kind="full")["seq"] == 5  # type: ignore[index]
    # The team works on: the next message takes seq 9, checkpoints go on from 5.
    assert team.send("bob", "lead", subject="after the move", body="").seq == 9
    assert team.checkpoint()["seq"] == team.read()["checkpoint_seq"] > 5


def test_the_first_open_moves_the_team_folders_into_the_database(backend: str, old_home: Home) -> None:
    before = _files(Path(old_home.root, "teams"))
    assert list_teams(old_home) == [TEAM]  # the first open imports
    assert not Path(old_home.root, "teams").exists()
    (kept,) = Path(old_home.root).glob("teams.migrated-*")
    assert _files(kept) == before, "the old folders are kept exactly as they were"
    assert Path(old_home.root, "phoenix.db").exists() == (backend != "postgres")
    _check_everything_came_back(old_home)
    assert list_teams(old_home) == [TEAM]  # once: nothing left to import


def test_a_broadcast_counts_for_every_reader_but_its_sender(backend: str, old_home: Home) -> None:
    box = Team.open(old_home, TEAM).mailbox
    assert [m.seq for m in box.fetch("alice")] == [5, 6]  # 7 is her own broadcast
    assert box.unread_count("alice") == 2


KILLED = r"""
import os, signal, sys
from phoenix_protocol.store import _team_files
from phoenix_protocol.core._home import Home
from phoenix_protocol.store._teams import list_teams

home, where = sys.argv[1:3]
if where == "before-rename":
    os.rename = lambda *args: os.kill(os.getpid(), signal.SIGKILL)
else:
    real = _team_files._insert
    def dying(tx, db, team):
        real(tx, db, team)
        os.kill(os.getpid(), signal.SIGKILL)  # in the transaction, before its commit
    _team_files._insert = dying
list_teams(Home(home))
"""


@pytest.mark.parametrize("where", ["in-transaction", "before-rename"])
def test_a_move_killed_half_way_is_finished_by_the_next_open(backend: str, old_home: Home, where: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", KILLED, old_home.root, where], capture_output=True, text=True, check=False, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert Path(old_home.root, "teams", TEAM, "metadata.json").is_file()  # nothing lost, nothing moved yet
    assert list_teams(old_home) == [TEAM]
    assert not Path(old_home.root, "teams").exists()
    _check_everything_came_back(old_home)


def test_a_team_that_differs_from_the_database_stops_the_move_and_keeps_the_folder(
    backend: str, old_home: Home, tmp_path: Path
) -> None:
    moved = tmp_path / "aside"
    os.rename(os.path.join(old_home.root, "teams"), moved)
    Team.create(old_home, "other", lead="lead", team_id=TEAM)  # the same id, other content
    os.rename(moved, os.path.join(old_home.root, "teams"))
    with pytest.raises(CorruptStateError, match=rf"team {TEAM} in .*teams/{TEAM} and in the database .* differ"):
        list_teams(old_home)
    assert Path(old_home.root, "teams", TEAM, "metadata.json").is_file()
    assert not list(Path(old_home.root).glob("teams.migrated-*"))
