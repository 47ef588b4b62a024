"""The database's schema: numbered migrations, run forward on both engines by the same code.

Each ``Migration`` has the SQL for PostgreSQL and for SQLite: the same tables, columns and
indexes, in each engine's types (``jsonb``/``text[]``/``bytea`` on PostgreSQL are ``TEXT`` holding
JSON and ``BLOB`` on SQLite; full-text search is a ``tsvector`` column there and an FTS5 table
here). ``phx_schema_migrations`` records what was applied. ``ensure`` runs on the first use of a
database in each process: it applies what is pending, each migration in the transaction that
records it (PostgreSQL: under an advisory lock; SQLite: ``BEGIN IMMEDIATE``, under the file's
lock), and refuses a database that a newer Phoenix migrated (``SchemaVersionError``), writing
nothing to it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from phoenix_protocol.core._errors import SchemaVersionError

if TYPE_CHECKING:
    from phoenix_protocol.store._db import Database, Tx

__all__ = ["LATEST", "MIGRATIONS", "Migration", "current", "ensure", "status"]

T = TypeVar("T")


class Migration(NamedTuple):
    """One step of the schema: ``version`` (applied in order), what it does, and its SQL per engine."""

    version: int
    description: str
    postgresql: str
    sqlite: str

    def sql(self, engine: str) -> str:
        return self.postgresql if engine == "postgresql" else self.sqlite


MIGRATIONS: list[Migration] = [
    Migration(
        1,
        "teams: tasks, mailbox, cursors, acks, heartbeats, checkpoints",
        postgresql="""
        CREATE TABLE phx_teams (
            team_id     text PRIMARY KEY,
            metadata    jsonb NOT NULL,
            roster      jsonb NOT NULL DEFAULT '[]'::jsonb,
            created_ms  bigint NOT NULL
        );
        CREATE TABLE phx_tasks (
            team_id      text NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            task_id      text NOT NULL,
            position     integer NOT NULL,
            status       text NOT NULL,
            assigned_to  text,
            dependencies text[] NOT NULL DEFAULT '{}',
            record       jsonb NOT NULL,
            PRIMARY KEY (team_id, task_id)
        );
        CREATE INDEX phx_tasks_ready ON phx_tasks (team_id, position) WHERE status = 'pending';
        CREATE TABLE phx_team_seq (
            team_id   text PRIMARY KEY REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            last_seq  bigint NOT NULL DEFAULT 0
        );
        CREATE TABLE phx_messages (
            team_id    text NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            seq        bigint NOT NULL,
            msg_id     text NOT NULL,
            sender     text NOT NULL,
            recipient  text NOT NULL,
            type       text NOT NULL,
            subject    text NOT NULL,
            body       text NOT NULL,
            ts         text NOT NULL,
            ts_ms      bigint NOT NULL,
            PRIMARY KEY (team_id, seq),
            UNIQUE (team_id, msg_id)
        );
        CREATE INDEX phx_messages_to ON phx_messages (team_id, recipient, seq);
        CREATE TABLE phx_cursors (
            team_id    text NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            reader     text NOT NULL,
            delivered  bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (team_id, reader)
        );
        CREATE TABLE phx_acks (
            team_id   text NOT NULL,
            seq       bigint NOT NULL,
            reader    text NOT NULL,
            acked_ms  bigint NOT NULL,
            PRIMARY KEY (team_id, seq, reader),
            FOREIGN KEY (team_id, seq) REFERENCES phx_messages(team_id, seq) ON DELETE CASCADE
        );
        CREATE TABLE phx_heartbeats (
            team_id     text NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            name        text NOT NULL,
            seq         bigint NOT NULL,
            ms          bigint NOT NULL,
            session_id  text,
            host        text,
            pid         integer,
            PRIMARY KEY (team_id, name)
        );
        CREATE TABLE phx_team_checkpoints (
            team_id  text NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            seq      bigint NOT NULL,
            kind     text NOT NULL,
            record   jsonb NOT NULL,
            PRIMARY KEY (team_id, seq)
        );
        CREATE INDEX phx_team_checkpoints_kind ON phx_team_checkpoints (team_id, kind, seq DESC);
        """,
        sqlite="""
        CREATE TABLE phx_teams (
            team_id     TEXT PRIMARY KEY,
            metadata    TEXT NOT NULL,
            roster      TEXT NOT NULL DEFAULT '[]',
            created_ms  INTEGER NOT NULL
        );
        CREATE TABLE phx_tasks (
            team_id      TEXT NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            task_id      TEXT NOT NULL,
            position     INTEGER NOT NULL,
            status       TEXT NOT NULL,
            assigned_to  TEXT,
            dependencies TEXT NOT NULL DEFAULT '[]',
            record       TEXT NOT NULL,
            PRIMARY KEY (team_id, task_id)
        );
        CREATE INDEX phx_tasks_ready ON phx_tasks (team_id, position) WHERE status = 'pending';
        CREATE TABLE phx_team_seq (
            team_id   TEXT PRIMARY KEY REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            last_seq  INTEGER NOT NULL DEFAULT 0
        );
        CREATE TABLE phx_messages (
            team_id    TEXT NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            seq        INTEGER NOT NULL,
            msg_id     TEXT NOT NULL,
            sender     TEXT NOT NULL,
            recipient  TEXT NOT NULL,
            type       TEXT NOT NULL,
            subject    TEXT NOT NULL,
            body       TEXT NOT NULL,
            ts         TEXT NOT NULL,
            ts_ms      INTEGER NOT NULL,
            PRIMARY KEY (team_id, seq),
            UNIQUE (team_id, msg_id)
        );
        CREATE INDEX phx_messages_to ON phx_messages (team_id, recipient, seq);
        CREATE TABLE phx_cursors (
            team_id    TEXT NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            reader     TEXT NOT NULL,
            delivered  INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (team_id, reader)
        );
        CREATE TABLE phx_acks (
            team_id   TEXT NOT NULL,
            seq       INTEGER NOT NULL,
            reader    TEXT NOT NULL,
            acked_ms  INTEGER NOT NULL,
            PRIMARY KEY (team_id, seq, reader),
            FOREIGN KEY (team_id, seq) REFERENCES phx_messages(team_id, seq) ON DELETE CASCADE
        );
        CREATE TABLE phx_heartbeats (
            team_id     TEXT NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            name        TEXT NOT NULL,
            seq         INTEGER NOT NULL,
            ms          INTEGER NOT NULL,
            session_id  TEXT,
            host        TEXT,
            pid         INTEGER,
            PRIMARY KEY (team_id, name)
        );
        CREATE TABLE phx_team_checkpoints (
            team_id  TEXT NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            seq      INTEGER NOT NULL,
            kind     TEXT NOT NULL,
            record   TEXT NOT NULL,
            PRIMARY KEY (team_id, seq)
        );
        CREATE INDEX phx_team_checkpoints_kind ON phx_team_checkpoints (team_id, kind, seq DESC);
        """,
    ),
    Migration(
        2,
        "memory: namespaced memories with full-text search",
        postgresql="""
        CREATE FUNCTION phx_words(text[]) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
            AS $$ SELECT array_to_string($1, ' ') $$;
        CREATE TABLE phx_memories (
            id          text PRIMARY KEY,
            namespace   text NOT NULL,
            text        text NOT NULL,
            tags        text[] NOT NULL DEFAULT '{}',
            metadata    jsonb NOT NULL DEFAULT '{}'::jsonb,
            created_ms  bigint NOT NULL,
            document    tsvector GENERATED ALWAYS AS (
                to_tsvector('english'::regconfig, text || ' ' || phx_words(tags))
            ) STORED
        );
        CREATE INDEX phx_memories_namespace ON phx_memories (namespace, created_ms DESC);
        CREATE INDEX phx_memories_document ON phx_memories USING gin (document);
        CREATE INDEX phx_memories_tags ON phx_memories USING gin (tags);
        """,
        sqlite="""
        CREATE TABLE phx_memories (
            seq         INTEGER PRIMARY KEY,
            id          TEXT NOT NULL UNIQUE,
            namespace   TEXT NOT NULL,
            text        TEXT NOT NULL,
            tags        TEXT NOT NULL DEFAULT '[]',
            metadata    TEXT NOT NULL DEFAULT '{}',
            created_ms  INTEGER NOT NULL
        );
        CREATE INDEX phx_memories_namespace ON phx_memories (namespace, created_ms DESC);
        CREATE VIRTUAL TABLE phx_memories_fts USING fts5(
            text, tags, content='phx_memories', content_rowid='seq', tokenize='porter unicode61'
        );
        CREATE TRIGGER phx_memories_ai AFTER INSERT ON phx_memories BEGIN
            INSERT INTO phx_memories_fts (rowid, text, tags) VALUES (new.seq, new.text, new.tags);
        END;
        CREATE TRIGGER phx_memories_ad AFTER DELETE ON phx_memories BEGIN
            INSERT INTO phx_memories_fts (phx_memories_fts, rowid, text, tags) VALUES ('delete', old.seq, old.text, old.tags);
        END;
        CREATE TRIGGER phx_memories_au AFTER UPDATE ON phx_memories BEGIN
            INSERT INTO phx_memories_fts (phx_memories_fts, rowid, text, tags) VALUES ('delete', old.seq, old.text, old.tags);
            INSERT INTO phx_memories_fts (rowid, text, tags) VALUES (new.seq, new.text, new.tags);
        END;
        """,
    ),
    Migration(
        3,
        "mailbox: a byte counter and an index of broadcasts (inboxes stay fast as the mailbox grows)",
        postgresql="""
        ALTER TABLE phx_team_seq ADD COLUMN bytes bigint NOT NULL DEFAULT 0;
        UPDATE phx_team_seq s SET bytes = coalesce((SELECT sum(octet_length(m.subject) + octet_length(m.body))
            FROM phx_messages m WHERE m.team_id = s.team_id), 0);
        CREATE INDEX phx_messages_broadcast ON phx_messages (team_id, seq) WHERE recipient = '*';
        """,
        sqlite="""
        ALTER TABLE phx_team_seq ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
        UPDATE phx_team_seq SET bytes = coalesce((SELECT sum(length(CAST(m.subject AS BLOB)) + length(CAST(m.body AS BLOB)))
            FROM phx_messages m WHERE m.team_id = phx_team_seq.team_id), 0);
        CREATE INDEX phx_messages_broadcast ON phx_messages (team_id, seq) WHERE recipient = '*';
        """,
    ),
    Migration(
        4,
        "mailbox: counters that make a reader's unread count constant-time",
        postgresql="""
        ALTER TABLE phx_team_seq ADD COLUMN broadcasts bigint NOT NULL DEFAULT 0;
        CREATE TABLE phx_mailbox_counts (
            team_id          text NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            name             text NOT NULL,
            direct           bigint NOT NULL DEFAULT 0,
            broadcasts_sent  bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (team_id, name)
        );
        ALTER TABLE phx_cursors ADD COLUMN addressed bigint NOT NULL DEFAULT 0;
        UPDATE phx_team_seq s SET broadcasts = (SELECT count(*) FROM phx_messages m
            WHERE m.team_id = s.team_id AND m.recipient = '*');
        INSERT INTO phx_mailbox_counts (team_id, name, direct, broadcasts_sent)
            SELECT team_id, name, sum(direct), sum(sent) FROM (
                SELECT team_id, recipient AS name, count(*) AS direct, 0 AS sent FROM phx_messages
                    WHERE recipient <> '*' GROUP BY team_id, recipient
                UNION ALL
                SELECT team_id, sender, 0, count(*) FROM phx_messages WHERE recipient = '*' GROUP BY team_id, sender
            ) AS c GROUP BY team_id, name;
        UPDATE phx_cursors c SET addressed = (SELECT count(*) FROM phx_messages m WHERE m.team_id = c.team_id
            AND m.seq <= c.delivered AND (m.recipient = c.reader OR (m.recipient = '*' AND m.sender <> c.reader)));
        """,
        sqlite="""
        ALTER TABLE phx_team_seq ADD COLUMN broadcasts INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE phx_mailbox_counts (
            team_id          TEXT NOT NULL REFERENCES phx_teams(team_id) ON DELETE CASCADE,
            name             TEXT NOT NULL,
            direct           INTEGER NOT NULL DEFAULT 0,
            broadcasts_sent  INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (team_id, name)
        );
        ALTER TABLE phx_cursors ADD COLUMN addressed INTEGER NOT NULL DEFAULT 0;
        UPDATE phx_team_seq SET broadcasts = (SELECT count(*) FROM phx_messages m
            WHERE m.team_id = phx_team_seq.team_id AND m.recipient = '*');
        INSERT INTO phx_mailbox_counts (team_id, name, direct, broadcasts_sent)
            SELECT team_id, name, sum(direct), sum(sent) FROM (
                SELECT team_id, recipient AS name, count(*) AS direct, 0 AS sent FROM phx_messages
                    WHERE recipient <> '*' GROUP BY team_id, recipient
                UNION ALL
                SELECT team_id, sender, 0, count(*) FROM phx_messages WHERE recipient = '*' GROUP BY team_id, sender
            ) AS c GROUP BY team_id, name;
        UPDATE phx_cursors SET addressed = (SELECT count(*) FROM phx_messages m WHERE m.team_id = phx_cursors.team_id
            AND m.seq <= phx_cursors.delivered AND (m.recipient = phx_cursors.reader
            OR (m.recipient = '*' AND m.sender <> phx_cursors.reader)));
        """,
    ),
    Migration(
        5,
        "agents' checkpoints (envelopes, a seq counter per agent, operation outcomes) and sessions",
        postgresql="""
        CREATE TABLE phx_checkpoint_seq (
            agent_id  text PRIMARY KEY,
            next_seq  bigint NOT NULL
        );
        CREATE TABLE phx_checkpoints (
            agent_id         text NOT NULL,
            seq              bigint NOT NULL,
            name             text NOT NULL,
            checkpoint_type  text NOT NULL,
            timestamp_ms     bigint NOT NULL,
            label            text,
            operation_id     text,
            size             integer NOT NULL,
            content          bytea NOT NULL,
            PRIMARY KEY (agent_id, seq),
            UNIQUE (agent_id, name)
        );
        CREATE INDEX phx_checkpoints_by_type ON phx_checkpoints (agent_id, checkpoint_type, seq DESC);
        CREATE TABLE phx_checkpoint_operations (
            agent_id  text NOT NULL,
            line      bigserial,
            op_id     text NOT NULL,
            outcome   text NOT NULL,
            at        text NOT NULL,
            PRIMARY KEY (agent_id, line)
        );
        CREATE INDEX phx_checkpoint_operations_done ON phx_checkpoint_operations (agent_id, op_id)
            WHERE outcome = 'succeeded';
        CREATE TABLE phx_session_current (
            agent_id  text PRIMARY KEY,
            record    text NOT NULL
        );
        CREATE TABLE phx_session_log (
            agent_id  text NOT NULL,
            seq       bigint NOT NULL,
            line      text NOT NULL,
            PRIMARY KEY (agent_id, seq)
        );
        """,
        sqlite="""
        CREATE TABLE phx_checkpoint_seq (
            agent_id  TEXT PRIMARY KEY,
            next_seq  INTEGER NOT NULL
        );
        CREATE TABLE phx_checkpoints (
            agent_id         TEXT NOT NULL,
            seq              INTEGER NOT NULL,
            name             TEXT NOT NULL,
            checkpoint_type  TEXT NOT NULL,
            timestamp_ms     INTEGER NOT NULL,
            label            TEXT,
            operation_id     TEXT,
            size             INTEGER NOT NULL,
            content          BLOB NOT NULL,
            PRIMARY KEY (agent_id, seq),
            UNIQUE (agent_id, name)
        );
        CREATE INDEX phx_checkpoints_by_type ON phx_checkpoints (agent_id, checkpoint_type, seq DESC);
        CREATE TABLE phx_checkpoint_operations (
            line      INTEGER PRIMARY KEY AUTOINCREMENT,
            agent_id  TEXT NOT NULL,
            op_id     TEXT NOT NULL,
            outcome   TEXT NOT NULL,
            at        TEXT NOT NULL
        );
        CREATE INDEX phx_checkpoint_operations_by_agent ON phx_checkpoint_operations (agent_id, line);
        CREATE INDEX phx_checkpoint_operations_done ON phx_checkpoint_operations (agent_id, op_id)
            WHERE outcome = 'succeeded';
        CREATE TABLE phx_session_current (
            agent_id  TEXT PRIMARY KEY,
            record    TEXT NOT NULL
        );
        CREATE TABLE phx_session_log (
            agent_id  TEXT NOT NULL,
            seq       INTEGER NOT NULL,
            line      TEXT NOT NULL,
            PRIMARY KEY (agent_id, seq)
        );
        """,
    ),
    Migration(
        6,
        "agents' state (one record per agent, with its revision) and every copy's ops events",
        postgresql="""
        CREATE TABLE phx_agent_state (
            agent_id    text PRIMARY KEY,
            state       text NOT NULL,
            rev         bigint NOT NULL,
            origin      text NOT NULL,
            host        text,
            updated_at  timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE phx_ops_events (
            agent_id  text NOT NULL,
            origin    text NOT NULL,
            seq       bigint NOT NULL,
            ts        text NOT NULL,
            event     text NOT NULL,
            status    text NOT NULL,
            line      text NOT NULL,
            PRIMARY KEY (agent_id, origin, seq)
        );
        CREATE INDEX phx_ops_events_by_seq ON phx_ops_events (agent_id, seq);
        """,
        sqlite="""
        CREATE TABLE phx_agent_state (
            agent_id    TEXT PRIMARY KEY,
            state       TEXT NOT NULL,
            rev         INTEGER NOT NULL,
            origin      TEXT NOT NULL,
            host        TEXT,
            updated_at  TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
        );
        CREATE TABLE phx_ops_events (
            agent_id  TEXT NOT NULL,
            origin    TEXT NOT NULL,
            seq       INTEGER NOT NULL,
            ts        TEXT NOT NULL,
            event     TEXT NOT NULL,
            status    TEXT NOT NULL,
            line      TEXT NOT NULL,
            PRIMARY KEY (agent_id, origin, seq)
        );
        CREATE INDEX phx_ops_events_by_seq ON phx_ops_events (agent_id, seq);
        """,
    ),
    Migration(
        7,
        "agents' identities (identity.yaml and its seal)",
        postgresql="""
        CREATE TABLE phx_identity (
            agent_id  text PRIMARY KEY,
            document  bytea NOT NULL,
            digest    text
        );
        """,
        sqlite="""
        CREATE TABLE phx_identity (
            agent_id  TEXT PRIMARY KEY,
            document  BLOB NOT NULL,
            digest    TEXT
        );
        """,
    ),
]
MIGRATIONS.append(
    Migration(
        8,
        "the memory bridge's tokens (moved from tokens.json)",
        postgresql="""
        CREATE TABLE phx_tokens (
            id        text PRIMARY KEY,
            position  bigint NOT NULL,
            record    text NOT NULL
        );
        """,
        sqlite="""
        CREATE TABLE phx_tokens (
            id        TEXT PRIMARY KEY,
            position  INTEGER NOT NULL,
            record    TEXT NOT NULL
        );
        """,
    )
)

MIGRATIONS.append(
    Migration(
        9,
        "checkpoints: the body as seed 003's JSON text, its checksum in a column of its own",
        # Each row's bytes were the document with a checksum line appended: the document up to its
        # last field becomes the content (closed again with "\n}"), the line's checksum is kept as
        # "line:<algorithm>:<hex>" (it covers those bytes and ",\n"). A row that does not read so
        # (damaged, not UTF-8) keeps its bytes in `legacy`, checksum 'legacy': reported on read.
        postgresql=r"""
        ALTER TABLE phx_checkpoints RENAME COLUMN content TO legacy;
        ALTER TABLE phx_checkpoints ALTER COLUMN legacy DROP NOT NULL;
        ALTER TABLE phx_checkpoints ADD COLUMN content text, ADD COLUMN checksum text;
        DO $$
        DECLARE
            r record;
            m text[];
        BEGIN
            FOR r IN SELECT agent_id, seq, legacy FROM phx_checkpoints LOOP
                BEGIN
                    m := regexp_match(convert_from(r.legacy, 'UTF8'),
                                      '^(.*),\n  "checksum": "([a-z0-9-]+:[0-9a-f]+)"\n\}\n?$');
                    IF m IS NOT NULL THEN
                        UPDATE phx_checkpoints SET content = m[1] || E'\n}', checksum = 'line:' || m[2], legacy = NULL
                            WHERE agent_id = r.agent_id AND seq = r.seq;
                    END IF;
                EXCEPTION WHEN others THEN
                    NULL;  -- not UTF-8: kept in `legacy`
                END;
            END LOOP;
        END $$;
        UPDATE phx_checkpoints SET content = '', checksum = 'legacy' WHERE content IS NULL;
        ALTER TABLE phx_checkpoints ALTER COLUMN content SET NOT NULL, ALTER COLUMN checksum SET NOT NULL;
        """,
        # No phoenix.db held checkpoints before this (SQLite came with it): the table is rebuilt
        # in the new shape, any row kept as it was in `legacy`.
        sqlite="""
        CREATE TABLE phx_checkpoints_v9 (
            agent_id         TEXT NOT NULL,
            seq              INTEGER NOT NULL,
            name             TEXT NOT NULL,
            checkpoint_type  TEXT NOT NULL,
            timestamp_ms     INTEGER NOT NULL,
            label            TEXT,
            operation_id     TEXT,
            size             INTEGER NOT NULL,
            content          TEXT NOT NULL,
            checksum         TEXT NOT NULL,
            legacy           BLOB,
            PRIMARY KEY (agent_id, seq),
            UNIQUE (agent_id, name)
        );
        INSERT INTO phx_checkpoints_v9
            SELECT agent_id, seq, name, checkpoint_type, timestamp_ms, label, operation_id, size, '', 'legacy', content
            FROM phx_checkpoints;
        DROP TABLE phx_checkpoints;
        ALTER TABLE phx_checkpoints_v9 RENAME TO phx_checkpoints;
        CREATE INDEX phx_checkpoints_by_type ON phx_checkpoints (agent_id, checkpoint_type, seq DESC);
        """,
    )
)
MIGRATIONS.append(
    Migration(
        10,
        "the checkpoint and session files of homes imported (each once; the import is re-runnable)",
        postgresql="""
        CREATE TABLE phx_file_imports (
            agent_id     text NOT NULL,
            source       text NOT NULL,
            imported_at  text NOT NULL,
            report       text NOT NULL,
            PRIMARY KEY (agent_id, source)
        );
        """,
        sqlite="""
        CREATE TABLE phx_file_imports (
            agent_id     TEXT NOT NULL,
            source       TEXT NOT NULL,
            imported_at  TEXT NOT NULL,
            report       TEXT NOT NULL,
            PRIMARY KEY (agent_id, source)
        );
        """,
    )
)

MIGRATIONS.append(
    Migration(
        11,
        "memory: an insertion order on PostgreSQL too (memories stored in the same millisecond list in order)",
        postgresql="""
        ALTER TABLE phx_memories ADD COLUMN seq bigserial;
        """,
        sqlite="",  # phx_memories.seq since migration 2
    )
)

_LANGGRAPH = """
CREATE TABLE phx_lg_checkpoints (
    thread_id             TEXT NOT NULL,
    checkpoint_ns         TEXT NOT NULL,
    checkpoint_id         TEXT NOT NULL,
    parent_checkpoint_id  TEXT,
    run_id                TEXT,
    checkpoint_type       TEXT NOT NULL,
    checkpoint            BLOB NOT NULL,
    metadata_type         TEXT NOT NULL,
    metadata              BLOB NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX phx_lg_checkpoints_by_run ON phx_lg_checkpoints (run_id);
CREATE TABLE phx_lg_writes (
    thread_id      TEXT NOT NULL,
    checkpoint_ns  TEXT NOT NULL,
    checkpoint_id  TEXT NOT NULL,
    task_id        TEXT NOT NULL,
    idx            INTEGER NOT NULL,
    channel        TEXT NOT NULL,
    value_type     TEXT NOT NULL,
    value          BLOB NOT NULL,
    task_path      TEXT NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);
"""
"""The LangGraph checkpointer's tables (``integrations.langgraph``), written once: ``BLOB`` is
``bytea`` on PostgreSQL, every other type the same on both engines."""

MIGRATIONS.append(
    Migration(
        12,
        "the LangGraph checkpointer's checkpoints and pending writes",
        postgresql=_LANGGRAPH.replace("BLOB", "bytea"),
        sqlite=_LANGGRAPH,
    )
)

_MEMORY_INDEX = """
CREATE TABLE phx_memory_terms (
    memory_id  TEXT NOT NULL REFERENCES phx_memories (id) ON DELETE CASCADE,
    namespace  TEXT NOT NULL,
    term       TEXT NOT NULL,
    tf         INTEGER NOT NULL,
    PRIMARY KEY (memory_id, term)
);
CREATE INDEX phx_memory_terms_by_term ON phx_memory_terms (namespace, term);
CREATE TABLE phx_memory_vectors (
    memory_id  TEXT NOT NULL REFERENCES phx_memories (id) ON DELETE CASCADE,
    model      TEXT NOT NULL,
    vector     BLOB NOT NULL,
    PRIMARY KEY (memory_id, model)
);
CREATE INDEX phx_memories_analyzed ON phx_memories (namespace, analyzed);
"""
"""Recall's own index (``store._recall``), the same on both engines: each memory's search terms
and counts, its sentence embeddings per model; ``analyzed`` (the analyzer version that wrote the
terms, 0: not yet) and ``term_count`` on the memory. A change of a memory's text or tags (by hand,
by a redaction run) drops both and marks it for analysis again. (SQLite: the FTS5 table's update
trigger now fires on a change of the text or tags only, not on the marking of ``analyzed``, which
would feed it values it does not hold yet.)"""

MIGRATIONS.append(
    Migration(
        13,
        "memory: recall's term index and embeddings, ranked the same way on both engines",
        postgresql="\n".join(
            (
                """
        ALTER TABLE phx_memories ADD COLUMN analyzed integer NOT NULL DEFAULT 0,
            ADD COLUMN term_count integer NOT NULL DEFAULT 0;
        """,
                _MEMORY_INDEX.replace("BLOB", "bytea"),
                """
        CREATE FUNCTION phx_memories_changed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.analyzed := 0;
            DELETE FROM phx_memory_terms WHERE memory_id = OLD.id;
            DELETE FROM phx_memory_vectors WHERE memory_id = OLD.id;
            RETURN NEW;
        END $$;
        CREATE TRIGGER phx_memories_changed BEFORE UPDATE OF text, tags ON phx_memories
            FOR EACH ROW EXECUTE FUNCTION phx_memories_changed();
        """,
            )
        ),
        sqlite="\n".join(
            (
                """
        ALTER TABLE phx_memories ADD COLUMN analyzed INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE phx_memories ADD COLUMN term_count INTEGER NOT NULL DEFAULT 0;
        """,
                _MEMORY_INDEX,
                """
        DROP TRIGGER phx_memories_au;
        CREATE TRIGGER phx_memories_au AFTER UPDATE OF text, tags ON phx_memories BEGIN
            INSERT INTO phx_memories_fts (phx_memories_fts, rowid, text, tags) VALUES ('delete', old.seq, old.text, old.tags);
            INSERT INTO phx_memories_fts (rowid, text, tags) VALUES (new.seq, new.text, new.tags);
        END;
        CREATE TRIGGER phx_memories_changed AFTER UPDATE OF text, tags ON phx_memories BEGIN
            UPDATE phx_memories SET analyzed = 0 WHERE seq = new.seq;
            DELETE FROM phx_memory_terms WHERE memory_id = old.id;
            DELETE FROM phx_memory_vectors WHERE memory_id = old.id;
        END;
        """,
            )
        ),
    )
)

_OUTBOX = """
CREATE TABLE phx_team_outbox (
    target     TEXT NOT NULL,
    team_id    TEXT NOT NULL,
    msg_id     TEXT NOT NULL,
    position   BIGINT NOT NULL,
    sender     TEXT NOT NULL,
    record     TEXT NOT NULL,
    state      TEXT NOT NULL,
    attempts   INTEGER NOT NULL DEFAULT 0,
    queued_ms  BIGINT NOT NULL,
    sent_ms    BIGINT,
    seq        BIGINT,
    last_error TEXT,
    PRIMARY KEY (target, team_id, msg_id)
);
CREATE INDEX phx_team_outbox_queue ON phx_team_outbox (target, team_id, state, position);
ALTER TABLE phx_heartbeats ADD COLUMN observed_ms BIGINT;
CREATE INDEX phx_messages_from ON phx_messages (team_id, sender, seq);
"""
"""Seed 004 §4.3's outbox (messages for a team on a server, queued here until it took them) and
the heartbeat's arrival time by the store's clock (``observed_ms``), written once."""

MIGRATIONS.append(
    Migration(
        14,
        "teams: the outbox of messages for a server (seed 004 §4.3), when the store received each heartbeat, "
        "messages by sender",
        postgresql=_OUTBOX,
        sqlite=_OUTBOX,
    )
)

_CLAUDE_TEAMS = """
CREATE TABLE phx_cc_teams (
    team_name        TEXT PRIMARY KEY,
    project          TEXT NOT NULL,
    state            TEXT NOT NULL,
    lead_session_id  TEXT,
    record           JSON NOT NULL,
    created_ms       BIGINT NOT NULL,
    updated_ms       BIGINT NOT NULL
);
CREATE INDEX phx_cc_teams_by_project ON phx_cc_teams (project, state);
CREATE TABLE phx_cc_members (
    team_name   TEXT NOT NULL REFERENCES phx_cc_teams(team_name) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    record      JSON NOT NULL,
    updated_ms  BIGINT NOT NULL,
    PRIMARY KEY (team_name, name)
);
CREATE TABLE phx_cc_tasks (
    team_name   TEXT NOT NULL REFERENCES phx_cc_teams(team_name) ON DELETE CASCADE,
    task_id     TEXT NOT NULL,
    status      TEXT NOT NULL,
    owner       TEXT,
    record      JSON NOT NULL,
    updated_ms  BIGINT NOT NULL,
    PRIMARY KEY (team_name, task_id)
);
CREATE TABLE phx_cc_messages (
    team_name       TEXT NOT NULL REFERENCES phx_cc_teams(team_name) ON DELETE CASCADE,
    msg_id          TEXT NOT NULL,
    seq             BIGINT NOT NULL,
    sender          TEXT NOT NULL,
    recipient       TEXT NOT NULL,
    kind            TEXT NOT NULL,
    record          JSON NOT NULL,
    sent_ms         BIGINT NOT NULL,
    delivered_ms    BIGINT,
    redeliver_to    TEXT,
    redelivered_ms  BIGINT,
    PRIMARY KEY (team_name, msg_id)
);
CREATE INDEX phx_cc_messages_redeliver ON phx_cc_messages (redeliver_to) WHERE redeliver_to IS NOT NULL;
"""
"""Claude Code's own agent teams as Phoenix records them (``store._cc_teams``), written once:
``JSON`` is ``jsonb`` on PostgreSQL, ``BIGINT`` the same on both engines."""

MIGRATIONS.append(
    Migration(
        15,
        "Claude Code agent teams: roster, tasks and messages recorded from its hooks",
        postgresql=_CLAUDE_TEAMS.replace("JSON NOT NULL", "jsonb NOT NULL"),
        sqlite=_CLAUDE_TEAMS,
    )
)

_OPENAI_AGENTS = """
CREATE TABLE phx_oa_sessions (
    session_id  TEXT PRIMARY KEY,
    last_seq    BIGINT NOT NULL,
    created_ms  BIGINT NOT NULL,
    updated_ms  BIGINT NOT NULL
);
CREATE TABLE phx_oa_items (
    session_id      TEXT NOT NULL,
    seq             BIGINT NOT NULL,
    schema_version  INTEGER NOT NULL,
    item            TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
"""
"""The OpenAI Agents SDK session's tables (``integrations.openai_agents``), the same on both engines:
a session's counter of items (``last_seq``) and its items, each a JSON document in order of ``seq``."""

MIGRATIONS.append(
    Migration(
        16,
        "the OpenAI Agents SDK session's sessions and items",
        postgresql=_OPENAI_AGENTS,
        sqlite=_OPENAI_AGENTS,
    )
)

MIGRATIONS.sort(key=lambda m: m.version)  # in order however the numbered steps were appended
LATEST = MIGRATIONS[-1].version

_BOOKKEEPING = {
    "postgresql": """
        CREATE TABLE IF NOT EXISTS phx_schema_migrations (
            version     integer PRIMARY KEY,
            description text NOT NULL,
            applied_at  timestamptz NOT NULL DEFAULT now()
        )""",
    "sqlite": """
        CREATE TABLE IF NOT EXISTS phx_schema_migrations (
            version     INTEGER PRIMARY KEY,
            description TEXT NOT NULL,
            applied_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        )""",
}

Runner = Callable[[Callable[["Tx"], Any], bool], Any]
"""How ``ensure`` runs a transaction: ``run(work, write)`` (the database's own, without ``ensure``)."""


def current(tx: Tx) -> int:
    """The newest migration applied (0 for an empty database)."""
    if tx.dialect.postgres:
        present = tx.scalar("SELECT to_regclass('phx_schema_migrations') IS NOT NULL")
    else:
        present = tx.scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'phx_schema_migrations'")
    if not present:
        return 0
    return int(tx.scalar("SELECT coalesce(max(version), 0) FROM phx_schema_migrations") or 0)


def _refuse_newer(db: Database, found: int) -> None:
    if found > LATEST:
        raise SchemaVersionError(
            f"the database {db.where} was migrated by a newer Phoenix (schema {found}; this one knows up to "
            f"{LATEST}): upgrade phoenix-protocol. Nothing was written.",
            path=db.where,
            found=found,
            supported=LATEST,
        )


def _apply(db: Database, run: Runner) -> list[dict[str, Any]]:
    applied: list[dict[str, Any]] = []
    for step in MIGRATIONS:

        def work(tx: Tx, step: Migration = step) -> bool:
            if tx.dialect.postgres:
                # Serialises the migrations of one schema across processes (other schemas' go on).
                tx.execute("SELECT pg_advisory_xact_lock(hashtext('phoenix migrations ' || current_schema()))")
            tx.script(_BOOKKEEPING[tx.dialect.name])
            found = current(tx)
            _refuse_newer(db, found)
            if step.version <= found:
                return False
            tx.script(step.sql(tx.dialect.name))
            tx.execute(
                "INSERT INTO phx_schema_migrations (version, description) VALUES (?, ?)",
                (step.version, step.description),
            )
            return True

        if run(work, True):
            applied.append({"version": step.version, "description": step.description})
    return applied


def ensure(db: Database, run: Runner) -> list[dict[str, Any]]:
    """Migrate ``db`` if it is behind (what was applied), or refuse it if it is ahead."""
    found = int(run(current, False))
    _refuse_newer(db, found)
    if found >= LATEST:
        return []
    return _apply(db, run)


def status(db: Database) -> dict[str, Any]:
    """``{database, engine, current, latest, applied: [...], pending: [...]}`` (changes nothing)."""

    def work(tx: Tx) -> tuple[int, list[Any]]:
        found = current(tx)
        rows = (
            tx.all("SELECT version, description, applied_at FROM phx_schema_migrations ORDER BY version")
            if found
            else []
        )
        return found, rows

    found, rows = db.peek(work) if db.exists() else (0, [])
    return {
        "database": db.where,
        "engine": db.engine,
        "current": found,
        "latest": LATEST,
        "applied": [
            {"version": int(v), "description": d, "applied_at": a if isinstance(a, str) else a.isoformat()}
            for v, d, a in rows
        ],
        "pending": [{"version": m.version, "description": m.description} for m in MIGRATIONS if m.version > found],
    }
