"""The memory bridge on the PostgreSQL store: the same endpoint tests as on files (issue 8).

The tests are ``test_server``'s, collected again here with ``PHOENIX_STORE`` pointing at a fresh
schema on the real server: memory, teams, and agents' state, checkpoints, sessions and identities
then live in PostgreSQL.
"""

from __future__ import annotations

import os

import pytest
from test_server import (  # noqa: F401 - fixtures and tests collected again on this store
    client,
    served,
    team,
    test_identity,
    test_restore_with_named_checkpoint_and_refusals,
    test_session_protocol_over_http,
    test_team_operations,
)


@pytest.fixture(autouse=True)
def _postgres(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHOENIX_STORE", pg_url)


def test_nothing_of_teams_or_memory_is_in_the_home(request: pytest.FixtureRequest) -> None:
    http = request.getfixturevalue("client")
    request.getfixturevalue("team")
    home = request.getfixturevalue("served")
    assert http.post("/memory/zero", json={"text": "kept in PostgreSQL"}).status_code == 201
    assert not os.path.exists(os.path.join(home.root, "teams"))
    assert not os.path.exists(os.path.join(home.root, "memory"))
