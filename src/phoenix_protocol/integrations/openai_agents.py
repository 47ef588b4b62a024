"""The OpenAI Agents SDK's session on Phoenix's store (the ``[openai-agents]`` extra): ``PhoenixSession``.

Importing it without ``openai-agents`` installed raises an ``ImportError`` naming the extra.
See ``docs/openai-agents.md``.
"""

from __future__ import annotations

from phoenix_protocol.integrations._openai_agents import ITEM_SCHEMA_VERSION, PhoenixSession

__all__ = ["ITEM_SCHEMA_VERSION", "PhoenixSession"]
