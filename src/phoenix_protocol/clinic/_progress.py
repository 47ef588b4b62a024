"""Keeping progress across a recovery: rehabilitation continues from the failed run, tools do not run twice.

Two mechanisms, both public pydantic-ai v2 API:

* **Resume.** ``capture_run_messages()`` keeps the messages of a run that raised. ``resume_point``
  cuts them back to the last request that made progress (the user's prompt, or tool returns
  that are not retries) and the rerun is ``agent.run(None, message_history=...)``: pydantic-ai
  sends that request again, so the tool calls that completed are not made again. A prescribed
  prompt replaces the prompt *in* that history (``replace_prompt``); prescribed instructions are
  the rerun's ``instructions=`` (pydantic-ai applies them to the resent request).
* **The tool ledger.** ``ToolLedger``, a capability added to every run the Clinic makes, records
  each tool call that completed (name, arguments, result). In a rerun, a call with the same name
  and arguments is answered from the ledger instead of running the tool again, unless the tool
  says it is safe to repeat: ``metadata={"idempotent": True}`` on its definition
  (``@agent.tool_plain(metadata={"idempotent": True})``). This is what protects side effects when
  a restart is truly needed (a summarized history), or when one of several parallel tool calls
  raised after the others had completed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import ModelMessage, ModelRequest, RunContext, ToolDefinition
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import BaseToolReturnPart, ToolCallPart, UserPromptPart

__all__ = [
    "IDEMPOTENT_KEY",
    "Prompt",
    "ToolLedger",
    "prompt_text",
    "replace_prompt",
    "restore_prompt",
    "resumable",
    "resume_point",
    "with_text",
]

Prompt = Any
"""What ``agent.run`` takes as a prompt: a string, a sequence of user content (text, images,
documents, ...), or ``None`` (continue from ``message_history``). ``Any``: pydantic-ai's own type
is a union that changes between minor versions."""

IDEMPOTENT_KEY = "idempotent"
"""The tool-metadata key that marks a tool as safe to run again in a rerun."""


def prompt_text(prompt: Prompt, *, placeholders: bool = True) -> str:
    """The text of a prompt, for the trauma and the Clinic agent: a string as it is, the text items
    of a multimodal prompt joined (other items as ``[BinaryContent image/png]``, or left out
    without ``placeholders``), and ``""`` for ``None``."""
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        items = []
        for item in prompt:
            if isinstance(item, str):
                items.append(item)
            elif placeholders:
                label = getattr(item, "media_type", None) or getattr(item, "url", None) or type(item).__name__
                items.append(f"[{type(item).__name__} {label}]" if label != type(item).__name__ else f"[{label}]")
        return "\n".join(items)
    return str(prompt)


def with_text(prompt: Prompt, text: str) -> Prompt:
    """``prompt`` with its text replaced by ``text``: a string becomes ``text``; a multimodal prompt
    keeps its non-text items after ``text``; ``None`` stays ``None`` (the caller adds ``text`` as
    an instruction instead: there is no prompt of this run to rewrite)."""
    if prompt is None:
        return None
    if isinstance(prompt, str):
        return text
    return [text, *(item for item in prompt if not isinstance(item, str))]


def _progress(message: ModelMessage) -> bool:
    """Whether ``message`` is a request that moved the run forward: it carries the user's prompt,
    or a tool return that is not a retry (the tool ran)."""
    if not isinstance(message, ModelRequest):
        return False
    for part in message.parts:
        if isinstance(part, UserPromptPart):
            return True
        if isinstance(part, BaseToolReturnPart) and part.outcome in ("success", "failed", "denied"):
            return True
    return False


def resume_point(messages: Sequence[ModelMessage], base: int) -> list[ModelMessage] | None:
    """The history a rerun continues from: ``messages`` (the failed run's, the caller's history
    first) cut back to the last request that made progress, when the run made any beyond its
    first request; else ``None`` (nothing to keep: the rerun starts from the prompt again).

    ``base`` is the length of the history the run started from: a cut never goes into it."""
    kept = _cut(messages, base)
    if len(kept) <= base + 1:
        return None  # at most the run's first request: nothing done yet
    return kept


def resumable(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """The messages of a failed run (``capture_run_messages()``), e.g. a ``run_stream`` or an
    ``iter`` that raised, cut back to the last request that made progress: pass them as
    ``message_history`` with the prompt ``None`` to continue the run without repeating the tool
    calls that completed (``recoverable_run(agent, None, message_history=resumable(captured))``)."""
    return _cut(messages, 0)


def _cut(messages: Sequence[ModelMessage], base: int) -> list[ModelMessage]:
    """``messages`` without the trailing ones that made no progress, never shorter than ``base``."""
    kept = list(messages)
    while len(kept) > base and not _progress(kept[-1]):
        kept.pop()
    return kept


def replace_prompt(history: list[ModelMessage], old: Prompt, new: Prompt) -> list[ModelMessage] | None:
    """``history`` with the run's prompt ``old`` replaced by ``new`` in the latest request that
    carries it (copies: the caller's messages are never changed); ``None`` when it is not there."""
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if not isinstance(message, ModelRequest):
            continue
        for j, part in enumerate(message.parts):
            if isinstance(part, UserPromptPart) and _same(part.content, old):
                parts = list(message.parts)
                parts[j] = dataclasses.replace(part, content=new)
                copy = list(history)
                copy[index] = dataclasses.replace(message, parts=parts)
                return copy
    return None


def restore_prompt(messages: list[ModelMessage], used: Prompt, original: Prompt) -> None:
    """Put the caller's ``original`` prompt back where the Clinic's rewritten ``used`` prompt is, in
    a healed run's messages (in place), so that follow-up turns do not carry the rewrite."""
    if used is None or original is None or _same(used, original):
        return
    for index, message in enumerate(messages):
        if not isinstance(message, ModelRequest):
            continue
        for j, part in enumerate(message.parts):
            if isinstance(part, UserPromptPart) and _same(part.content, used):
                parts = list(message.parts)
                parts[j] = dataclasses.replace(part, content=original)
                messages[index] = dataclasses.replace(message, parts=parts)


def _same(content: Any, prompt: Prompt) -> bool:
    if isinstance(prompt, str) or isinstance(content, str):
        return bool(content == prompt)
    try:
        return bool(list(content) == list(prompt))
    except TypeError:
        return False


def _key(name: str, args: Any) -> str:
    try:
        return name + "\x00" + json.dumps(args, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return name + "\x00" + repr(args)


@dataclass
class ToolLedger(AbstractCapability[Any]):
    """Records the tool calls that completed in an episode; in a rerun, answers a repeated call
    (same tool, same arguments) from the record instead of running the tool again, unless the
    tool's metadata says ``{"idempotent": True}``."""

    results: dict[str, Any] = field(default_factory=dict)
    """Completed calls: key (name and arguments) to the tool's result."""
    replaying: bool = False
    """True in reruns: a repeated call is answered from ``results``."""
    ran: list[str] = field(default_factory=list)
    """The name of every tool call that really ran (in every run of the episode), in order."""
    replayed: list[str] = field(default_factory=list)
    """The name of every call answered from the ledger, in order."""

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: Any,
    ) -> Any:
        if tool_def.kind != "function":
            return await handler(args)
        key = _key(tool_def.name, args)
        safe = bool((tool_def.metadata or {}).get(IDEMPOTENT_KEY))
        if self.replaying and not safe and key in self.results:
            self.replayed.append(tool_def.name)
            return self.results[key]
        result = await handler(args)
        self.ran.append(tool_def.name)
        self.results[key] = result
        return result

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # internal: never built from an agent spec
