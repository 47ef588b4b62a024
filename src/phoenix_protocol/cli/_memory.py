"""``phx memory store|recall|list|delete``: the agent's namespaced memory (seed 002).

On the local home by default; with ``--server URL`` (or ``$PHOENIX_SERVER``) through the memory
bridge, with the same output. Registered on the ``phx`` group by ``_cli``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from phoenix_protocol.cli._main import Output, common, main_group
from phoenix_protocol.cli._remote import attach
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.services._agent import Agent

if TYPE_CHECKING:
    from phoenix_protocol.client import PhoenixClient
    from phoenix_protocol.store._memory import MemoryStore

__all__: list[str] = []


def _metadata(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    import json

    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise UsageError(f"--metadata must be a JSON object: {exc}.") from None
    if not isinstance(value, dict):
        raise UsageError('--metadata must be a JSON object, e.g. \'{"source": "review"}\'.')
    return value


_UNITS = {"m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def _when(value: str | None, name: str, now_ms: int) -> str | None:
    """``--since``/``--until`` as an ISO 8601 time: given as one, or as an age (``30m``, ``12h``,
    ``7d``, ``2w``: that long before now)."""
    if value is None:
        return None
    from phoenix_protocol.core._clock import iso_from_ms
    from phoenix_protocol.store._memory import time_bound

    text = value.strip().lower()
    if text[:-1].isdigit() and text[-1:] in _UNITS:
        return iso_from_ms(now_ms - int(text[:-1]) * _UNITS[text[-1]])
    return iso_from_ms(int(time_bound(value, f"--{name}") or 0))


def _window(agent_or_clock: Any, since: str | None, until: str | None) -> tuple[str | None, str | None]:
    import time

    clock = getattr(agent_or_clock, "clock", None)
    now = clock.now_ms() if clock is not None else int(time.time() * 1000)
    return _when(since, "since", now), _when(until, "until", now)


def _time_options(func: Any) -> Any:
    """``--since`` and ``--until`` (shared by recall and list)."""
    func = click.option(
        "--until", metavar="WHEN", help="Only memories stored before WHEN (ISO 8601, or an age: 30m, 12h, 7d, 2w)."
    )(func)
    return click.option(
        "--since", metavar="WHEN", help="Only memories stored at or after WHEN (ISO 8601, or an age: 30m, 12h, 7d, 2w)."
    )(func)


def _store(agent: Agent) -> MemoryStore:
    from phoenix_protocol.store._memory import open_memory_store

    return open_memory_store(agent.home, config=agent.config, clock=agent.clock)


def _table(out: Output, records: list[dict[str, Any]], *, scores: bool = False) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, padding=(0, 1), header_style="bold")
    if scores:
        table.add_column("score", justify="right", no_wrap=True)
    for column in ("id", "created", "tags"):
        table.add_column(column, no_wrap=True)
    table.add_column("text", overflow="fold")
    for r in records:
        text = " ".join(str(r["text"]).split())
        row = [
            escape(r["id"]),
            str(r["created_at"])[:19].replace("T", " "),
            escape(", ".join(r["tags"])),
            escape(text if len(text) <= 200 else text[:199] + "…"),
        ]
        table.add_row(*([f"{r['score']:.3f}"] if scores else []), *row)
    out.console.print(table)
    if not records:
        out.console.print("(no memories)")


@main_group.group("memory")
def memory_group() -> None:
    """The agent's memory: store text with tags, recall it ranked (BM25, or fused with embeddings), list, delete.

    Example: phx memory recall "why do timers drift" --k 3
    """


# -- store ---------------------------------------------------------------------------------------


def _print_stored(out: Output, agent_id: str, record: dict[str, Any]) -> None:
    if out.as_json:
        out.json({"agent": agent_id, "memory": record})
    else:
        from rich.markup import escape

        out.console.print(f"stored {escape(record['id'])}")


@memory_group.command("store")
@click.argument("text")
@click.option("--tag", "tags", multiple=True, metavar="TAG", help="A tag (repeatable).")
@click.option("--metadata", metavar="JSON", help="A JSON object stored with the memory.")
@common
def memory_store(agent: Agent, out: Output, text: str, tags: tuple[str, ...], metadata: str | None) -> None:
    """Store TEXT in the agent's namespace; its id joins the session's recent memories.

    Example: phx memory store "Timers drift under load" --tag asyncio
    """
    from phoenix_protocol.services._sessions import remember

    record = remember(agent, text, tags=list(tags), metadata=_metadata(metadata), store=_store(agent))
    _print_stored(out, agent.id, record.as_dict())


def _remote_store(
    client: PhoenixClient, out: Output, agent_id: str, text: str, tags: tuple[str, ...], metadata: str | None
) -> None:
    _print_stored(out, agent_id, client.memory_store(agent_id, text, tags=tags, metadata=_metadata(metadata)))


# -- recall --------------------------------------------------------------------------------------


def _print_recalled(out: Output, agent_id: str, query: str, results: list[dict[str, Any]]) -> None:
    if out.as_json:
        from phoenix_protocol.core._redact import redact

        out.json({"agent": agent_id, "query": redact(query), "results": results})
    else:
        _table(out, results, scores=True)


@memory_group.command("recall")
@click.argument("query")
@click.option("--k", "k", type=click.IntRange(1, 100), default=5, show_default=True, help="How many memories.")
@click.option("--tag", "tags", multiple=True, metavar="TAG", help="Only memories with this tag (repeatable).")
@_time_options
@click.option(
    "--mode",
    type=click.Choice(["lexical", "semantic"]),
    help="lexical (BM25), or semantic (fused with sentence embeddings; the [persona] extra). "
    "Default: the memory_recall setting.",
)
@common
def memory_recall(
    agent: Agent,
    out: Output,
    query: str,
    k: int,
    tags: tuple[str, ...],
    since: str | None,
    until: str | None,
    mode: str | None,
) -> None:
    """Recall the memories that best match QUERY, best first (none when nothing matches well enough).

    Example: phx memory recall "why do timers drift" --k 3 --since 7d
    """
    from phoenix_protocol.services._sessions import recall_for

    low, high = _window(agent, since, until)
    found = recall_for(
        agent, query, k=k, tags=list(tags) or None, since=low, until=high, mode=mode, store=_store(agent)
    )
    _print_recalled(out, agent.id, query, [{**r.as_dict(), "score": score} for r, score in found])


def _remote_recall(
    client: PhoenixClient,
    out: Output,
    agent_id: str,
    query: str,
    k: int,
    tags: tuple[str, ...],
    since: str | None,
    until: str | None,
    mode: str | None,
) -> None:
    low, high = _window(None, since, until)
    results = client.memory_recall(agent_id, query, k=k, tags=list(tags) or None, since=low, until=high, mode=mode)
    _print_recalled(out, agent_id, query, results)


# -- list ----------------------------------------------------------------------------------------


def _print_list(out: Output, agent_id: str, records: list[dict[str, Any]]) -> None:
    if out.as_json:
        out.json({"agent": agent_id, "memories": records})
    else:
        _table(out, records)


@memory_group.command("list")
@click.option("--tag", "tags", multiple=True, metavar="TAG", help="Only memories with this tag (repeatable).")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True)
@_time_options
@common
def memory_list(
    agent: Agent,
    out: Output,
    tags: tuple[str, ...],
    limit: int,
    offset: int,
    since: str | None,
    until: str | None,
) -> None:
    """List the agent's memories, newest first.

    Example: phx memory list --tag asyncio --since 2026-11-01 --json
    """
    low, high = _window(agent, since, until)
    records = _store(agent).list(agent.id, tags=list(tags) or None, limit=limit, offset=offset, since=low, until=high)
    _print_list(out, agent.id, [r.as_dict() for r in records])


def _remote_list(
    client: PhoenixClient,
    out: Output,
    agent_id: str,
    tags: tuple[str, ...],
    limit: int,
    offset: int,
    since: str | None,
    until: str | None,
) -> None:
    low, high = _window(None, since, until)
    records = client.memory_list(agent_id, tags=list(tags) or None, limit=limit, offset=offset, since=low, until=high)
    _print_list(out, agent_id, records)


# -- delete --------------------------------------------------------------------------------------


def _print_deleted(out: Output, agent_id: str, memory_id: str) -> None:
    if out.as_json:
        out.json({"agent": agent_id, "deleted": memory_id})
    else:
        out.console.print(f"deleted {memory_id}")


@memory_group.command("delete")
@click.argument("memory_id", metavar="ID")
@common
def memory_delete(agent: Agent, out: Output, memory_id: str) -> None:
    """Delete memory ID from the agent's namespace.

    Example: phx memory delete mem-0123456789abcdef01234567
    """
    if not _store(agent).delete(agent.id, memory_id):
        raise UsageError(f"no memory {memory_id!r} in {agent.id}'s namespace (`phx memory list`).")
    _print_deleted(out, agent.id, memory_id)


def _remote_delete(client: PhoenixClient, out: Output, agent_id: str, memory_id: str) -> None:
    client.memory_delete(agent_id, memory_id)
    _print_deleted(out, agent_id, memory_id)


attach(memory_store, _remote_store)
attach(memory_recall, _remote_recall)
attach(memory_list, _remote_list)
attach(memory_delete, _remote_delete)
