"""LangGraph's checkpointer on Phoenix's store (the ``[langgraph]`` extra): ``PhoenixSaver``.

Importing it without ``langgraph-checkpoint`` installed raises an ``ImportError`` naming the extra.
See ``docs/langgraph.md``.
"""

from __future__ import annotations

from phoenix_protocol.integrations._langgraph import DEFAULT_KEEP, PhoenixSaver

__all__ = ["DEFAULT_KEEP", "PhoenixSaver"]
