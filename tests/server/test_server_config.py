"""``phx serve`` reads the configuration once: at startup, and never again while it serves."""

from __future__ import annotations

from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient

from phoenix_protocol.cli._main import cli
from phoenix_protocol.core._home import Home
from phoenix_protocol.store._teams import Team
from phoenix_protocol.store._tokens import TokenStore

# One request or more in every area of the service, in the order of a session.
REQUESTS: list[tuple[str, str, dict[str, Any] | None, int]] = [
    ("GET", "/healthz", None, 200),
    ("GET", "/readyz", None, 200),
    ("POST", "/restore/zero", {"session_id": "s-1"}, 200),
    ("POST", "/memory/zero", {"text": "Timers drift under load", "tags": ["asyncio"]}, 201),
    ("POST", "/memory/zero/recall", {"query": "timers"}, 200),
    ("GET", "/memory/zero", None, 200),
    ("PATCH", "/identity/zero", {"path": "state.current_focus", "value": "timers"}, 200),
    ("POST", "/identity/zero/entries", {"kind": "skill", "name": "asyncio"}, 200),
    ("GET", "/identity/zero", None, 200),
    ("POST", "/teams/release-1/messages", {"from": "alice", "to": "bob", "subject": "parser", "body": "done"}, 201),
    ("GET", "/teams/release-1/inbox/bob", None, 200),
    ("POST", "/teams/release-1/inbox/bob/delivered", {"through_seq": 1}, 200),
    ("POST", "/teams/release-1/messages/1/ack", {"name": "bob"}, 200),
    ("GET", "/teams/release-1/tasks", None, 200),
    ("POST", "/teams/release-1/tasks/task-0001/claim", {"name": "alice"}, 200),
    ("POST", "/teams/release-1/heartbeat/alice", {"session_id": "s-1"}, 200),
    ("POST", "/checkpoint/zero", {"summary": "Timers fixed"}, 201),
    ("GET", "/checkpoint/zero/latest", None, 200),
    ("GET", "/sessions/zero", None, 200),
    ("GET", "/sessions/nobody", None, 404),
]


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])  # noqa: S104 - uvicorn.run is replaced: nothing listens
def test_phx_serve_reads_the_configuration_once(
    home: Home, backend: str, host: str, monkeypatch: pytest.MonkeyPatch, load_config_calls: list[str]
) -> None:
    """Startup (the bind check, the token store, the memory store) and twenty requests in every
    area, authenticated, on either store: ``load_config`` runs once, in ``phx serve``."""
    home.ensure()
    team = Team.create(home, "release", lead="lead", team_id="release-1")
    team.join("alice")
    team.join("bob")
    assert team.add_task("Write the parser")["task_id"] == "task-0001"
    token, _info = TokenStore(home).create(["*"], ["*"])
    answers: list[tuple[str, str, int]] = []

    def run(app: Any, **options: Any) -> None:  # uvicorn.run, serving the requests in process
        with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as client:
            for method, path, body, _status in REQUESTS:
                answers.append((method, path, client.request(method, path, json=body).status_code))

    monkeypatch.setattr(uvicorn, "run", run)
    load_config_calls.clear()
    assert cli(["serve", "--home", home.root, "--host", host]) == 0
    assert answers == [(method, path, status) for method, path, _body, status in REQUESTS]
    assert len(load_config_calls) == 1, load_config_calls
