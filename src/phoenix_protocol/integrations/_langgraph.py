"""LangGraph's checkpointer on Phoenix's SQL store (``phoenix_protocol.integrations.langgraph``).

``PhoenixSaver.from_home(home)`` (or ``PhoenixSaver(db)``) is a ``BaseCheckpointSaver`` on a home's database (``store._db.open_database``:
``phoenix.db`` on SQLite, or the PostgreSQL server ``store`` names), in the tables of migration 12
(``phx_lg_checkpoints``, ``phx_lg_writes``). Every method has its async twin (the conformance suite
finds a capability only from the async method): the same SQL, run in a worker thread
(``asyncio.to_thread``; each thread has its own connection on SQLite, the pool's on PostgreSQL).

A checkpoint is stored whole (its channel values inside, serialised with the saver's ``serde``),
its metadata beside it, with the run id the metadata names (``delete_for_runs``). Retention:
``keep`` (default ``DEFAULT_KEEP``) is how many checkpoints of one thread and namespace a ``put``
leaves, the oldest (by checkpoint id, which LangGraph makes increasing) deleted with their pending
writes in the same transaction; ``keep=None`` keeps all, as LangGraph's own savers do.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # pragma: no cover - the extra's absence is tested in a subprocess
    raise ImportError(
        "phoenix_protocol.integrations.langgraph needs LangGraph's checkpoint package: "
        "pip install 'phoenix-protocol[langgraph]'"
    ) from exc

from phoenix_protocol.core._errors import UsageError

if TYPE_CHECKING:
    from phoenix_protocol.core._home import Home
    from phoenix_protocol.store._db import Database, Row, Tx

__all__ = ["DEFAULT_KEEP", "PhoenixSaver"]

DEFAULT_KEEP = 100
"""How many checkpoints of one thread and namespace a ``put`` leaves, unless told otherwise."""

_CHECKPOINT_COLUMNS = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, "
    "checkpoint_type, checkpoint, metadata_type, metadata"
)
_WRITES_BATCH = 500
"""How many checkpoints' pending writes one query of ``list`` reads."""
_WRITE_COLUMNS = "thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, value_type, value, task_path"


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id}}


class PhoenixSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints in a Phoenix database, pruned to the newest ``keep`` per thread and namespace."""

    def __init__(
        self, db: Database, *, keep: int | None = DEFAULT_KEEP, serde: SerializerProtocol | None = None
    ) -> None:
        super().__init__(serde=serde)
        if keep is not None and keep < 1:
            raise UsageError(f"keep must be at least 1 (or None to keep every checkpoint), not {keep}.")
        self.db = db
        self.keep = keep

    @classmethod
    def from_home(cls, home: Home | str, *, keep: int | None = DEFAULT_KEEP) -> PhoenixSaver:
        """A saver on ``home``'s database: the store its configuration names (``phoenix.db`` in the
        home, or ``PHOENIX_STORE``'s PostgreSQL server), read once here."""
        from phoenix_protocol.core._home import Home
        from phoenix_protocol.store._db import open_database

        return cls(open_database(home if isinstance(home, Home) else Home(str(home))), keep=keep)

    # -- reading -----------------------------------------------------------------------------

    def _tuple(self, tx: Tx, row: Row) -> CheckpointTuple:
        writes = self._writes(tx, [row])
        return self._tuple_of(row, writes.get((row[0], row[1], row[2]), []))

    def _writes(self, tx: Tx, rows: Sequence[Row]) -> dict[tuple[str, str, str], list[Row]]:
        """The pending writes of ``rows`` (of ``_CHECKPOINT_COLUMNS``) by thread, namespace and
        checkpoint id, read with one query per thread and namespace (and ``_WRITES_BATCH``
        checkpoints), not one per checkpoint."""
        ids: dict[tuple[str, str], list[str]] = {}
        for row in rows:
            ids.setdefault((row[0], row[1]), []).append(row[2])
        writes: dict[tuple[str, str, str], list[Row]] = {}
        for (thread_id, ns), checkpoint_ids in ids.items():
            for start in range(0, len(checkpoint_ids), _WRITES_BATCH):
                batch = checkpoint_ids[start : start + _WRITES_BATCH]
                found = tx.all(
                    "SELECT checkpoint_id, task_id, idx, channel, value_type, value, task_path FROM phx_lg_writes "  # noqa: S608 - only '?'
                    f"WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id IN ({tx.dialect.placeholders(len(batch))})",
                    (thread_id, ns, *batch),
                )
                for w in found:
                    writes.setdefault((thread_id, ns, w[0]), []).append(w[1:])
        return writes

    def _tuple_of(self, row: Row, writes: list[Row]) -> CheckpointTuple:
        thread_id, ns, checkpoint_id, parent_id, _run, ctype, cblob, mtype, mblob = row
        writes.sort(key=lambda w: writes_sort_key(w[5], w[0], w[1]))
        return CheckpointTuple(
            config=_config(thread_id, ns, checkpoint_id),
            checkpoint=self.serde.loads_typed((ctype, bytes(cblob))),
            metadata=self.serde.loads_typed((mtype, bytes(mblob))),
            parent_config=_config(thread_id, ns, parent_id) if parent_id else None,
            pending_writes=[(w[0], w[2], self.serde.loads_typed((w[3], bytes(w[4])))) for w in writes],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``), else the thread's newest in the namespace."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        checkpoint_id = get_checkpoint_id(config)

        def work(tx: Tx) -> CheckpointTuple | None:
            if checkpoint_id:
                row = tx.one(
                    f"SELECT {_CHECKPOINT_COLUMNS} FROM phx_lg_checkpoints "  # noqa: S608 - constant columns
                    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
                    (thread_id, ns, checkpoint_id),
                )
            else:
                row = tx.one(
                    f"SELECT {_CHECKPOINT_COLUMNS} FROM phx_lg_checkpoints "  # noqa: S608 - constant columns
                    "WHERE thread_id = ? AND checkpoint_ns = ? ORDER BY checkpoint_id DESC LIMIT 1",
                    (thread_id, ns),
                )
            return None if row is None else self._tuple(tx, row)

        return self.db.read(work)

    def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Iterator[CheckpointTuple]:
        """The rows and their writes read in one transaction, then each tuple decoded as it is
        taken (a long history is never held decoded whole)."""
        rows, writes = self._rows(config, filter, before, limit)
        for row in rows:
            yield self._tuple_of(row, writes.get((row[0], row[1], row[2]), []))

    def _rows(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> tuple[list[Row], dict[tuple[str, str, str], list[Row]]]:
        where: list[str] = []
        params: list[Any] = []
        if config is not None:
            configurable = config["configurable"]
            where.append("thread_id = ?")
            params.append(str(configurable["thread_id"]))
            if configurable.get("checkpoint_ns") is not None:
                where.append("checkpoint_ns = ?")
                params.append(str(configurable["checkpoint_ns"]))
            if checkpoint_id := get_checkpoint_id(config):
                where.append("checkpoint_id = ?")
                params.append(checkpoint_id)
        if before is not None and (before_id := get_checkpoint_id(before)):
            where.append("checkpoint_id < ?")
            params.append(before_id)
        sql = f"SELECT {_CHECKPOINT_COLUMNS} FROM phx_lg_checkpoints"  # noqa: S608 - constant columns
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY checkpoint_id DESC, thread_id, checkpoint_ns"
        if limit is not None and not filter:
            sql += f" LIMIT {max(int(limit), 0)}"

        def work(tx: Tx) -> tuple[list[Row], dict[tuple[str, str, str], list[Row]]]:
            found: list[Row] = []
            for row in tx.all(sql, params):
                if limit is not None and len(found) >= limit:
                    break
                if filter:
                    metadata = self.serde.loads_typed((row[7], bytes(row[8])))
                    if not all(metadata.get(k) == v for k, v in filter.items()):
                        continue
                found.append(row)
            return found, self._writes(tx, found)

        return self.db.read(work)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """The checkpoints that match, newest first (``filter``: metadata values; ``before``: older than that id)."""
        yield from self._list(config, filter, before, limit)

    # -- writing -----------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint`` (its parent: ``config``'s checkpoint id), then apply the retention."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        parent_id = configurable.get("checkpoint_id")
        full_metadata = get_checkpoint_metadata(config, metadata)
        ctype, cblob = self.serde.dumps_typed(checkpoint)
        mtype, mblob = self.serde.dumps_typed(full_metadata)
        run_id = full_metadata.get("run_id")
        row = (
            thread_id,
            ns,
            checkpoint["id"],
            parent_id,
            None if run_id is None else str(run_id),
            ctype,
            cblob,
            mtype,
            mblob,
        )

        def work(tx: Tx) -> None:
            tx.execute(
                f"INSERT INTO phx_lg_checkpoints ({_CHECKPOINT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "  # noqa: S608
                "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
                "parent_checkpoint_id = excluded.parent_checkpoint_id, run_id = excluded.run_id, "
                "checkpoint_type = excluded.checkpoint_type, checkpoint = excluded.checkpoint, "
                "metadata_type = excluded.metadata_type, metadata = excluded.metadata",
                row,
            )
            if self.keep is not None:
                self._retain(tx, thread_id, ns, self.keep)

        self.db.transaction(work)
        return _config(thread_id, ns, checkpoint["id"])

    def _retain(self, tx: Tx, thread_id: str, ns: str, keep: int) -> None:
        """Delete all but the newest ``keep`` checkpoints of ``thread_id``/``ns``, with their writes
        (two statements, the cut found by each: nothing older than the ``keep``-th newest; nothing
        at all while there are fewer, the cut being NULL)."""
        for table in ("phx_lg_writes", "phx_lg_checkpoints"):
            tx.execute(
                f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id < ("  # noqa: S608
                "SELECT checkpoint_id FROM phx_lg_checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
                "ORDER BY checkpoint_id DESC LIMIT 1 OFFSET ?)",
                (thread_id, ns, thread_id, ns, keep - 1),
            )

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes for ``config``'s checkpoint (a special channel's write replaces, others once)."""
        configurable = config["configurable"]
        key = (
            str(configurable["thread_id"]),
            str(configurable.get("checkpoint_ns", "")),
            str(configurable["checkpoint_id"]),
        )
        replace: list[tuple[Any, ...]] = []
        once: list[tuple[Any, ...]] = []
        for idx, (channel, value) in enumerate(writes):
            vtype, vblob = self.serde.dumps_typed(value)
            index = WRITES_IDX_MAP.get(channel, idx)
            (replace if index < 0 else once).append((*key, task_id, index, channel, vtype, vblob, task_path))
        insert = f"INSERT INTO phx_lg_writes ({_WRITE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "  # noqa: S608

        def work(tx: Tx) -> None:
            if once:
                tx.executemany(insert + "ON CONFLICT DO NOTHING", once)
            if replace:
                tx.executemany(
                    insert + "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET "
                    "channel = excluded.channel, value_type = excluded.value_type, value = excluded.value, "
                    "task_path = excluded.task_path",
                    replace,
                )

        self.db.transaction(work)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of ``thread_id``."""

        def work(tx: Tx) -> None:
            tx.execute("DELETE FROM phx_lg_writes WHERE thread_id = ?", (str(thread_id),))
            tx.execute("DELETE FROM phx_lg_checkpoints WHERE thread_id = ?", (str(thread_id),))

        self.db.transaction(work)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata names one of ``run_ids``, with their writes."""
        ids = [str(r) for r in run_ids]
        if not ids:
            return
        marks = self.db.dialect.placeholders(len(ids))

        def work(tx: Tx) -> None:
            tx.execute(
                "DELETE FROM phx_lg_writes WHERE EXISTS (SELECT 1 FROM phx_lg_checkpoints c "  # noqa: S608 - only '?'
                "WHERE c.thread_id = phx_lg_writes.thread_id AND c.checkpoint_ns = phx_lg_writes.checkpoint_ns "
                f"AND c.checkpoint_id = phx_lg_writes.checkpoint_id AND c.run_id IN ({marks}))",
                ids,
            )
            tx.execute(f"DELETE FROM phx_lg_checkpoints WHERE run_id IN ({marks})", ids)  # noqa: S608 - only '?'

        self.db.transaction(work)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of ``source_thread_id`` to ``target_thread_id`` (the whole chain)."""
        source, target = str(source_thread_id), str(target_thread_id)

        def work(tx: Tx) -> None:
            tx.execute(
                f"INSERT INTO phx_lg_checkpoints ({_CHECKPOINT_COLUMNS}) SELECT ?, checkpoint_ns, checkpoint_id, "  # noqa: S608
                "parent_checkpoint_id, run_id, checkpoint_type, checkpoint, metadata_type, metadata "
                "FROM phx_lg_checkpoints WHERE thread_id = ? ON CONFLICT DO NOTHING",
                (target, source),
            )
            tx.execute(
                f"INSERT INTO phx_lg_writes ({_WRITE_COLUMNS}) SELECT ?, checkpoint_ns, checkpoint_id, task_id, idx, "  # noqa: S608
                "channel, value_type, value, task_path FROM phx_lg_writes WHERE thread_id = ? ON CONFLICT DO NOTHING",
                (target, source),
            )

        self.db.transaction(work)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: only the newest checkpoint of each namespace of each thread stays (with its
        writes); ``delete``: the threads go entirely."""
        if strategy not in ("keep_latest", "delete"):
            raise UsageError(f"strategy must be keep_latest or delete, not {strategy!r}.")
        ids = [str(t) for t in thread_ids]
        if not ids:
            return
        if strategy == "delete":
            for thread_id in ids:
                self.delete_thread(thread_id)
            return

        def work(tx: Tx) -> None:
            marks = self.db.dialect.placeholders(len(ids))
            pairs = tx.all(
                f"SELECT DISTINCT thread_id, checkpoint_ns FROM phx_lg_checkpoints WHERE thread_id IN ({marks})",  # noqa: S608
                ids,
            )
            for thread_id, ns in pairs:
                self._retain(tx, thread_id, ns, 1)

        self.db.transaction(work)

    def get_next_version(self, current: str | int | None, channel: None) -> str:
        """The version after ``current``: a zero-padded counter and a random fraction, as ``InMemorySaver`` makes them."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(current.split(".")[0])
        return f"{number + 1:032}.{random.random():016}"  # noqa: S311 - a tie-break, not a secret

    # -- async twins (the same SQL in a worker thread) ---------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """``get_tuple`` in a worker thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """``list`` in a worker thread (the tuples decoded there too)."""
        for item in await asyncio.to_thread(lambda: list(self._list(config, filter, before, limit))):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """``put`` in a worker thread."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """``put_writes`` in a worker thread."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """``delete_thread`` in a worker thread."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """``delete_for_runs`` in a worker thread."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """``copy_thread`` in a worker thread."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``prune`` in a worker thread."""
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
