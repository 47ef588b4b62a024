"""The memory bridge on a real uvicorn (127.0.0.1, ephemeral port), through phoenix_protocol.client,
the CLI's --server, and `phx serve` itself."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from conftest import phx_unread, plant_checkpoint
from phoenix_protocol.agent._identity import IdentityCoreError
from phoenix_protocol.cli._main import cli
from phoenix_protocol.client import AuthenticationError, NotFoundError, PhoenixClient, ServerError
from phoenix_protocol.core._errors import InvalidIdError, RefusedError, UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.server._app import create_app
from phoenix_protocol.server._common import Answer, problem
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._checkpoints import CheckpointOwnershipError
from phoenix_protocol.store._teams import ClaimConflictError, Team
from phoenix_protocol.store._tokens import TokenStore

LIMIT = 16 * 1024


@contextlib.contextmanager
def running(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a thread on an ephemeral loopback port; yields its URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        assert thread.is_alive(), "uvicorn stopped"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture
def served(home: Home) -> Home:
    home.ensure()
    return home


@pytest.fixture
def url(served: Home) -> Iterator[str]:
    with running(create_app(served, max_body_bytes=LIMIT)) as base:
        yield base


@pytest.fixture
def admin(served: Home) -> str:
    token, _info = TokenStore(served).create(["*"], ["*"], label="tests")
    return token


@pytest.fixture
def team(served: Home) -> Team:
    team = Team.create(served, "release", lead="lead", team_id="release-1")
    team.join("alice")
    team.join("bob")
    team.add_task("Write the parser")
    return team


def test_session_protocol_through_the_client(url: str, admin: str) -> None:
    with PhoenixClient(url, admin) as phx:
        assert phx.health()["status"] == "ok" and phx.ready()
        started = phx.restore("zero", session_id="s-1")
        assert started["session_id"] == "s-1"
        memory = phx.memory_store("zero", "Timers drift under load", tags=["asyncio"], metadata={"src": "review"})
        hits = phx.memory_recall("zero", "why do timers drift", k=3)
        assert hits[0]["id"] == memory["id"] and hits[0]["score"] >= 0
        info = phx.checkpoint("zero", "Implemented namespace isolation", context={"pending_items": ["docs"]})
        latest = phx.latest_checkpoint("zero")
        assert latest["name"] == info["name"]
        assert latest["checkpoint"]["recent_memories"] == {
            "memory_ids": [memory["id"]],
            "last_recall_query": "why do timers drift",
        }
        assert latest["checkpoint"]["context"]["pending_items"] == ["docs"]
        assert [s["session_id"] for s in phx.sessions("zero")] == ["s-1"]
        again = phx.restore("zero")
        assert again["checkpoint"] == info["name"] and again["restored"]["context"]["pending_items"] == ["docs"]

        assert (
            phx.identity_set("zero", "state.current_focus", "isolation")["mutable"]["state"]["current_focus"]
            == "isolation"
        )
        skills = phx.identity_add("zero", "skill", "fastapi", level="working")["mutable"]["skills"]
        assert skills == [{"name": "fastapi", "level": "working"}]
        assert phx.identity_get("zero")["immutable"] == {"name": "zero"}
        with pytest.raises(IdentityCoreError):
            phx.identity_set("zero", "immutable.name", "one")

        assert [m["id"] for m in phx.memory_list("zero", tags=["asyncio"])] == [memory["id"]]
        assert phx.memory_get("zero", memory["id"])["metadata"] == {"src": "review"}
        phx.memory_delete("zero", memory["id"])
        with pytest.raises(NotFoundError):
            phx.memory_delete("zero", memory["id"])


def test_errors_come_back_as_phoenix_errors(url: str, admin: str, served: Home) -> None:
    alice, _ = TokenStore(served).create(["agent:alice"], ["*"])
    with PhoenixClient(url, admin) as phx:
        phx.memory_store("bob", "bob's")
        with pytest.raises(UsageError) as invalid:
            phx.memory_store("-bad", "x")
        assert invalid.value.status == 422  # type: ignore[attr-defined]
        with pytest.raises(UsageError):
            phx.memory_store("zero", "")
    with PhoenixClient(url, alice) as phx, pytest.raises(NotFoundError) as hidden:
        phx.memory_list("bob")
    assert hidden.value.problem["status"] == 404  # type: ignore[attr-defined]
    for token in (None, "phx_000000000000_nope", alice + "x"):
        with PhoenixClient(url, token) as phx, pytest.raises(AuthenticationError):
            phx.sessions("alice")
    with PhoenixClient("http://127.0.0.1:9", admin, timeout=2) as phx, pytest.raises(ServerError):
        phx.health()
    with pytest.raises(UsageError):
        PhoenixClient("ftp://example.com")
    assert not isinstance(InvalidIdError("x"), RefusedError)


def test_team_operations_through_the_client(url: str, admin: str, team: Team) -> None:
    with PhoenixClient(url, admin) as phx:
        sent = phx.team_send("release-1", "alice", "bob", subject="Found it", body="line 427", msg_id="m-1")
        assert phx.team_send("release-1", "alice", "bob", subject="Found it", body="line 427", msg_id="m-1")[
            "duplicate"
        ]
        inbox = phx.team_inbox("release-1", "bob")
        assert [m["seq"] for m in inbox] == [sent["message"]["seq"]]
        assert phx.team_inbox("release-1", "bob") == []  # confirmed delivered
        assert phx.team_ack("release-1", sent["message"]["seq"], "bob")["acked_by"] == ["bob"]
        task_id = phx.team_tasks("release-1")[0]["task_id"]
        assert phx.team_claim("release-1", task_id, "alice")["assigned_to"] == "alice"
        with pytest.raises(ClaimConflictError):
            phx.team_claim("release-1", task_id, "bob")
        assert phx.team_heartbeat("release-1", "alice", session_id="s-1")["name"] == "alice"
        with pytest.raises(NotFoundError):
            phx.team_tasks("nope")


def test_oversized_bodies_over_a_real_socket(url: str, admin: str, served: Home) -> None:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    conn.putrequest("POST", "/memory/zero")
    conn.putheader("Authorization", f"Bearer {admin}")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(10 * 1024 * 1024))
    conn.endheaders()  # and no body at all: the answer comes from the header alone
    response = conn.getresponse()
    assert response.status == 413 and response.getheader("content-type") == "application/problem+json"
    assert json.loads(response.read())["status"] == 413
    conn.close()

    # Streamed without a length: the server answers 413 and closes as soon as the limit is passed,
    # with the rest of the body unread, so the client may see the 413 or only the reset that
    # follows it (the deterministic check of this path is in test_server.py). Either way nothing
    # is stored.
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    chunks = [b'{"text": "'] + [b"x" * 1024] * 20 + [b'"}']
    try:
        conn.request(
            "POST",
            "/memory/zero",
            body=iter(chunks),
            headers={"Authorization": f"Bearer {admin}", "Content-Type": "application/json"},
            encode_chunked=True,
        )
        assert conn.getresponse().status == 413
    except ConnectionError:
        pass
    conn.close()
    with PhoenixClient(url, admin) as phx, pytest.raises(NotFoundError):
        phx.memory_list("zero")  # nothing was stored


def test_concurrent_clients_lose_no_acknowledged_write(url: str, admin: str) -> None:
    acknowledged: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        try:
            with PhoenixClient(url, admin) as phx:
                for i in range(15):
                    record = phx.memory_store("zero", f"note {n}-{i} about timers", tags=[f"w{n}"])
                    with lock:
                        acknowledged.append(record["id"])
                    phx.memory_recall("zero", "timers", k=2)
                phx.checkpoint(f"agent-{n}", f"worker {n} done", checkpoint_type="routine")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    with PhoenixClient(url, admin) as phx:
        stored = {m["id"] for m in phx.memory_list("zero", limit=1000)}
        assert set(acknowledged) <= stored and len(acknowledged) == 120
        for n in range(8):
            assert phx.latest_checkpoint(f"agent-{n}")["checkpoint"]["summary"] == f"worker {n} done"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = cli([*args, "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)  # type: ignore[no-any-return]


def test_cli_uses_the_server(
    url: str,
    admin: str,
    team: Team,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("PHOENIX_SERVER", url)
    monkeypatch.setenv("PHOENIX_TOKEN", admin)
    monkeypatch.setenv("PHOENIX_AGENT", "zero")

    started = _run(capsys, "restore", "--session", "s-9")
    assert started["agent"] == "zero" and started["session_id"] == "s-9"
    stored = _run(capsys, "memory", "store", "Timers drift under load", "--tag", "asyncio", "--metadata", '{"a": 1}')
    assert stored["memory"]["metadata"] == {"a": 1}
    recalled = _run(capsys, "memory", "recall", "timers", "--k", "2")
    assert recalled["results"][0]["id"] == stored["memory"]["id"]
    assert [m["id"] for m in _run(capsys, "memory", "list")["memories"]] == [stored["memory"]["id"]]
    taken = _run(capsys, "checkpoint", "--summary", "remote work")
    latest = _run(capsys, "checkpoint", "latest")
    assert latest["name"] == taken["checkpoint"]["name"]
    assert latest["checkpoint"]["recent_memories"]["memory_ids"] == [stored["memory"]["id"]]
    assert [s["session_id"] for s in _run(capsys, "sessions")["sessions"]] == ["s-9"]
    assert (
        _run(capsys, "identity", "set", "state.current_focus", "remote")["identity"]["mutable"]["state"][
            "current_focus"
        ]
        == "remote"
    )
    assert _run(capsys, "identity", "add", "belief", "timers drift", "--confidence", "0.7")["identity"]["mutable"][
        "beliefs"
    ] == [{"subject": "timers drift", "confidence": 0.7}]
    assert _run(capsys, "identity", "show")["identity"]["immutable"] == {"name": "zero"}
    assert _run(capsys, "memory", "delete", stored["memory"]["id"])["deleted"] == stored["memory"]["id"]

    sent = _run(capsys, "team", "send", "release-1", "--from", "alice", "--to", "bob", "--subject", "s", "--body", "b")
    assert cli(["team", "inbox", "release-1", "--as", "bob", "--json"]) == 0
    assert [m["seq"] for m in json.loads(capsys.readouterr().out)["messages"]] == [sent["message"]["seq"]]
    assert _run(capsys, "team", "ack", "release-1", str(sent["message"]["seq"]), "--as", "bob")["acked_by"] == ["bob"]
    task_id = _run(capsys, "team", "tasks", "release-1")["tasks"][0]["task_id"]
    assert _run(capsys, "team", "claim", "release-1", task_id, "--as", "alice")["task"]["assigned_to"] == "alice"
    assert cli(["team", "claim", "release-1", task_id, "--as", "bob"]) == 4  # refused, as locally
    capsys.readouterr()
    assert _run(capsys, "team", "heartbeat", "release-1", "alice")["heartbeat"]["name"] == "alice"

    # Human output works too, and nothing was written to a local home.
    assert cli(["sessions"]) == 0
    assert cli(["checkpoint", "latest"]) == 0
    assert cli(["team", "tasks", "release-1"]) == 0
    assert "s-9" in capsys.readouterr().out
    assert not (elsewhere / ".phoenix").exists()

    monkeypatch.setenv("PHOENIX_TOKEN", "phx_000000000000_wrong")
    assert cli(["sessions", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["type"] == "AuthenticationError"
    assert cli(["checkpoint"]) == 2  # --summary is required remotely
    assert cli(["sessions", "--home", str(tmp_path / "local"), "--server", url]) == 2
    capsys.readouterr()
    assert cli(["sessions", "--home", str(tmp_path / "local"), "--json"]) == 0  # an explicit home wins
    assert json.loads(capsys.readouterr().out)["sessions"] == []


def test_restoring_another_agents_checkpoint(url: str, admin: str, served: Home) -> None:
    """As docs/server.md says: another agent's checkpoint name is 404, as an unknown name (nothing
    outside the namespace is told apart); 409 CheckpointOwnershipError only for a file planted in
    the agent's own directory under its own name, which a restore without a name skips."""
    zero, bob = Agent.open("zero", home=served), Agent.open("bob", home=served)
    own = zero.checkpoints.create("routine", summary="zero's")
    bobs = bob.checkpoints.create("routine", summary="bob's")
    with PhoenixClient(url, admin) as phx:
        for name in (bobs.name, "bob_20260101000000000-00000099_routine.checkpoint"):
            with pytest.raises(NotFoundError) as hidden:
                phx.restore("zero", checkpoint=name)
            assert hidden.value.problem["error"] == "NotFoundError"  # type: ignore[attr-defined]
        planted = "zero_20260101000000000-00000007_routine.checkpoint"
        plant_checkpoint(bob, bobs.name, zero, planted)
        for ref in (planted, "7", "#7"):
            with pytest.raises(CheckpointOwnershipError) as refused:
                phx.restore("zero", checkpoint=ref)
            assert refused.value.status == 409  # type: ignore[attr-defined]
        started = phx.restore("zero")
        assert started["checkpoint"] == own.name
        assert any(planted in p and "'bob'" in p for p in started["problems"])


@pytest.mark.parametrize("as_json", [False, True])
def test_remote_pre_operation_checkpoint_is_refused_as_locally(
    url: str,
    admin: str,
    served: Home,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    as_json: bool,
) -> None:
    """`phx checkpoint --type pre-operation` over --server: the local refusal, exit code and hint
    (`phx checkpoint begin-op`), before any request (it was the server's 422 without the hint)."""
    json_flag = ["--json"] if as_json else []
    args = ["checkpoint", "--type", "pre-operation", "--summary", "s", "--agent", "zero", *json_flag]
    assert cli([*args, "--home", str(tmp_path / "local")]) == 2
    local = capsys.readouterr()
    assert "phx checkpoint begin-op" in local.out + local.err
    monkeypatch.setenv("PHOENIX_TOKEN", admin)
    for extra in ([], ["--summary", ""]):  # with or without a summary, the type is what is wrong
        assert cli([*args, *extra, "--server", url]) == 2
        assert capsys.readouterr() == local
    assert not Agent.open("zero", home=served).exists()  # nothing reached the server


def _hand_edit(path: Path | str, old: str, new: str) -> None:
    """Edit a file as a person would: ``new`` may hold a JSON/YAML escape like ``\\udce9``."""
    text = Path(path).read_text(encoding="utf-8")
    assert old in text, (path, text)
    Path(path).write_text(text.replace(old, new), encoding="utf-8")


def test_lone_surrogates_in_hand_written_files_are_answered(
    url: str,
    admin: str,
    served: Home,
    team: Team,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A ``\\udXXX`` escape standing alone in identity.yaml, state.json or a team's JSON in the
    database reads as a lone surrogate, which UTF-8 cannot encode: the answers hold U+FFFD instead
    (they were 500)."""
    agent = Agent.open("zero", home=served)
    agent.state.set_status("working", "task")
    agent.identity.set("state.current_focus", "focus")
    _hand_edit(agent.identity.path, "current_focus: focus", 'current_focus: "bad \\udce9 focus"')
    _hand_edit(agent.state.path, '"current_task": "task"', '"current_task": "bad \\udce9 task"')
    team.send("alice", "bob", type="info", subject="Found it", body="line 427")
    team.store.db.transaction(  # a hand edit of phoenix.db
        lambda tx: tx.execute(
            "UPDATE phx_tasks SET record = replace(record, 'Write the parser', 'Write the \\udce9 parser')"
        )
    )

    with PhoenixClient(url, admin) as phx:
        assert phx.identity_get("zero")["mutable"]["state"]["current_focus"] == "bad \ufffd focus"
        started = phx.restore("zero", session_id="s-1")
        assert started["identity"]["mutable"]["state"]["current_focus"] == "bad \ufffd focus"
        assert phx.team_tasks("release-1")[0]["title"] == "Write the \ufffd parser"
        assert [m["body"] for m in phx.team_inbox("release-1", "bob")] == ["line 427"]
        assert phx.team_claim("release-1", "task-0001", "alice")["title"] == "Write the \ufffd parser"
        phx.checkpoint("zero", "done")  # collects the state and the identity
        latest = phx.latest_checkpoint("zero")["checkpoint"]
        assert latest["state"]["current_task"]["context"]["description"] == "bad \ufffd task"

    # The same data through the CLI's --server and --json: valid UTF-8 as well.
    monkeypatch.setenv("PHOENIX_SERVER", url)
    monkeypatch.setenv("PHOENIX_TOKEN", admin)
    monkeypatch.chdir(served.root)
    shown = _run(capsys, "identity", "show", "--agent", "zero")
    assert shown["identity"]["mutable"]["state"]["current_focus"] == "bad \ufffd focus"
    assert _run(capsys, "team", "tasks", "release-1")["tasks"][0]["title"] == "Write the \ufffd parser"


def test_answer_makes_lone_surrogates_valid() -> None:
    body = bytes(problem(500, "bad \udce9 detail", instance="/x", error="CorruptStateError").body)
    assert json.loads(body)["detail"] == "bad \ufffd detail"
    assert bytes(Answer({"k\udce9": ["v\udce9", 1]}).body).decode("utf-8") == '{"k\ufffd":["v\ufffd",1]}'
    assert bytes(Answer({"plain": "caf\u00e9"}).body) == '{"plain":"caf\u00e9"}'.encode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_phx_serve(served: Home, admin: str) -> None:
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "phoenix_protocol",
            "serve",
            "--port",
            str(port),
            "--home",
            served.root,
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
                    assert json.loads(response.read())["status"] == "ok"
                    break
            except OSError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "phx serve did not start"
                time.sleep(0.1)
        with PhoenixClient(f"http://127.0.0.1:{port}", admin) as phx:
            assert phx.memory_store("zero", "served by phx serve")["namespace"] == "zero"
        with PhoenixClient(f"http://127.0.0.1:{port}") as phx, pytest.raises(AuthenticationError):
            phx.memory_list("zero")
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=10)
    assert b"memory bridge for" in err
    assert admin.encode() not in err


def test_a_remote_inbox_whose_reader_went_away_delivers_nothing(
    url: str, admin: str, team: Team, tmp_path: Path
) -> None:
    """Found in review: `phx team inbox --server` marked the messages delivered before printing
    them, so a reader gone away lost them; now they are marked once handed over, as locally."""
    with PhoenixClient(url, admin) as phx:
        phx.team_send("release-1", sender="alice", to="bob", subject="s", body="b")
        proc = phx_unread(
            ["team", "inbox", "release-1", "--as", "bob"],
            cwd=tmp_path,
            env={**os.environ, "PHOENIX_SERVER": url, "PHOENIX_TOKEN": admin},
        )
        assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
        assert [m["subject"] for m in phx.team_inbox("release-1", "bob")] == ["s"]  # still undelivered


def test_recall_windows_and_modes_through_the_client_and_the_cli(
    url: str, admin: str, served: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    """``since``/``until``/``mode`` from ``PhoenixClient`` and ``phx memory … --server``: the same
    answers as the library's."""
    with PhoenixClient(url, admin) as phx:
        memory = phx.memory_store("zero", "Alice edits code in Neovim with pyright")
        assert [m["id"] for m in phx.memory_recall("zero", "neovim", since="2000-01-01T00:00:00Z")] == [memory["id"]]
        assert phx.memory_recall("zero", "neovim", until="2000-01-01T00:00:00Z") == []
        assert phx.memory_list("zero", until="2000-01-01T00:00:00Z") == []
        assert [m["id"] for m in phx.memory_list("zero", since="2000-01-01T00:00:00+02:00")] == [memory["id"]]
        question = "which typing tool does she program with"
        assert phx.memory_recall("zero", question, mode="lexical") == []
        assert [m["id"] for m in phx.memory_recall("zero", question, mode="semantic")] == [memory["id"]]
        with pytest.raises(UsageError):
            phx.memory_recall("zero", "neovim", since="last tuesday")

    def remote(*args: str) -> dict[str, Any]:
        assert cli(["memory", *args, "--agent", "zero", "--server", url, "--token", admin, "--json"]) == 0
        answer: dict[str, Any] = json.loads(capsys.readouterr().out)
        return answer

    assert [m["id"] for m in remote("recall", "neovim", "--since", "1h")["results"]] == [memory["id"]]
    assert remote("recall", "neovim", "--until", "1h")["results"] == []
    assert remote("list", "--until", "2000-01-01")["memories"] == []
    assert [m["id"] for m in remote("recall", question, "--mode", "semantic")["results"]] == [memory["id"]]
