"""The LangGraph checkpointer (``integrations.langgraph``) on both engines: LangGraph's own
conformance suite (base and extended capabilities), the retention policy, and a small graph-like
run through the saver as LangGraph's runtime drives it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate

from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations.langgraph import DEFAULT_KEEP, PhoenixSaver
from phoenix_protocol.store._db import Database, open_database


@pytest.fixture
def db(home: Home, backend: str) -> Database:
    """The home's database on each engine in turn (``backend``)."""
    return open_database(home)


def _checkpoint(step: int) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": [f"message {step}"]}
    checkpoint["channel_versions"] = {"messages": step}
    return checkpoint


def test_conformance_base_and_extended(db: Database, backend: str, request: pytest.FixtureRequest) -> None:
    async def saver() -> AsyncIterator[PhoenixSaver]:
        yield PhoenixSaver(db)

    # Registered by a call, not as a decorator: the conformance package ships no types, and whether
    # mypy sees through it depends on what else is installed (a `type: ignore` may be "unused").
    factory: Any = checkpointer_test(name=f"PhoenixSaver ({backend})")(saver)
    report = asyncio.run(validate(factory))
    report.print_report()  # the level and counts, in the test's output
    counts = {name: (result.tests_passed, result.tests_failed) for name, result in report.results.items()}
    passed = sum(p for p, _ in counts.values())
    total = sum(p + f for p, f in counts.values())
    line = f"LangGraph conformance, PhoenixSaver on {backend}: {report.conformance_level()}, {passed}/{total} checks passed"
    print(line, counts)
    request.node.user_properties.append(
        ("summary", f"{line} ({', '.join(f'{k} {p}/{p + f}' for k, (p, f) in counts.items())})")
    )
    failures = {name: result.failures for name, result in report.results.items() if not result.passed}
    assert report.passed_all_base(), failures
    assert report.passed_all(), failures
    assert report.conformance_level() == "FULL"
    assert all(result.detected for result in report.results.values())


def test_retention_keeps_the_newest_per_thread_and_namespace(db: Database) -> None:
    saver = PhoenixSaver(db, keep=3)
    for ns in ("", "child"):
        config: Any = {"configurable": {"thread_id": "t1", "checkpoint_ns": ns}}
        ids = []
        for step in range(7):
            checkpoint = _checkpoint(step)
            config = saver.put(config, checkpoint, {"step": step}, {"messages": step})
            saver.put_writes(config, [("messages", f"write {step}")], task_id="task")
            ids.append(checkpoint["id"])
        listed = [t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": "t1", "checkpoint_ns": ns}})]
        assert listed == ids[:-4:-1], "the newest three, newest first"
    other: Any = {"configurable": {"thread_id": "t2", "checkpoint_ns": ""}}
    saver.put(other, _checkpoint(0), {}, {})
    assert len(list(saver.list({"configurable": {"thread_id": "t2"}}))) == 1, "another thread untouched"
    writes = db.read(lambda tx: tx.scalar("SELECT count(*) FROM phx_lg_writes WHERE thread_id = 't1'"))
    assert writes == 6, "the pruned checkpoints' writes went with them"
    newest = saver.get_tuple({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}})
    assert newest is not None and newest.pending_writes == [("task", "messages", "write 6")]

    unbounded = PhoenixSaver(db, keep=None)
    config = {"configurable": {"thread_id": "t3", "checkpoint_ns": ""}}
    for step in range(DEFAULT_KEEP + 5):
        config = unbounded.put(config, _checkpoint(step), {}, {})
    assert len(list(unbounded.list({"configurable": {"thread_id": "t3"}}))) == DEFAULT_KEEP + 5
    PhoenixSaver(db).put(config, _checkpoint(999), {}, {})
    assert len(list(unbounded.list({"configurable": {"thread_id": "t3"}}))) == DEFAULT_KEEP
    with pytest.raises(UsageError):
        PhoenixSaver(db, keep=0)


def test_a_graph_run_resumes_from_the_store(db: Database) -> None:
    """What LangGraph's runtime does each super-step (put, then the tasks' writes, the next step's
    parent the last), then a new process-like saver resuming the thread from the store."""

    async def run() -> None:
        saver = PhoenixSaver(db, keep=5)
        config: Any = {"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}
        versions: dict[str, Any] = {}
        messages: list[str] = []
        for step in range(8):
            messages.append(f"turn {step}")
            versions["messages"] = saver.get_next_version(versions.get("messages"), None)
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"messages": list(messages)}
            checkpoint["channel_versions"] = dict(versions)
            config = await saver.aput(config, checkpoint, {"source": "loop", "step": step}, dict(versions))
            await saver.aput_writes(config, [("messages", f"reply {step}")], task_id=f"agent-{step}", task_path="agent")

        resumed = PhoenixSaver(db, keep=5)
        latest = await resumed.aget_tuple({"configurable": {"thread_id": "chat"}})
        assert latest is not None
        assert latest.checkpoint["channel_values"]["messages"] == [f"turn {i}" for i in range(8)]
        assert latest.metadata["step"] == 7
        assert latest.pending_writes == [("agent-7", "messages", "reply 7")]
        assert latest.parent_config is not None
        history = [t async for t in resumed.alist({"configurable": {"thread_id": "chat"}})]
        assert [t.metadata["step"] for t in history] == [7, 6, 5, 4, 3]
        loops = [t async for t in resumed.alist(None, filter={"source": "loop", "step": 5})]
        assert [t.config["configurable"]["thread_id"] for t in loops] == ["chat"]
        await resumed.acopy_thread("chat", "chat-fork")
        await resumed.adelete_thread("chat")
        assert await resumed.aget_tuple({"configurable": {"thread_id": "chat"}}) is None
        fork = await resumed.aget_tuple({"configurable": {"thread_id": "chat-fork"}})
        assert fork is not None and fork.checkpoint["id"] == latest.checkpoint["id"]

    asyncio.run(run())


def test_import_without_the_extra_names_it(tmp_path: Any) -> None:
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'langgraph' or name.startswith('langgraph.'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, _Block())\n"
    )
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.path.abspath(src)])}
    done = subprocess.run(
        [sys.executable, "-c", "import phoenix_protocol.integrations.langgraph"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "phoenix-protocol[langgraph]" in done.stderr
