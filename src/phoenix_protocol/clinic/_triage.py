"""Triage (seed 001, step 1): catch the failure and capture its trauma context.

Two sources, both public pydantic-ai v2 API:

* the messages of the failed run, from ``pydantic_ai.capture_run_messages()`` (which keeps them
  when ``agent.run`` raises): the tool calls, what came back for each (a retried
  ``ToolReturnPart`` carries ``retry.cause``: ``unknown_tool``, ``validation_error``, ...), and the
  size of the conversation;
* ``Observer``, a capability added to every run the Clinic makes (capabilities are v2's extension
  point), whose ``before_model_request`` hook keeps the tool definitions the model was offered in
  the run's latest request: the tools that really exist, with their JSON schemas.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import ModelMessage, ModelRequest, ModelResponse, RunContext, ToolDefinition
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import BaseToolCallPart, BaseToolReturnPart, RetryFeedbackPart
from pydantic_ai.models import ModelRequestContext

from phoenix_protocol.clinic._models import ToolCall, TraumaContext

__all__ = ["Failure", "Observer", "clip", "history_chars", "part_text", "render_messages", "triage"]

MAX_TOOL_CALLS = 20
"""Tool calls kept in a trauma (the latest ones)."""


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marking the cut."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def clip_tail(text: str, limit: int) -> str:
    """The last ``limit`` characters of ``text`` (a traceback's end is where the error is)."""
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


@dataclass
class Observer(AbstractCapability[Any]):
    """Keeps the tool and output-tool definitions of the run's latest model request."""

    tools: list[ToolDefinition] = field(default_factory=list)
    output_tools: list[ToolDefinition] = field(default_factory=list)
    requests: int = 0

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        params = request_context.model_request_parameters
        self.tools = list(params.function_tools)
        self.output_tools = list(params.output_tools)
        self.requests += 1
        return request_context

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # internal: never built from an agent spec


@dataclass
class Failure:
    """Everything triage saw: the error, the run's messages, the tools on offer, and the trauma."""

    error: BaseException
    messages: list[ModelMessage]
    tools: list[ToolDefinition]
    output_tools: list[ToolDefinition]
    trauma: TraumaContext


def part_text(part: object) -> str:
    """The text of one message part, as a model would read it."""
    if isinstance(part, BaseToolCallPart):
        return f"call {part.tool_name}({part.args_as_json_str()})"
    if isinstance(part, BaseToolReturnPart):
        return f"{part.tool_name} returned: {part.model_response_str()}"
    content = getattr(part, "content", None)
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list | tuple):
        return " ".join(item if isinstance(item, str) else _json(item) for item in content)
    return _json(content)


def _json(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def history_chars(messages: Sequence[ModelMessage]) -> int:
    """Characters of text in ``messages``."""
    return sum(len(part_text(p)) for m in messages for p in m.parts)


def render_messages(messages: Sequence[ModelMessage], *, part_limit: int, total_limit: int) -> str:
    """The conversation as plain text, each part clipped to ``part_limit``; when the whole is longer
    than ``total_limit``, its beginning and its end are kept (the middle is what goes)."""
    lines: list[str] = []
    for message in messages:
        who = "assistant" if isinstance(message, ModelResponse) else "user"
        for part in message.parts:
            text = " ".join(part_text(part).split())
            if not text:
                continue
            kind = getattr(part, "part_kind", "part")
            if kind in ("system-prompt", "instruction"):
                who_part = "system"
            elif kind in ("tool-return", "builtin-tool-return", "retry-feedback", "retry-prompt"):
                who_part = "tool"
            else:
                who_part = who
            lines.append(f"[{who_part}] {clip(text, part_limit)}")
    text = "\n".join(lines)
    if len(text) <= total_limit:
        return text
    half = max(0, total_limit // 2 - 40)
    return text[:half] + f"\n[… {len(text) - 2 * half} characters left out …]\n" + text[-half:]


def tool_calls_of(messages: Sequence[ModelMessage]) -> list[ToolCall]:
    """Every tool call in ``messages`` with what came back for it (the latest ``MAX_TOOL_CALLS``)."""
    calls: list[ToolCall] = []
    by_id: dict[str, ToolCall] = {}
    for message in messages:
        for part in message.parts:
            if isinstance(message, ModelResponse) and isinstance(part, BaseToolCallPart):
                args: dict[str, Any] | str | None
                try:
                    args = part.args_as_dict(raise_if_invalid=True)
                except ValueError:
                    args = clip(part.args if isinstance(part.args, str) else _json(part.args), 2000)
                call = ToolCall(tool_name=part.tool_name, args=args, tool_call_id=part.tool_call_id)
                calls.append(call)
                by_id[part.tool_call_id] = call
            elif isinstance(message, ModelRequest) and isinstance(part, BaseToolReturnPart):
                known = by_id.get(part.tool_call_id)
                if known is None:
                    continue
                known.outcome = part.outcome
                retry = getattr(part, "retry", None)
                known.retry_cause = getattr(retry, "cause", None)
                known.result = clip(" ".join(part.model_response_str(wrap_if_error=False).split()), 500)
    return calls[-MAX_TOOL_CALLS:]


def retry_feedback_causes(messages: Sequence[ModelMessage]) -> list[str]:
    """The ``retry.cause`` of every ``RetryFeedbackPart`` (retries of the output as a whole), in order."""
    causes = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, RetryFeedbackPart) and part.retry is not None:
                causes.append(str(part.retry.cause))
    return causes


def history_digest(messages: Sequence[ModelMessage], chars: int) -> str:
    """A deterministic digest of a long conversation (no model call): its size and its ends."""
    requests = sum(1 for m in messages if isinstance(m, ModelRequest))
    first = next((part_text(p) for m in messages for p in m.parts if getattr(p, "part_kind", "") == "user-prompt"), "")
    last_parts = [
        " ".join(part_text(p).split()) for m in messages[-3:] for p in m.parts if " ".join(part_text(p).split())
    ]
    tail = " | ".join(clip(t, 160) for t in last_parts[-4:])
    return clip(
        f"{len(messages)} messages ({requests} requests, {len(messages) - requests} responses), about {chars:,} "
        f"characters. First user prompt: {clip(' '.join(first.split()), 200)!r}. Latest parts: {tail}",
        1200,
    )


def triage(
    error: BaseException,
    *,
    original_prompt: str,
    prompt_used: str,
    attempt: int,
    messages: Sequence[ModelMessage],
    observer: Observer,
    long_history_chars: int = 20_000,
    long_history_messages: int = 30,
) -> Failure:
    """Capture the trauma context of ``error``, raised by a run whose messages are ``messages``."""
    messages = list(messages)
    cause = error.__cause__
    chars = history_chars(messages)
    calls = tool_calls_of(messages)
    long = chars > long_history_chars or len(messages) > long_history_messages
    trauma = TraumaContext(
        original_prompt=original_prompt,
        error_type=type(error).__name__,
        error_message=clip(str(error), 2000),
        stack_trace=clip_tail("".join(traceback.format_exception(error)), 8000),
        tool_calls=calls or None,
        history_summary=history_digest(messages, chars) if long else None,
        attempt=attempt,
        prompt_used=prompt_used if prompt_used != original_prompt else None,
        cause_type=type(cause).__name__ if cause is not None else None,
        cause_message=clip(str(cause), 2000) if cause is not None else None,
        available_tools=[t.name for t in observer.tools],
        message_count=len(messages),
        history_chars=chars,
    )
    return Failure(error, messages, list(observer.tools), list(observer.output_tools), trauma)
