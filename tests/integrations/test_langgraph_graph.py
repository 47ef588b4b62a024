"""A real compiled LangGraph graph on ``PhoenixSaver``, on both engines: a super-step that fails
(one task raising, or the whole process killed with SIGKILL) is resumed from the store, the tasks
that had finished not run again; then an ``interrupt`` answered with ``Command(resume=...)``, and
the thread's history (``get_state_history``), whole or cut by the retention."""

from __future__ import annotations

import operator
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations.langgraph import PhoenixSaver
from phoenix_protocol.store._db import open_database

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    decision: str


def _wait_for_write(saver: PhoenixSaver, thread_id: str, value: list[str], timeout: float = 60.0) -> None:
    """Until the thread's newest checkpoint holds a pending write of ``value`` (a parallel task
    finished and LangGraph stored its writes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        latest = saver.get_tuple({"configurable": {"thread_id": thread_id}})
        if latest is not None and any(v == value for _, _, v in latest.pending_writes or ()):
            return
        time.sleep(0.01)
    raise AssertionError(f"no pending write {value!r} on {thread_id} within {timeout}s")


def build(saver: PhoenixSaver, calls: Counter[str], fail_b: Callable[[], None] | None = None) -> Any:
    """``fetch``, then ``a`` and ``b`` in parallel (``b`` calls ``fail_b`` first, when given), then
    ``review``, which asks a person (``interrupt``), then ``finish``."""

    def fetch(state: State) -> State:
        calls["fetch"] += 1
        return {"log": ["fetched"]}

    def a(state: State) -> State:
        calls["a"] += 1
        return {"log": ["a done"]}

    def b(state: State) -> State:
        calls["b"] += 1
        if fail_b is not None:
            fail_b()
        return {"log": ["b done"]}

    def review(state: State) -> State:
        decision = interrupt({"question": "ship it?", "log": state["log"]})
        calls["review"] += 1
        return {"decision": str(decision)}

    def finish(state: State) -> State:
        calls["finish"] += 1
        return {"log": [f"finished: {state['decision']}"]}

    graph = StateGraph(State)
    for node in (fetch, a, b, review, finish):
        graph.add_node(node.__name__, node)
    graph.add_edge(START, "fetch")
    graph.add_edge("fetch", "a")
    graph.add_edge("fetch", "b")
    graph.add_edge(["a", "b"], "review")
    graph.add_edge("review", "finish")
    graph.add_edge("finish", END)
    return graph.compile(checkpointer=saver)


def _finish_after_the_failure(graph: Any, calls: Counter[str], config: Any) -> None:
    """The failed thread resumed: ``b`` alone runs again (``a``'s write was kept), then the
    interrupt, then its answer."""
    paused = graph.get_state(config)
    assert paused.next == ("b",), "a finished: its write is kept, b alone is still to run"
    assert sorted(t.name for t in paused.tasks) == ["a", "b"]
    assert [t.result for t in paused.tasks if t.name == "a"] == [{"log": ["a done"]}]
    out = graph.invoke(None, config)
    assert calls["fetch"] == 0 and calls["a"] == 0 and calls["b"] == 1, calls
    assert out["__interrupt__"][0].value["question"] == "ship it?"
    assert graph.get_state(config).next == ("review",)
    done = graph.invoke(Command(resume="approved"), config)
    assert sorted(done["log"]) == sorted(["fetched", "a done", "b done", "finished: approved"])
    assert done["log"][-1] == "finished: approved" and done["decision"] == "approved"
    assert calls["review"] == 1 and calls["finish"] == 1


def test_a_failed_step_resumes_from_the_store_then_an_interrupt_is_answered(home: Home, backend: str) -> None:
    saver = PhoenixSaver(open_database(home), keep=3)
    config: Any = {"configurable": {"thread_id": "raise"}}
    first: Counter[str] = Counter()

    def fail_once() -> None:
        _wait_for_write(saver, "raise", ["a done"])
        raise RuntimeError("the tool's server went away")

    graph = build(saver, first, fail_once)
    try:
        graph.invoke({"log": []}, config)
    except RuntimeError as exc:
        assert "went away" in str(exc)
    else:
        raise AssertionError("b did not fail")
    assert first == Counter({"fetch": 1, "a": 1, "b": 1})

    resumed: Counter[str] = Counter()  # a new saver and graph, as a new process would build them
    _finish_after_the_failure(build(PhoenixSaver(open_database(home), keep=3), resumed), resumed, config)
    history = list(graph.get_state_history(config))
    assert len(history) == 3, "the retention keeps the newest three checkpoints"
    assert history[0].next == () and history[0].values["decision"] == "approved"
    assert [h.metadata["step"] for h in history if h.metadata is not None] == [4, 3, 2]


CHILD = """
import os, signal, sys
from collections import Counter
sys.path[:0] = [{here!r}, {src!r}]
from test_langgraph_graph import _wait_for_write, build
from phoenix_protocol.integrations.langgraph import PhoenixSaver

saver = PhoenixSaver.from_home(sys.argv[1])

def killed() -> None:
    _wait_for_write(saver, "killed", ["a done"])
    os.kill(os.getpid(), signal.SIGKILL)

build(saver, Counter(), killed).invoke({{"log": []}}, {{"configurable": {{"thread_id": "killed"}}}})
"""


def test_a_graph_killed_mid_step_resumes_from_the_store(home: Home, backend: str) -> None:
    """The graph runs in a child process that SIGKILLs itself inside ``b`` (once ``a``'s write is
    stored); this process resumes the thread from the store (``PHOENIX_STORE`` names the same
    PostgreSQL schema in both on that engine)."""
    code = CHILD.format(here=str(HERE), src=str(SRC))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.run(
        [sys.executable, "-c", code, home.root], env=env, capture_output=True, text=True, timeout=240
    )
    assert child.returncode == -signal.SIGKILL, child.stderr

    calls: Counter[str] = Counter()
    saver = PhoenixSaver.from_home(home.root)
    graph = build(saver, calls)
    config: Any = {"configurable": {"thread_id": "killed"}}
    _finish_after_the_failure(graph, calls, config)
    history = list(graph.get_state_history(config))
    assert [h.metadata["step"] for h in history if h.metadata is not None] == [4, 3, 2, 1, 0, -1]
    assert [h.next for h in history] == [(), ("finish",), ("review",), ("a", "b"), ("fetch",), ("__start__",)], (
        "every checkpoint of the thread, newest first, back to the input (step 1: the one the child died in)"
    )
