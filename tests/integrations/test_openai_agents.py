"""The OpenAI Agents SDK session (``integrations.openai_agents``) on both engines: the real SDK's
``Runner.run`` offline against a scripted local Responses API (``FakeResponses``, answering the
SDK's non-streaming ``POST /v1/responses`` with JSON), then the session's own operations."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, SessionSettings, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import InvalidIdError, SchemaVersionError, UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.core._redact import redact
from phoenix_protocol.integrations.openai_agents import ITEM_SCHEMA_VERSION, PhoenixSession
from phoenix_protocol.store._db import Database, open_database

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))  # one copy of the fake: tests/e2e/

from fake_models import FakeResponses, ResponsesRequest, Turn

set_tracing_disabled(True)  # nothing leaves the machine


@pytest.fixture
def db(home: Home, backend: str) -> Database:
    """The home's database on each engine in turn (``backend``)."""
    return open_database(home)


@function_tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"Sunny and 21 C in {city}."


def _agent(api: FakeResponses) -> Agent[Any]:
    client = AsyncOpenAI(base_url=api.url, api_key="fake", max_retries=0)
    model = OpenAIResponsesModel(model="scripted", openai_client=client)
    return Agent(name="assistant", instructions="Answer briefly.", model=model, tools=[weather])


def _user(text: str) -> Any:
    """A user's message as the SDK stores it (``Any``: the SDK types items as a union of TypedDicts)."""
    return {"content": text, "role": "user"}


async def _items(session: PhoenixSession, limit: int | None = None) -> list[Any]:
    return list(await session.get_items(limit))


def _strip_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k not in ("id", "status")} for item in items]


def test_a_second_run_replays_the_stored_history(db: Database, clock: ManualClock) -> None:
    """Run 1 calls a tool and answers; run 2, through a new session object on the same store (as a
    new process would open it), sends run 1's whole conversation back to the model, the secret the
    user typed redacted, then its own question."""
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    turns = [Turn.call("weather", city="Paris"), Turn.say("Sunny in Paris."), Turn.say("You asked about Paris.")]
    again = PhoenixSession("chat-1", db, clock=clock)

    async def run(api: FakeResponses) -> None:
        agent = _agent(api)
        first = await Runner.run(
            agent, f"Weather in Paris? My token is {secret}", session=PhoenixSession("chat-1", db, clock=clock)
        )
        assert first.final_output == "Sunny in Paris."
        clock.advance(60)
        second = await Runner.run(agent, "What did I ask?", session=again)
        assert second.final_output == "You asked about Paris."

    with FakeResponses(turns) as api:
        asyncio.run(run(api))
        requests: list[ResponsesRequest] = api.main_requests()

    assert len(requests) == 3 and all(r.body.get("stream") in (None, False) for r in requests)
    assert secret in requests[0].text, "the first request carries what the user typed"
    stored = asyncio.run(_items(again))
    assert [item.get("type", "message") for item in stored] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
        "message",
    ]
    assert stored[0] == _user("Weather in Paris? My token is [REDACTED:github-token]")
    assert stored[2]["output"] == "Sunny and 21 C in Paris."
    replayed = requests[2].inputs()
    assert replayed == [*stored[:4], _user("What did I ask?")], "run 2 sent run 1's history, then its question"
    assert secret not in requests[2].text
    assert _strip_ids(stored[1:2]) == [
        {"arguments": '{"city": "Paris"}', "call_id": "call_resp_1", "name": "weather", "type": "function_call"}
    ]
    assert stored[5]["content"][0]["text"] == "You asked about Paris."
    row = db.read(lambda tx: tx.one("SELECT created_ms, updated_ms FROM phx_oa_sessions WHERE session_id = 'chat-1'"))
    assert row is not None
    created, updated = row
    assert updated == clock.now_ms() and created < updated


def test_session_settings_limit_bounds_what_a_run_replays(db: Database) -> None:
    session = PhoenixSession("chat-2", db, session_settings={"limit": 2})

    async def run(api: FakeResponses) -> None:
        agent = _agent(api)
        for question in ("First?", "Second?", "Third?"):
            await Runner.run(agent, question, session=session)
        # The run's own settings win over the session's.
        settings = RunConfig(session_settings=SessionSettings(limit=1))
        await Runner.run(agent, "Fourth?", session=session, run_config=settings)

    with FakeResponses([Turn.say("One."), Turn.say("Two."), Turn.say("Three."), Turn.say("Four.")]) as api:
        asyncio.run(run(api))
        requests = api.main_requests()
    third, fourth = requests[2].inputs(), requests[3].inputs()
    assert [i.get("content") if i.get("role") == "user" else i["content"][0]["text"] for i in third] == [
        "Second?",
        "Two.",
        "Third?",
    ]
    assert len(fourth) == 2 and fourth[0]["content"][0]["text"] == "Three." and fourth[1] == _user("Fourth?")
    everything = asyncio.run(_items(session))
    assert len(everything) == 2, "limit=None still means the session's own limit"
    assert len(asyncio.run(PhoenixSession("chat-2", db).get_items())) == 8, "every item is kept"
    newest_three = asyncio.run(_items(session, 3))  # an explicit limit wins over the settings
    assert newest_three[0]["content"][0]["text"] == "Three." and newest_three[1] == _user("Fourth?")
    assert asyncio.run(session.get_items(limit=0)) == []
    with pytest.raises(UsageError):
        asyncio.run(session.get_items(limit=-1))


def test_pop_item_and_clear_session(db: Database) -> None:
    async def run() -> None:
        session = PhoenixSession("chat-3", db)
        other = PhoenixSession("chat-4", db)
        assert await session.pop_item() is None, "an empty session"
        await session.add_items([_user(f"message {i}") for i in range(5)])
        await other.add_items([_user("elsewhere")])
        assert await session.pop_item() == _user("message 4")
        assert await session.pop_item() == _user("message 3")
        assert await session.get_items() == [_user(f"message {i}") for i in range(3)]
        await session.add_items([_user("after the pops")])
        assert await session.get_items(limit=2) == [_user("message 2"), _user("after the pops")]
        await session.clear_session()
        assert await session.get_items() == [] and await session.pop_item() is None
        assert await other.get_items() == [_user("elsewhere")], "another session untouched"
        await session.add_items([_user("a new start")])
        assert await session.get_items() == [_user("a new start")]
        await session.add_items([])
        assert await session.get_items() == [_user("a new start")]
        for _ in range(2):
            await session.pop_item()
        assert await session.get_items() == []

    asyncio.run(run())


def test_concurrent_writers_keep_every_item_in_order(db: Database) -> None:
    """Twelve ``add_items`` of three items each at once (worker threads; on PostgreSQL, connections
    of the pool racing), with pops among them: no seq given twice, no item popped twice, each batch
    kept whole and in order."""

    async def run() -> list[Any]:
        sessions = [PhoenixSession("shared", db) for _ in range(3)]
        await asyncio.gather(
            *(sessions[b % 3].add_items([_user(f"{b}.{i}") for i in range(3)]) for b in range(12)),
        )
        popped = await asyncio.gather(*(sessions[p % 3].pop_item() for p in range(5)))
        return [popped, await _items(sessions[0])]

    popped, kept = asyncio.run(run())
    texts = [item["content"] for item in kept] + [item["content"] for item in popped]
    assert len(kept) == 31 and sorted(texts) == sorted(f"{b}.{i}" for b in range(12) for i in range(3))
    order = [item["content"] for item in kept]
    for b in range(12):
        mine = [t for t in order if t.startswith(f"{b}.")]
        if len(mine) == 3:
            start = order.index(f"{b}.0")
            assert order[start : start + 3] == [f"{b}.0", f"{b}.1", f"{b}.2"], "a batch is contiguous"
    seqs = db.read(lambda tx: [r[0] for r in tx.all("SELECT seq FROM phx_oa_items WHERE session_id = 'shared'")])
    assert len(set(seqs)) == 31


def test_an_item_from_a_newer_phoenix_is_refused_not_popped(db: Database) -> None:
    session = PhoenixSession("chat-5", db)
    asyncio.run(session.add_items([_user("old"), _user("new")]))
    db.transaction(
        lambda tx: tx.execute(
            "UPDATE phx_oa_items SET schema_version = ? WHERE session_id = 'chat-5' AND seq = 2",
            (ITEM_SCHEMA_VERSION + 1,),
        )
    )
    with pytest.raises(SchemaVersionError):
        asyncio.run(session.get_items())
    with pytest.raises(SchemaVersionError):
        asyncio.run(session.pop_item())
    assert db.read(lambda tx: tx.scalar("SELECT count(*) FROM phx_oa_items WHERE session_id = 'chat-5'")) == 2


def test_a_cancelled_add_finishes_before_the_cancellation_is_raised(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = PhoenixSession("chat-6", open_database(home))
    started, release = threading.Event(), threading.Event()
    add = session._add

    def held(items: list[Any]) -> None:
        started.set()
        release.wait(30)
        add(items)

    monkeypatch.setattr(session, "_add", held)

    async def run() -> None:
        task = asyncio.ensure_future(session.add_items([_user("kept")]))
        await asyncio.to_thread(started.wait, 30)
        task.cancel()
        await asyncio.sleep(0)
        assert not task.done(), "still waiting for the write"
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await session.get_items() == [_user("kept")]

    asyncio.run(run())


def test_an_opaque_encrypted_content_is_stored_as_it_came(home: Home) -> None:
    session = PhoenixSession("chat-7", open_database(home))
    blob = "gAAAAABk+AKIAIOSFODNN7EXAMPLE/Qx9Zz=="  # base64 that happens to hold a key-like run
    assert redact(blob) != blob, "the redactor alone would change it"
    reasoning: Any = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": blob}
    asyncio.run(session.add_items([reasoning, _user("key AKIAIOSFODNN7EXAMPLE")]))
    kept = asyncio.run(_items(session))
    assert kept[0] == reasoning and list(kept[0]) == list(reasoning)
    assert kept[1] == _user("key [REDACTED:aws-access-key]")


def test_session_ids_are_validated(home: Home) -> None:
    db = open_database(home)
    with pytest.raises(InvalidIdError):
        PhoenixSession("../etc", db)
    with pytest.raises(InvalidIdError):
        PhoenixSession("", db)


def test_import_without_the_extra_names_it(tmp_path: Path) -> None:
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'agents' or name.startswith('agents.'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, _Block())\n"
    )
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.path.abspath(src)])}
    done = subprocess.run(
        [sys.executable, "-c", "import phoenix_protocol.integrations.openai_agents"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "phoenix-protocol[openai-agents]" in done.stderr
