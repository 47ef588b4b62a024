"""``phx team …``: the CLI of seed 004 (teams, tasks, mailbox, liveness, lifecycle, resume).

Registered on the ``phx`` group by ``_cli``. Every command takes ``--home`` and ``--json``; errors
map to the usual exit codes (2 usage, 4 refused: a claim conflict, a read-only team, a lifecycle
step not allowed); ``phx team resume`` and ``probe`` use the seed's codes: 0 attached, 1 transient
(retry), 2 permanent.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from phoenix_protocol.cli._main import (
    EXIT_OK,
    Output,
    _Exit,
    home_common,
    main_group,
    stdout_lost,
    visible,
    write_stdout,
)
from phoenix_protocol.core._config import Config
from phoenix_protocol.core._errors import PhoenixError
from phoenix_protocol.core._home import Home

if TYPE_CHECKING:
    from phoenix_protocol.store._team_store import Inbox
    from phoenix_protocol.store._teams import Team

__all__: list[str] = []

F = TypeVar("F", bound=Callable[..., Any])


def _team(home: Home, config: Config, team_id: str) -> Team:
    from phoenix_protocol.store._teams import Team

    return Team.open(home, team_id, config=config)


def _print_task(out: Output, task: dict[str, Any], verb: str) -> None:
    if out.as_json:
        out.json({"task": task})
        return
    from rich.markup import escape

    owner = f" ({escape(task['assigned_to'])})" if task.get("assigned_to") else ""
    out.console.print(
        f"{verb} [bold]{task['task_id']}[/] {escape('[' + task['status'] + ']')}{owner} {escape(task['title'])}"
    )


def _tasks_table(out: Output, tasks: list[dict[str, Any]]) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, padding=(0, 1), header_style="bold")
    for column in ("task", "status", "owner", "after", "check"):
        table.add_column(column, no_wrap=True)
    table.add_column("title", overflow="fold")
    for t in tasks:
        table.add_row(
            t["task_id"],
            t["status"],
            escape(t.get("assigned_to") or "-"),
            ", ".join(t["dependencies"]) or "-",
            t["checkpoint"].get("check_status", "-"),
            escape(t["title"]),
        )
    out.console.print(table)
    if not tasks:
        out.console.print("(no tasks)")


@main_group.group("team")
def team_group() -> None:
    """Teams of agents: tasks with atomic claims, a mailbox, heartbeats, the resume protocol.

    Example: phx team create release --lead lead
    """


@team_group.command("create")
@click.argument("name")
@click.option("--lead", required=True, metavar="NAME", help="The lead's name.")
@click.option("--check-command", metavar="CMD", help="What consolidation runs (the project's tests, say).")
@click.option(
    "--facts-command", metavar="CMD", help="Whose output hash 'verify facts' compares (default: git HEAD + changes)."
)
@click.option("--id", "team_id", metavar="ID", help="The team's id (default: the name as a slug, plus 5 random hex).")
@home_common
def team_create(
    home: Home,
    config: Config,
    out: Output,
    name: str,
    lead: str,
    check_command: str | None,
    facts_command: str | None,
    team_id: str | None,
) -> None:
    """Create a team; prints its id.

    Example: phx team create release --lead lead --check-command "make test"
    """
    from phoenix_protocol.store._teams import Team

    team = Team.create(
        home,
        name,
        lead=lead,
        check_command=check_command,
        facts_command=facts_command,
        team_id=team_id,
        config=config,
    )
    if out.as_json:
        out.json({"team": team.read()})
    else:
        out.console.print(f"created team [bold]{team.id}[/] (lead {lead})")
        write_stdout(team.id + "\n")


@team_group.command("join")
@click.argument("team_id", metavar="TEAM")
@click.argument("name")
@click.option("--role", default="engineer", show_default=True)
@click.option("--session", metavar="ID", help="The teammate's session id (default: $PHOENIX_SESSION_ID).")
@home_common
def team_join(home: Home, config: Config, out: Output, team_id: str, name: str, role: str, session: str | None) -> None:
    """Join a team (a pending team becomes active).

    Example: phx team join release-1a2b3 alice --role engineer
    """
    mate = _team(home, config, team_id).join(
        name, role=role, session_id=session or os.environ.get("PHOENIX_SESSION_ID") or None
    )
    if out.as_json:
        out.json({"teammate": mate})
    else:
        out.console.print(f"{name} joined {team_id} as {role}")


@team_group.group("task")
def team_task_group() -> None:
    """Add tasks and dependencies.

    Example: phx team task add TEAM "Write the parser"
    """


@team_task_group.command("add")
@click.argument("team_id", metavar="TEAM")
@click.argument("title")
@click.option("--after", multiple=True, metavar="TASK", help="A task this one depends on (repeatable).")
@home_common
def team_task_add(home: Home, config: Config, out: Output, team_id: str, title: str, after: tuple[str, ...]) -> None:
    """Add a task (pending), optionally after others.

    Example: phx team task add TEAM "Integration tests" --after task-0001
    """
    _print_task(out, _team(home, config, team_id).add_task(title, after=list(after)), "added")


@team_task_group.command("depend")
@click.argument("team_id", metavar="TEAM")
@click.argument("task_id", metavar="TASK")
@click.option("--on", "on", required=True, metavar="TASK", help="The task it depends on.")
@home_common
def team_task_depend(home: Home, config: Config, out: Output, team_id: str, task_id: str, on: str) -> None:
    """Make TASK depend on another; a cycle is refused.

    Example: phx team task depend TEAM task-0003 --on task-0002
    """
    _print_task(out, _team(home, config, team_id).add_dependency(task_id, on), "updated")


@team_group.command("tasks")
@click.argument("team_id", metavar="TEAM")
@home_common
def team_tasks(home: Home, config: Config, out: Output, team_id: str) -> None:
    """List every task.

    Example: phx team tasks TEAM --json
    """
    tasks = _team(home, config, team_id).read()["tasks"]
    if out.as_json:
        out.json({"team_id": team_id, "tasks": tasks})
    else:
        _tasks_table(out, tasks)


@team_group.command("ready")
@click.argument("team_id", metavar="TEAM")
@home_common
def team_ready(home: Home, config: Config, out: Output, team_id: str) -> None:
    """Tasks whose dependencies are all completed, ready to claim.

    Example: phx team ready TEAM
    """
    tasks = _team(home, config, team_id).ready()
    if out.as_json:
        out.json({"team_id": team_id, "ready": tasks})
    else:
        _tasks_table(out, tasks)


@team_group.command("claim")
@click.argument("team_id", metavar="TEAM")
@click.argument("task_id", metavar="[TASK]", required=False)
@click.option("--as", "name", required=True, metavar="NAME")
@home_common
def team_claim(home: Home, config: Config, out: Output, team_id: str, task_id: str | None, name: str) -> None:
    """Claim a ready task (without TASK: the first ready one); atomic: of two claimers of one
    task exactly one wins (the other exits 4). With no task ready, prints so and exits 0.

    Example: phx team claim TEAM task-0001 --as alice
    """
    team = _team(home, config, team_id)
    if task_id is not None:
        _print_task(out, team.claim(task_id, name), "claimed")
        return
    task = team.claim_next(name)
    if task is not None:
        _print_task(out, task, "claimed")
    elif out.as_json:
        out.json({"task": None})
    else:
        out.console.print("no task is ready")


@team_group.command("release")
@click.argument("team_id", metavar="TEAM")
@click.argument("task_id", metavar="TASK")
@click.option("--as", "name", required=True, metavar="NAME")
@home_common
def team_release(home: Home, config: Config, out: Output, team_id: str, task_id: str, name: str) -> None:
    """Give a claimed task back to the queue.

    Example: phx team release TEAM task-0001 --as alice
    """
    _print_task(out, _team(home, config, team_id).release(task_id, name), "released")


@team_group.command("done")
@click.argument("team_id", metavar="TEAM")
@click.argument("task_id", metavar="TASK")
@click.option("--as", "name", required=True, metavar="NAME")
@click.option("--check", type=click.Choice(["green", "red", "pending"]), default="green", show_default=True)
@click.option("--file", "files", multiple=True, metavar="PATH", help="A file the task modified (repeatable).")
@home_common
def team_done(
    home: Home, config: Config, out: Output, team_id: str, task_id: str, name: str, check: str, files: tuple[str, ...]
) -> None:
    """Finish a task: --check green completes it, red blocks it.

    Example: phx team done TEAM task-0001 --as alice --check green
    """
    _print_task(out, _team(home, config, team_id).done(task_id, name, check=check, files=list(files)), "done")


@team_group.command("reassign")
@click.argument("team_id", metavar="TEAM")
@click.argument("task_id", metavar="TASK")
@click.argument("new_owner")
@home_common
def team_reassign(home: Home, config: Config, out: Output, team_id: str, task_id: str, new_owner: str) -> None:
    """The seed's --force-reassign: hand a task to NEW_OWNER, who inherits its checkpoint.

    Example: phx team reassign TEAM task-0001 bob
    """
    _print_task(out, _team(home, config, team_id).reassign(task_id, new_owner), "reassigned")


@team_group.command("sweep")
@click.argument("team_id", metavar="TEAM")
@home_common
def team_sweep(home: Home, config: Config, out: Output, team_id: str) -> None:
    """Return tasks held by suspended or stale teammates to the queue.

    Example: phx team sweep TEAM
    """
    back = _team(home, config, team_id).sweep()
    if out.as_json:
        out.json({"team_id": team_id, "returned": back})
    else:
        out.console.print(f"{len(back)} task(s) returned to the queue")


@team_group.command("send")
@click.argument("team_id", metavar="TEAM")
@click.option("--from", "sender", required=True, metavar="NAME")
@click.option("--to", "to", required=True, metavar="NAME|*")
@click.option(
    "--type",
    "kind",
    type=click.Choice(["info", "question", "challenge", "resolution"]),
    default="info",
    show_default=True,
)
@click.option("--subject", required=True)
@click.option("--body", required=True)
@click.option("--id", "msg_id", metavar="MSG_ID", help="Idempotency key: sending the same id twice stores it once.")
@home_common
def team_send(
    home: Home,
    config: Config,
    out: Output,
    team_id: str,
    sender: str,
    to: str,
    kind: str,
    subject: str,
    body: str,
    msg_id: str | None,
) -> None:
    """Send a message (direct, or * to broadcast); idempotent by --id.

    Example: phx team send TEAM --from alice --to '*' --subject "Found it" --body "Deadlock at line 427" --id msg-001
    """
    message = _team(home, config, team_id).send(sender, to, type=kind, subject=subject, body=body, msg_id=msg_id)
    if out.as_json:
        out.json(
            {"message": message.as_dict(), "duplicate": bool(getattr(message, "duplicate", False)), "queued": False}
        )
    else:
        note = " (already sent: stored once)" if getattr(message, "duplicate", False) else ""
        out.console.print(f"message {message.seq} ({message.msg_id}) to {to}{note}")


def _print_messages(out: Output, messages: list[Any]) -> None:
    from rich.markup import escape

    for m in messages:
        out.console.print(
            f"[bold]#{m.seq}[/] {m.ts[:19].replace('T', ' ')} [cyan]{escape(m.sender)}[/] → {escape(m.to)} "
            f"{escape('[' + m.type + ']')} [bold]{escape(m.subject)}[/]\n    {escape(m.body)}"
        )


@team_group.command("inbox")
@click.argument("team_id", metavar="TEAM")
@click.option("--as", "name", required=True, metavar="NAME")
@click.option("--follow", is_flag=True, help="Keep waiting for new messages (Ctrl-C stops).")
@click.option("--limit", type=click.IntRange(min=1), help="At most N messages.")
@home_common
def team_inbox(
    home: Home, config: Config, out: Output, team_id: str, name: str, follow: bool, limit: int | None
) -> None:
    """Messages NAME has not received yet; marked delivered only once printed.

    Example: phx team inbox TEAM --as bob
    """
    team = _team(home, config, team_id)
    team.require_member(name)  # a stranger has no inbox: nothing is shown, no cursor is made
    mailbox = team.mailbox

    def deliver() -> Inbox:
        messages = mailbox.fetch(name, limit=limit)
        if out.as_json:
            out.json({"messages": [m.as_dict() for m in messages]}, one_line=True)
        else:
            _print_messages(out, messages)
        write_stdout("")  # handed over: only now is it delivered
        if stdout_lost():
            raise _Exit(EXIT_OK)  # the reader went away: nothing more is delivered, and this was not
        if messages.through_seq:  # past the messages shown and the ones not for NAME in between
            mailbox.mark_delivered(name, messages.through_seq)
        return messages

    first = deliver()
    if not follow:
        if not first and not out.as_json:
            out.console.print("(no new messages)")
        return
    try:
        while True:  # woken by the sender's commit on PostgreSQL; a look every 0.2 s on SQLite
            if mailbox.wait(name, timeout=30.0):
                deliver()
    except KeyboardInterrupt:
        return


@team_group.command("ack")
@click.argument("team_id", metavar="TEAM")
@click.argument("seq", type=int)
@click.option("--as", "name", required=True, metavar="NAME")
@home_common
def team_ack(home: Home, config: Config, out: Output, team_id: str, seq: int, name: str) -> None:
    """Acknowledge message SEQ (it must have been delivered to NAME).

    Example: phx team ack TEAM 12 --as bob
    """
    team = _team(home, config, team_id)
    team.require_member(name)
    mailbox = team.mailbox
    mailbox.ack(name, seq)
    if out.as_json:
        out.json({"seq": seq, "acked_by": mailbox.acked_by(seq)})
    else:
        out.console.print(f"acknowledged #{seq}")


@team_group.command("replay")
@click.argument("team_id", metavar="TEAM")
@click.option("--last", "last", type=click.IntRange(min=1), default=10, show_default=True)
@home_common
def team_replay(home: Home, config: Config, out: Output, team_id: str, last: int) -> None:
    """The newest N messages of the whole team (the lead's summary).

    Example: phx team replay TEAM --last 5
    """
    messages = _team(home, config, team_id).mailbox.replay(last)
    if out.as_json:
        out.json({"team_id": team_id, "messages": [m.as_dict() for m in messages]})
    else:
        _print_messages(out, messages)


def print_delivery(
    out: Output, team_id: str, name: str, messages: list[dict[str, Any]], note: str | None = None
) -> None:
    """``phx team outbox``'s output, local or through ``--server``."""
    if out.as_json:
        out.json({"team_id": team_id, "name": name, "messages": messages, **({"note": note} if note else {})})
        return
    from rich.markup import escape

    colours = {"queued": "yellow", "refused": "red", "delivered": "cyan", "read": "blue", "acked": "green"}
    for m in messages:
        seq = f"#{m['seq']}" if m.get("seq") else "-"
        who = ""
        if m.get("recipients"):
            who = f" read {len(m['read_by'])}/{len(m['recipients'])}, acked {len(m['acked_by'])}/{len(m['recipients'])}"
        error = f" ({escape(str(m['last_error']))})" if m.get("last_error") and m["state"] != "delivered" else ""
        out.console.print(
            f"{seq} {escape(m['msg_id'])} → {escape(str(m.get('to')))} [{colours.get(m['state'], 'white')}]"
            f"{m['state']}[/]{who} {escape(str(m.get('subject')))}{error}"
        )
    if not messages:
        out.console.print("(nothing sent)")
    if note:
        out.console.print(f"[yellow]{escape(note)}[/]")


@team_group.command("outbox")
@click.argument("team_id", metavar="TEAM")
@click.option("--as", "name", required=True, metavar="NAME", help="The sender.")
@click.option("--last", "last", type=click.IntRange(min=1, max=1000), default=20, show_default=True)
@home_common
def team_outbox(home: Home, config: Config, out: Output, team_id: str, name: str, last: int) -> None:
    """What NAME sent and where each message is: queued (--server unreachable; sent again now),
    delivered (stored), read (handed over to every recipient), acked (by every recipient).

    Example: phx team outbox TEAM --as lead --json
    """
    messages = _team(home, config, team_id).delivery(name, last=last)
    for message in messages:  # the same keys as through --server's outbox (nothing is queued here)
        message.update(attempts=None, queued_at=None, last_error=None)
    print_delivery(out, team_id, name, messages)


@team_group.command("progress")
@click.argument("team_id", metavar="TEAM")
@click.argument("task_id", metavar="[TASK]", required=False)
@click.option("--as", "name", required=True, metavar="NAME")
@click.option("--file", "files", multiple=True, metavar="PATH", help="A file the task modified (repeatable).")
@click.option("--check", type=click.Choice(["green", "red", "pending"]), help="The status of the task's check.")
@click.option("--note", metavar="TEXT", help="Where the work stands, for whoever takes the task over.")
@home_common
def team_progress(
    home: Home,
    config: Config,
    out: Output,
    team_id: str,
    task_id: str | None,
    name: str,
    files: tuple[str, ...],
    check: str | None,
    note: str | None,
) -> None:
    """Record progress on a task NAME holds (without TASK: its current one) and checkpoint it: the
    files modified (plus those its Write/Edit tool calls changed, noted by the hooks), the check
    status, a note.

    Example: phx team progress TEAM --as alice --file src/parser.py --check red --note "guard fixed, 2 tests red"
    """
    task = _team(home, config, team_id).record_progress(task_id, name, files=list(files), check=check, note=note)
    if out.as_json:
        out.json({"task": task})
        return
    from rich.markup import escape

    point = task["checkpoint"]
    out.console.print(
        f"progress on [bold]{task['task_id']}[/]: {len(point['files_modified'])} file(s), check "
        f"{point.get('check_status')}"
        + (f", note: {escape(point['note'])}" if point.get("note") else "")
        + f" ({point.get('name')})"
    )


@team_group.command("attach")
@click.argument("team_id", metavar="TEAM")
@click.option("--as", "name", required=True, metavar="NAME")
@click.option("--task", "task_id", required=True, metavar="TASK", help="The task to resume.")
@click.option("--session", metavar="ID", help="The teammate's session id (default: $PHOENIX_SESSION_ID).")
@home_common
def team_attach(
    home: Home, config: Config, out: Output, team_id: str, name: str, task_id: str, session: str | None
) -> None:
    """The seed's `--resume-team TEAM --task TASK`: a teammate (re-)attaches to its task and gets
    the task's checkpoint (files, check status, notes, whom it was inherited from).

    Example: phx team attach TEAM --as bob --task task-0001
    """
    info = _team(home, config, team_id).attach(
        name, task_id, session_id=session or os.environ.get("PHOENIX_SESSION_ID") or None
    )
    if out.as_json:
        out.json(info)
        return
    from rich.markup import escape

    task, point = info["task"], info["checkpoint"]
    out.console.print(f"{escape(name)} attached to [bold]{task['task_id']}[/] {escape(task['title'])}")
    if point.get("inherited_from"):
        out.console.print(f"inherited from {escape(point['inherited_from'])}")
    out.console.print(f"check: {point.get('check_status')}; last progress: {point.get('last_progress_at') or '-'}")
    for path in point.get("files_modified") or []:
        out.console.print(f"  modified: {escape(path)}")
    for entry in (point.get("notes") or [])[-5:]:
        out.console.print(
            f"  note ({entry['at'][:16].replace('T', ' ')}, {escape(entry['by'])}): {escape(entry['note'])}"
        )
    out.console.print(f"{info['unread']} unread message(s) (`phx team inbox {team_id} --as {name}`)")


@team_group.command("heartbeat")
@click.argument("team_id", metavar="TEAM")
@click.argument("name")
@home_common
def team_heartbeat(home: Home, config: Config, out: Output, team_id: str, name: str) -> None:
    """Record a heartbeat (UTC ms + sequence number); the hooks do it on every tool call.

    Example: phx team heartbeat TEAM alice
    """
    record = _team(home, config, team_id).heartbeat(name, session_id=os.environ.get("PHOENIX_SESSION_ID") or None)
    if out.as_json:
        out.json({"heartbeat": record})
    else:
        out.console.print(f"heartbeat {record['seq']} for {name}")


@team_group.command("status")
@click.argument("team_id", metavar="TEAM")
@click.option("--as", "name", metavar="NAME", help="A teammate's view: its tasks, unread messages, ZOMBIE mode.")
@home_common
def team_status(home: Home, config: Config, out: Output, team_id: str, name: str | None) -> None:
    """The team's state, or a teammate's view of it (ZOMBIE mode when the lead is silent).

    Example: phx team status TEAM --as alice
    """
    from rich.markup import escape

    team = _team(home, config, team_id)
    if name:
        view = team.status_for(name)
        if out.as_json:
            out.json(view)
            return
        if view["zombie"]:
            out.console.print(
                f"[bold red]ZOMBIE mode[/]: the lead ({view['lead']}) has been silent for "
                f"{(view['lead_silence_ms'] or 0) // 60_000} min. Keep working on your task; checkpoints every 30 s."
            )
        out.console.print(f"team {team_id} {escape('[' + view['status'] + ']')} — {view['unread']} unread message(s)")
        _tasks_table(out, view["tasks"])
        return
    from phoenix_protocol.services._team_resume import probe

    data = team.read()
    probed = probe(team)
    if out.as_json:
        out.json({"team": data, "probe": probed})
        return
    out.console.print(
        f"team [bold]{team_id}[/] ({escape(str(data.get('name')))}) {escape('[' + data['status'] + ']')}, lead {data['lead']}"
    )
    _tasks_table(out, data["tasks"])
    for mate in probed["teammates"]:
        out.console.print(f"  {mate['name']}: {mate['class']}" + (" (clock skew)" if mate["skew"] else ""))


@team_group.command("checkpoint")
@click.argument("team_id", metavar="TEAM")
@home_common
def team_checkpoint(home: Home, config: Config, out: Output, team_id: str) -> None:
    """Take a full team checkpoint now.

    Example: phx team checkpoint TEAM
    """
    info = _team(home, config, team_id).checkpoint(kind="full", reason="on demand")
    if out.as_json:
        out.json({"checkpoint": info})
    else:
        out.console.print(f"checkpoint {info['name']}")


@team_group.command("export")
@click.argument("team_id", metavar="TEAM")
@click.argument("directory", type=click.Path(file_okay=False))
@home_common
def team_export(home: Home, config: Config, out: Output, team_id: str, directory: str) -> None:
    """Write the team as seed 004's files: DIRECTORY/TEAM/ with metadata.json, mailbox.jsonl,
    teammates.json and checkpoints/ (an earlier export there is brought up to date).

    Example: phx team export TEAM .team-state
    """
    from rich.markup import escape

    from phoenix_protocol.store._team_files import check_export_directory

    result = _team(home, config, team_id).export(check_export_directory(directory))
    if out.as_json:
        out.json(result)
    else:
        out.console.print(
            f"exported {team_id} to {escape(result['directory'])}: {result['messages']} messages, "
            f"{result['checkpoints']} checkpoints"
        )


@team_group.command("consolidate")
@click.argument("team_id", metavar="TEAM")
@click.option("--resolve", type=click.Choice(["retry", "abort", "inspect"]), help="After a partial consolidation.")
@home_common
def team_consolidate(home: Home, config: Config, out: Output, team_id: str, resolve: str | None) -> None:
    """Mark consolidating, run the check command, record the last good commit.

    Example: phx team consolidate TEAM
    """
    team = _team(home, config, team_id)
    result = team.resolve_consolidation(resolve) if resolve else team.consolidate()
    if out.as_json:
        out.json({"team_id": team_id, "consolidation": result})
        return
    if "diff" in result:  # the staged changes as git shows them: teammates' text, made visible
        write_stdout(visible(result["diff"]))
        return
    if result.get("green"):
        out.console.print("[green]check green[/]: commit the work, then `phx team complete " + team_id + "`")
    elif "green" in result:
        out.console.print(f"[red]check red[/] (exit {result.get('exit_code')}): the team is active again")
    else:
        out.console.print(f"consolidation {result.get('choice')}: {result}")


@team_group.command("complete")
@click.argument("team_id", metavar="TEAM")
@click.option("--force", is_flag=True, help="Even with uncommitted changes.")
@home_common
def team_complete(home: Home, config: Config, out: Output, team_id: str, force: bool) -> None:
    """Mark the team completed (read-only from then on).

    Example: phx team complete TEAM
    """
    data = _team(home, config, team_id).complete(force=force)
    if out.as_json:
        out.json({"team_id": team_id, "status": data["status"]})
    else:
        out.console.print(f"team {team_id} completed")


@team_group.command("list")
@home_common
def team_list(home: Home, config: Config, out: Output) -> None:
    """Teams in this home (resumable ones first).

    Example: phx team list --json
    """
    from phoenix_protocol.store._teams import Team, list_teams

    rows: list[dict[str, Any]] = []
    for team_id in list_teams(home, config=config):
        try:
            data = Team.open(home, team_id, config=config).read()
        except PhoenixError as exc:
            rows.append({"team_id": team_id, "error": str(exc)})
            continue
        rows.append(
            {
                "team_id": team_id,
                "name": data.get("name"),
                "status": data["status"],
                "lead": data["lead"],
                "tasks": len(data["tasks"]),
            }
        )
    rows.sort(key=lambda r: (r.get("status") == "completed", r["team_id"]))
    if out.as_json:
        out.json({"teams": rows})
        return
    for row in rows:
        out.console.print(
            f"{row['team_id']}  {row.get('status', '?')}  lead {row.get('lead', '?')}  {row.get('tasks', 0)} task(s)"
        )
    if not rows:
        out.console.print("(no teams)")


def _resume_output(out: Output, result: Any) -> None:
    if out.as_json:
        out.write_document({"ok": result.exit_code == 0, **result.as_dict()})
        return
    marks = {"ok": "[green]✓[/]", "warn": "[yellow]![/]", "error": "[red]✗[/]"}
    from rich.markup import escape

    for step in result.steps:
        out.console.print(f"{marks.get(step['level'], '-')} {step['step']}: {escape(step['detail'])}")
        for mate in (step.get("zombie") or {}).get("teammates", []):
            for task in mate["tasks"]:
                point = task["checkpoint"]
                out.console.print(
                    f"    {escape(mate['name'])}: {task['task_id']} {escape('[' + task['status'] + ']')} check "
                    f"{point.get('check_status')}, {len(point.get('files_modified') or [])} file(s)"
                    + (f", note: {escape(point['note'])}" if point.get("note") else "")
                )
        for asked in (step.get("zombie") or {}).get("asked", []):
            out.console.print(f"    asked {escape(asked['name'])} for its status (message #{asked['seq']})")
    s = result.summary
    if s:
        tasks = ", ".join(f"{n} {k}" for k, n in sorted(s["tasks"].items())) or "no tasks"
        mates = ", ".join(f"{n} {k}" for k, n in sorted(s["teammates"].items())) or "no teammates"
        out.console.print(
            f"Team {s['team_id']}: created {s['created_seconds_ago']} s ago; tasks: {tasks}; teammates: {mates}; "
            f"last activity: {s['last_action']} at {s['last_action_at']}; next checkpoint: {s['next_checkpoint_at']}"
        )


@team_group.command("probe")
@click.argument("team_id", metavar="TEAM")
@home_common
def team_probe(home: Home, config: Config, out: Output, team_id: str) -> None:
    """Run the resume validation without attaching (another lead's binding is reported, not an
    error; exit 1 transient, 2 permanent, as resume).

    Example: phx team probe TEAM
    """
    from phoenix_protocol.services._team_resume import resume

    result = resume(
        home, team_id, session_id=os.environ.get("PHOENIX_SESSION_ID") or "probe", attach=False, config=config
    )
    _resume_output(out, result)
    if result.exit_code:
        raise _Exit(result.exit_code)


@team_group.command("resume")
@click.argument("team_id", metavar="TEAM")
@click.option("--session", metavar="ID", help="The lead's session id (default: $PHOENIX_SESSION_ID, else a new one).")
@click.option("--allow-stale", is_flag=True, help="Attach even when every teammate is stale (else exit 2).")
@home_common
def team_resume(home: Home, config: Config, out: Output, team_id: str, session: str | None, allow_stale: bool) -> None:
    """Re-attach as lead after a crash: the seed's validation sequence; exit 0 attached,
    1 transient (retry), 2 permanent.

    Example: phx team resume TEAM --session lead-2
    """
    import uuid

    from phoenix_protocol.services._team_resume import resume

    session_id = session or os.environ.get("PHOENIX_SESSION_ID") or f"lead-{uuid.uuid4().hex[:12]}"
    result = resume(home, team_id, session_id=session_id, allow_stale=allow_stale, config=config)
    _resume_output(out, result)
    if result.exit_code:
        raise _Exit(result.exit_code)
