"""``PhoenixSaver`` (``integrations.langgraph``) with its default retention, and with ``keep=None``.

    PYTHONPATH=src .venv/bin/python bench/langgraph_saver.py [N]

``N`` checkpoints (default 10,000; each holds five 200-character messages) put on one thread of a
fresh home's ``phoenix.db``, then 200 ``get_tuple`` of the newest and 50 ``list`` of the whole
thread; prints the mean times and the size of the database files (``phoenix.db`` and its WAL).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from phoenix_protocol.integrations.langgraph import DEFAULT_KEEP, PhoenixSaver


def run(n: int, keep: int | None) -> str:
    root = os.path.join(tempfile.mkdtemp(), "home")
    saver = PhoenixSaver.from_home(root, keep=keep)
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    t0 = time.perf_counter()
    for i in range(n):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": ["x" * 200] * 5}
        config = saver.put(config, checkpoint, {"step": i}, {})
    t1 = time.perf_counter()
    for _ in range(200):
        saver.get_tuple({"configurable": {"thread_id": "t"}})
    t2 = time.perf_counter()
    for _ in range(50):
        listed = len(list(saver.list({"configurable": {"thread_id": "t"}})))
    t3 = time.perf_counter()
    size = sum(os.path.getsize(os.path.join(root, f)) for f in os.listdir(root) if f.startswith("phoenix.db"))
    return (
        f"keep={keep}: put {1000 * (t1 - t0) / n:.2f} ms, get_tuple {1000 * (t2 - t1) / 200:.2f} ms, "
        f"list ({listed}) {1000 * (t3 - t2) / 50:.1f} ms, database files {size / 1e6:.1f} MB"
    )


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    for keep in (DEFAULT_KEEP, None):
        print(run(n, keep))


if __name__ == "__main__":
    main()
