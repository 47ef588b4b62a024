"""Schemathesis against the OpenAPI document the memory bridge serves (issue 7).

Every operation gets positive and negative examples generated from the served schema, sent to the
app (ASGI, in process) with a token that may do everything, and every built-in check runs on the
response: no 5xx, status codes, content types, headers and bodies as documented, invalid input
refused, valid input accepted, authentication not ignored, the Allow header of a 405 right.
``PHOENIX_SCHEMATHESIS_EXAMPLES=300`` runs a longer, randomized search (25 derandomized examples
per operation in ``make test``).

The schema is the one the app serves (``GET /openapi.json``), loaded at collection time from an
app on a home that is never created; the requests go to an app on the test's temporary home
through ``_Target`` (``schemathesis.pytest.from_fixture`` does not work with pytest 9).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is part of the [test] extra")

from phoenix_protocol.core._clock import ManualClock  # noqa: E402
from phoenix_protocol.core._home import Home  # noqa: E402
from phoenix_protocol.server._app import create_app  # noqa: E402
from phoenix_protocol.store._teams import Team  # noqa: E402
from phoenix_protocol.store._tokens import TokenStore  # noqa: E402


class _Target:
    """An ASGI app that forwards to the app of the running test."""

    def __init__(self) -> None:
        self.app: Any = None
        self.token = ""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert self.app is not None, "the served fixture did not run"
        await self.app(scope, receive, send)


TARGET = _Target()
_NOWHERE = Home(os.path.join(tempfile.gettempdir(), "phoenix-schemathesis-never-created"))
# A body over the server's size limit is refused with 413 before it is validated: that is a
# rejection too (the default list of rejection statuses does not name it).
REJECTED = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]
CONFIG = schemathesis.config.SchemathesisConfig.from_dict(
    {"checks": {"negative_data_rejection": {"expected-statuses": REJECTED}}}
)
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(_NOWHERE, require_tokens=False), config=CONFIG)
schema.app = TARGET
assert not os.path.exists(_NOWHERE.root)

SETTINGS = hypothesis.settings(
    max_examples=int(os.environ.get("PHOENIX_SCHEMATHESIS_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=list(hypothesis.HealthCheck),
    database=None,
    derandomize=os.environ.get("PHOENIX_SCHEMATHESIS_EXAMPLES") is None,
)


@pytest.fixture(autouse=True)
def served(home: Home, clock: ManualClock) -> Iterator[None]:
    home.ensure()
    TARGET.token, _ = TokenStore(home, clock=clock).create(["*"], ["*"], label="schemathesis")
    team = Team.create(home, "release", lead="lead", team_id="release-1", clock=clock)
    team.join("alice")
    team.add_task("Write the parser")
    TARGET.app = create_app(home, clock=clock, max_body_bytes=256 * 1024)
    yield
    TARGET.app = None


@schema.parametrize()  # type: ignore[untyped-decorator]
@SETTINGS
def test_every_operation_passes_every_check(case: Any) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {TARGET.token}"})
