"""An agent's identity on the PostgreSQL store: ``PgIdentity``, on ``phx_identity`` (migration 7
in ``_pg``): the bytes of ``identity.yaml`` and its seal (the digest of the immutable section).

The row is the identity, so a session that starts on another machine loads the same one. Each
machine keeps a copy in its home (``identity.yaml``, ``identity.digest``, and ``.identity-copy``:
the sha256 of the text this store wrote there), refreshed by every read and change:

- the hooks' persona check reads the copy (``IdentityStore.read(copy=True)``: no round trip);
- a copy edited by hand since it was written (or an ``identity.yaml`` written before the home
  moved to PostgreSQL) is the document, as on files: its mutable changes are taken by the next
  change, and a changed core is refused by the seal (the server's) until ``reset-core``.

A change is one transaction under a transaction-scoped advisory lock on the agent, retried on a
fresh connection only when nothing was sent (the change is a pure function of what it read).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._durable import atomic_write, keep_damaged, read_bytes
from phoenix_protocol.store import _pg

if TYPE_CHECKING:
    import psycopg

    from phoenix_protocol.agent._identity import IdentityRepair, IdentityStore

__all__ = ["COPY_MARK", "PgIdentity", "agents_with_identity", "export_identity", "import_identity"]

COPY_MARK = ".identity-copy"

Raw = tuple[bytes | None, str | None]
Row = tuple[bytes, str | None]


class PgIdentity(_pg.PgBound):
    """One agent's identity on the PostgreSQL server named by its configuration."""

    def __init__(self, store: IdentityStore) -> None:
        agent = store.agent
        super().__init__(str(agent.config.store), pool_size=agent.config.pg_pool_size)
        self.store = store
        self.agent = agent
        self.mark_path = os.path.join(agent.dir, COPY_MARK)

    def _row(self, conn: psycopg.Connection[Any]) -> Row | None:
        found = conn.execute(
            "SELECT document, digest FROM phx_identity WHERE agent_id = %s", (self.agent.id,)
        ).fetchone()
        return (bytes(found[0]), found[1]) if found else None

    def edited_copy(self) -> Raw | None:
        """This machine's files when they are not the copy this store wrote (edited by hand, or
        written before the home moved to PostgreSQL)."""
        data, digest = self.store.read_files()
        if data is None:
            return None
        if self._marked() == hashlib.sha256(data).hexdigest():
            return None
        return data, digest

    def _marked(self) -> str | None:
        """The sha256 of the copy this store last wrote here (``COPY_MARK``), if it keeps one."""
        mark = read_bytes(self.mark_path)
        return mark.decode("ascii", "replace").strip() if mark is not None else None

    def written_here(self, data: bytes) -> str | None:
        """When ``data`` is this machine's copy, the sha256 of the copy this store last wrote here
        (else of the file Phoenix last wrote here, ``identity.digest``): a copy cut short since is
        damage, as on files, and never passed on to the server. ``None`` for the server's row."""
        if read_bytes(self.store.path) != data:
            return None
        return self._marked() or self.store._written()

    def repair_copy(self) -> IdentityRepair | None:
        """This machine's copy when it no longer reads (cut short, damaged): kept beside it as
        ``identity.yaml.corrupt-<time>``, and the server's row written in its place (the row is
        the identity; a copy that does not read never reaches it). ``None``: nothing to repair
        (the copy is the one this store wrote, or it reads, or the server has no row)."""
        from phoenix_protocol.agent._identity import IdentityRepair
        from phoenix_protocol.core._errors import CorruptStateError

        edited = self.edited_copy()
        if edited is None or edited[0] is None:
            return None
        data, seal = edited[0], edited[1]
        with contextlib.suppress(CorruptStateError):
            self.store._parse(data, sealed=seal is not None, written=self.written_here(data))
            return None  # it reads: nothing to repair
        row = self._run(self._row)
        if row is None:
            return None
        kept = keep_damaged(self.store.path, data, self.agent.clock.now_ms())
        self._write_copy(*row)
        self.agent.record(
            "identity_repaired",
            "warn",
            {
                "checkpoint": None,
                "from": "server",
                "kept_as": os.path.basename(kept),
                "replayed": 0,
                "later_changes": [],
            },
            trusted=True,
        )
        return IdentityRepair(None, kept, [])

    def _write_copy(self, data: bytes, digest: str | None) -> None:
        """Make this machine's copy ``data`` and ``digest`` (nothing is written when it is)."""
        mark = hashlib.sha256(data).hexdigest().encode("ascii")
        if self.store.read_files() == (data, digest) and read_bytes(self.mark_path) == mark:
            return
        if digest is None:
            self.agent.ensure()
            atomic_write(self.store.path, data)
        else:
            self.store.write_files(data, digest)
        atomic_write(self.mark_path, mark, durable=False)

    def exists(self) -> bool:
        return self.edited_copy() is not None or self._run(self._row) is not None

    def load(self) -> Raw:
        """The document and its seal: an edited copy here (checked against the server's seal
        when it has one), else the server's row (refreshing the copy)."""
        edited = self.edited_copy()
        try:
            row = self._run(self._row)
        except _pg.PgError:
            if not self.agent.store_fallback:
                raise
            return self.store.read_files()  # a hook: this machine's copy rather than nothing
        if edited is not None:
            return edited[0], (row[1] if row is not None and row[1] is not None else edited[1])
        if row is None:
            return None, None
        self._write_copy(*row)
        return row

    def change(self, work: Callable[[bytes | None, str | None], tuple[bytes, str]]) -> None:
        """``work(document, seal)`` under the agent's lock on the server; stores what it returns
        and refreshes this machine's copy."""
        written: list[tuple[bytes, str]] = []

        def txn(conn: psycopg.Connection[Any]) -> None:
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("phx_identity:" + self.agent.id,))
            row = self._row(conn)
            edited = self.edited_copy()
            if edited is not None:
                base: Raw = (edited[0], row[1] if row is not None and row[1] is not None else edited[1])
            else:
                base = row if row is not None else (None, None)
            data, digest = work(*base)
            conn.execute(
                "INSERT INTO phx_identity (agent_id, document, digest) VALUES (%s, %s, %s) "
                "ON CONFLICT (agent_id) DO UPDATE SET document = EXCLUDED.document, digest = EXCLUDED.digest",
                (self.agent.id, data, digest),
            )
            written[:] = [(data, digest)]

        self._run(txn)
        self._write_copy(*written[0])


def agents_with_identity(url: str) -> list[str]:
    return _pg.ids(url, "SELECT agent_id FROM phx_identity ORDER BY 1")


def export_identity(url: str, agent_id: str) -> Raw:
    """``identity.yaml``'s bytes and the seal (``None`` when unsealed) of an agent."""

    def work(conn: psycopg.Connection[Any]) -> Raw:
        found = conn.execute("SELECT document, digest FROM phx_identity WHERE agent_id = %s", (agent_id,)).fetchone()
        return (bytes(found[0]), found[1]) if found else (None, None)

    return _pg.transaction(url, work, retry=True)


def import_identity(url: str, agent_id: str, document: bytes, digest: str | None) -> None:
    def work(conn: psycopg.Connection[Any]) -> None:
        conn.execute(
            "INSERT INTO phx_identity (agent_id, document, digest) VALUES (%s, %s, %s)", (agent_id, document, digest)
        )

    _pg.transaction(url, work, retry=True)
