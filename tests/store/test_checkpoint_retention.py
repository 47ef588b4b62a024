"""Checkpoint retention against an independent model, for any sequence of steps.

Steps: create a routine, recovery or session checkpoint; begin an operation (a pre-operation
checkpoint); end one (success or failure); advance the clock by some hours; prune. After every
step the checkpoints on disk and in ``entries()`` are exactly what the policy keeps:

- routine: the newest ``keep_routine``;
- pre-operation: those whose operation has not completed successfully (open or failed);
- recovery: those no older than ``recovery_retention_days`` as of the last write or prune (the
  policy runs on writes, not as time passes);
- session: the newest ``keep_session_checkpoints``.

The model below knows nothing of the store's ``_retain``; it only sees the names ``create``
returns, so a store that kept or dropped one checkpoint too many is caught.

The store here has only its own section collector, which never fails: the one exception to the
policy, the last good copy of a damaged identity.yaml or state.json kept whatever its type or age
(``KEPT_COPIES``), is tested in tests/test_doctor.py.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context, event

from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._checkpoints import CheckpointStore, CollectContext

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


@dataclass
class Record:
    name: str
    seq: int
    kind: str
    at_ms: int
    operation: str | None = None


@dataclass
class Model:
    keep_routine: int
    keep_session: int
    retention_days: float
    records: list[Record] = field(default_factory=list)
    succeeded: set[str] = field(default_factory=set)
    next_seq: int = 1

    def write(self, record: Record, now_ms: int) -> None:
        assert record.seq == self.next_seq, f"seq {record.seq}, expected {self.next_seq}"
        self.next_seq += 1
        self.records.append(record)
        self.enforce(now_ms)

    def enforce(self, now_ms: int) -> list[str]:
        """Apply the policy; returns the names it removes."""
        routine = sorted((r.seq for r in self.records if r.kind == "routine"), reverse=True)[: self.keep_routine]
        session = sorted((r.seq for r in self.records if r.kind == "session"), reverse=True)[: self.keep_session]
        max_age = int(self.retention_days * DAY_MS)

        def kept(r: Record) -> bool:
            if r.kind == "routine":
                return r.seq in routine
            if r.kind == "session":
                return r.seq in session
            if r.kind == "recovery":
                return now_ms - r.at_ms <= max_age
            return r.operation not in self.succeeded

        removed = [r for r in self.records if not kept(r)]
        for r in removed:
            note(f"retention removes a {r.kind} checkpoint")
        self.records = [r for r in self.records if kept(r)]
        return [r.name for r in removed]

    def names(self) -> list[str]:
        """Newest first."""
        return [r.name for r in sorted(self.records, key=lambda r: -r.seq)]

    def has_checkpoint_of(self, op_id: str) -> bool:
        return any(r.operation == op_id for r in self.records)


def note(what: str) -> None:
    """Count what happened (``pytest --hypothesis-show-statistics``), when run by Hypothesis."""
    if currently_in_test_context():
        event(what)


def tiny(ctx: CollectContext) -> dict[str, Any]:
    return {"type": ctx.checkpoint_type}


def open_store(home: str, clock: ManualClock, config: dict[str, Any], agent_id: str = "keeper") -> CheckpointStore:
    agent = Agent.open(agent_id, home=Home(home), clock=clock, config_overrides=config)
    store = agent.checkpoints
    store._collectors.clear()  # each create stays cheap: one tiny section
    store.register("payload", tiny)
    return store


def on_disk(store: CheckpointStore) -> list[str]:
    """What is stored, newest first, seen without the store's own reading code: the table, read
    by the engine's own driver."""
    if store.backend.db.engine == "postgresql":
        import psycopg

        with psycopg.connect(store.agent.config.store) as conn:
            rows = conn.execute(
                "SELECT name FROM phx_checkpoints WHERE agent_id = %s ORDER BY seq DESC", (store.agent.id,)
            ).fetchall()
        return [str(r[0]) for r in rows]
    import sqlite3

    if not store.backend.db.exists():
        return []
    with contextlib.closing(sqlite3.connect(store.backend.db.where)) as conn:
        rows = conn.execute(
            "SELECT name FROM phx_checkpoints WHERE agent_id = ? ORDER BY seq DESC", (store.agent.id,)
        ).fetchall()
    return [str(r[0]) for r in rows]


Step = tuple[Any, ...]


def run_steps(steps: list[Step], config: dict[str, Any], store_url: str | None = None) -> Model:
    """Run ``steps`` against a fresh store (SQLite, or a new agent on the PostgreSQL store
    ``store_url``) and the model; compare after every step."""
    model = Model(
        int(config.get("keep_routine", 3)),
        int(config.get("keep_session_checkpoints", 50)),
        float(config.get("recovery_retention_days", 7.0)),
    )
    operations: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        clock = ManualClock()
        agent_id = "keeper"
        if store_url is not None:
            import uuid

            config = {**config, "store": store_url}
            agent_id = f"keeper-{uuid.uuid4().hex[:12]}"
        store = open_store(os.path.join(tmp, "home"), clock, config, agent_id)
        failed: set[str] = set()  # operations ended as failed (their checkpoint kept)
        for number, step in enumerate(steps):
            kind = step[0]
            now = clock.now_ms()
            if kind in ("routine", "recovery", "session"):
                info = store.create(kind)
                model.write(Record(info.name, info.seq, kind, now), now)
            elif kind == "begin":
                op = store.begin_operation(f"operation {len(operations)}")
                operations.append(op.id)
                assert op.checkpoint.operation_id == op.id
                model.write(Record(op.checkpoint.name, op.checkpoint.seq, "pre-operation", now, op.id), now)
            elif kind == "end":
                if not operations:
                    continue
                op_id, success = operations[step[1] % len(operations)], step[2]
                if not model.has_checkpoint_of(op_id):  # released (or never kept): nothing to end
                    note("ending a released operation is refused")
                    with pytest.raises(UsageError, match="no open operation"):
                        store.end_operation(op_id, success=success)
                    continue
                if not success and op_id in failed:
                    note("a second failure of one operation is refused")
                    with pytest.raises(UsageError, match="already ended as failed"):
                        store.end_operation(op_id, success=False)
                    continue
                removed = store.end_operation(op_id, success=success)
                expected: list[str] = []
                if not success:
                    failed.add(op_id)
                if success:
                    model.succeeded.add(op_id)
                    expected = model.enforce(now)
                assert sorted(r.name for r in removed) == sorted(expected), f"step {number} {step}"
            elif kind == "advance":
                clock.advance(step[1] * 3600)
            elif kind == "prune":
                removed = store.prune()
                assert sorted(r.name for r in removed) == sorted(model.enforce(now)), f"step {number} {step}"
            else:  # pragma: no cover
                raise AssertionError(step)
            where = f"after step {number} {step} of {steps}"
            assert on_disk(store) == model.names(), where
            assert [e.name for e in store.entries()] == model.names(), where
            for kind_filter in ("routine", "pre-operation", "recovery", "session"):
                want = [n for n in model.names() if n.endswith(f"_{kind_filter}.checkpoint")]
                assert [e.name for e in store.entries(kind_filter)] == want, where
        store.flush()  # before the directory goes: the ops events are written behind
    return model


steps_strategy = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["routine", "routine", "recovery", "session", "session", "begin", "begin", "prune"])),
        st.tuples(st.just("end"), st.integers(0, 20), st.booleans()),
        st.tuples(st.just("advance"), st.integers(1, 30)),
    ),
    min_size=12,
    max_size=60,
)

configs = st.fixed_dictionaries(
    {
        "keep_routine": st.integers(1, 3),
        "keep_session_checkpoints": st.integers(1, 3),
        "recovery_retention_days": st.sampled_from([0.0, 0.5, 1.0, 2.0]),
    }
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_strategy, config=configs)
def test_any_sequence_of_steps_leaves_what_the_policy_keeps(steps: list[Step], config: dict[str, Any]) -> None:
    run_steps(steps, config)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(steps=steps_strategy, config=configs)
def test_the_same_policy_on_postgresql(pg_url: str, steps: list[Step], config: dict[str, Any]) -> None:
    """The same property on the PostgreSQL store (fewer examples: each step is a transaction);
    each example is a new agent in the test's schema."""
    run_steps(steps, config, store_url=pg_url)


def test_small_values_scripted() -> None:
    """keep_routine=2, keep_session_checkpoints=3, recovery_retention_days=1, step by step."""
    config = {"keep_routine": 2, "keep_session_checkpoints": 3, "recovery_retention_days": 1}
    steps: list[Step] = [
        ("recovery",),
        *[("routine",)] * 4,
        *[("session",)] * 5,
        ("begin",),
        ("begin",),
        ("begin",),
        ("end", 0, True),  # released
        ("end", 1, False),  # kept: failed
        ("advance", 24),  # the recovery is exactly one day old: still kept
        ("prune",),
        ("advance", 1),
        ("end", 0, True),  # already released
        ("routine",),  # this write drops the recovery, now older than a day
        ("end", 1, True),  # a failed operation that later succeeds releases its checkpoint
    ]
    model = run_steps(steps, config)
    kinds = sorted(r.kind for r in model.records)
    assert kinds == ["pre-operation", "routine", "routine", "session", "session", "session"]
    assert [r.seq for r in model.records if r.kind == "pre-operation"] == [13]  # the open one


def test_defaults() -> None:
    """The built-in policy: 3 routine, 50 session checkpoints, recovery for 7 days."""
    steps: list[Step] = [
        ("recovery",),
        ("begin",),
        *[("routine",), ("session",)] * 30,
        ("advance", 24 * 6),
        ("recovery",),
        *[("session",)] * 25,
        ("end", 0, False),
        ("advance", 25),  # the first recovery is now 7 days and an hour old
        ("routine",),
    ]
    model = run_steps(steps, {})
    counts = {kind: sum(r.kind == kind for r in model.records) for kind in ("routine", "session", "recovery")}
    assert counts == {"routine": 3, "session": 50, "recovery": 1}
    assert any(r.kind == "pre-operation" for r in model.records)  # failed: kept
