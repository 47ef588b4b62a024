"""The memory bridge in process (FastAPI's TestClient): endpoints, problem details, limits, tokens."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from conftest import change_checkpoint, plant_checkpoint
from phoenix_protocol.cli._main import cli
from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.server._app import check_bind, create_app, is_loopback
from phoenix_protocol.server._params import check_json
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._bridge import NOT_FOUND
from phoenix_protocol.store._memory import MemoryStore
from phoenix_protocol.store._teams import Team
from phoenix_protocol.store._tokens import TokenStore

PROBLEM = "application/problem+json"


@pytest.fixture
def served(home: Home, clock: ManualClock) -> Home:
    home.ensure()
    return home


@pytest.fixture
def client(served: Home, clock: ManualClock) -> Iterator[TestClient]:
    with TestClient(create_app(served, clock=clock, max_body_bytes=64 * 1024)) as c:
        yield c


@pytest.fixture
def team(served: Home, clock: ManualClock) -> Team:
    team = Team.create(served, "release", lead="lead", team_id="release-1", clock=clock)
    team.join("alice")
    team.join("bob")
    team.add_task("Write the parser")
    return team


def assert_problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["status"] == status and body["type"] == "about:blank"
    assert body["title"] and body["detail"] and body["instance"] == response.request.url.path
    return body  # type: ignore[no-any-return]


# -- health and OpenAPI ------------------------------------------------------------------------


def test_health_ready_and_openapi(client: TestClient) -> None:
    assert client.get("/healthz").json()["status"] == "ok"
    assert client.get("/readyz").json() == {"status": "ready"}
    spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert "Problem" in spec["components"]["schemas"] and "HTTPValidationError" not in spec["components"]["schemas"]
    operations = [(p, m, op) for p, ops in spec["paths"].items() for m, op in ops.items()]
    assert len(operations) >= 21
    for path, _method, op in operations:
        for code, response in op["responses"].items():
            if int(code) >= 400:
                assert list(response["content"]) == [PROBLEM], (path, code)
        if path not in ("/healthz", "/readyz"):
            assert op["security"] == [{"bearerAuth": []}], path
            assert {"401", "404", "422"} <= set(op["responses"]), path


def test_not_ready_without_a_home(tmp_path: Any) -> None:
    with TestClient(create_app(Home(str(tmp_path / "missing")))) as c:
        assert_problem(c.get("/readyz"), 503)


# -- checkpoints, sessions, memory (seed 002's session protocol) --------------------------------


def test_session_protocol_over_http(client: TestClient, served: Home) -> None:
    secret = "ghp_" + "x7Yq2Lm9Pz4Rt6Vb8Nc1Kd3Fg5Hj0Ws2Ea4Ub"
    refused = client.post("/restore/zero", json={"session_id": secret})  # stored in clear: refused
    assert refused.status_code == 422 and "looks like a secret" in refused.text and secret not in refused.text
    started = client.post("/restore/zero", json={"session_id": "s-1"})
    assert started.status_code == 200, started.text
    assert started.json()["session_id"] == "s-1" and started.json()["checkpoint"] is None

    stored = client.post(
        "/memory/zero", json={"text": "Timers drift under load", "tags": ["asyncio"], "metadata": {"src": "review"}}
    )
    assert stored.status_code == 201, stored.text
    memory = stored.json()["memory"]
    assert memory["id"].startswith("mem-") and memory["tags"] == ["asyncio"] and memory["metadata"] == {"src": "review"}
    client.post("/memory/zero", json={"text": "The release checklist: changelog, tag, publish"})

    recalled = client.post("/memory/zero/recall", json={"query": "why do timers drift", "k": 3})
    assert recalled.status_code == 200, recalled.text
    results = recalled.json()["results"]
    assert results[0]["id"] == memory["id"] and "score" in results[0]
    assert client.post("/memory/zero/recall", json={"query": "timers", "tags": ["release"]}).json()["results"] == []

    listed = client.get("/memory/zero", params={"tag": "asyncio"}).json()
    assert [m["id"] for m in listed["memories"]] == [memory["id"]]
    assert len(client.get("/memory/zero", params={"limit": 1}).json()["memories"]) == 1
    assert client.get(f"/memory/zero/{memory['id']}").json()["memory"]["text"] == "Timers drift under load"

    taken = client.post(
        "/checkpoint/zero",
        json={
            "summary": "Implemented PAIF namespace isolation",
            "context": {"pending_items": ["write the docs"], "current_focus": "isolation"},
            "working_memory": {"scratchpad": "draft", "context_stack": ["tests", "docs"]},
            "identity_updates": {"new_skills": [{"name": "fastapi", "level": "working"}]},
            "extensions": {"review": {"approved": True}},
        },
    )
    assert taken.status_code == 201, taken.text
    info = taken.json()["checkpoint"]
    assert info["checkpoint_type"] == "session" and info["label"] == "Implemented PAIF namespace isolation"

    latest = client.get("/checkpoint/zero/latest").json()
    assert latest["name"] == info["name"] and latest["problems"] == []
    data = latest["checkpoint"]
    assert data["recent_memories"]["memory_ids"] == [
        stored.json()["memory"]["id"],
        data["recent_memories"]["memory_ids"][1],
    ]
    assert data["recent_memories"]["last_recall_query"] == "timers"
    assert data["context"]["pending_items"] == ["write the docs"] and data["context"]["current_focus"] == "isolation"
    assert data["context"]["conversation_summary"] == "Implemented PAIF namespace isolation"
    assert data["working_memory"]["context_stack"] == ["tests", "docs"]
    assert data["identity_updates"]["new_skills"] == [{"name": "fastapi", "level": "working"}]
    assert data["extensions"]["review"] == {"approved": True}
    assert client.get("/checkpoint/zero/latest", params={"type": "routine"}).status_code == 404

    restored = client.post("/restore/zero", json={}).json()
    assert restored["checkpoint"] == info["name"]
    assert restored["restored"]["context"]["pending_items"] == ["write the docs"]
    sessions = client.get("/sessions/zero").json()["sessions"]
    assert sessions[0]["session_id"] == "s-1"
    assert sessions[0]["checkpoint"] == info["name"] and sessions[-1]["restored_from"] == info["name"]

    assert client.delete(f"/memory/zero/{memory['id']}").status_code == 204
    assert_problem(client.delete(f"/memory/zero/{memory['id']}"), 404)
    assert_problem(client.get(f"/memory/zero/{memory['id']}"), 404)
    echoed = client.post("/memory/zero/recall", json={"query": f"timers {secret}", "tags": [secret]})
    assert echoed.status_code == 200 and secret not in echoed.text and "REDACTED" in echoed.json()["query"]
    tagged = client.post("/memory/other", json={"text": "tagged", "tags": [secret], "metadata": {secret: 1}})
    assert tagged.status_code == 201 and secret not in tagged.text and secret.lower() not in tagged.text
    # Same code path as the CLI: the checkpoint is one the library reads back.
    checkpoint, _problems = Agent.open("zero", home=served).checkpoints.latest()
    assert checkpoint is not None and checkpoint.name == info["name"]


def test_latest_when_every_checkpoint_is_damaged_is_corrupt_state(client: TestClient, served: Home) -> None:
    client.post("/checkpoint/zero", json={"summary": "only one", "checkpoint_type": "routine"})
    agent = Agent.open("zero", home=served)
    (name,) = [e.name for e in agent.checkpoints.entries()]
    change_checkpoint(agent, name, lambda content: content.replace("only one", "only two"))
    answer = client.get("/checkpoint/zero/latest")
    assert answer.status_code == 500 and answer.json()["error"] == "CorruptStateError"
    assert "checksum mismatch" in answer.json()["detail"] and served.root not in answer.json()["detail"]


def test_restore_with_named_checkpoint_and_refusals(client: TestClient, served: Home) -> None:
    client.post("/checkpoint/zero", json={"summary": "first", "checkpoint_type": "routine"})
    name = client.get("/checkpoint/zero/latest").json()["name"]
    assert client.post("/restore/zero", json={"checkpoint": name, "force": True}).json()["checkpoint"] == name
    # Recorded as the session's (found in review: through the server it said restored from nothing).
    assert client.get("/sessions/zero").json()["sessions"][-1]["restored_from"] == name
    seq = str(int(name.split("-")[1].split("_")[0]))
    for ref in (seq, f"#{seq}"):  # its number, as `phx checkpoint list` shows it
        assert client.post("/restore/zero", json={"checkpoint": ref}).json()["checkpoint"] == name
    assert_problem(client.post("/restore/zero", json={"checkpoint": "99"}), 404)
    assert_problem(client.post("/restore/zero", json={"checkpoint": "nope.checkpoint"}), 422)
    missing = name.replace("_routine.", "_recovery.")
    assert_problem(client.post("/restore/zero", json={"checkpoint": missing}), 404)
    assert_problem(
        client.post("/restore/zero", json={"checkpoint": "zero_00000000000000000-1_routine.checkpoint"}), 404
    )
    client.post("/checkpoint/other", json={"summary": "theirs", "checkpoint_type": "routine"})
    theirs = client.get("/checkpoint/other/latest").json()["name"]
    before = client.get("/sessions/zero").json()
    assert_problem(client.post("/restore/zero", json={"checkpoint": theirs}), 404)  # not in zero's namespace
    assert client.get("/sessions/zero").json() == before


def test_identity(client: TestClient) -> None:
    assert_problem(client.get("/identity/zero"), 404)  # nothing on disk yet
    changed = client.patch("/identity/zero", json={"path": "state.current_focus", "value": "Port the scheduler"})
    assert changed.status_code == 200, changed.text
    assert changed.json()["identity"]["mutable"]["state"]["current_focus"] == "Port the scheduler"
    added = client.post("/identity/zero/entries", json={"kind": "belief", "name": "timers drift", "confidence": 0.7})
    assert added.json()["identity"]["mutable"]["beliefs"] == [{"subject": "timers drift", "confidence": 0.7}]
    before = client.get("/identity/zero").json()
    assert before["identity"]["immutable"] == {"name": "zero"}
    assert_problem(client.patch("/identity/zero", json={"path": "immutable.name", "value": "x"}), 409)
    for refused in (
        {"path": "beliefs", "value": [1, 2]},
        {"path": "accumulated_experience", "value": "many"},
        {"path": "state", "value": "busy"},
    ):
        assert_problem(client.patch("/identity/zero", json=refused), 400)
    assert_problem(client.patch("/identity/zero", json={"path": "../x", "value": 1}), 422)
    assert_problem(client.post("/identity/zero/entries", json={"kind": "belief", "name": "x", "confidence": 2}), 422)
    assert client.get("/identity/zero").json() == before


def test_team_operations(client: TestClient, team: Team) -> None:
    sent = client.post(
        "/teams/release-1/messages",
        json={"from": "alice", "to": "bob", "subject": "Found it", "body": "Deadlock at line 427", "msg_id": "m-1"},
    )
    assert sent.status_code == 201, sent.text
    assert sent.json()["message"]["from"] == "alice" and sent.json()["duplicate"] is False
    again = client.post(
        "/teams/release-1/messages",
        json={"from": "alice", "to": "bob", "subject": "Found it", "body": "Deadlock at line 427", "msg_id": "m-1"},
    )
    assert again.json()["duplicate"] is True

    inbox = client.get("/teams/release-1/inbox/bob").json()
    assert [m["subject"] for m in inbox["messages"]] == ["Found it"]
    seq = inbox["messages"][0]["seq"]
    assert client.get("/teams/release-1/inbox/bob").json()["messages"], "not delivered until confirmed"
    assert_problem(client.post(f"/teams/release-1/messages/{seq}/ack", json={"name": "bob"}), 400)  # not delivered
    confirmed = client.post("/teams/release-1/inbox/bob/delivered", json={"through_seq": inbox["through_seq"]})
    assert confirmed.status_code == 200, confirmed.text
    assert client.get("/teams/release-1/inbox/bob").json()["messages"] == []
    acked = client.post(f"/teams/release-1/messages/{seq}/ack", json={"name": "bob"})
    assert acked.json()["acked_by"] == ["bob"]

    tasks = client.get("/teams/release-1/tasks").json()["tasks"]
    task_id = tasks[0]["task_id"]
    claimed = client.post(f"/teams/release-1/tasks/{task_id}/claim", json={"name": "alice"})
    assert claimed.status_code == 200, claimed.text
    assert claimed.json()["task"]["assigned_to"] == "alice"
    conflict = assert_problem(client.post(f"/teams/release-1/tasks/{task_id}/claim", json={"name": "bob"}), 409)
    assert conflict["error"] == "ClaimConflictError"
    assert_problem(client.post("/teams/release-1/tasks/task-9999/claim", json={"name": "bob"}), 404)

    beat = client.post("/teams/release-1/heartbeat/alice", json={"session_id": "s-1"})
    assert beat.status_code == 200, beat.text
    assert beat.json()["heartbeat"]["seq"] >= 1
    assert client.post("/teams/release-1/heartbeat/alice").status_code == 200

    assert_problem(client.get("/teams/release-1/inbox/mallory"), 404)
    assert_problem(client.post("/teams/release-1/heartbeat/mallory"), 404)
    unknown = assert_problem(client.get("/teams/nope/tasks"), 404)
    assert unknown["detail"] == NOT_FOUND  # not the list of teams that exist
    assert_problem(
        client.post("/teams/release-1/messages", json={"from": "mallory", "to": "bob", "subject": "s", "body": "b"}),
        400,
    )


# -- bad input: validation, limits, problem details ----------------------------------------------


def _memory_count(home: Home) -> int:
    return MemoryStore(home).count("zero")


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/sessions/-bad", 422),
        ("/sessions/" + "a" * 65, 422),
        ("/sessions/a..b%20c", 422),
        ("/memory/zero/not%2Fan-id", 404),
        ("/teams/release-1/inbox/..", 404),
        ("/nowhere", 404),
    ],
)
def test_bad_paths_are_problems(client: TestClient, path: str, status: int) -> None:
    assert_problem(client.get(path), status)


@pytest.mark.parametrize(
    "body",
    [
        b'{"text": ""}',
        b'{"text": "x", "unknown": 1}',
        b'{"text": "x", "tags": "asyncio"}',
        b'{"text": "x", "tags": ["' + b"t" * 65 + b'"]}',
        b'{"text": "\\ud800"}',
        b'{"text": "x", "metadata": {"a": NaN}}',
        b'{"text": "x", "metadata": {"a": Infinity}}',
        b'{"text": "x", "metadata": ' + b'{"a":' * 40 + b"1" + b"}" * 41,
        b'{"text": 5}',
        b"{not json",
        b"[]",
        b'"text"',
    ],
)
def test_invalid_bodies_are_422_and_store_nothing(client: TestClient, served: Home, body: bytes) -> None:
    response = client.post("/memory/zero", content=body, headers={"content-type": "application/json"})
    problem = assert_problem(response, 422)
    assert problem["error"] == "ValidationError" and problem["errors"]
    assert _memory_count(served) == 0
    assert not os.path.exists(os.path.join(served.root, "agents", "zero"))


def test_deep_json_and_wrong_content_type_are_client_errors(client: TestClient, served: Home) -> None:
    assert_problem(
        client.post(
            "/memory/zero", content=b"[" * 20_000 + b"]" * 20_000, headers={"content-type": "application/json"}
        ),
        400,
    )
    assert_problem(client.post("/memory/zero", content=b'{"text": "x"}', headers={"content-type": "text/plain"}), 422)
    assert _memory_count(served) == 0


def test_oversized_bodies_are_413_before_they_are_read(client: TestClient, served: Home) -> None:
    big = b'{"text": "' + b"x" * 70_000 + b'"}'
    problem = assert_problem(
        client.post("/memory/zero", content=big, headers={"content-type": "application/json"}), 413
    )
    assert "65536" in problem["detail"]

    chunks_read: list[int] = []

    def stream() -> Iterator[bytes]:
        yield b'{"text": "'
        for i in range(100):
            chunks_read.append(i)
            yield b"x" * 4096
        yield b'"}'

    response = client.post("/memory/zero", content=stream(), headers={"content-type": "application/json"})
    assert response.request.headers.get("transfer-encoding") == "chunked"
    assert_problem(response, 413)
    assert _memory_count(served) == 0
    assert_problem(client.post("/memory/zero", content=b"{}", headers={"content-length": "abc"}), 400)


def test_method_not_allowed_is_a_problem(client: TestClient) -> None:
    response = client.put("/memory/zero", json={})
    assert_problem(response, 405)
    assert "POST" in response.headers["allow"]


def test_check_json() -> None:
    assert check_json({"a": [1, 2.5, "x", None, True]}) == {"a": [1, 2.5, "x", None, True]}
    deep: list[Any] = [1]
    for _ in range(40):
        deep = [deep]
    for bad in ({"a": float("nan")}, ["\udc80"], {"\ud800": 1}, deep):
        with pytest.raises(ValueError):
            check_json(bad)


# -- authentication and namespaces -------------------------------------------------------------------


@pytest.fixture
def tokens(served: Home, clock: ManualClock) -> TokenStore:
    return TokenStore(served, clock=clock)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_tokens_are_required_once_the_home_has_one(
    client: TestClient, tokens: TokenStore, clock: ManualClock, served: Home
) -> None:
    assert client.get("/sessions/zero").status_code == 404  # open: no token in the home
    alice, _info = tokens.create(["agent:alice"], ["*"])
    missing = assert_problem(client.get("/sessions/alice"), 401)
    assert missing["error"] == "AuthenticationError"
    assert client.get("/sessions/alice").headers["www-authenticate"] == 'Bearer realm="phoenix"'
    wrong = client.get("/sessions/alice", headers=_bearer(alice[:-2] + "zz"))
    assert_problem(wrong, 401)
    assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
    assert_problem(client.get("/sessions/alice", headers={"Authorization": "Basic YTpi"}), 401)
    # Public paths stay open; authentication comes before the size check and validation.
    assert client.get("/healthz").status_code == 200
    assert client.get("/openapi.json").status_code == 200
    assert_problem(client.post("/memory/alice", content=b"x" * 100_000), 401)
    assert_problem(client.post("/memory/alice", content=b"{bad"), 401)
    assert_problem(client.get("/nowhere"), 401)
    ok = client.post("/memory/alice", json={"text": "mine"}, headers=_bearer(alice))
    assert ok.status_code == 201, ok.text


def test_another_namespace_looks_like_no_namespace(client: TestClient, tokens: TokenStore) -> None:
    admin, _ = tokens.create(["*"], ["*"])
    assert client.post("/restore/bob", json={}, headers=_bearer(admin)).status_code == 200
    assert client.post("/memory/bob", json={"text": "bob's secret"}, headers=_bearer(admin)).status_code == 201
    alice, _ = tokens.create(["agent:alice"], ["*"])

    def stripped(response: Any) -> dict[str, Any]:
        body = assert_problem(response, 404)
        body.pop("instance")
        return body

    others = [
        client.get("/sessions/bob", headers=_bearer(alice)),
        client.get("/memory/bob", headers=_bearer(alice)),
        client.post("/memory/bob/recall", json={"query": "secret"}, headers=_bearer(alice)),
        client.post("/memory/bob", json={"text": "planted"}, headers=_bearer(alice)),
        client.get("/identity/bob", headers=_bearer(alice)),
    ]
    ghost = client.get("/sessions/ghost", headers=_bearer(alice))
    ghost_by_admin = client.get("/sessions/ghost", headers=_bearer(admin))
    assert all(stripped(r) == stripped(ghost) == stripped(ghost_by_admin) for r in others)
    assert stripped(ghost)["detail"] == NOT_FOUND
    assert [m["text"] for m in client.get("/memory/bob", headers=_bearer(admin)).json()["memories"]] == ["bob's secret"]


def test_scopes_limit_operations(client: TestClient, tokens: TokenStore, served: Home) -> None:
    reader, _ = tokens.create(["agent:zero"], ["memory:read"])
    writer, _ = tokens.create(["agent:zero"], ["memory:write"])
    assert client.post("/memory/zero", json={"text": "x"}, headers=_bearer(writer)).status_code == 201
    assert client.get("/memory/zero", headers=_bearer(reader)).status_code == 200
    assert_problem(client.post("/memory/zero", json={"text": "y"}, headers=_bearer(reader)), 404)
    assert_problem(client.get("/memory/zero", headers=_bearer(writer)), 404)
    assert_problem(client.post("/checkpoint/zero", json={"summary": "s"}, headers=_bearer(writer)), 404)
    assert _memory_count(served) == 1


def test_revoked_and_expired_tokens_are_401(client: TestClient, tokens: TokenStore, clock: ManualClock) -> None:
    short, _ = tokens.create(["agent:zero"], ["*"], expires_in=60)
    revoked, info = tokens.create(["agent:zero"], ["*"])
    assert client.post("/restore/zero", json={}, headers=_bearer(short)).status_code == 200
    tokens.revoke(info.id)
    assert_problem(client.get("/sessions/zero", headers=_bearer(revoked)), 401)
    clock.advance(61)
    assert_problem(client.get("/sessions/zero", headers=_bearer(short)), 401)


def test_require_tokens_without_any_refuses_everything(served: Home) -> None:
    with TestClient(create_app(served, require_tokens=True)) as c:
        assert_problem(c.get("/sessions/zero"), 401)
        assert c.get("/healthz").status_code == 200


# -- binding ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.3.4.5", True), ("::1", True), ("[::1]", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("example.com", False), ("", False)],  # noqa: S104
)  # fmt: skip
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_non_loopback_needs_an_active_token(
    served: Home, tokens: TokenStore, capsys: pytest.CaptureFixture[str]
) -> None:
    check_bind(served, "127.0.0.1")
    with pytest.raises(UsageError, match=r"refusing to listen on 0\.0\.0\.0"):
        check_bind(served, "0.0.0.0")  # noqa: S104
    assert cli(["serve", "--host", "0.0.0.0", "--home", served.root]) == 2  # noqa: S104
    assert "refusing to listen" in capsys.readouterr().err
    _token, info = tokens.create(["agent:zero"], ["*"])
    check_bind(served, "0.0.0.0")  # noqa: S104
    tokens.revoke(info.id)
    with pytest.raises(UsageError):
        check_bind(served, "10.0.0.5")


def test_restore_409_is_described_as_a_planted_checkpoint(client: TestClient, served: Home) -> None:
    """POST /restore answers 409 only for a planted checkpoint (a file named as the agent's own,
    or found by its number, holding another agent's checkpoint): its OpenAPI description says so,
    as docs/server.md does, rather than the generic claim/identity/team refusals."""
    spec = client.get("/openapi.json").json()
    described = spec["paths"]["/restore/{agent_id}"]["post"]["responses"]["409"]
    assert list(described["content"]) == [PROBLEM]
    text = described["description"]
    assert "planted" in text and "CheckpointOwnershipError" in text and "another agent's checkpoint" in text
    assert "claim conflict" not in text  # the other endpoints' refusals do not happen here
    claim = spec["paths"]["/teams/{team_id}/tasks/{task_id}/claim"]["post"]["responses"]["409"]
    assert "claim conflict" in claim["description"]  # the others keep the generic description
    docs = (Path(__file__).resolve().parents[2] / "docs" / "server.md").read_text(encoding="utf-8")
    assert "409 `CheckpointOwnershipError`: a planted checkpoint" in docs

    zero, bob = Agent.open("zero", home=served), Agent.open("bob", home=served)
    zero.checkpoints.create("routine", summary="zero's")
    bobs = bob.checkpoints.create("routine", summary="bob's")
    planted = "zero_20260101000000000-00000007_routine.checkpoint"
    plant_checkpoint(bob, bobs.name, zero, planted)
    for ref in (planted, "#7"):
        body = assert_problem(client.post("/restore/zero", json={"checkpoint": ref}), 409)
        assert body["error"] == "CheckpointOwnershipError"


def test_recall_time_window_and_mode(client: TestClient, clock: ManualClock) -> None:
    """``since``/``until`` (ISO 8601) on recall and list, ``mode``; requests without them unchanged."""
    old = client.post("/memory/zero", json={"text": "Alice edits code in Neovim with pyright"}).json()["memory"]
    clock.advance(86_400)
    new = client.post("/memory/zero", json={"text": "Alice prefers Neovim for editing"}).json()["memory"]
    midpoint = "2026-01-01T12:00:00Z"  # the ManualClock starts at 2026-01-01T00:00:00Z

    def recall(**extra: Any) -> list[str]:
        answer = client.post("/memory/zero/recall", json={"query": "neovim", **extra})
        assert answer.status_code == 200, answer.text
        return [m["id"] for m in answer.json()["results"]]

    assert recall() == [new["id"], old["id"]]
    assert recall(since=midpoint) == [new["id"]]
    assert recall(until=midpoint) == [old["id"]]
    assert recall(since="2026-01-01T13:00:00+01:00", until="2026-01-02T00:00:00Z") == []  # until is exclusive
    assert recall(mode="lexical", since=midpoint) == [new["id"]]
    listed = client.get("/memory/zero", params={"since": midpoint}).json()["memories"]
    assert [m["id"] for m in listed] == [new["id"]]
    semantic = client.post(
        "/memory/zero/recall", json={"query": "which typing tool does she program with", "mode": "semantic"}
    )
    assert semantic.status_code == 200, semantic.text
    assert {m["id"] for m in semantic.json()["results"]} == {old["id"], new["id"]}  # no word in common
    question = {"query": "which typing tool does she program with", "mode": "lexical"}
    assert client.post("/memory/zero/recall", json=question).json()["results"] == []
    for body in ({"since": "yesterday"}, {"mode": "fuzzy"}, {"until": 5}):
        refused = client.post("/memory/zero/recall", json={"query": "neovim", **body})
        assert refused.status_code == 422 and refused.headers["content-type"] == PROBLEM
    assert client.get("/memory/zero", params={"until": "soon"}).status_code == 422
