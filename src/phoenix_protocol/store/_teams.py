"""Teams (seed 004): durable team state, tasks with atomic claims, liveness, lifecycle, resume.

A team lives in the home's database (``_team_store``: SQLite ``phoenix.db`` by default,
PostgreSQL with ``store = "postgresql://…"``): its metadata (lifecycle status, lead binding,
settings, session log), its tasks (one row each), its roster, its mailbox and its checkpoints (a
small record on every task transition and every few messages, a full snapshot periodically and on
demand, each with the heartbeats' last values, the mailbox position and the facts hash; the newest
200 kept). Heartbeats take a fast path (``_heartbeats``). ``phx team export`` writes seed 004's
``.team-state/<team-id>/`` files from it (``_team_files``), and so does the optional git mirror.

Every record carries ``schema_version``; ``MIGRATIONS`` upgrades older ones on load (the seed's
"1.0 → 1.1 adds checkpoint_seq = 0") and a newer one is refused. A change of the team is one
transaction on its row: of two teammates claiming one task at once, exactly one wins and the
other gets ``ClaimConflictError``.

Lifecycle: pending → active → consolidating → completed (and back from consolidating to active
when the check fails); a completed team is read-only. The lead's session binding
(``lead_session_id``, ``lead_last_seen``) lets a new lead session re-attach after a crash: a lead
silent for more than ``lead_timeout`` (5 min) may be replaced, and its teammates meanwhile work on
in ZOMBIE mode (checkpointing every 30 s).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import subprocess
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from phoenix_protocol.agent._heartbeats import SKEW_MS, classify, runtime_dir
from phoenix_protocol.core._clock import Clock, iso_from_ms, system_clock
from phoenix_protocol.core._errors import (
    CorruptStateError,
    NotFoundError,
    RefusedError,
    SchemaVersionError,
    UsageError,
)
from phoenix_protocol.core._ids import validate_id, validate_session_id
from phoenix_protocol.core._jsonio import dumps_line

if TYPE_CHECKING:
    from phoenix_protocol.core._config import Config
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.store._db import Database
    from phoenix_protocol.store._team_store import Mailbox, Message, TeamStore

T = TypeVar("T")

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "TASK_STATUSES",
    "TEAM_STATUSES",
    "ClaimConflictError",
    "NotAMemberError",
    "Team",
    "TeamNotFoundError",
    "TeamReadOnlyError",
    "generate_team_id",
    "list_teams",
]

SCHEMA_VERSION = "1.1"
TEAM_STATUSES = ("pending", "active", "suspended", "consolidating", "completed")
TASK_STATUSES = ("pending", "in_progress", "blocked", "completed")
CHECK_STATUSES = ("green", "red", "pending")
ROLES = ("lead", "engineer", "validator", "tester", "integrator", "reviewer", "writer")
_TRANSITIONS = {
    "pending": {"active"},
    "active": {"suspended", "consolidating"},
    "suspended": {"active", "consolidating"},
    "consolidating": {"active", "completed"},
    "completed": set(),
}
LEAD_TIMEOUT_MS = 5 * 60_000
ZOMBIE_CHECKPOINT_MS = 30_000
MESSAGE_CHECKPOINT_EVERY = 5
MESSAGE_CHECKPOINT_MS = 30_000
FULL_SNAPSHOT_MS = 5 * 60_000
KEEP_CHECKPOINTS = 200
KEEP_NOTES = 20
MAX_NOTE_CHARS = 2000


class TeamNotFoundError(NotFoundError):
    """No team with that id in this home (``phx team list``)."""


class TeamReadOnlyError(RefusedError):
    """The team is completed: its state is read-only."""


class ClaimConflictError(RefusedError):
    """Another teammate holds the task (or it is not claimable now)."""


class NotAMemberError(UsageError):
    """The name is not a teammate of this team: it has no inbox, tasks or heartbeat there."""


def generate_team_id(name: str) -> str:
    """A readable, safe, unique id: the name reduced to a slug plus 5 random characters."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40].rstrip("-") or "team"
    suffix = uuid.uuid4().hex[:5]
    return validate_id(f"{slug}-{suffix}", "team id")


# -- schema migrations --------------------------------------------------------------------------


def _migrate_1_0(data: dict[str, Any]) -> dict[str, Any]:
    """Seed 004's example upgrade: 1.0 → 1.1 adds ``checkpoint_seq`` = 0."""
    out = dict(data)
    out["schema_version"] = "1.1"
    if "teammates" in out and "tasks" not in out:  # teammates.json: nothing else changed
        return out
    out.setdefault("checkpoint_seq", 0)
    tasks = []
    for old in out.get("tasks", []) or []:
        task = dict(old)
        checkpoint = dict(task.get("checkpoint") or {})
        checkpoint.setdefault("checkpoint_seq", 0)
        task["checkpoint"] = checkpoint
        tasks.append(task)
    out["tasks"] = tasks
    return out


MIGRATIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {"1.0": _migrate_1_0}
"""``MIGRATIONS[v]`` upgrades a version-``v`` team record to the next version."""


def _version_tuple(version: object, path: str) -> tuple[int, int]:
    try:
        major, minor = str(version).split(".")
        return int(major), int(minor)
    except ValueError:
        raise CorruptStateError(f"{path}: schema_version {version!r} is not a version like 1.1.", path=path) from None


def migrate(data: dict[str, Any], path: str) -> dict[str, Any]:
    """Bring a team record up to ``SCHEMA_VERSION``; refuse a newer one."""
    version = str(data.get("schema_version", "1.0"))
    if _version_tuple(version, path) > _version_tuple(SCHEMA_VERSION, path):
        raise SchemaVersionError(
            f"{path} was written by a newer Phoenix (team schema {version}; this one reads up to "
            f"{SCHEMA_VERSION}). Upgrade phoenix-protocol to read it; the file was left as it is.",
            path=path,
        )
    while version != SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise CorruptStateError(f"{path}: no migration from team schema {version}.", path=path)
        data = step(data)
        version = str(data["schema_version"])
    return data


def list_teams(home: Home, *, config: Config | None = None) -> list[str]:
    """Ids of the teams in ``home``'s database (its ``store``), sorted."""
    from phoenix_protocol.store._team_store import list_team_ids

    return list_team_ids(_database(home, config))


def _database(home: Home, config: Config | None = None) -> Database:
    """The home's database, with a home written by an earlier release's team folders moved in
    first (``_team_files.import_home_teams``, once)."""
    from phoenix_protocol.store._db import open_database

    db = open_database(home, config)
    if os.path.isdir(os.path.join(home.root, "teams")):
        from phoenix_protocol.store._team_files import import_home_teams

        import_home_teams(home, db)
    return db


class Team:
    """One team in a Phoenix home. ``Team.create`` makes one; ``Team.open`` loads one. Its state
    is in the home's database (``self.store``, a ``TeamStore``)."""

    def __init__(self, home: Home, team_id: str, *, clock: Clock = system_clock, config: Config | None = None) -> None:
        from phoenix_protocol.core._config import load_config
        from phoenix_protocol.store._team_store import TeamStore

        self.home = home
        self.id = validate_id(team_id, "team id")
        self.clock = clock
        self.config = config if config is not None else load_config(home.root, project_root=home.project_root)
        self.heartbeat_dir = runtime_dir(home.root, self.id)
        self._mailbox: Mailbox | None = None
        self.store: TeamStore = TeamStore(
            _database(home, self.config),
            self.id,
            clock=clock,
            lock_timeout=float(self.config.lock_timeout),
            heartbeat_dir=self.heartbeat_dir,
        )

    # -- opening ----------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        home: Home,
        name: str,
        *,
        lead: str,
        check_command: str | None = None,
        facts_command: str | None = None,
        team_id: str | None = None,
        clock: Clock = system_clock,
        config: Config | None = None,
    ) -> Team:
        """Create a team (status pending) led by ``lead``."""
        validate_id(lead, "lead name")
        if not name.strip():
            raise UsageError("a team needs a name.")
        team = cls(home, team_id or generate_team_id(name), clock=clock, config=config)
        if team.store.exists():
            raise UsageError(f"team {team.id} already exists.")
        home.ensure()
        ms = clock.now_ms()
        metadata = {
            "kind": "phoenix.team",
            "schema_version": SCHEMA_VERSION,
            "team_id": team.id,
            "name": " ".join(name.split())[:200],
            "created_at": iso_from_ms(ms),
            "created_ms": ms,
            "status": "pending",
            "lead": lead,
            "lead_session_id": None,
            "lead_last_seen": iso_from_ms(ms),  # the lead creates the team: seen now
            "lead_last_seen_ms": ms,
            "settings": {"check_command": check_command, "facts_command": facts_command},
            "checkpoint_seq": 0,
            "task_seq": 0,
            "tasks": [],
            "session_log": {
                "last_action": "team_created",
                "last_action_at": iso_from_ms(ms),
                "lead_timeout_detected_at": None,
                "last_good_commit": None,
                "consolidation": None,
                "messages_since_checkpoint": 0,
                "last_checkpoint_ms": None,
                "last_full_snapshot_ms": None,
            },
        }
        team.store.create(metadata)
        team.join(lead, role="lead")
        return team

    @classmethod
    def open(cls, home: Home, team_id: str, *, clock: Clock = system_clock, config: Config | None = None) -> Team:
        """Open an existing team; ``TeamNotFoundError`` names the ids that do exist."""
        team = cls(home, team_id, clock=clock, config=config)
        if not team.store.exists():
            known = list_teams(home, config=team.config)
            raise TeamNotFoundError(
                f"no team {team_id!r} in {home.root}"
                + (f"; teams: {', '.join(known)}" if known else "")
                + " (`phx team list`)."
            )
        return team

    def exists(self) -> bool:
        """Whether the team has been created (in the configured store)."""
        return bool(self.store.exists())

    @property
    def mailbox(self) -> Mailbox:
        """The team's mailbox."""
        if self._mailbox is None:
            self._mailbox = self.store.mailbox()
        return self._mailbox

    # -- reading and changing ------------------------------------------------------------------

    def read(self) -> dict[str, Any]:
        """The team's metadata with its tasks (migrated)."""
        return self.store.read()

    def roster(self) -> list[dict[str, Any]]:
        """The teammates."""
        return self.store.roster()

    def _change(
        self,
        mutate: Callable[[dict[str, Any]], T],
        *,
        allow_completed: bool = False,
        task_id: str | None = None,
        metadata_only: bool = False,
    ) -> tuple[dict[str, Any], T]:
        """Run ``mutate`` on the team under its lock. ``task_id``: ``mutate`` looks at that task
        only, and ``data["tasks"]`` may hold just it (the other tasks are left as they are);
        ``metadata_only``: ``mutate`` changes no task, and ``data["tasks"]`` is empty."""

        def guarded(data: dict[str, Any]) -> T:
            if data["status"] == "completed" and not allow_completed:
                raise TeamReadOnlyError(f"team {self.id} is completed: its state is read-only.")
            return mutate(data)

        return self.store.change(guarded, task_id=task_id, metadata_only=metadata_only)

    def _change_roster(self, mutate: Callable[[list[dict[str, Any]]], T]) -> T:
        return self.store.change_roster(mutate)

    def _log(self, data: dict[str, Any], action: str) -> None:
        ms = self.clock.now_ms()
        data["session_log"]["last_action"] = action
        data["session_log"]["last_action_at"] = iso_from_ms(ms)

    # -- lifecycle -------------------------------------------------------------------------------

    def transition(self, status: str, *, reason: str = "") -> dict[str, Any]:
        """Move the team to ``status`` if the lifecycle allows it."""
        if status not in TEAM_STATUSES:
            raise UsageError(f"team status must be one of {', '.join(TEAM_STATUSES)}, not {status!r}.")

        def mutate(data: dict[str, Any]) -> None:
            current = data["status"]
            if status == current:
                return
            if status not in _TRANSITIONS[current]:
                raise RefusedError(
                    f"team {self.id} cannot go from {current} to {status} (lifecycle: pending → active → "
                    "consolidating → completed)."
                )
            data["status"] = status
            self._log(data, f"status_{status}" + (f": {reason}" if reason else ""))

        data, _ = self._change(mutate)
        return data

    # -- teammates -------------------------------------------------------------------------------

    def join(self, name: str, *, role: str = "engineer", session_id: str | None = None) -> dict[str, Any]:
        """Add (or update) a teammate; the first join makes a pending team active."""
        validate_id(name, "teammate name")
        if session_id is not None:
            validate_session_id(session_id)
        if role not in ROLES:
            raise UsageError(f"role must be one of {', '.join(ROLES)}, not {role!r}.")
        ms = self.clock.now_ms()

        def mutate(teammates: list[dict[str, Any]]) -> dict[str, Any]:
            for mate in teammates:
                if mate["name"] == name:
                    mate.update(role=role, session_id=session_id or mate.get("session_id"), status="active")
                    return mate
            mate = {
                "name": name,
                "role": role,
                "session_id": session_id,
                "status": "active",
                "joined_at": iso_from_ms(ms),
                "current_task": None,
                "last_heartbeat_seq": 0,
                "seen_at_ms": ms,
            }
            teammates.append(mate)
            return mate

        data = self.store.read_metadata()
        if data["status"] == "completed":
            raise TeamReadOnlyError(f"team {self.id} is completed: its state is read-only.")
        mate: dict[str, Any] = self._change_roster(mutate)
        if data["status"] == "pending" and name != data["lead"]:
            with contextlib.suppress(RefusedError):
                self.transition("active", reason=f"{name} joined")
        return mate

    def teammate_names(self) -> list[str]:
        return [m["name"] for m in self.roster()]

    def require_member(self, name: str) -> str:
        """``name`` if it is a teammate; else ``NotAMemberError`` (nothing is read or moved for it)."""
        validate_id(name, "teammate name")
        if name not in self.teammate_names():
            raise NotAMemberError(f"{name!r} is not in team {self.id} (`phx team join {self.id} {name}`).")
        return name

    def heartbeat(self, name: str, *, session_id: str | None = None) -> dict[str, Any]:
        """Record a heartbeat of ``name`` (fast path); the lead's also refreshes its binding."""
        if session_id is not None:
            validate_session_id(session_id)  # stored in clear (the hooks give a hash of a secret instead)
        data = self.store.read_metadata()
        if name not in self.teammate_names():
            raise UsageError(f"{name!r} is not in team {self.id} (`phx team join {self.id} {name}`).")
        record: dict[str, Any] = self.store.beat(name, now_ms=self.clock.now_ms(), session_id=session_id)
        if name == data["lead"] and data["status"] != "completed":
            last = data.get("lead_last_seen_ms") or 0
            if record["ms"] - last >= 60_000:  # the binding in metadata.json, at most once a minute

                def mutate(meta: dict[str, Any]) -> None:
                    meta["lead_last_seen_ms"] = record["ms"]
                    meta["lead_last_seen"] = iso_from_ms(record["ms"])

                self._change(mutate, metadata_only=True)
        return record

    def liveness(self, name: str, *, now_ms: int | None = None) -> dict[str, Any]:
        """``{class, elapsed_ms, skew, seq}`` for one teammate (see ``_heartbeats``)."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        mate = next((m for m in self.roster() if m["name"] == name), None)
        if mate is None:
            raise UsageError(f"{name!r} is not in team {self.id}.")
        return self._liveness(mate, self.store.read_beat(name, observed=True), now)

    def liveness_all(self, *, now_ms: int | None = None) -> dict[str, dict[str, Any]]:
        """``liveness`` of every teammate, from one read of the roster and one of the heartbeats."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        roster = self.roster()
        beats = self.store.read_beats([m["name"] for m in roster], observed=True)
        return {m["name"]: self._liveness(m, beats.get(m["name"]), now) for m in roster}

    def _liveness(self, mate: dict[str, Any], hb: dict[str, Any] | None, now: int) -> dict[str, Any]:
        name = mate["name"]
        thresholds = {
            "online_minutes": float(self.config.team_online_minutes),
            "idle_minutes": float(self.config.team_idle_minutes),
            "suspended_minutes": float(self.config.team_suspended_minutes),
        }
        if hb is None:
            last_ms = mate.get("last_heartbeat_ms")
            elapsed = now - last_ms if isinstance(last_ms, int) else now - int(mate.get("seen_at_ms") or 0)
            return {
                "class": classify(elapsed, **thresholds),
                "elapsed_ms": elapsed,
                "skew": False,
                "seq": mate.get("last_heartbeat_seq", 0),
                "source": "roster",
            }
        elapsed = now - int(hb["ms"])
        if elapsed >= -SKEW_MS:
            age = max(elapsed, 0)
            if int(mate.get("last_heartbeat_seq") or 0) == hb["seq"] and mate.get("seen_at_ms"):
                # We saw this very beat (while its clock was skewed) at seen_at_ms by our clock:
                # it is at least that old, whatever its timestamp says now.
                age = max(age, now - int(mate["seen_at_ms"]))
            return {
                "class": classify(age, **thresholds),
                "elapsed_ms": elapsed,
                "skew": False,
                "seq": hb["seq"],
                "source": "heartbeat",
            }
        # Clock skew: order by sequence number, timed by our own clock, and never younger than
        # the store says the beat is (when it arrived, by the store's clock: the database
        # server's, or this machine's for a heartbeat file): a beat nobody saw while its stamp
        # was in the future is as old as its arrival, not as fresh as the first look at it.
        seen_seq = int(mate.get("last_heartbeat_seq") or 0)
        seen_at = int(mate.get("seen_at_ms") or now)
        observed = hb.get("observed_age_ms")
        if isinstance(observed, int):
            seen_at = min(seen_at, now - observed) if hb["seq"] == seen_seq else now - observed
        if hb["seq"] > seen_seq:
            first_seen = seen_at if isinstance(observed, int) else now

            def mutate(teammates: list[dict[str, Any]]) -> None:
                for m in teammates:
                    if m["name"] == name:
                        m["last_heartbeat_seq"] = hb["seq"]
                        m["seen_at_ms"] = first_seen

            self._change_roster(mutate)
            seen_at = first_seen
        return {
            "class": classify(now - seen_at, **thresholds),
            "elapsed_ms": elapsed,
            "skew": True,
            "seq": hb["seq"],
            "source": "sequence",
        }

    # -- tasks -------------------------------------------------------------------------------------

    @staticmethod
    def _task(data: dict[str, Any], task_id: str) -> dict[str, Any]:
        for task in data["tasks"]:
            if task["task_id"] == task_id:
                return task  # type: ignore[no-any-return]
        known = ", ".join(t["task_id"] for t in data["tasks"][-10:])
        raise UsageError(f"no task {task_id!r} in this team" + (f" (latest: {known})" if known else "") + ".")

    def add_task(self, title: str, *, after: list[str] | None = None) -> dict[str, Any]:
        """Add a task (pending) depending on ``after``."""
        from phoenix_protocol.core._redact import redact

        clean = redact(" ".join(title.split()))[:300]
        if not clean:
            raise UsageError("a task needs a title.")
        deps = list(dict.fromkeys(after or []))
        ms = self.clock.now_ms()

        def mutate(data: dict[str, Any]) -> dict[str, Any]:
            for dep in deps:
                self._task(data, dep)
            data["task_seq"] = int(data.get("task_seq", 0)) + 1
            task: dict[str, Any] = {
                "task_id": f"task-{data['task_seq']:04d}",
                "title": clean,
                "assigned_to": None,
                "status": "pending",
                "dependencies": deps,
                "created_at": iso_from_ms(ms),
                "started_at": None,
                "completed_at": None,
                "checkpoint": {
                    "last_progress_at": None,
                    "files_modified": [],
                    "check_status": "pending",
                    "checkpoint_seq": 0,
                    "name": None,
                },
            }
            data["tasks"].append(task)
            self._log(data, "task_added")
            return task

        _data, task = self._change(mutate)
        return task

    def add_dependency(self, task_id: str, on: str) -> dict[str, Any]:
        """Make ``task_id`` depend on ``on``; a dependency cycle is refused."""

        def mutate(data: dict[str, Any]) -> dict[str, Any]:
            task = self._task(data, task_id)
            self._task(data, on)
            graph = {t["task_id"]: list(t["dependencies"]) for t in data["tasks"]}
            graph[task_id] = [*graph[task_id], on]
            cycle = _find_cycle(graph)
            if cycle:
                raise UsageError("that dependency would make a cycle: " + " → ".join(cycle) + "; refused.")
            if on not in task["dependencies"]:
                task["dependencies"].append(on)
            self._log(data, "dependency_added")
            return task

        _data, task = self._change(mutate)
        return task

    def ready(self) -> list[dict[str, Any]]:
        """Pending, unassigned tasks whose dependencies are all completed."""
        data = self.read()
        done = {t["task_id"] for t in data["tasks"] if t["status"] == "completed"}
        return [
            t
            for t in data["tasks"]
            if t["status"] == "pending" and not t["assigned_to"] and set(t["dependencies"]) <= done
        ]

    def claim(self, task_id: str, name: str) -> dict[str, Any]:
        """Claim a ready task for ``name``: atomic (the metadata lock), exactly one claimer wins."""
        validate_id(name, "teammate name")
        if name not in self.teammate_names():
            raise UsageError(f"{name!r} is not in team {self.id} (`phx team join {self.id} {name}`).")
        ms = self.clock.now_ms()

        def mutate(data: dict[str, Any]) -> dict[str, Any]:
            task = self._task(data, task_id)
            if task["assigned_to"] == name and task["status"] == "in_progress":
                return task  # already ours: idempotent
            if task["assigned_to"]:
                raise ClaimConflictError(f"{task_id} is already claimed by {task['assigned_to']}.")
            if task["status"] != "pending":
                raise ClaimConflictError(f"{task_id} is {task['status']}, not claimable.")
            done = {t["task_id"] for t in data["tasks"] if t["status"] == "completed"}
            waiting = [d for d in task["dependencies"] if d not in done]
            if waiting:
                raise ClaimConflictError(
                    f"{task_id} waits for {', '.join(waiting)} (`phx team ready` lists claimable tasks)."
                )
            task.update(assigned_to=name, status="in_progress", started_at=iso_from_ms(ms))
            self._log(data, "task_assignment")
            return task

        _data, task = self._change(mutate)
        self._set_current_task(name, task_id)
        self._task_checkpoint(task, "claimed")
        return task

    def claim_next(self, name: str) -> dict[str, Any] | None:
        """Claim the first ready task for ``name`` (``None`` when none is ready). On PostgreSQL
        the task is picked with ``FOR UPDATE SKIP LOCKED``: concurrent claimers take different
        tasks instead of queueing on one."""
        validate_id(name, "teammate name")
        if name not in self.teammate_names():
            raise UsageError(f"{name!r} is not in team {self.id} (`phx team join {self.id} {name}`).")
        started = iso_from_ms(self.clock.now_ms())
        task = self.store.claim_next(name, started)
        if task is None:
            return None
        self._set_current_task(name, task["task_id"])
        self._task_checkpoint(task, "claimed")
        return task

    def release(self, task_id: str, name: str) -> dict[str, Any]:
        """Give a claimed task back to the queue (only its owner can)."""
        self.absorb_files(name)

        def mutate(data: dict[str, Any]) -> dict[str, Any]:
            task = self._task(data, task_id)
            if task["assigned_to"] != name:
                raise ClaimConflictError(f"{task_id} is held by {task['assigned_to'] or 'nobody'}, not {name}.")
            task.update(assigned_to=None, status="pending")
            self._log(data, "task_released")
            return task

        _data, task = self._change(mutate)
        self._set_current_task(name, None)
        self._task_checkpoint(task, "released")
        return task

    def done(self, task_id: str, name: str, *, check: str = "green", files: list[str] | None = None) -> dict[str, Any]:
        """Finish a task: ``check`` green (or pending) completes it, red blocks it."""
        if check not in CHECK_STATUSES:
            raise UsageError(f"check must be one of {', '.join(CHECK_STATUSES)}, not {check!r}.")
        self.absorb_files(name)
        ms = self.clock.now_ms()

        def mutate(data: dict[str, Any]) -> dict[str, Any]:
            task = self._task(data, task_id)
            if task["assigned_to"] != name:
                raise ClaimConflictError(f"{task_id} is held by {task['assigned_to'] or 'nobody'}, not {name}.")
            task["checkpoint"]["check_status"] = check
            task["checkpoint"]["last_progress_at"] = iso_from_ms(ms)
            if files:
                task["checkpoint"]["files_modified"] = sorted(set(task["checkpoint"]["files_modified"]) | set(files))
            if check == "red":
                task["status"] = "blocked"
            else:
                task.update(status="completed", completed_at=iso_from_ms(ms))
            self._log(data, "task_completed" if check != "red" else "task_blocked")
            return task

        _data, task = self._change(mutate)
        if task["status"] == "completed":
            self._set_current_task(name, None)
        self._task_checkpoint(task, "done" if task["status"] == "completed" else "blocked")
        return task

    def current_task_of(self, name: str) -> str | None:
        """The task ``name`` works on: its roster's ``current_task``, else the one unfinished task it holds."""
        data = self.read()
        mate = next((m for m in self.roster() if m["name"] == name), None)
        held = [t for t in data["tasks"] if t["assigned_to"] == name and t["status"] in ("in_progress", "blocked")]
        current = (mate or {}).get("current_task")
        if current and any(t["task_id"] == current for t in held):
            return str(current)
        return str(held[0]["task_id"]) if len(held) == 1 else None

    def record_progress(
        self,
        task_id: str | None,
        name: str,
        *,
        files: list[str] | None = None,
        check: str | None = None,
        note: str | None = None,
        checkpoint: bool = True,
    ) -> dict[str, Any]:
        """Record progress on a task ``name`` holds (``None``: its current task): files modified
        (plus those its Write/Edit tool calls changed, noted by the hooks), the check status, a
        note; then a task checkpoint, so that a teammate taking the task over starts from it."""
        self.require_member(name)
        if check is not None and check not in CHECK_STATUSES:
            raise UsageError(f"check must be one of {', '.join(CHECK_STATUSES)}, not {check!r}.")
        if task_id is None:
            task_id = self.current_task_of(name)
            if task_id is None:
                raise UsageError(f"{name} holds no unfinished task: name the task (`phx team tasks {self.id}`).")
        from phoenix_protocol.core._redact import redact

        clean_note = redact(" ".join(note.split()))[:MAX_NOTE_CHARS] if note and note.strip() else None
        holder: dict[str, Any] = {}
        from phoenix_protocol.agent._heartbeats import take_files

        def keep(noted: list[str]) -> None:
            holder["task"] = self._progress(task_id, name, [*(files or []), *noted], check, clean_note)

        take_files(self.heartbeat_dir, name, keep)
        if "task" not in holder:  # nothing noted by the hooks: ``keep`` was not called
            keep([])
        task: dict[str, Any] = holder["task"]
        if checkpoint:
            self._task_checkpoint(task, "progress")
        return task

    def _progress(
        self, task_id: str, name: str, files: list[str], check: str | None, note: str | None
    ) -> dict[str, Any]:
        ms = self.clock.now_ms()

        def mutate(data: dict[str, Any]) -> dict[str, Any]:
            task = self._task(data, task_id)
            if task["assigned_to"] != name:
                raise ClaimConflictError(f"{task_id} is held by {task['assigned_to'] or 'nobody'}, not {name}.")
            point = task["checkpoint"]
            if files:
                point["files_modified"] = sorted(set(point["files_modified"]) | set(files))
            if check is not None:
                point["check_status"] = check
            if note is not None:
                point["note"] = note
                point["notes"] = [*(point.get("notes") or []), {"at": iso_from_ms(ms), "by": name, "note": note}][
                    -KEEP_NOTES:
                ]
            point["last_progress_at"] = iso_from_ms(ms)
            self._log(data, "progress_recorded")
            return task

        _data, task = self._change(mutate, task_id=task_id)
        return task

    def absorb_files(self, name: str) -> list[str]:
        """Take the files ``name``'s Write/Edit tool calls changed (noted by the PostToolUse hook)
        into the checkpoint of the task it works on; files noted while it held no task are dropped."""
        from phoenix_protocol.agent._heartbeats import take_files

        def keep(noted: list[str]) -> None:
            task_id = self.current_task_of(name) if noted else None
            if task_id is not None:
                self._progress(task_id, name, noted, None, None)

        return take_files(self.heartbeat_dir, name, keep)

    def reassign(self, task_id: str, new_owner: str) -> dict[str, Any]:
        """The seed's ``--force-reassign``: give a task to ``new_owner``, who inherits its checkpoint."""
        if new_owner not in self.teammate_names():
            raise UsageError(f"{new_owner!r} is not in team {self.id}.")
        holder = next((t["assigned_to"] for t in self.read()["tasks"] if t["task_id"] == task_id), None)
        if holder:
            self.absorb_files(holder)  # what its tool calls changed goes with the task
        previous: dict[str, Any] = {}

        def mutate(data: dict[str, Any]) -> dict[str, Any]:
            task = self._task(data, task_id)
            if task["status"] == "completed":
                raise ClaimConflictError(f"{task_id} is completed.")
            previous["owner"] = task["assigned_to"]
            task.update(assigned_to=new_owner, status="in_progress")
            task["started_at"] = task["started_at"] or self.clock.now_iso()
            task["checkpoint"]["inherited_from"] = previous["owner"]
            self._log(data, "task_reassigned")
            return task

        _data, task = self._change(mutate)
        if previous.get("owner"):
            self._set_current_task(previous["owner"], None)
        self._set_current_task(new_owner, task_id)
        self._task_checkpoint(task, f"reassigned from {previous.get('owner')}")
        return task

    def sweep(self) -> list[dict[str, Any]]:
        """Return tasks held by suspended or stale teammates to the queue (checkpoints kept)."""
        lead = self.store.read_metadata()["lead"]
        dead = {
            name
            for name, live in self.liveness_all().items()
            if name != lead and live["class"] in ("suspended", "stale")
        }
        if not dead:
            return []
        for name in sorted(dead):
            self.absorb_files(name)

        def mutate(data: dict[str, Any]) -> list[dict[str, Any]]:
            back = []
            for task in data["tasks"]:
                if task["status"] in ("in_progress", "blocked") and task["assigned_to"] in dead:
                    task["checkpoint"]["inherited_from"] = task["assigned_to"]
                    task.update(assigned_to=None, status="pending")
                    back.append(task)
            if back:
                self._log(data, "tasks_swept")
            return back

        _data, back = self._change(mutate)
        for task in back:
            self._task_checkpoint(task, "swept")
        for name in dead:
            self._set_current_task(name, None)
        return back

    def _set_current_task(self, name: str, task_id: str | None) -> None:
        def mutate(teammates: list[dict[str, Any]]) -> None:
            for mate in teammates:
                if mate["name"] == name:
                    mate["current_task"] = task_id

        self._change_roster(mutate)

    # -- messages ------------------------------------------------------------------------------

    def send(
        self, sender: str, to: str, *, type: str = "info", subject: str, body: str, msg_id: str | None = None
    ) -> Message:
        """Send a message (idempotent by ``msg_id``) in one small transaction: the message, the
        mailbox's counters, the session log's message count and, every few messages, a
        ``messages`` checkpoint."""
        ms = self.clock.now_ms()

        def after(meta: dict[str, Any]) -> bool:
            log = meta["session_log"]
            log["messages_since_checkpoint"] = int(log.get("messages_since_checkpoint", 0)) + 1
            last = log.get("last_checkpoint_ms") or 0
            self._log(meta, "message_sent")
            return bool(
                log["messages_since_checkpoint"] >= MESSAGE_CHECKPOINT_EVERY or ms - last >= MESSAGE_CHECKPOINT_MS
            )

        def checkpoint(
            meta: dict[str, Any], beats: dict[str, Any], position: dict[str, Any]
        ) -> tuple[int, dict[str, Any]]:
            seq = self._number_checkpoint(meta, "messages", ms)
            return seq, self._checkpoint_record(seq, "messages", "", ms, beats, position)

        return self.store.send(
            sender,
            to,
            type=type,
            subject=subject,
            body=body,
            msg_id=msg_id,
            after=after,
            checkpoint=checkpoint,
            keep=KEEP_CHECKPOINTS,
        )

    def _number_checkpoint(self, data: dict[str, Any], kind: str, ms: int) -> int:
        """The next checkpoint's seq, recorded in the team's metadata with its session log."""
        data["checkpoint_seq"] = int(data.get("checkpoint_seq", 0)) + 1
        log = data["session_log"]
        log["messages_since_checkpoint"] = 0
        log["last_checkpoint_ms"] = ms
        if kind == "full":
            log["last_full_snapshot_ms"] = ms
        self._log(data, "checkpoint_saved")
        return int(data["checkpoint_seq"])

    def _checkpoint_record(
        self, seq: int, kind: str, reason: str, ms: int, beats: dict[str, Any], position: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "kind": "phoenix.team-checkpoint",
            "schema_version": SCHEMA_VERSION,
            "team_id": self.id,
            "seq": seq,
            "checkpoint_type": kind,
            "reason": reason,
            "timestamp": iso_from_ms(ms),
            "timestamp_ms": ms,
            "heartbeats": beats,
            "mailbox": position,
        }

    # -- checkpoints -----------------------------------------------------------------------------

    def facts_hash(self) -> dict[str, Any]:
        """Seed 004's "verify facts": the hash of the facts command's output (default: git HEAD
        and a hash of tracked changes)."""
        data = self.store.read_metadata()
        command = (data.get("settings") or {}).get("facts_command")
        root = self.home.project_root or os.path.dirname(self.home.root)
        if command:
            proc = subprocess.run(command, shell=True, cwd=root, capture_output=True, timeout=60, check=False)  # noqa: S602 - the user's configured command
            output = proc.stdout + b"\x00" + str(proc.returncode).encode()
            source = command
        else:
            head = _git(root, "rev-parse", "HEAD")
            diff = _git(root, "diff", "HEAD", "--no-color", "--no-ext-diff")
            output = (head or b"no-git") + b"\x00" + hashlib.sha256(diff or b"").digest()
            source = "git HEAD + tracked changes"
        return {"hash": "sha256:" + hashlib.sha256(output).hexdigest(), "source": source}

    def checkpoint(self, *, kind: str = "full", task: dict[str, Any] | None = None, reason: str = "") -> dict[str, Any]:
        """Write ``checkpoints/checkpoint-<seq>.json``: ``full`` (metadata, roster, heartbeats,
        mailbox position and cursors, facts) or ``task`` / ``messages`` (small, between snapshots);
        ``auto`` is ``full`` when the last full snapshot is older than 5 minutes, else ``task``."""
        ms = self.clock.now_ms()
        holder: dict[str, Any] = {}
        if kind == "auto":  # decided outside the change: two claimers may both snapshot, no harm
            last_full = self.store.read_metadata()["session_log"].get("last_full_snapshot_ms") or 0
            kind = "full" if ms - last_full >= FULL_SNAPSHOT_MS else "task"

        def mutate(data: dict[str, Any]) -> None:
            holder["seq"] = self._number_checkpoint(data, kind, ms)
            if task is not None:
                self._task(data, task["task_id"])["checkpoint"].update(
                    checkpoint_seq=data["checkpoint_seq"], name=f"checkpoint-{data['checkpoint_seq']:08d}.json"
                )
            holder["data"] = data

        # A task record needs only its task: the store may load just that one (PostgreSQL does).
        only = task["task_id"] if task is not None and kind != "full" else None
        data, _ = self._change(
            mutate, allow_completed=kind == "full", task_id=only, metadata_only=kind != "full" and task is None
        )
        seq = holder["seq"]
        roster = self.roster()
        beats = self.store.read_beats([m["name"] for m in roster])
        record = self._checkpoint_record(seq, kind, reason, ms, beats, self._mailbox_position(roster))
        if kind == "full":
            record["metadata"] = data
            record["teammates"] = roster
            record["facts"] = self.facts_hash()
        elif task is not None:
            record["task"] = self._task(data, task["task_id"])
        name = f"checkpoint-{seq:08d}.json"
        self.store.write_checkpoint(name, seq, kind, record, KEEP_CHECKPOINTS)
        if kind == "full" and self.config.team_git_mirror:
            self.mirror_to_git(f"phoenix team {self.id}: {name}")
        return {"name": name, "seq": seq, "kind": kind}

    def _mailbox_position(self, roster: list[dict[str, Any]]) -> dict[str, Any]:
        try:
            stats = self.mailbox.stats()
            cursors = self.mailbox.cursor_states([m["name"] for m in roster])
        except (OSError, AttributeError, UsageError, CorruptStateError):
            return {}
        return {"stats": stats, "cursors": cursors}

    def _task_checkpoint(self, task: dict[str, Any], reason: str) -> None:
        info = self.checkpoint(kind="auto", task=task, reason=f"{task['task_id']} {reason}")
        task["checkpoint"].update(checkpoint_seq=info["seq"], name=info["name"])  # what the caller gets back

    def latest_checkpoint(self, *, kind: str | None = None) -> dict[str, Any] | None:
        """The newest checkpoint (of a kind)."""
        return self.store.latest_checkpoint(kind)

    def mirror_to_git(self, message: str | None = None) -> str | None:
        """Commit the team's seed-004 files (what ``phx team export`` writes) to
        ``refs/phoenix/teams/<team_id>`` with git plumbing: no branch, index or work tree of the
        user's is touched. Returns the commit id (``None`` outside git)."""
        from phoenix_protocol.store._team_files import mirror_to_git

        return mirror_to_git(self, message or f"phoenix team {self.id}")

    def export(self, directory: str) -> dict[str, Any]:
        """Write seed 004's ``<directory>/<team_id>/`` layout (``phx team export``)."""
        from phoenix_protocol.store._team_files import export_team

        return export_team(self, directory)

    # -- the lead, zombie mode ----------------------------------------------------------------------

    def lead_silence_ms(self, *, now_ms: int | None = None) -> int | None:
        """Milliseconds since the lead was last seen (its heartbeat or binding), or ``None``."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        data = self.store.read_metadata()
        seen = [int(data["lead_last_seen_ms"])] if data.get("lead_last_seen_ms") else []
        hb = self.store.read_beat(data["lead"], observed=True)
        if hb is not None:
            beat_ms = int(hb["ms"])
            if beat_ms - now > SKEW_MS and isinstance(hb.get("observed_age_ms"), int):
                beat_ms = now - int(hb["observed_age_ms"])  # stamped in the future: when it arrived
            seen.append(beat_ms)
        return now - max(seen) if seen else None

    def status_for(self, name: str) -> dict[str, Any]:
        """What a teammate should know: its tasks, unread messages, and ZOMBIE mode when the lead
        has been silent for more than 5 minutes (keep working; checkpoint every 30 s)."""
        member = name in self.teammate_names()
        if member:
            self.absorb_files(name)
        data = self.read()
        silence = self.lead_silence_ms()
        zombie = (
            name != data["lead"]
            and data["status"] in ("active", "suspended")
            and silence is not None
            and silence > LEAD_TIMEOUT_MS
        )
        log = data["session_log"]
        if zombie and (not log.get("lead_timeout_detected_at") or name not in (log.get("zombie_teammates") or [])):
            ms = self.clock.now_ms()

            def mutate(meta: dict[str, Any]) -> None:
                episode = meta["session_log"]
                if not episode.get("lead_timeout_detected_at"):
                    episode["lead_timeout_detected_at"] = iso_from_ms(ms)
                    episode["lead_timeout_detected_ms"] = ms
                    episode["zombie_teammates"] = []
                if member and name not in (episode.get("zombie_teammates") or []):
                    episode["zombie_teammates"] = [*(episode.get("zombie_teammates") or []), name]

            self._change(mutate, metadata_only=True)
        mine = [t for t in data["tasks"] if t["assigned_to"] == name and t["status"] != "completed"]
        out = {
            "team_id": self.id,
            "status": data["status"],
            "name": name,
            "zombie": zombie,
            "lead": data["lead"],
            "lead_silence_ms": silence,
            "tasks": mine,
            "unread": self.mailbox.unread_count(name) if member else 0,
        }
        if zombie:
            last = data["session_log"].get("last_full_snapshot_ms") or 0  # task records between do not count
            if self.clock.now_ms() - last >= ZOMBIE_CHECKPOINT_MS:
                out["checkpoint"] = self.checkpoint(kind="full", reason=f"ZOMBIE: lead silent, {name} works on")
        return out

    def attach(self, name: str, task_id: str, *, session_id: str | None = None) -> dict[str, Any]:
        """Seed 004's ``--resume-team <id> --task <task-id>``: teammate ``name`` (re-)attaches to
        a task, in a new session after its own crash or as the new owner after a reassignment.
        The task must be ``name``'s (a pending, ready one is claimed); another teammate's is a
        ``ClaimConflictError`` (``phx team reassign`` first). Returns the task with its checkpoint
        (files, check status, notes, who it was inherited from), the newest team checkpoint that
        recorded it, and the unread count."""
        self.require_member(name)
        if session_id is not None:
            validate_session_id(session_id)
        self.absorb_files(name)
        data = self.read()
        task = self._task(data, task_id)
        if task["status"] == "completed":
            raise ClaimConflictError(f"{task_id} is completed: nothing to resume.")
        if task["assigned_to"] is None:
            task = self.claim(task_id, name)
        elif task["assigned_to"] != name:
            raise ClaimConflictError(
                f"{task_id} is held by {task['assigned_to']}, not {name}: "
                f"`phx team reassign {self.id} {task_id} {name}` hands it over with its checkpoint."
            )

        def mutate(teammates: list[dict[str, Any]]) -> None:
            for mate in teammates:
                if mate["name"] == name:
                    mate["current_task"] = task_id
                    mate["status"] = "active"
                    if session_id is not None:
                        mate["session_id"] = session_id

        self._change_roster(mutate)
        self.heartbeat(name, session_id=session_id)
        saved = task["checkpoint"].get("name")
        record = self.store.read_checkpoint(saved) if saved else None
        return {
            "team_id": self.id,
            "name": name,
            "session_id": session_id,
            "task": task,
            "checkpoint": task["checkpoint"],
            "team_checkpoint": record,
            "unread": self.mailbox.unread_count(name),
        }

    def delivery(self, sender: str, *, msg_ids: list[str] | None = None, last: int = 50) -> list[dict[str, Any]]:
        """Seed 004 §4.3's delivery state of the messages ``sender`` sent (``msg_ids``, else its
        newest ``last``): for each recipient whether it was read (handed over by its inbox) and
        acknowledged; ``state`` is ``acked`` (by every recipient), ``read`` (by every recipient)
        or ``delivered`` (stored in the mailbox, not yet read by all)."""
        self.require_member(sender)
        roster = self.teammate_names()
        messages = self.store.mailbox().sent_by(sender, msg_ids=msg_ids, last=last)
        cursors = self.mailbox.cursor_states(roster)
        out = []
        for message in messages:
            recipients = [n for n in roster if n != sender] if message.broadcast else [message.to]
            read_by = [n for n in recipients if n in cursors and cursors[n]["delivered_seq"] >= message.seq]
            acked = [n for n in recipients if n in message.acked_by]
            state = (
                "acked"
                if recipients and len(acked) == len(recipients)
                else "read"
                if recipients and len(read_by) == len(recipients)
                else "delivered"
            )
            out.append(
                {
                    **message.as_dict(),
                    "state": state,
                    "delivered": True,
                    "recipients": recipients,
                    "read_by": read_by,
                    "acked_by": acked,
                }
            )
        return out

    # -- consolidation ------------------------------------------------------------------------------

    def consolidate(self) -> dict[str, Any]:
        """Mark consolidating, run the check command, record the last good commit. Green stays
        consolidating (commit, then ``complete``); red goes back to active."""
        data = self.store.read_metadata()
        root = self.home.project_root or os.path.dirname(self.home.root)
        head = _git(root, "rev-parse", "HEAD")
        if data["status"] != "consolidating":
            self.transition("consolidating", reason="consolidation started")
        self.checkpoint(kind="full", reason="pre-consolidation")
        command = (data.get("settings") or {}).get("check_command")
        result: dict[str, Any] = {"command": command, "head": head.decode().strip() if head else None}
        if command:
            proc = subprocess.run(command, shell=True, cwd=root, capture_output=True, timeout=3600, check=False)  # noqa: S602 - the user's configured check
            result["exit_code"] = proc.returncode
            from phoenix_protocol.core._redact import redact

            result["output_tail"] = redact((proc.stdout + proc.stderr)[-2000:].decode("utf-8", "replace"))
            green = proc.returncode == 0
        else:
            result["exit_code"] = None
            green = True
        result["green"] = green
        ms = self.clock.now_ms()

        def mutate(meta: dict[str, Any]) -> None:
            log = meta["session_log"]
            log["consolidation"] = {**result, "at": iso_from_ms(ms)}
            if green and result["head"]:
                log["last_good_commit"] = result["head"]
            self._log(meta, "consolidation_checked")

        self._change(mutate)
        if not green:
            self.transition("active", reason="consolidation check failed")
        return result

    def complete(self, *, force: bool = False) -> dict[str, Any]:
        """Mark the team completed (read-only from then on); refused while git has uncommitted
        changes unless ``force``."""
        root = self.home.project_root
        status = self.store.read_metadata()["status"]
        if "completed" not in _TRANSITIONS[status]:
            raise RefusedError(
                f"team {self.id} is {status}: only a consolidating team can complete (`phx team consolidate`)."
            )
        if root and not force:
            dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
            if dirty and dirty.strip():
                raise RefusedError("the work tree has uncommitted changes: commit them first (or --force).")
        self.checkpoint(kind="full", reason="completed")
        return self.transition("completed", reason="consolidated")

    def partial_consolidation(self) -> dict[str, Any] | None:
        """Status consolidating plus staged or dirty changes in git: a lead died mid-consolidation."""
        data = self.store.read_metadata()
        if data["status"] != "consolidating":
            return None
        root = self.home.project_root
        staged = _git(root, "diff", "--cached", "--name-only", "-z") if root else None
        dirty = _git(root, "diff", "--name-only", "-z") if root else None
        files_staged = [f for f in (staged or b"").decode("utf-8", "surrogateescape").split("\x00") if f]
        files_dirty = [f for f in (dirty or b"").decode("utf-8", "surrogateescape").split("\x00") if f]
        if not files_staged and not files_dirty:
            return None
        return {
            "staged": files_staged,
            "dirty": files_dirty,
            "last_good_commit": data["session_log"].get("last_good_commit"),
            "options": ["retry", "abort", "inspect"],
        }

    def resolve_consolidation(self, choice: str) -> dict[str, Any]:
        """retry (run the check again) | abort (reset to the last good commit, reopen tasks) |
        inspect (the staged diff)."""
        data = self.store.read_metadata()
        root = self.home.project_root
        if choice == "retry":
            return {"choice": "retry", **self.consolidate()}
        if choice == "inspect":
            diff = _git(root, "diff", "--cached", "--stat", "--patch", "--no-color") if root else None
            return {"choice": "inspect", "diff": (diff or b"").decode("utf-8", "replace")}
        if choice == "abort":
            good = data["session_log"].get("last_good_commit")
            if not good or not root:
                raise RefusedError("no last good commit recorded: cannot roll back; inspect and fix by hand.")
            self.checkpoint(kind="full", reason="before consolidation abort")
            if _git(root, "reset", "--hard", good) is None:
                raise RefusedError(f"git reset --hard {good} failed; the work tree was left as it is.")

            def mutate(meta: dict[str, Any]) -> list[str]:
                reopened = []
                for task in meta["tasks"]:
                    if task["status"] == "completed":
                        task.update(status="pending", assigned_to=None, completed_at=None)
                        reopened.append(task["task_id"])
                meta["status"] = "active"
                self._log(meta, "consolidation_aborted")
                return reopened

            _meta, reopened = self._change(mutate)
            return {"choice": "abort", "reset_to": good, "reopened": reopened}
        raise UsageError("choose retry, abort or inspect.")


def _find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """A dependency cycle in ``graph`` (node → its dependencies), as a path, or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in graph.get(node, []):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if state.get(dep) is None:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in graph:
        if state.get(node) is None:
            found = visit(node)
            if found:
                return found
    return None


def _git(root: str | None, *args: str, input_: bytes | None = None, env: dict[str, str] | None = None) -> bytes | None:
    if root is None:
        return None
    full_env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C", **(env or {}))
    try:
        proc = subprocess.run(
            ["git", "-C", root, *args], input=input_, capture_output=True, timeout=30, env=full_env, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def dumps(record: dict[str, Any]) -> str:
    """One record as a JSON line (for ``--json`` outputs)."""
    return dumps_line(record)
