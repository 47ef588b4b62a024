"""Seed 004 §4.3 through the CLI's ``--server``, on a real uvicorn, on both stores: a send the
server cannot take is queued in the sender's own home, sent again with its id once the server is
back, and ``phx team outbox`` shows each message queued, delivered, read or acked. A reused id with
other content is a ``MessageConflictError`` over HTTP too."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from phoenix_protocol.cli._main import cli
from phoenix_protocol.client import PhoenixClient
from phoenix_protocol.core._home import Home
from phoenix_protocol.server._app import create_app
from phoenix_protocol.store._team_store import MessageConflictError
from phoenix_protocol.store._teams import Team


@contextlib.contextmanager
def serving(app: Any, sock: socket.socket) -> Iterator[None]:
    """Serve ``app`` with uvicorn in a thread on ``sock`` (bound already)."""
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        assert thread.is_alive(), "uvicorn stopped"
        time.sleep(0.01)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(10)


def phx(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = cli([*args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_send_through_an_unreachable_server_is_queued_then_delivered(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served = Home(str(tmp_path / "served"))
    served.ensure()
    team = Team.create(served, "release", lead="lead", team_id="release-1")
    team.join("alice")
    team.join("bob")
    monkeypatch.setenv("PHOENIX_HOME", str(tmp_path / "local"))  # the sender's own home: its outbox
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    monkeypatch.setenv("PHOENIX_SERVER", url)
    send = ["team", "send", "release-1", "--from", "lead", "--to", "alice", "--type", "question"]

    code, data = phx(capsys, *send, "--subject", "What's your status?", "--body", "", "--id", "msg-001")
    assert code == 0 and data["queued"] is True and data["message"]["msg_id"] == "msg-001"
    assert "could not be reached" in data["note"] and "phx team outbox" in data["note"]
    code, data = phx(
        capsys, "team", "send", "release-1", "--from", "lead", "--to", "*", "--subject", "all", "--body", "b"
    )
    assert code == 0 and data["queued"] is True
    broadcast = data["message"]["msg_id"]  # the id was made here, before the first attempt
    code, data = phx(capsys, "team", "outbox", "release-1", "--as", "lead")
    assert code == 0 and [(m["msg_id"], m["state"]) for m in data["messages"]] == [
        ("msg-001", "queued"),
        (broadcast, "queued"),
    ]
    # Tried by its send, by the next send (oldest first), and by this look.
    assert data["messages"][0]["attempts"] == 3 and "still queued" in data["note"]
    assert team.mailbox.stats()["count"] == 0

    with serving(create_app(served), sock):
        # The next look at the outbox sends what was queued, in order, with the same ids.
        code, data = phx(capsys, "team", "outbox", "release-1", "--as", "lead")
        assert code == 0 and "note" not in data
        assert [(m["msg_id"], m["state"], m["seq"]) for m in data["messages"]] == [
            ("msg-001", "delivered", 1),
            (broadcast, "delivered", 2),
        ]
        assert [m.msg_id for m in team.mailbox.replay(5)] == ["msg-001", broadcast]

        # Read, then acknowledged, as the recipients see them.
        assert phx(capsys, "team", "inbox", "release-1", "--as", "alice")[0] == 0
        assert phx(capsys, "team", "ack", "release-1", "1", "--as", "alice")[0] == 0
        code, data = phx(capsys, "team", "outbox", "release-1", "--as", "lead")
        states = {m["msg_id"]: (m["state"], m["read_by"], m["acked_by"]) for m in data["messages"]}
        assert states == {"msg-001": ("acked", ["alice"], ["alice"]), broadcast: ("delivered", ["alice"], [])}

        # Sending again with the same id: stored once; with other content: a conflict, exit 4.
        code, data = phx(capsys, *send, "--subject", "What's your status?", "--body", "", "--id", "msg-001")
        assert code == 0 and data["duplicate"] is True and data["message"]["seq"] == 1
        code, data = phx(capsys, *send, "--subject", "Another question", "--body", "", "--id", "msg-001")
        assert code == 4 and data["error"]["type"] == "MessageConflictError"
        code, data = phx(capsys, *send, "--subject", "fresh", "--body", "", "--id", "msg-002")
        assert code == 0 and data["queued"] is False and data["message"]["seq"] == 3
        with PhoenixClient(url) as client, pytest.raises(MessageConflictError, match="different content"):
            client.team_send("release-1", "lead", "bob", subject="x", body="y", msg_id="msg-002")
        # A stranger's inbox is refused over HTTP as well.
        assert phx(capsys, "team", "inbox", "release-1", "--as", "mallory")[0] == 2
    assert team.mailbox.stats()["count"] == 3
