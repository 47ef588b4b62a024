"""``--server URL`` / ``$PHOENIX_SERVER``: the CLI on a memory bridge instead of the local home.

``attach(command, remote)`` gives a ``phx`` command ``--server URL`` and ``--token TOKEN``
(defaults ``$PHOENIX_SERVER`` and ``$PHOENIX_TOKEN``). Without a server the command runs as it
always did, on the local home; with one, ``remote(client, out, **options)`` runs instead, through
``phoenix_protocol.client``, and prints the same JSON shape (``--json``) as the local command.
An explicit ``--home`` wins over ``$PHOENIX_SERVER``; ``--home`` with an explicit ``--server`` is
a usage error.

Commands given a remote form here: ``phx checkpoint`` (session, routine and recovery types),
``phx checkpoint latest``, ``phx restore``, ``phx sessions``, ``phx identity show|set|add``,
``phx team send|outbox|inbox|ack|tasks|claim|heartbeat`` (a send goes through the local outbox:
``store._team_outbox``); ``_cli_memory`` attaches ``phx memory …``.
Importing this module attaches them, so ``_cli`` imports it after the command modules.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from phoenix_protocol.cli import _sessions as _cli_sessions
from phoenix_protocol.cli import _teams as _cli_teams
from phoenix_protocol.cli._main import (
    EXIT_OK,
    Output,
    _Exit,
    hand_down,
    handed_down,
    main_group,
    reported,
    stdout_lost,
    write_stdout,
)
from phoenix_protocol.core._errors import UsageError

if TYPE_CHECKING:
    from phoenix_protocol.client import PhoenixClient
    from phoenix_protocol.store._team_outbox import Outbox

__all__ = ["attach", "resolve_remote_agent"]

Remote = Callable[..., None]


def _options() -> list[click.Parameter]:
    return [
        click.Option(
            ["--server"],
            metavar="URL",
            envvar="PHOENIX_SERVER",
            help="Use the memory bridge at URL (`phx serve`) instead of the local home (default: $PHOENIX_SERVER).",
        ),
        click.Option(
            ["--token"],
            metavar="TOKEN",
            envvar="PHOENIX_TOKEN",
            help="Bearer token for --server (default: $PHOENIX_TOKEN; prefer the variable: arguments show in ps).",
        ),
    ]


def resolve_remote_agent(explicit: str | None) -> str:
    """``--agent``, else ``$PHOENIX_AGENT``, else the local configuration's ``agent_id``, else ``default``."""
    from phoenix_protocol.core._config import load_config
    from phoenix_protocol.core._home import Home, resolve_agent_id

    configured = None
    if explicit is None and not os.environ.get("PHOENIX_AGENT"):
        home = Home.resolve()
        configured = load_config(home.root, project_root=home.project_root).agent_id
    return resolve_agent_id(explicit, configured=configured)


def attach(command: click.Command, remote: Remote, *, agent: bool = True) -> None:
    """Give ``command`` ``--server``/``--token``; with a server, run ``remote`` instead.

    ``remote(client, out, **options)`` gets the command's own options (``agent_id`` resolved when
    ``agent``), without ``--home``/``--json``.
    """
    original = command.callback
    if original is None:  # pragma: no cover - every phx command has a callback
        raise TypeError(f"{command.name} has no callback")
    command.params.extend(_options())

    @functools.wraps(original)
    def callback(*args: Any, server: str | None, token: str | None, **kwargs: Any) -> object:
        ctx = click.get_current_context()
        explicit = ctx.get_parameter_source("server") not in (ParameterSource.ENVIRONMENT, ParameterSource.DEFAULT)
        if isinstance(command, click.Group) and ctx.invoked_subcommand is not None:
            # `phx checkpoint --server URL latest`: for the subcommand (see ``_cli.hand_down``)
            token_given = ctx.get_parameter_source("token") is ParameterSource.COMMANDLINE
            hand_down(ctx, server=server if explicit else None, token=token if token_given else None)
            return original(*args, **kwargs)
        given = handed_down(ctx)
        if not explicit and given.get("server"):  # given to the group, taken here
            server, explicit = given.pop("server"), True
        if ctx.get_parameter_source("token") is not ParameterSource.COMMANDLINE and given.get("token"):
            token = given.pop("token")
        home = kwargs.get("home") or kwargs.get("home_path") or given.get("home")
        if not server or (home and not explicit):
            return original(*args, **kwargs)
        out = Output(bool(kwargs.pop("as_json", False) or given.get("as_json")))
        kwargs.pop("home", None)
        kwargs.pop("home_path", None)
        with reported(out):
            if home:
                raise UsageError("--home and --server name two different places: give one of them.")
            from phoenix_protocol.client import PhoenixClient

            if agent:
                own = kwargs.get("agent_id")
                kwargs["agent_id"] = resolve_remote_agent(given.get("agent_id") if own is None else own)
            with PhoenixClient(server, token) as client:
                remote(client, out, **kwargs)
        return None

    command.callback = callback


class _RemoteAgent:
    """What the local output helpers need of an agent: its id."""

    def __init__(self, agent_id: str) -> None:
        self.id = agent_id


def _escape(text: object) -> str:
    from rich.markup import escape

    return escape(str(text))


# -- checkpoints, sessions, identity -------------------------------------------------------------


def _checkpoint(client: PhoenixClient, out: Output, agent_id: str, summary: str | None, checkpoint_type: str) -> None:
    _cli_sessions.check_checkpoint_type(checkpoint_type)  # the local command's refusal and hint, before a request
    if not summary or not summary.strip():
        raise UsageError("--summary is required with --server (the server does not guess what was done).")
    info = client.checkpoint(agent_id, summary, checkpoint_type=checkpoint_type)
    if out.as_json:
        out.json({"agent": agent_id, "checkpoint": info})
    else:
        out.console.print(f"[green]checkpoint[/] {_escape(info['name'])} ({info['size'] / 1024:.1f} KB)")


def _checkpoint_latest(client: PhoenixClient, out: Output, agent_id: str, checkpoint_type: str | None) -> None:
    from phoenix_protocol.services._checkpoints import Checkpoint

    data = client.latest_checkpoint(agent_id, checkpoint_type=checkpoint_type)
    if out.as_json:
        out.json(
            {
                "agent": agent_id,
                "path": None,
                "name": data["name"],
                "checkpoint": data["checkpoint"],
                "operation_status": None,  # the server does not say
                "problems": data["problems"],
            }
        )
        return
    checkpoint = Checkpoint(data["name"], data["checkpoint"])
    _cli_sessions._show_checkpoint(out, _RemoteAgent(agent_id), checkpoint, data["problems"])  # type: ignore[arg-type]


def _restore(
    client: PhoenixClient, out: Output, agent_id: str, name: str | None, force: bool, session: str | None
) -> None:
    data = client.restore(agent_id, checkpoint=name, force=force, session_id=session)
    data.pop("agent_id", None)
    if out.as_json:
        out.json({"agent": agent_id, **data})
        return
    out.console.print(f"session {_escape(data['session_id'])} started {data['started_at']}")
    if data.get("checkpoint"):
        out.console.print(f"restored from [bold]{_escape(data['checkpoint'])}[/]")
        context = (data.get("restored") or {}).get("context") or {}
        if context.get("conversation_summary"):
            out.console.print(f"summary: {_escape(context['conversation_summary'])}")
        for item in context.get("pending_items") or []:
            out.console.print(f"pending: {_escape(item)}")
    else:
        out.console.print("no checkpoint to restore from")
    for problem in data.get("problems") or []:
        out.console.print(f"[yellow]problem:[/] {_escape(problem)}")


def _sessions(client: PhoenixClient, out: Output, agent_id: str) -> None:
    _cli_sessions._print_sessions(out, agent_id, client.sessions(agent_id), [])  # the server reports none


def _print_identity(out: Output, agent_id: str, identity: dict[str, Any]) -> None:
    if out.as_json:
        out.json({"agent": agent_id, "path": None, "identity": identity})
        return
    import yaml

    out.console.print(_escape(yaml.safe_dump(identity, sort_keys=False, allow_unicode=True)))


def _identity_show(client: PhoenixClient, out: Output, agent_id: str) -> None:
    _print_identity(out, agent_id, client.identity_get(agent_id))


def _identity_set(client: PhoenixClient, out: Output, agent_id: str, path: str, value: str) -> None:
    _print_identity(out, agent_id, client.identity_set(agent_id, path, _cli_sessions._parse_value(value, path)))


def _identity_add(
    client: PhoenixClient,
    out: Output,
    agent_id: str,
    kind: str,
    name: str,
    confidence: float | None,
    level: str | None,
    relation: str | None,
) -> None:
    identity = client.identity_add(agent_id, kind, name, confidence=confidence, level=level, type=relation)
    _print_identity(out, agent_id, identity)


# -- teams ---------------------------------------------------------------------------------------


def _messages(records: list[dict[str, Any]]) -> list[Any]:
    from phoenix_protocol.store._team_store import Message

    return [Message.from_record(r) for r in records]


def _local_outbox() -> Outbox:
    """The outbox on this machine: in ``$PHOENIX_HOME`` (or ``$PHOENIX_STATE_DIR``) when one is
    set, else in this user's state folder (``$XDG_STATE_HOME/phoenix/outbox``, beside the list of
    homes): a command sent to a server writes no home into the folder it is run from."""
    from phoenix_protocol.core._config import load_config
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.core._homes import registry_path
    from phoenix_protocol.store._db import open_database
    from phoenix_protocol.store._team_outbox import Outbox

    if os.environ.get("PHOENIX_HOME") or os.environ.get("PHOENIX_STATE_DIR"):
        home = Home.resolve()
    else:
        home = Home(os.path.join(os.path.dirname(registry_path()), "outbox"))
    home.ensure()
    return Outbox(open_database(home, load_config(home.root, project_root=home.project_root)))


def _unreachable(exc: Exception) -> bool:
    """A send worth retrying later with the same id: the server could not be reached, did not
    answer, failed, or was busy (a refusal or a usage error is final)."""
    from phoenix_protocol.client import ServerError
    from phoenix_protocol.core._errors import LockTimeoutError

    return isinstance(exc, (ServerError, LockTimeoutError))


def _poster(client: PhoenixClient, team_id: str, answers: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def post(row: dict[str, Any]) -> dict[str, Any]:
        m = row["message"]
        sent = client.team_send(
            team_id, m["sender"], m["to"], subject=m["subject"], body=m["body"], type=m["type"], msg_id=row["msg_id"]
        )
        answers[row["msg_id"]] = sent
        message: dict[str, Any] = sent["message"]
        return message

    return post


def _team_send(
    client: PhoenixClient,
    out: Output,
    team_id: str,
    sender: str,
    to: str,
    kind: str,
    subject: str,
    body: str,
    msg_id: str | None,
) -> None:
    from phoenix_protocol.services._team_outbox import send_queued
    from phoenix_protocol.store._team_store import Mailbox

    outbox = _local_outbox()
    fields = Mailbox(outbox.db, team_id=team_id).prepare(
        sender, to, type=kind, subject=subject, body=body, msg_id=msg_id
    )
    answers: dict[str, Any] = {}
    row = send_queued(outbox, client.base_url, team_id, fields, _poster(client, team_id, answers), _unreachable)
    sent = answers.get(fields["msg_id"])
    if sent is None and row["state"] == "sent":  # sent earlier, by another send's flush
        sent = {"message": {**_queued_message(row), "seq": row["seq"]}, "duplicate": True}
    if sent is None:
        reason = str(row["error"]).rstrip(".")
        note = f"queued: {reason}; sent again by the next send or `phx team outbox {team_id} --as {sender}`"
        if out.as_json:
            out.json({"message": _queued_message(row), "duplicate": False, "queued": True, "note": note})
        else:
            out.console.print(f"[yellow]message {_escape(row['msg_id'])} to {_escape(to)} {_escape(note)}[/]")
        return
    message = sent["message"]
    if out.as_json:
        out.json({"message": message, "duplicate": sent["duplicate"], "queued": False})
    else:
        note = " (already sent: stored once)" if sent["duplicate"] else ""
        out.console.print(f"message {message['seq']} ({_escape(message['msg_id'])}) to {_escape(to)}{note}")


def _queued_message(row: dict[str, Any]) -> dict[str, Any]:
    from phoenix_protocol.services._team_outbox import outbox_message

    return {**outbox_message(row), "acked_by": []}


def _team_outbox(client: PhoenixClient, out: Output, team_id: str, name: str, last: int) -> None:
    from phoenix_protocol.services._team_outbox import delivery, flush

    outbox = _local_outbox()
    flushed = flush(outbox, client.base_url, team_id, _poster(client, team_id, {}), _unreachable)
    note = None
    if flushed["error"]:
        note = f"{flushed['queued']} message(s) still queued: {flushed['error']}"

    def status(msg_ids: list[str]) -> list[dict[str, Any]]:
        nonlocal note
        if not msg_ids:
            return []
        try:
            return client.team_delivery(team_id, name, msg_ids=msg_ids)
        except Exception as exc:
            if not _unreachable(exc):
                raise
            note = note or f"the server could not be asked: {exc}"
            return []

    messages = delivery(outbox, client.base_url, team_id, name, status, last=last)
    _cli_teams.print_delivery(out, team_id, name, messages, note)


def _team_inbox(client: PhoenixClient, out: Output, team_id: str, name: str, follow: bool, limit: int | None) -> None:

    def deliver() -> list[dict[str, Any]]:
        page = client.team_inbox_page(team_id, name, limit=limit)
        messages: list[dict[str, Any]] = page["messages"]
        if out.as_json:
            out.json({"messages": messages}, one_line=True)
        else:
            _cli_teams._print_messages(out, _messages(messages))
        write_stdout("")  # handed over: only now is it delivered
        if stdout_lost():
            raise _Exit(EXIT_OK)  # the reader went away: nothing more is delivered, and this was not
        if messages:
            client.team_mark_delivered(team_id, name, page["through_seq"])
        return messages

    first = deliver()
    if not follow:
        if not first and not out.as_json:
            out.console.print("(no new messages)")
        return
    try:
        while True:
            time.sleep(1.0)
            deliver()
    except KeyboardInterrupt:
        return


def _team_ack(client: PhoenixClient, out: Output, team_id: str, seq: int, name: str) -> None:
    data = client.team_ack(team_id, seq, name)
    if out.as_json:
        out.json(data)
    else:
        out.console.print(f"acknowledged #{seq}")


def _team_tasks(client: PhoenixClient, out: Output, team_id: str) -> None:
    tasks = client.team_tasks(team_id)
    if out.as_json:
        out.json({"team_id": team_id, "tasks": tasks})
    else:
        for task in tasks:
            task.setdefault("checkpoint", {})
            task.setdefault("dependencies", [])
        _cli_teams._tasks_table(out, tasks)


def _team_claim(client: PhoenixClient, out: Output, team_id: str, task_id: str | None, name: str) -> None:
    if task_id is None:  # the bridge claims named tasks (POST /teams/{team}/tasks/{task}/claim)
        raise UsageError("with --server, name the task to claim (`phx team ready TEAM` lists them).")
    _cli_teams._print_task(out, client.team_claim(team_id, task_id, name), "claimed")


def _team_heartbeat(client: PhoenixClient, out: Output, team_id: str, name: str) -> None:
    record = client.team_heartbeat(team_id, name, session_id=os.environ.get("PHOENIX_SESSION_ID") or None)
    if out.as_json:
        out.json({"heartbeat": record})
    else:
        out.console.print(f"heartbeat {record.get('seq')} for {_escape(name)}")


def _command(*path: str) -> click.Command:
    command: click.Command = main_group
    for name in path:
        if not isinstance(command, click.Group):  # pragma: no cover - the paths below are groups
            raise TypeError(f"{command.name} has no subcommands")
        command = command.commands[name]
    return command


attach(_command("checkpoint"), _checkpoint)
attach(_command("checkpoint", "latest"), _checkpoint_latest)
attach(_command("restore"), _restore)
attach(_command("sessions"), _sessions)
attach(_command("identity", "show"), _identity_show)
attach(_command("identity", "set"), _identity_set)
attach(_command("identity", "add"), _identity_add)
attach(_command("team", "send"), _team_send, agent=False)
attach(_command("team", "outbox"), _team_outbox, agent=False)
attach(_command("team", "inbox"), _team_inbox, agent=False)
attach(_command("team", "ack"), _team_ack, agent=False)
attach(_command("team", "tasks"), _team_tasks, agent=False)
attach(_command("team", "claim"), _team_claim, agent=False)
attach(_command("team", "heartbeat"), _team_heartbeat, agent=False)
