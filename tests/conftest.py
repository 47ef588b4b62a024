"""Shared fixtures. Every test runs with a temporary HOME and no PHOENIX_* / CLAUDE_* / GEMINI_* variables,
so nothing touches the real ~/.claude, ~/.gemini, ~/.codex or the user's git configuration."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_postgresql import factories

from phoenix_protocol.core._clock import ManualClock
from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations._install import hook_command
from phoenix_protocol.services._agent import Agent

GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
HOOK_PREFIX = shlex.split(hook_command("event"))[:-1]
"""The hook command ``phx install`` writes (``python -S ...``), without its event."""


def run_hook(
    project: Path, command: str, event: str, env: dict[str, str], **extra: object
) -> subprocess.CompletedProcess[bytes]:
    """Run ``phx hook <command>`` as Claude Code does: a process in ``project``, the payload of
    ``event`` (session ``sess-1`` unless ``extra`` says otherwise) on stdin, ``env`` added."""
    import json

    body = {"session_id": "sess-1", "transcript_path": "/tmp/t.jsonl", "cwd": str(project), "hook_event_name": event}
    return subprocess.run(
        [*HOOK_PREFIX, command],
        input=json.dumps({**body, **extra}).encode(),
        capture_output=True,
        check=False,
        env={**os.environ, **env},
        cwd=project,
        timeout=60,
    )


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_home = tmp_path_factory.mktemp("user-home")
    monkeypatch.setenv("HOME", str(fake_home))
    # This user's list of homes (phx status --all) is the test's own.
    monkeypatch.setenv("XDG_STATE_HOME", str(fake_home / ".local" / "state"))
    for name in list(os.environ):
        if name.startswith(("PHOENIX_", "CLAUDE", "GEMINI_", "CODEX_HOME")):  # an outer agent CLI's too
            monkeypatch.delenv(name, raising=False)
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    # Team heartbeats live in the runtime directory: one per test, not the machine's.
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path_factory.mktemp("runtime")))


@pytest.fixture(autouse=True)
def _write_behind_finished() -> Iterator[None]:
    """Each test ends with the write-behind of its checkpoints done (named files, removals, ops
    events), while its directories still exist; a write-behind that failed fails the test. Then
    the databases it opened are closed: ``open_database`` keeps one per home for the process (its
    SQLite connection, or the PostgreSQL pool), which a suite of homes would otherwise hold open."""
    yield
    from phoenix_protocol.core import _background

    try:
        _background.wait()
    finally:
        opened = sys.modules.get("phoenix_protocol.store._db")
        if opened is not None:
            opened.close_all()


def git(cwd: Path, *args: str) -> str:
    """Run git in a test repository without reading or writing any user configuration."""
    proc = subprocess.run(
        [
            "git",
            "-c",
            "user.name=Phoenix Test",
            "-c",
            "user.email=test@phoenix.invalid",
            "-c",
            "init.defaultBranch=main",
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **GIT_ENV},
    )
    return proc.stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty git work tree with one commit."""
    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q")
    (root / "README.md").write_text("# test project\n")
    git(root, "add", "README.md")
    git(root, "commit", "-q", "-m", "Initial commit")
    return root


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(str(tmp_path / "phoenix-home"))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def agent(home: Home, clock: ManualClock) -> Iterator[Agent]:
    yield Agent.open("tester", home=home, clock=clock)


@pytest.fixture
def load_config_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Where ``load_config`` is called from (``file:line``), call by call, from now on in this
    test: a counting wrapper replaces it in ``core._config`` (which a function-level import reads)
    and in every module that imported it at its top. Clear it once the test's setup is done."""
    import contextlib
    import importlib

    from phoenix_protocol.core import _config

    for name in ("phoenix_protocol.cli._main", "phoenix_protocol.services._transfer", "phoenix_protocol.server._app"):
        with contextlib.suppress(ImportError):  # the server's extra may be missing
            importlib.import_module(name)  # its top-level import done now, so that it is replaced below
    original = _config.load_config
    calls: list[str] = []

    def counting(*args: Any, **kwargs: Any) -> _config.Config:
        caller = sys._getframe(1)
        calls.append(f"{caller.f_code.co_filename}:{caller.f_lineno}")
        return original(*args, **kwargs)

    for module in list(sys.modules.values()):
        if (
            getattr(module, "__name__", "").startswith("phoenix_protocol")
            and vars(module).get("load_config") is original
        ):
            monkeypatch.setattr(module, "load_config", counting)
    return calls


PG_SERVER = os.environ.get("PHOENIX_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
"""The PostgreSQL server the tests use when it answers (CI's machines run one: trust auth,
database ``test``); otherwise ``pg_server`` starts a throwaway one, or skips."""


def _answers(url: str) -> bool:
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error:
        return False
    return True


def _pg_ctl() -> str | None:
    """PostgreSQL's ``pg_ctl``: on the PATH, else the newest Debian-style install."""
    import glob
    import shutil

    found = shutil.which("pg_ctl")
    if found:
        return found
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return candidates[-1] if candidates else None


postgresql_throwaway = factories.postgresql_proc(executable=_pg_ctl() or "pg_ctl", port=None)
"""A throwaway server (pytest-postgresql), started only when ``pg_server`` asks for it."""


def _uses_postgres(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    return "pg_server" in getattr(item, "fixturenames", ()) or "postgres" in params


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With no PostgreSQL server to use, the PostgreSQL suite is left out with one line, not
    hundreds of skips."""
    if _answers(PG_SERVER) or (_pg_ctl() is not None and os.geteuid() != 0):
        return
    left_out = [item for item in items if _uses_postgres(item)]
    if not left_out:
        return
    keep = set(map(id, left_out))
    items[:] = [item for item in items if id(item) not in keep]
    config.hook.pytest_deselected(items=left_out)
    why = "no PostgreSQL binaries" if _pg_ctl() is None else "initdb cannot run as root"
    config.stash[_PG_NOTE] = (
        f"PostgreSQL suite not run ({len(left_out)} tests): no server at {PG_SERVER} and {why}; "
        "start a server (or install PostgreSQL and run as a normal user), or set PHOENIX_TEST_PG=postgresql://user@host:port/db."
    )


_PG_NOTE = pytest.StashKey[str]()


SUMMARY = "summary"
"""A test's ``user_properties`` entry ``(SUMMARY, line)`` is printed at the end of the run (the
LangGraph conformance report, say); under xdist the workers' reports carry it to the controller."""


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    lines = {
        str(value)
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "call"
        for key, value in getattr(report, "user_properties", ())
        if key == SUMMARY
    }
    for line in sorted(lines):
        terminalreporter.write_line(line)
    note = config.stash.get(_PG_NOTE, None)
    if note:
        terminalreporter.write_line(note, yellow=True)


@pytest.fixture(scope="session")
def pg_server(request: pytest.FixtureRequest) -> str:
    """A PostgreSQL server for the suites that run on it: ``PHOENIX_TEST_PG`` (default the local
    server at 127.0.0.1:5432) when it answers; else a throwaway server that pytest-postgresql
    starts from the installed binaries (``initdb`` refuses to run as root); else the test is
    skipped with one line saying how to run it."""
    if _answers(PG_SERVER):
        return PG_SERVER
    how = "start one, or set PHOENIX_TEST_PG=postgresql://user@host:port/db"
    pg_ctl = _pg_ctl()
    if pg_ctl is None:
        pytest.skip(f"PostgreSQL suite skipped: no server at {PG_SERVER} and no PostgreSQL binaries ({how}).")
    if os.geteuid() == 0:
        pytest.skip(f"PostgreSQL suite skipped: no server at {PG_SERVER}, and initdb cannot run as root ({how}).")
    proc = request.getfixturevalue("postgresql_throwaway")
    return f"postgresql://{proc.user}@{proc.host}:{proc.port}/postgres"


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A PostgreSQL store URL of its own: a fresh schema, dropped afterwards (with this process's pools)."""
    import uuid

    import psycopg

    from phoenix_protocol.store import _pg

    schema = "phx_test_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_server, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        # The schema names the connections too, so that faults injected by one test reach its own.
        yield f"{pg_server}?options=-csearch_path%3D{schema}&application_name={schema}"
    finally:
        _pg.close_all()
        with psycopg.connect(pg_server, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each store in turn: ``sqlite`` (the home's ``phoenix.db``, the default; the agents' state
    files in the home) and ``postgres`` (``PHOENIX_STORE`` naming a fresh schema of the test
    server), for the conformance suites that run on both (``_write_behind_finished`` closes the
    databases after the test; ``pg_url`` the pools, before it drops the schema)."""
    if request.param == "postgres":
        monkeypatch.setenv("PHOENIX_STORE", request.getfixturevalue("pg_url"))
    yield request.param


def application_name(pg_url: str) -> str:
    """The application name ``pg_url`` gives its connections (the test's schema)."""
    return pg_url.rsplit("application_name=", 1)[1].split("&", 1)[0]


def terminate_transactions_on(pg_url: str, table: str) -> int:
    """``pg_terminate_backend`` every other connection of this store (``pg_url``'s application
    name) idle in a transaction whose last statement names ``table`` (a fault injected in the
    middle of a store's write); returns how many."""
    import psycopg

    with psycopg.connect(pg_url.split("?", 1)[0], autocommit=True) as other:
        rows = other.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
            "AND state = 'idle in transaction' AND query LIKE %s AND application_name = %s",
            (f"%{table}%", application_name(pg_url)),
        ).fetchall()
    return len(rows)


def phx_unread(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    """Run ``phx args`` in a fresh interpreter whose stdout is a pipe nobody reads (its reader
    closed first: every write fails with EPIPE), stderr captured; ``kwargs`` go to
    ``subprocess.run`` (``cwd``, ``env``)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "phoenix_protocol", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            check=False,
            timeout=60,
            **kwargs,
        )
    finally:
        os.close(write)


def change_checkpoint(agent: Agent, name: str, change: Callable[[str], str]) -> None:
    """Change the stored body of checkpoint ``name`` of ``agent`` behind the store's back (damage
    by hand: the checksum column is left as it was)."""
    store = agent.checkpoints

    def work(tx: Any) -> None:
        content = tx.scalar("SELECT content FROM phx_checkpoints WHERE agent_id = ? AND name = ?", (agent.id, name))
        tx.execute(
            "UPDATE phx_checkpoints SET content = ? WHERE agent_id = ? AND name = ?",
            (change(str(content)), agent.id, name),
        )

    store.backend.db.transaction(work)


def plant_checkpoint(source: Agent, name: str, target: Agent, planted: str) -> None:
    """Copy checkpoint ``name`` of ``source``, body and checksum as they are, into ``target``'s
    checkpoints as ``planted`` (another agent's checkpoint copied in by hand)."""
    from phoenix_protocol.store._checkpoints import CheckpointInfo, lock_agent, parse_name

    stored = source.checkpoints.backend.read(name)
    assert stored is not None
    _owner, seq, ms, kind = parse_name(planted) or ("", 0, 0, "")
    rows = target.checkpoints.backend

    def work(tx: Any) -> None:
        lock_agent(tx, target.id)
        info = CheckpointInfo(planted, seq, kind, ms, size=len(stored.content))
        rows.put_existing(tx, info, stored.content, stored.checksum, stored.legacy)

    rows.db.transaction(work)


def rewrite_checkpoint(agent: Agent, name: str, envelope: dict[str, Any]) -> None:
    """Store ``envelope`` as checkpoint ``name``'s body with a checksum that matches (as a newer
    Phoenix, or a hand edit that recomputed it, would have written it)."""
    from phoenix_protocol.services._checkpoints import encode

    content, checksum = encode(envelope)
    agent.checkpoints.backend.db.transaction(
        lambda tx: tx.execute(
            "UPDATE phx_checkpoints SET content = ?, checksum = ? WHERE agent_id = ? AND name = ?",
            (content.decode(), checksum, agent.id, name),
        )
    )
