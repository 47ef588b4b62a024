"""The cross-namespace matrix: every endpoint × (no token, wrong token, another namespace's token,
revoked token, expired token) is refused, reads nothing and changes nothing."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from phoenix_protocol.core import _background
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._home import Home
from phoenix_protocol.server._app import create_app
from phoenix_protocol.server._common import PUBLIC_PATHS
from phoenix_protocol.services._bridge import NOT_FOUND
from phoenix_protocol.store._memory import MemoryStore
from phoenix_protocol.store._teams import Team
from phoenix_protocol.store._tokens import TokenStore

PRIVATE = "bob's launch codes"


@pytest.fixture
def world(home: Home, clock: ManualClock) -> dict[str, Any]:
    """Agent bob (a session, a checkpoint, a memory, an identity) and team release-1, and tokens."""
    home.ensure()
    admin_token, _ = TokenStore(home, clock=clock).create(["*"], ["*"])
    with TestClient(create_app(home, clock=clock)) as c:
        auth = {"Authorization": f"Bearer {admin_token}"}
        assert c.post("/restore/bob", json={"session_id": "s-1"}, headers=auth).status_code == 200
        memory = c.post("/memory/bob", json={"text": PRIVATE}, headers=auth).json()["memory"]
        assert c.post("/checkpoint/bob", json={"summary": PRIVATE}, headers=auth).status_code == 201
        assert c.patch("/identity/bob", json={"path": "state.current_focus", "value": PRIVATE}, headers=auth).is_success
    team = Team.create(home, "release", lead="lead", team_id="release-1", clock=clock)
    team.join("alice")
    team.join("bob")
    team.add_task("Write the parser")
    message = team.send("alice", "bob", subject=PRIVATE, body=PRIVATE)
    team.mailbox.mark_delivered("bob", message.seq)
    tokens = TokenStore(home, clock=clock)
    other, _ = tokens.create(["agent:alice", "agent:ghost", "team:other-team"], ["*"])
    right_token, _ = tokens.create(["agent:bob", "team:release-1"], ["*"])
    revoked, info = tokens.create(["agent:bob", "team:release-1"], ["*"])
    tokens.revoke(info.id)
    expired, _ = tokens.create(["agent:bob", "team:release-1"], ["*"], expires_in=60)
    clock.advance(120)
    # The checkpoint's named file and its ops event are written behind (half a second later):
    # done now, so that a test's snapshots before and after see a settled world.
    _background.wait()
    return {
        "memory_id": memory["id"],
        "seq": message.seq,
        "credentials": {
            "no token": None,
            "wrong token": right_token[:-6] + "AAAAAA",
            "another namespace": other,
            "revoked token": revoked,
            "expired token": expired,
        },
        "right": right_token,
    }


def requests(
    memory_id: str,
    seq: int | str,
    agent: str = "bob",
    team: str = "release-1",
    *,
    reader: str = "bob",
    mate: str = "alice",
    task: str = "task-0001",
) -> list[tuple[str, str, Any]]:
    """One valid request per endpoint."""
    return [
        ("POST", f"/checkpoint/{agent}", {"summary": "planted"}),
        ("GET", f"/checkpoint/{agent}/latest", None),
        ("POST", f"/restore/{agent}", {}),
        ("GET", f"/sessions/{agent}", None),
        ("POST", f"/memory/{agent}", {"text": "planted"}),
        ("POST", f"/memory/{agent}/recall", {"query": "launch codes"}),
        ("GET", f"/memory/{agent}", None),
        ("GET", f"/memory/{agent}/{memory_id}", None),
        ("GET", f"/identity/{agent}", None),
        ("PATCH", f"/identity/{agent}", {"path": "state.current_focus", "value": "hijacked"}),
        ("POST", f"/identity/{agent}/entries", {"kind": "belief", "name": "planted"}),
        ("GET", f"/teams/{team}/tasks", None),
        ("GET", f"/teams/{team}/inbox/{reader}", None),
        ("POST", f"/teams/{team}/inbox/{reader}/delivered", {"through_seq": seq}),
        ("POST", f"/teams/{team}/messages/{seq}/ack", {"name": "bob"}),
        ("POST", f"/teams/{team}/messages", {"from": "alice", "to": "bob", "subject": "planted", "body": "x"}),
        ("POST", f"/teams/{team}/tasks/{task}/claim", {"name": "alice"}),
        ("POST", f"/teams/{team}/heartbeat/{mate}", {}),
        ("GET", f"/teams/{team}/sent/{mate}", None),
        ("DELETE", f"/memory/{agent}/{memory_id}", None),
    ]


def snapshot(*roots: str) -> dict[str, str]:
    """Every file under ``roots`` and the sha256 of its content; for the home's database, of its
    rows (SQLite moves pages from its WAL into the file when a connection closes: no change)."""
    import sqlite3

    out = {}
    for root in roots:
        for directory, _dirs, files in os.walk(root):
            for name in files:
                if name.endswith("-shm"):
                    continue
                path = os.path.join(directory, name)
                if name.endswith(("phoenix.db-wal", "phoenix.db-shm")):
                    continue
                if name.endswith("phoenix.db"):
                    with contextlib.closing(sqlite3.connect(path)) as conn:
                        out[path] = hashlib.sha256("\n".join(conn.iterdump()).encode()).hexdigest()
                    continue
                with open(path, "rb") as fh:
                    out[path] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.fixture
def client(home: Home, clock: ManualClock) -> Iterator[TestClient]:
    with TestClient(create_app(home, clock=clock)) as c:
        yield c


def test_every_endpoint_is_in_the_matrix(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    documented = {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops if p not in PUBLIC_PATHS}
    placeholders = requests(
        "{memory_id}", "{seq}", "{agent_id}", "{team_id}", reader="{name}", mate="{name}", task="{task_id}"
    )
    normalized = {(method, path) for method, path, _body in placeholders}
    assert normalized == documented


def test_refused_reads_nothing_and_changes_nothing(
    client: TestClient, world: dict[str, Any], home: Home, clock: ManualClock
) -> None:
    runtime = os.environ["XDG_RUNTIME_DIR"]
    before = snapshot(home.root, runtime)
    unauthorized: list[dict[str, Any]] = []
    for label, token in world["credentials"].items():
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        for method, path, body in requests(world["memory_id"], world["seq"]):
            response = client.request(method, path, json=body, headers=headers)
            where = f"{label}: {method} {path}"
            assert response.headers["content-type"] == "application/problem+json", where
            problem = response.json()
            assert PRIVATE not in response.text, where
            assert set(problem) == {"type", "title", "status", "detail", "instance", "error"}, where
            if label == "another namespace":
                assert response.status_code == 404, where
                assert problem["detail"] == NOT_FOUND, where
            else:
                assert response.status_code == 401, where
                assert response.headers["www-authenticate"].startswith("Bearer"), where
                unauthorized.append({k: v for k, v in problem.items() if k != "instance"})
    assert all(p == unauthorized[0] for p in unauthorized)  # wrong, revoked and expired look alike
    assert snapshot(home.root, runtime) == before
    assert [m.text for m in MemoryStore(home).list("bob")] == [PRIVATE]


def test_another_namespace_gets_the_answer_of_no_namespace(client: TestClient, world: dict[str, Any]) -> None:
    other = {"Authorization": f"Bearer {world['credentials']['another namespace']}"}
    right = {"Authorization": f"Bearer {world['right']}"}
    for (method, path, body), (_m, ghost_path, _b) in zip(
        requests(world["memory_id"], world["seq"]),
        requests(world["memory_id"], world["seq"], agent="ghost", team="other-team"),
        strict=True,
    ):
        refused = client.request(method, path, json=body, headers=other)
        if method == "GET" or path.startswith("/teams/"):  # reads, and team operations (teams are not created here)
            missing = client.request(method, ghost_path, json=body, headers=other)
            assert missing.status_code == 404, (method, ghost_path, missing.text)
            strip = {"instance"}
            assert {k: v for k, v in refused.json().items() if k not in strip} == {
                k: v for k, v in missing.json().items() if k not in strip
            }, (method, path)
    # The control: the right token can do each of these.
    for method, path, body in requests(world["memory_id"], world["seq"]):
        response = client.request(method, path, json=body, headers=right)
        assert response.is_success, (method, path, response.text)


def test_matrix_holds_on_a_home_without_bob(home: Home, clock: ManualClock) -> None:
    """With no token in the home at all but require_tokens, every endpoint is 401."""
    home.ensure()
    with TestClient(create_app(home, clock=clock, require_tokens=True)) as c:
        for method, path, body in requests("mem-0", 1):
            assert c.request(method, path, json=body).status_code == 401, (method, path)
    assert not os.path.exists(os.path.join(home.root, "agents"))
