"""``phx db migrate``, ``phx db status`` and ``phx db sync``: the PostgreSQL store's schema and
this machine's agent copies (issue 8); ``phx export`` and ``phx import``.

Registered on the ``phx`` group by ``_cli``. The store is the configured one (``PHOENIX_STORE``
or ``store`` in ``phoenix.toml``); with the file store there is nothing to migrate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import click

from phoenix_protocol.cli._main import Output, home_common, main_group
from phoenix_protocol.core._config import Config
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.core._home import Home

__all__: list[str] = []


def _url(config: Config) -> str:
    from phoenix_protocol.store._pg import is_postgres_url

    store = config.store
    if not is_postgres_url(store):
        raise UsageError(
            f"the store is {store!r}, not PostgreSQL: set PHOENIX_STORE=postgresql://user@host/db "
            "(or store = 'postgresql://...' in phoenix.toml) first."
        )
    return str(store)


@main_group.group("db")
def db_group() -> None:
    """The PostgreSQL store's schema (PHOENIX_STORE=postgresql://…, [postgres] extra).

    Example: phx db status
    """


@db_group.command("migrate")
@home_common
def db_migrate(home: Home, config: Config, out: Output) -> None:
    """Apply the pending schema migrations (also done on first use); concurrent runs wait for
    each other.

    Example: PHOENIX_STORE=postgresql://phoenix@db.internal/phoenix phx db migrate
    """
    from phoenix_protocol.store import _pg

    url = _url(config)
    applied = _pg.migrate(url)
    result: dict[str, Any] = {"server": _pg.describe(url), "applied": applied, **_pg.status(url)}
    if out.as_json:
        out.json(result)
        return
    for step in applied:
        out.console.print(f"applied migration {step['version']}: {step['description']}")
    out.console.print(f"{result['server']}: schema version {result['current']} (latest {result['latest']})")


@db_group.command("status")
@home_common
def db_status(home: Home, config: Config, out: Output) -> None:
    """The schema version of the PostgreSQL store and the migrations not applied yet (nothing is changed).

    Example: phx db status --json
    """
    from rich.table import Table

    from phoenix_protocol.store import _pg

    info = _pg.status(_url(config))
    if out.as_json:
        out.json(info)
        return
    table = Table(title=f"{info['server']}: schema {info['current']} of {info['latest']}")
    table.add_column("version", justify="right")
    table.add_column("migration")
    table.add_column("applied")
    for step in info["applied"]:
        table.add_row(str(step["version"]), step["description"], step["applied_at"])
    for step in info["pending"]:
        table.add_row(str(step["version"]), step["description"], "[yellow]pending[/yellow]")
    out.console.print(table)


@db_group.command("sync")
@home_common
def db_sync(home: Home, config: Config, out: Output) -> None:
    """Pass this machine's copies of the agents' state and ops events on to the PostgreSQL store
    now (the hooks do it every 30 s and at every other change), or take newer records from it.

    Example: phx db sync --json
    """
    from rich.table import Table

    from phoenix_protocol.services._agent import sync_copies
    from phoenix_protocol.store import _pg

    url = _url(config)
    with _progress(out) as say:
        reports = sync_copies(home, progress=say, config=config)
    if out.as_json:
        out.json({"server": _pg.describe(url), "agents": reports})
        return
    table = Table(title=f"{_pg.describe(url)}: {len(reports)} agent copies")
    table.add_column("agent")
    table.add_column("events passed on", justify="right")
    table.add_column("took the server's record")
    table.add_column("revision", justify="right")
    for report in reports:
        rev = report["rev"]
        table.add_row(
            report["agent"],
            str(report["events"]),
            "yes" if report["pulled"] else "no",
            "-" if rev is None else str(rev),
        )
    out.console.print(table)


def _progress(out: Output) -> AbstractContextManager[Callable[[str], None]]:
    """A transient rich status line for text output (nothing in --json mode)."""
    import contextlib

    if out.as_json:
        return contextlib.nullcontext(lambda _what: None)
    from rich.progress import Progress, SpinnerColumn, TextColumn

    @contextlib.contextmanager
    def running() -> Iterator[Callable[[str], None]]:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=out.console, transient=True) as bar:
            task = bar.add_task("starting")
            yield lambda what: bar.update(task, description=what)

    return running()


@main_group.command("export")
@click.argument("path", type=click.Path(dir_okay=False))
@home_common
def export_cmd(home: Home, config: Config, out: Output, path: str) -> None:
    """Write the whole home and its store (agents' files, teams, memory) to PATH (JSON lines, 0600).

    Example: phx export home.phx.jsonl
    """
    from phoenix_protocol.services._transfer import export_home

    with _progress(out) as say:
        counts = export_home(home, path, progress=say, config=config)
    if out.as_json:
        out.json({"path": path, "records": counts})
    else:
        out.console.print(f"exported {sum(counts.values())} records to {path}: " + _summary(counts))


@main_group.command("import")
@click.argument("path", type=click.Path(dir_okay=False, exists=True))
@home_common
def import_cmd(home: Home, config: Config, out: Output, path: str) -> None:
    """Load an export into this home and its store; refused (nothing written) if any of it exists.

    Example: PHOENIX_STORE=postgresql://phoenix@db/phoenix phx import home.phx.jsonl --home /new/home
    """
    from phoenix_protocol.services._transfer import import_home

    with _progress(out) as say:
        counts = import_home(home, path, progress=say, config=config)
    if out.as_json:
        out.json({"path": path, "records": counts})
    else:
        out.console.print(f"imported {sum(counts.values())} records from {path}: " + _summary(counts))


def _summary(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "nothing"
