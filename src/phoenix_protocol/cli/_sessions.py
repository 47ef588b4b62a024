"""``phx checkpoint``, ``phx restore``, ``phx sessions``, ``phx identity``: the CLI of seeds 003 and 002.

Registered on the ``phx`` group by ``_cli``; same conventions (``--agent``, ``--home``, ``--json``,
exit codes).
"""

from __future__ import annotations

from typing import Any

import click

from phoenix_protocol.cli._main import Output, common, main_group
from phoenix_protocol.core._errors import CorruptStateError, PhoenixError, UsageError
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.services._checkpoints import CHECKPOINT_TYPES, Checkpoint, CheckpointInfo, joined_problems

__all__ = ["check_checkpoint_type"]


_NAME_FROM_WIDTH = 130
"""Terminal width from which ``phx checkpoint list`` shows each checkpoint's file name (narrower:
its number, which ``show`` and ``restore --checkpoint`` take as well; ``--json`` always has both)."""


def _operation_statuses(agent: Agent, infos: list[CheckpointInfo]) -> dict[str, str]:
    """The status of the operation of each pre-operation checkpoint in ``infos``, by operation id:
    ``open``, ``failed`` (its checkpoint kept) or ``succeeded`` (one not released yet). Read only
    when one is listed (operations.jsonl, small)."""
    ids = {i.operation_id for i in infos if i.operation_id}
    if not ids:
        return {}
    outcomes = agent.checkpoints.operation_outcomes()
    return {op_id: outcomes.get(op_id, "open") for op_id in ids}


def _operation_status(agent: Agent, checkpoint: Checkpoint) -> str | None:
    """``_operation_statuses`` for one checkpoint; ``None``: it has no operation."""
    operation = checkpoint.data.get("operation")
    op_id = operation.get("id") if isinstance(operation, dict) else None
    if not isinstance(op_id, str) or not op_id:
        return None
    return agent.checkpoints.operation_outcomes().get(op_id, "open")


def _info_table(out: Output, infos: list[CheckpointInfo], statuses: dict[str, str]) -> None:
    from rich.markup import escape
    from rich.table import Table

    named = out.console.width >= _NAME_FROM_WIDTH
    table = Table(box=None, padding=(0, 1), header_style="bold")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("type", no_wrap=True)
    table.add_column("taken (UTC)", no_wrap=True, min_width=19)
    table.add_column("size", justify="right", no_wrap=True)
    if named:
        table.add_column("name", no_wrap=True)
    table.add_column("summary", overflow="fold", min_width=12)
    for info in infos:
        status = statuses.get(info.operation_id or "")
        cells = [
            str(info.seq),
            info.checkpoint_type + (f" ({status})" if status else ""),
            info.timestamp[:19].replace("T", " "),
            f"{info.size / 1024:.1f} KB",
        ]
        if named:
            cells.append(escape(info.name))
        table.add_row(*cells, escape(_short(info.label or "", 80)))
    out.console.print(table)
    if not infos:
        out.console.print("(no checkpoints)")


def _show_checkpoint(
    out: Output, agent: Agent, checkpoint: Checkpoint, problems: list[str], operation_status: str | None = None
) -> None:
    """``operation_status``: that of the checkpoint's operation (``_operation_status``), when known."""
    if out.as_json:
        out.json(
            {
                "agent": agent.id,
                "path": checkpoint.path,
                "name": checkpoint.name,
                "checkpoint": checkpoint.data,
                "operation_status": operation_status,
                "problems": problems,
            }
        )
        return
    from rich.markup import escape
    from rich.table import Table

    for problem in problems:  # checkpoints skipped on the way
        out.console.print(f"[yellow]skipped:[/] {escape(problem)}")
    source = "checksum ok"
    out.console.print(
        f"[bold]{escape(checkpoint.name)}[/] ({escape(checkpoint.checkpoint_type)}, "
        f"{escape(checkpoint.timestamp)}, {source})"
    )
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, text in _checkpoint_lines(checkpoint, operation_status):
        grid.add_row(label, escape(text))
    out.console.print(grid)


def _duration(seconds: int) -> str:
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _short(value: object, limit: int = 120) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _listed(items: list[Any], limit: int = 3) -> str:
    shown = "; ".join(_short(item, 60) for item in items[:limit])
    return f"{shown}; \u2026 ({len(items)} in all)" if len(items) > limit else shown


def _checkpoint_lines(checkpoint: Checkpoint, operation_status: str | None = None) -> list[tuple[str, str]]:
    """What ``phx checkpoint show`` prints for a checkpoint, as (label, text) rows: each seed
    section in a line or two (``--json`` has them whole). Tolerant of sections a custom
    collector shaped its own way (shown as compact JSON)."""

    def part(name: str) -> dict[str, Any]:
        value = checkpoint.section(name)
        return value if isinstance(value, dict) else {}

    rows: list[tuple[str, str]] = []
    if checkpoint.summary:
        rows.append(("summary", checkpoint.summary))
    operation = checkpoint.data.get("operation")
    if isinstance(operation, dict):
        status = f", {operation_status}" if operation_status else ""
        rows.append(("operation", f"{operation.get('name') or '?'} ({operation.get('id') or '?'}{status})"))
    task = part("current_task")
    context: dict[str, Any] = task["context"] if isinstance(task.get("context"), dict) else {}
    if task:
        progress = task.get("progress_percentage")
        status = str(task.get("status") or "unknown") + (
            f", {progress:g} %" if isinstance(progress, int | float) else ""
        )
        rows.append(("task", f"{context.get('description') or '-'} ({status})"))
        for key, label in (("last_output", "last output"), ("error_message", "error"), ("last_tool", "last tool")):
            if context.get(key):
                rows.append((label, _short(context[key])))
    meta = part("metadata")
    if meta.get("session_id") or meta.get("started_at"):
        seconds = meta.get("duration_seconds")
        took = f", {_duration(seconds)}" if isinstance(seconds, int) else ""
        rows.append(
            (
                "session",
                f"{meta.get('session_id') or '?'} (from {meta.get('started_at') or '?'} to {meta.get('ended_at') or '?'}{took})",
            )
        )
    ops = part("operational_context")
    for key in ("goals", "constraints", "decisions"):
        items = ops.get(key)
        if isinstance(items, list) and items:
            shown = [d.get("resolved", d) if isinstance(d, dict) else d for d in items]
            rows.append((key, _listed(shown if key != "decisions" else shown[::-1])))
    for item in part("context").get("pending_items") or []:
        rows.append(("pending", _short(item)))
    mailbox = part("mailbox")
    if mailbox.get("last_processed_id") or mailbox.get("pending_count"):
        rows.append(
            (
                "mailbox",
                f"last processed {mailbox.get('last_processed_id') or '-'}, {mailbox.get('pending_count') or 0} pending",
            )
        )
    memories = part("recent_memories")
    ids = memories.get("memory_ids")
    if isinstance(ids, list) and ids:
        rows.append(("memories", f"{len(ids)} stored this session: {_listed(ids)}"))
    if memories.get("last_recall_query"):
        rows.append(("last recall", _short(memories["last_recall_query"])))
    working = part("working_memory")
    stack = working.get("context_stack")
    if isinstance(stack, list) and stack:
        rows.append(("context stack", " > ".join(_short(item, 60) for item in stack)))
    files = working.get("open_files")
    if isinstance(files, list) and files:
        rows.append(("open files", _listed(files, 5)))
    if working.get("scratchpad"):
        rows.append(("scratchpad", f"{len(str(working['scratchpad'])):,} characters (the brief)"))
    updates = part("identity_updates")
    if updates:
        added = [
            f"{len(updates.get(key) or [])} {word}"
            for key, word in (
                ("new_beliefs", "beliefs"),
                ("new_skills", "skills"),
                ("new_relationships", "relationships"),
            )
        ]
        drift: dict[str, Any] = updates["drift_checks"] if isinstance(updates.get("drift_checks"), dict) else {}
        rows.append(
            (
                "identity",
                "new: "
                + ", ".join(added)
                + f"; drift checks {drift.get('passed', 0)} passed, {drift.get('failed', 0)} failed",
            )
        )
    memory = part("memory")
    if memory:
        rows.append(
            ("events", f"{len(memory.get('session') or [])} this session, {len(memory.get('short_term') or [])} recent")
        )
    extensions = checkpoint.data.get("extensions")
    held = sorted(str(k) for k, v in extensions.items() if v is not None) if isinstance(extensions, dict) else []
    if held:  # an extension with nothing in it (no identity yet, say) is not listed
        rows.append(("extensions", ", ".join(held)))
    return rows


def check_checkpoint_type(checkpoint_type: str) -> None:
    """Refuse (``UsageError``) a type `phx checkpoint` does not take: a pre-operation checkpoint,
    which would have no operation (no end-op or prune would remove it). The local command and its
    ``--server`` form (``_cli_remote``) both ask here, before anything is written or sent."""
    if checkpoint_type == "pre-operation":
        raise UsageError(
            "a pre-operation checkpoint belongs to an operation: take it with `phx checkpoint begin-op NAME` "
            "(and release or keep it with `phx checkpoint end-op ID`)."
        )


@main_group.group("checkpoint", invoke_without_command=True)
@click.option(
    "--summary",
    help="What was done and what remains (stored with the checkpoint). Left out, or blank: for a session "
    "checkpoint, the task and the number of open items.",
)
@click.option("--type", "checkpoint_type", type=click.Choice(CHECKPOINT_TYPES), default="session", show_default=True)
@common
def checkpoint_group(agent: Agent, out: Output, summary: str | None, checkpoint_type: str) -> None:
    """Take a checkpoint (default: a session checkpoint, as seed 002's `checkpoint --summary`).

    --agent, --home and --json given before a subcommand apply to it (`phx checkpoint --agent zero
    list`) unless it gives its own; --summary and --type belong to this command alone.

    Example: phx checkpoint --agent zero --summary "Implemented namespace isolation"
    """
    check_checkpoint_type(checkpoint_type)
    unstarted = False
    if checkpoint_type == "session":
        from phoenix_protocol.services._sessions import end, ending_session

        unstarted = ending_session(agent) is None
        info = end(agent, summary=summary)
    else:
        info = agent.checkpoints.create(checkpoint_type, summary=summary)
    note = (
        "no session was started for this agent, so this one has no start or duration in `phx sessions`; "
        "`phx restore` (or the SessionStart hook) starts one."
    )
    failed = (
        f"sections not collected: {', '.join(info.failed_sections)} (the checkpoint holds each one's error instead; "
        f"`phx checkpoint show {info.name}` shows them, `phx doctor` checks and repairs the agent's files)."
        if info.failed_sections
        else None
    )
    if out.as_json:
        data: dict[str, Any] = {"agent": agent.id, "checkpoint": info.as_dict()}
        data["failed_sections"] = list(info.failed_sections)
        if checkpoint_type == "session":
            data["session_started"] = not unstarted
            if unstarted:
                data["note"] = note
        out.json(data)
    else:
        from rich.markup import escape

        out.console.print(f"[green]checkpoint[/] {escape(info.name)} ({info.size / 1024:.1f} KB)")
        if failed is not None:
            out.console.print(f"[yellow]warning:[/] {escape(failed)}")
        if unstarted:
            out.console.print(f"[yellow]note:[/] {escape(note)}")


@checkpoint_group.command("list")
@click.option("--type", "checkpoint_type", type=click.Choice(CHECKPOINT_TYPES), help="Only this type.")
@click.option("--limit", type=click.IntRange(min=1), help="At most N, newest first.")
@common
def checkpoint_list(agent: Agent, out: Output, checkpoint_type: str | None, limit: int | None) -> None:
    """List checkpoints, newest first (from the index; nothing is read).

    Example: phx checkpoint list --type routine --json
    """
    infos = agent.checkpoints.entries(checkpoint_type, limit=limit)
    statuses = _operation_statuses(agent, infos)
    if out.as_json:
        rows = [{**i.as_dict(), "operation_status": statuses.get(i.operation_id or "")} for i in infos]
        out.json({"agent": agent.id, "checkpoints": rows})
    else:
        _info_table(out, infos, statuses)


@checkpoint_group.command("show")
@click.argument("name")
@common
def checkpoint_show(agent: Agent, out: Output, name: str) -> None:
    """Show one checkpoint (checksum verified). NAME is its file name, its number (the `#` of
    `phx checkpoint list`), or `latest`.

    Example: phx checkpoint show 12
    """
    problems: list[str] = []
    if name == "latest":
        checkpoint, problems = agent.checkpoints.latest()
        if checkpoint is None:
            raise _no_valid_checkpoint(agent, problems)
    else:
        checkpoint = agent.checkpoints.read(name)
    _show_checkpoint(out, agent, checkpoint, problems, _operation_status(agent, checkpoint))


@checkpoint_group.command("latest")
@click.option("--type", "checkpoint_type", type=click.Choice(CHECKPOINT_TYPES), help="The newest of this type.")
@common
def checkpoint_latest(agent: Agent, out: Output, checkpoint_type: str | None) -> None:
    """The newest valid checkpoint; damaged ones are reported and skipped.

    Example: phx checkpoint latest --type session
    """
    checkpoint, problems = agent.checkpoints.latest(checkpoint_type)
    if checkpoint is None:
        raise _no_valid_checkpoint(agent, problems, checkpoint_type)
    _show_checkpoint(out, agent, checkpoint, problems, _operation_status(agent, checkpoint))


def _no_valid_checkpoint(agent: Agent, problems: list[str], checkpoint_type: str | None = None) -> PhoenixError:
    """Why ``latest`` found nothing: no checkpoint at all is a usage error (exit 2); only damaged
    ones (``problems``: skipped) is corrupt data (exit 3), as any other."""
    missing = f"agent {agent.id!r} has no valid checkpoint" + (f" of type {checkpoint_type}" if checkpoint_type else "")
    if not problems:
        return UsageError(missing + ".")
    return CorruptStateError(
        f"{missing}: each one met is damaged ({joined_problems(problems)}); `phx doctor` repairs what it can."
    )


@checkpoint_group.command("prune")
@common
def checkpoint_prune(agent: Agent, out: Output) -> None:
    """Enforce the retention policy now (it is also enforced on every write).

    Example: phx checkpoint prune
    """
    dropped = agent.checkpoints.prune()
    if out.as_json:
        out.json({"agent": agent.id, "removed": [d.as_dict() for d in dropped]})
    else:
        out.console.print(f"removed {len(dropped)} checkpoint(s)")


@checkpoint_group.command("export")
@click.argument("directory", type=click.Path(file_okay=False))
@common
def checkpoint_export(agent: Agent, out: Output, directory: str) -> None:
    """Write each checkpoint as seed 003's named file, <agent>_<timestamp>_<type>.checkpoint, in
    DIRECTORY (checksum verified first; files 0600; those already there replaced, no other file
    touched). A damaged checkpoint is reported and not written.

    Example: phx checkpoint export --agent zero ./checkpoints && jq .summary ./checkpoints/*.checkpoint
    """
    written, problems = agent.checkpoints.export(directory)
    if out.as_json:
        out.json({"agent": agent.id, "directory": directory, "written": written, "problems": problems})
    else:
        from rich.markup import escape

        for problem in problems:
            out.console.print(f"[yellow]not written:[/] {escape(problem)}")
        out.console.print(f"wrote {len(written)} checkpoint file(s) to {escape(directory)}")
    if problems:
        raise CorruptStateError(
            f"{len(problems)} checkpoint(s) of {agent.id!r} are damaged and were not written ({joined_problems(problems)})."
        )


@checkpoint_group.command("begin-op")
@click.argument("operation")
@common
def checkpoint_begin_op(agent: Agent, out: Output, operation: str) -> None:
    """Take a pre-operation checkpoint before a risky OPERATION; prints the operation id.

    Example: phx checkpoint begin-op "migrate db"
    """
    op = agent.checkpoints.begin_operation(operation)
    if out.as_json:
        out.json(
            {"agent": agent.id, "operation": {"id": op.id, "name": op.name}, "checkpoint": op.checkpoint.as_dict()}
        )
    else:
        from rich.markup import escape

        out.console.print(f"pre-operation checkpoint {escape(op.checkpoint.name)}")
        out.console.print(op.id)


@checkpoint_group.command("end-op")
@click.argument("operation_id")
@click.option("--failed", is_flag=True, help="The operation failed: keep its checkpoint.")
@click.option("--error", "error", metavar="MSG", help="What went wrong (implies --failed).")
@common
def checkpoint_end_op(agent: Agent, out: Output, operation_id: str, failed: bool, error: str | None) -> None:
    """End an operation: success releases its checkpoint, --failed (or --error MSG) keeps it.

    Example: phx checkpoint end-op op-1767225600000-4242-1
    """
    failed = failed or error is not None
    removed = agent.checkpoints.end_operation(operation_id, success=not failed, error=error)
    if out.as_json:
        out.json(
            {
                "agent": agent.id,
                "operation": operation_id,
                "succeeded": not failed,
                "removed": [r.name for r in removed],
            }
        )
    else:
        out.console.print(
            "operation succeeded; checkpoint released" if not failed else "operation failed; checkpoint kept"
        )


@main_group.command("restore")
@click.option(
    "--checkpoint",
    "name",
    metavar="NAME",
    help="Restore from this checkpoint: its name or its number, the # of `phx checkpoint list` "
    "(default: the newest valid one).",
)
@click.option("--force", is_flag=True, help="Overwrite the current task and notes with the checkpoint's.")
@click.option("--session", metavar="ID", help="Session id (default: a new one).")
@common
def restore_command(agent: Agent, out: Output, name: str | None, force: bool, session: str | None) -> None:
    """Start a session from the newest checkpoint (seed 002's restore): identity, context, working memory.

    Example: phx restore --agent zero
    """
    from phoenix_protocol.services._sessions import start_session

    # A named checkpoint is restored first: ownership, checksum and version refused before anything is written.
    result = agent.checkpoints.restore(name, force=force) if name is not None else None
    started = start_session(agent, session, source="restore", restore=name is None, force=force, restored=result)
    checkpoint = started.checkpoint
    data = started.as_dict()
    if out.as_json:
        out.json({"agent": agent.id, **data})
        return
    from rich.markup import escape

    out.console.print(f"session {escape(started.session_id)} started {started.started_at}")
    if checkpoint is not None:
        _show_checkpoint(out, agent, checkpoint, [])
    else:
        out.console.print("no checkpoint to restore from")
    for problem in data["problems"]:
        out.console.print(f"[yellow]problem:[/] {escape(problem)}")


@main_group.command("sessions")
@common
def sessions_command(agent: Agent, out: Output) -> None:
    """List the agent's sessions with start, end and duration.

    Example: phx sessions --agent zero
    """
    from phoenix_protocol.services._sessions import read_sessions

    sessions, problems = read_sessions(agent)
    _print_sessions(out, agent.id, sessions, [p.as_dict() for p in problems])


def _print_sessions(out: Output, agent_id: str, sessions: list[dict[str, Any]], problems: list[dict[str, Any]]) -> None:
    """The sessions as a table (or ``--json``), here or from a memory bridge, and the problems
    met reading them (``LogProblem.as_dict``: lines of sessions.jsonl skipped), as ``phx log``
    reports its own."""
    if out.as_json:
        out.json({"agent": agent_id, "sessions": sessions, "problems": problems})
        return
    from rich.markup import escape
    from rich.table import Table

    # The times and the duration keep their width in a narrow terminal; the session id (whole in
    # --json) is cut first, then the summary folds.
    table = Table(box=None, padding=(0, 1), header_style="bold")
    table.add_column("started", no_wrap=True, min_width=19)
    table.add_column("ended", no_wrap=True, min_width=19)
    table.add_column("duration", no_wrap=True, min_width=8)
    table.add_column("session", overflow="ellipsis", min_width=8)
    table.add_column("summary", overflow="fold", min_width=12)
    for s in sessions:
        duration = s.get("duration_seconds")
        table.add_row(
            str(s.get("started_at") or "?")[:19].replace("T", " "),
            _session_end(s),
            _duration(duration) if isinstance(duration, int) else "-",
            escape(str(s["session_id"])),
            escape(_short(str(s.get("summary") or ""), 80)),
        )
    out.console.print(table)
    if not sessions:
        out.console.print("(no sessions yet)")
    for problem in problems:
        out.console.print(
            f"[yellow]warning:[/] {escape(str(problem['path']))}:{problem['line']}: {escape(str(problem['message']))}"
        )


def _session_end(session: dict[str, Any]) -> str:
    """The "ended" cell: the end time, or why there is none (``open``, ``interrupted`` in yellow)."""
    ended = session.get("ended_at")
    if ended:
        return str(ended)[:19].replace("T", " ")
    status = session.get("status")
    if status == "interrupted":
        return "[yellow]interrupted[/]"
    return str(status or "open")


@main_group.group("identity")
def identity_group() -> None:
    """The agent's identity.yaml: a sealed immutable core and a mutable section.

    Example: phx identity show --agent zero
    """


def _print_identity(out: Output, agent: Agent, identity: Any) -> None:
    if out.as_json:
        out.json({"agent": agent.id, "path": agent.identity.path, "identity": identity.as_dict()})
        return
    import yaml
    from rich.markup import escape

    out.console.print(escape(yaml.safe_dump(identity.as_dict(), sort_keys=False, allow_unicode=True)))


@identity_group.command("show")
@common
def identity_show(agent: Agent, out: Output) -> None:
    """Show identity.yaml (refused if its core was edited by hand).

    Example: phx identity show --json
    """
    _print_identity(out, agent, agent.identity.read())


def _parse_value(raw: str, path: str = "") -> object:
    """VALUE of `phx identity set`: YAML for numbers, booleans, null and flow collections
    (``[a, b]``, ``{k: v}``); text as it was typed for ``state.current_focus`` and wherever YAML
    would make a mapping or a list of plain text ("Port: the scheduler", "- draft")."""
    import yaml

    from phoenix_protocol.agent._identity import load_yaml

    if path.removeprefix("mutable.") == "state.current_focus":
        return raw
    try:
        value = load_yaml(raw)
    except (yaml.YAMLError, ValueError):  # ValueError: a date that is none (2026-13-45)
        return raw
    if isinstance(value, dict | list):
        return value if raw.lstrip().startswith(("[", "{")) else raw
    return value if value is None or isinstance(value, str | int | float) else raw  # a date stays text


@identity_group.command("set")
@click.argument("path")
@click.argument("value")
@common
def identity_set(agent: Agent, out: Output, path: str, value: str) -> None:
    """Set a value in the mutable section (VALUE is read as YAML: numbers, true/false, null,
    [flow, lists]; state.current_focus and other plain text are kept as typed); the core is refused.

    Example: phx identity set state.current_focus "Port the scheduler"
    """
    _print_identity(out, agent, agent.identity.set(path, _parse_value(value, path)))


@identity_group.command("add")
@click.argument("kind", type=click.Choice(["belief", "skill", "relationship"]))
@click.argument("name")
@click.option("--confidence", type=float, help="For a belief: 0 to 1.")
@click.option("--level", help="For a skill.")
@click.option("--type", "relation", help="For a relationship.")
@common
def identity_add(
    agent: Agent, out: Output, kind: str, name: str, confidence: float | None, level: str | None, relation: str | None
) -> None:
    """Add (or update) a belief, skill or relationship.

    Example: phx identity add belief "asyncio timers drift under load" --confidence 0.7
    """
    if kind == "belief":
        entry: dict[str, Any] = {"subject": name, "confidence": 0.5 if confidence is None else confidence}
    elif kind == "skill":
        entry = {"name": name, "level": level or "familiar"}
    else:
        entry = {"entity": name, "type": relation or "peer"}
    _print_identity(out, agent, agent.identity.add(kind, entry))


@identity_group.command("reset-core")
@click.option(
    "--from-file",
    "from_file",
    type=click.Path(exists=True, dir_okay=False),
    help="YAML with the new immutable section.",
)
@common
def identity_reset_core(agent: Agent, out: Output, from_file: str | None) -> None:
    """Change the immutable core on purpose (logged): seal the core as it now is in the file,
    or as given by --from-file.

    Example: phx identity reset-core
    """
    immutable = None if from_file is None else _core_from_file(from_file)
    _print_identity(out, agent, agent.identity.reset_core(immutable))


def _core_from_file(path: str) -> dict[str, Any]:
    """The immutable section in ``path`` (the section itself, or a document with it under
    ``immutable``), dates as text as identity.yaml's are read; ``UsageError`` unless it is valid
    YAML holding a mapping that is not empty."""
    import yaml

    from phoenix_protocol.agent._identity import _texts, load_yaml

    with open(path, "rb") as fh:
        data = fh.read()
    try:
        core = load_yaml(data)
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: a date that is none (2026-13-45)
        raise UsageError(f"{path} is not valid YAML ({' '.join(str(exc).split())}); nothing was changed.") from None
    if isinstance(core, dict) and "immutable" in core:
        core = core["immutable"]
    if not isinstance(core, dict) or not core:
        raise UsageError(
            f"{path} holds no immutable section: it must be a mapping (e.g. `name: zero`), or a document "
            "with one under `immutable:`; nothing was changed."
        )
    result: dict[str, Any] = _texts(core)
    return result
