"""``phx ui``'s routes (issue 35): each view's document on both stores, tokens (what a token does
not cover is left out or a 404; read-only unless a token with a write scope), the page served
without one, and live updates over server-sent events from a real uvicorn."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient
from test_server_uvicorn import running
from ui_scenario import CLAUDE_TEAM, Scenario, fill

from phoenix_protocol.core._home import Home
from phoenix_protocol.server._app import create_app
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.store._teams import Team
from phoenix_protocol.store._tokens import TokenStore


@pytest.fixture
def scenario(home: Home, backend: str) -> Iterator[Scenario]:
    filled = fill(home)
    try:
        yield filled
    finally:
        filled.close()


def _client(scenario: Scenario, **kwargs: Any) -> TestClient:
    return TestClient(create_app(scenario.home, clock=scenario.clock, **kwargs))


def test_overview_judges_agents_as_the_watchdog_does(scenario: Scenario) -> None:
    doc = _client(scenario, require_tokens=False).get("/ui/api/overview").json()
    verdicts = {row["agent"]: row["verdict"] for row in doc["agents"]}
    assert verdicts == {"builder": "alive", "scout": "stalled"}
    scout = next(r for r in doc["agents"] if r["agent"] == "scout")
    assert "is gone" in scout["detail"] and scout["recover"] is True
    [team] = doc["teams"]
    assert team["board"] == {"pending": 0, "in_progress": 1, "blocked": 1, "done": 1}
    assert team["liveness"] == {"online": 2, "stale": 1}
    assert doc["clinic"] == {"episodes": 1, "healed": 1, "gave_up": 0}


def test_agent_view_brief_timeline_checkpoints_sessions(scenario: Scenario) -> None:
    client = _client(scenario, require_tokens=False)
    doc = client.get("/ui/api/agents/builder").json()
    assert doc["brief_html"].startswith("<h1>") and "Port the parser to the new grammar" in doc["brief_html"]
    timeline = doc["timeline"]
    assert sum(timeline["series"]["tool"]) == 5 and sum(timeline["series"]["failure"]) == 2
    assert sum(timeline["series"]["checkpoint"]) == 2
    assert [m["label"] for m in timeline["marks"] if m["kind"] == "drift"] == [
        "drift: repetition: the same failing Bash call 3 times"
    ]
    assert [c["name"] for c in doc["checkpoints"]] == scenario.checkpoints[::-1]
    [sess] = doc["sessions"]
    assert sess["session_id"] == "sess-builder" and sess["status"] == "open" and sess["duration_seconds"] > 3600
    [episode] = doc["clinic"]
    assert [v["root_cause"] for v in episode["visits"]] == ["transient_error", "hallucinated_tool"]
    assert episode["outcome"] == "healed"
    older, newer = scenario.checkpoints
    content = client.get(f"/ui/api/agents/builder/checkpoints/{newer}").json()["content"]
    assert content["summary"] == "grammar tests next"
    diff = client.get("/ui/api/agents/builder/diff", params={"older": older, "newer": newer}).json()
    assert "state" in diff["changed"] and any(line.startswith("+") and "test_grammar" in line for line in diff["diff"])
    assert client.get("/ui/api/agents/builder/checkpoints/nope").status_code in (400, 404)
    assert client.get("/ui/api/agents/ghost").status_code == 404


def test_team_view_board_graph_roster_mailbox(scenario: Scenario) -> None:
    doc = _client(scenario, require_tokens=False).get("/ui/api/teams/release").json()
    columns = {t["title"]: t["column"] for t in doc["tasks"]}
    assert columns == {
        "Cut the release branch": "done",
        "Write the release notes": "in_progress",
        "Publish the release": "blocked",
    }
    ids = {t["title"]: t["task_id"] for t in doc["tasks"]}
    assert {(e["from"], e["to"]) for e in doc["edges"]} == {
        (ids["Cut the release branch"], ids["Write the release notes"]),
        (ids["Write the release notes"], ids["Publish the release"]),
    }
    classes = {m["name"]: m["liveness"]["class"] for m in doc["roster"]}
    assert classes == {"lead": "online", "alice": "online", "bob": "stale"}
    states = {m["subject"]: m["recipients"] for m in doc["messages"]}
    assert states["Notes format"] == [{"name": "alice", "delivered": True, "acked": True}]
    assert states["Re: Notes format"] == [{"name": "lead", "delivered": True, "acked": False}]
    assert states["Publishing"] == [{"name": "bob", "delivered": False, "acked": False}]
    assert [t["subject"] for t in doc["threads"]] == ["Publishing", "Notes format"]


def test_claude_code_teams_and_their_recovery(scenario: Scenario) -> None:
    client = _client(scenario, require_tokens=False)
    [listed] = client.get("/ui/api/overview").json()["claude_teams"]
    assert (listed["team_name"], listed["state"], listed["teammates"], listed["messages"]) == (
        CLAUDE_TEAM,
        "recovered",
        1,
        2,
    )
    team = client.get(f"/ui/api/claude-teams/{CLAUDE_TEAM}").json()["claude_team"]
    researcher = next(m for m in team["members"] if m["name"] == "researcher")
    assert researcher["prompt"] == "Find every caller of parse()"
    assert [(t["id"], t["status"], t["owner"]) for t in team["tasks"]] == [("1", "in_progress", "researcher")]
    assert {m["msg_id"]: m["recovery"] for m in team["messages"]} == {
        "m1": "delivered",
        "m2": "to be delivered again to team-lead",
    }
    assert client.get("/ui/api/claude-teams/session-ffffffff").status_code == 404


def test_the_page_is_served_without_a_token_and_data_is_not(scenario: Scenario) -> None:
    TokenStore(scenario.home).create(["*"], ["*"], label="admin")
    client = _client(scenario)
    page = client.get("/ui/")
    assert page.status_code == 200 and "assets/app.js" in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    for asset in ("app.js", "app.css", "icon.svg"):
        assert client.get(f"/ui/assets/{asset}").status_code == 200
    assert client.get("/ui/assets/index.html").status_code == 404  # only the listed assets
    assert client.get("/ui/assets/..%2F_app.py").status_code == 404
    assert client.get("/ui/api/session").status_code == 401
    assert client.get("/ui/api/overview").status_code == 401
    assert client.get("/ui/api/events").status_code == 401
    # Nothing in the page or its script comes from elsewhere.
    for text in (page.text, client.get("/ui/assets/app.js").text, client.get("/ui/assets/app.css").text):
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_read_only_token_sees_its_namespaces_and_changes_nothing(scenario: Scenario) -> None:
    tokens = TokenStore(scenario.home)
    reader, _ = tokens.create(["agent:builder", "team:release"], ["checkpoint:read", "team:read"], label="viewer")
    writer, _ = tokens.create(["*"], ["checkpoint:read", "checkpoint:write", "team:*"], label="operator")
    client = _client(scenario)
    session = client.get("/ui/api/session", headers=_auth(reader)).json()
    assert session["read_only"] is True and session["can_write"] == {"agents": False, "teams": False}
    doc = client.get("/ui/api/overview", headers=_auth(reader)).json()
    assert [r["agent"] for r in doc["agents"]] == ["builder"]
    assert client.get("/ui/api/agents/scout", headers=_auth(reader)).status_code == 404
    assert client.get("/ui/api/events", params={"watch": "agent:scout"}, headers=_auth(reader)).status_code == 404
    builder = Agent("builder", scenario.home)
    before = len(builder.checkpoints.entries())
    team_before = Team.open(scenario.home, "release").latest_checkpoint()
    refused = client.post("/ui/api/agents/builder/checkpoint", headers=_auth(reader))
    assert refused.status_code == 409 and "read-only" in refused.json()["detail"]
    assert client.post("/ui/api/teams/release/checkpoint", headers=_auth(reader)).status_code == 409
    assert client.post("/ui/api/agents/scout/checkpoint", headers=_auth(reader)).status_code == 404
    assert len(builder.checkpoints.entries()) == before
    assert Team.open(scenario.home, "release").latest_checkpoint() == team_before
    # A token with the write scope may.
    assert client.get("/ui/api/session", headers=_auth(writer)).json()["can_write"] == {"agents": True, "teams": True}
    assert client.post("/ui/api/agents/builder/checkpoint", headers=_auth(writer)).status_code == 200
    assert len(builder.checkpoints.entries()) == before + 1
    assert client.post("/ui/api/teams/release/checkpoint", headers=_auth(writer)).status_code == 200


def test_a_home_without_tokens_is_shown_read_only(scenario: Scenario) -> None:
    client = _client(scenario)
    assert client.get("/ui/api/session").json()["read_only"] is True
    assert client.post("/ui/api/agents/builder/checkpoint").status_code == 409


def _events(url: str, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    conn.request("GET", path)
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("content-type", "").startswith("text/event-stream")
    event = ""
    data: list[str] = []
    try:
        while True:
            line = response.readline().decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line == "" and event:
                yield event, json.loads("\n".join(data))
                event, data = "", []
    finally:
        conn.close()


def test_live_updates_arrive_without_reloading(scenario: Scenario) -> None:
    app = create_app(scenario.home, clock=scenario.clock, require_tokens=False)
    with running(app) as url:
        stream = _events(url, "/ui/api/events?watch=team:release")
        kind, first = next(stream)
        assert kind == "view" and len(first["messages"]) == 3
        started = time.monotonic()
        Team.open(scenario.home, "release").send("bob", "lead", subject="Credentials", body="Ready.")
        kind, second = next(stream)
        assert kind == "view" and second["messages"][0]["subject"] == "Credentials"
        assert time.monotonic() - started < 10


def test_phx_ui_serves_the_page_and_prints_the_address_with_its_token(home: Home) -> None:
    import os
    import subprocess
    import sys
    import urllib.request

    from test_server_uvicorn import _free_port

    home.ensure()
    token, _ = TokenStore(home).create(["*"], ["checkpoint:read", "team:read"], label="viewer")
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "VIEW_TOKEN": token, "EMPTY_TOKEN": ""}
    argv = [sys.executable, "-m", "phoenix_protocol", "ui", "--port", str(port), "--home", home.root]
    refused = subprocess.run([*argv, "--token", "EMPTY_TOKEN"], capture_output=True, env=env, timeout=60, check=False)
    assert refused.returncode == 2 and b"EMPTY_TOKEN" in refused.stderr
    proc = subprocess.Popen([*argv, "--token", "VIEW_TOKEN"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode().strip()
        assert line == f"http://127.0.0.1:{port}/ui/#token={token}"
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ui/", timeout=1) as response:
                    assert b"assets/app.js" in response.read()
                    break
            except OSError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "phx ui did not start"
                time.sleep(0.1)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/ui/api/session", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - http, built above
            assert json.loads(response.read())["read_only"] is True
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=10)
    assert b"Phoenix dashboard for" in err and token.encode() not in err
