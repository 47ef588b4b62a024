"""Diagnosis (seed 001, step 2): the deterministic fast path, and the Clinic agent behind it.

The fast path reads pydantic-ai's own errors and what they carry; it never calls a model:

=====================================================================  =========================
signal                                                                 root cause
=====================================================================  =========================
``ModelContextWindowExceededError``; ``ModelHTTPError`` 400/413 whose  context_length_exceeded
code, type, body or message names the context length; the
per-request input token limit
``UnexpectedModelBehavior`` (a tool's or the output's retries ran      hallucinated_tool
out) whose last retry has ``retry.cause`` ``unknown_tool`` or
``unavailable_tool``, or whose ``__cause__`` says "Unknown tool name"
the same, with ``retry.cause == "validation_error"`` or a pydantic     invalid_tool_arguments
``ValidationError`` as ``__cause__``
``ModelRateLimitError``, ``ModelUnavailableError`` (overloaded),       transient_error
``ModelServerError``, ``ModelConnectionError`` / ``ModelTimeoutError``,
``ModelRequestTimeout``, ``RunTimedOut``, ``ModelHTTPError``
408/409/425/429/5xx, ``TimeoutError``, ``ConnectionError``, a
``FallbackExceptionGroup`` of only these
``UsageLimitExceeded`` on requests, tool calls, tokens or cost (the   logic_error (abort)
episode's one budget is spent)
=====================================================================  =========================

A ``FallbackExceptionGroup`` where one model's context overflowed and the others failed
transiently is a context overflow (the summary helps the model that overflowed).

Anything else goes to the Clinic agent. ``untreatable`` lists what the Clinic does not treat at
all (it propagates unchanged): credentials, an unknown model, an exhausted quota, a usage mistake
(``UserError``), a cancellation, and a deterministic client error (an HTTP 4xx other than 408,
409, 425, 429 or a context overflow: the same request would get it again).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from pydantic import ValidationError
from pydantic_ai import (
    FallbackExceptionGroup,
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelRequestTimeout,
    RunCancelled,
    RunTimedOut,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
    UserError,
)
from pydantic_ai.exceptions import (
    ContentFilterError,
    ModelAuthenticationError,
    ModelContextWindowExceededError,
    ModelNotFoundError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    ModelServerError,
    ModelUnavailableError,
    OutputTokenLimitExceeded,
)

from phoenix_protocol.clinic._models import Diagnosis, Visit
from phoenix_protocol.clinic._triage import Failure, clip, retry_feedback_causes
from phoenix_protocol.core._redact import redact

__all__ = [
    "CLINIC_GUIDE",
    "CLINIC_SYSTEM_PROMPT",
    "fast_diagnosis",
    "is_output_tool",
    "last_retry",
    "render_case",
    "untreatable",
]

CLINIC_SYSTEM_PROMPT = (
    "You are an expert AI debugger and psychologist. Your goal is to analyze why a worker agent failed and "
    "prescribe a fix. You do not execute the task yourself; you repair the request."
)
"""The seed's system prompt for the Clinic agent (section 3.2), verbatim."""

CLINIC_GUIDE = """\
You receive the trauma context of a failed run of a worker agent: its prompt, the error, the stack trace, \
the tool calls it made and the tools that exist, and what was already tried.
Diagnose one root cause and prescribe one action:
- retry: the same request will probably succeed if sent again.
- modify_prompt: give modified_prompt (the complete prompt to run instead: keep the user's intent, \
remove the ambiguity or state the expected format) and/or modified_instructions (a short instruction \
added to the worker's own).
- summarize_history: the conversation is too long for the worker's model.
- abort: the failure cannot be repaired by changing the request (a bug in a tool, an impossible task); \
say why in the explanation.
Do not prescribe what was already tried and failed. Never invent tools: only the listed tools exist.\
"""
"""Instructions given to the Clinic agent with the seed's system prompt: what each action means."""

_CONTEXT_WORDS = re.compile(
    r"context[ _-]?(length|window)|maximum context|context_length_exceeded|prompt is too long|too many tokens|"
    r"input is too long|input (?:length|tokens?) exceeds?|exceeds? the (?:maximum|max)[^.]{0,40}tokens|"
    r"reduce the length of the (?:messages|prompt)|string_above_max_length|request too large",
    re.IGNORECASE,
)
_TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
_REQUEST_SIZE_LIMITS = ("per_request_input_tokens_limit",)


def untreatable(error: BaseException) -> bool:
    """Whether the Clinic leaves ``error`` alone (it propagates unchanged): no change to the request
    can fix it, or the caller asked for it (cancellation)."""
    if not isinstance(error, Exception):
        return True  # KeyboardInterrupt, asyncio.CancelledError, SystemExit
    if isinstance(error, RunCancelled) and not isinstance(error, RunTimedOut):
        return True
    if isinstance(error, FallbackExceptionGroup) and error.exceptions:
        return all(untreatable(e) for e in error.exceptions)
    if deterministic_client_error(error):
        return True
    return isinstance(error, UserError | ModelAuthenticationError | ModelNotFoundError | ModelQuotaExceededError)


def deterministic_client_error(error: BaseException) -> bool:
    """Whether ``error`` is an HTTP 4xx that the same request would get again: not a timeout, a
    conflict, a rate limit (408, 409, 425, 429), nor a context overflow (which a summary fixes)."""
    return (
        isinstance(error, ModelHTTPError)
        and 400 <= error.status_code < 500
        and error.status_code not in _TRANSIENT_STATUS
        and _context_overflow(error) is None
    )


def _context_overflow(error: BaseException) -> str | None:
    if isinstance(error, ModelContextWindowExceededError):
        return "the provider said the input exceeds the model's context window"
    if isinstance(error, ModelHTTPError) and error.status_code in (400, 413):
        words = " ".join(
            str(x)
            for x in (error.provider_error_code, error.provider_error_type, _body_text(error.body), error.message)
        )
        match = _CONTEXT_WORDS.search(words)
        if match:
            return f"HTTP {error.status_code} naming the context length ({match.group(0)!r})"
    if isinstance(error, UsageLimitExceeded) and any(limit in error.message for limit in _REQUEST_SIZE_LIMITS):
        return "a request's input grew past the per-request token limit"
    if isinstance(error, FallbackExceptionGroup) and error.exceptions:
        overflows = [_context_overflow(e) for e in error.exceptions]
        if any(overflows) and all(o or _transient(e) for o, e in zip(overflows, error.exceptions, strict=True)):
            reason = next(o for o in overflows if o)
            return f"a fallback model's context overflowed ({reason}; the others failed transiently)"
    return None


def _body_text(body: object) -> str:
    if body is None:
        return ""
    if isinstance(body, str):
        return body
    try:
        return json.dumps(body, default=str)
    except (TypeError, ValueError):
        return repr(body)


def _transient(error: BaseException) -> str | None:
    if isinstance(error, ModelRateLimitError):
        return "the provider's rate limit was reached"
    if isinstance(error, ModelUnavailableError):
        return "the provider was unavailable or overloaded"
    if isinstance(error, ModelServerError):
        return "the provider failed with a server error"
    if isinstance(error, ModelConnectionError):
        return "the connection to the provider failed or timed out"
    if isinstance(error, ModelRequestTimeout):
        return "the model request timed out"
    if isinstance(error, RunTimedOut):
        return "the run timed out"
    if isinstance(error, ModelHTTPError) and error.status_code in _TRANSIENT_STATUS:
        return f"HTTP {error.status_code} from the provider"
    if isinstance(error, FallbackExceptionGroup) and error.exceptions:
        reasons = [_transient(e) for e in error.exceptions]
        if all(reasons):
            return f"every fallback model failed transiently ({reasons[0]})"
        return None
    if isinstance(error, TimeoutError | ConnectionError) and not isinstance(error, ModelAPIError):
        return f"{type(error).__name__}: a network failure"
    return None


def last_retry(failure: Failure) -> tuple[str | None, str | None]:
    """The cause and tool name of the retry that ran out (the failed run's last one)."""
    named = re.match(r"Tool '([^']+)' exceeded max retries", str(getattr(failure.error, "message", "")))
    calls = failure.trauma.tool_calls or []
    retried = [c for c in calls if c.retry_cause is not None]
    if named:
        same = [c for c in retried if c.tool_name == named.group(1)]
        if same:
            return same[-1].retry_cause, same[-1].tool_name
    output_causes = retry_feedback_causes(failure.messages)
    if "output retries" in str(failure.error) and output_causes:
        return output_causes[-1], None
    if retried:
        return retried[-1].retry_cause, retried[-1].tool_name
    return None, None


def fast_diagnosis(failure: Failure) -> Diagnosis | None:
    """The root cause when pydantic-ai's error says it plainly; ``None`` when it does not."""
    error = failure.error
    why = _context_overflow(error)
    if why:
        return Diagnosis(root_cause="context_length_exceeded", explanation=why + ".", confidence=0.95)
    why = _transient(error)
    if why:
        return Diagnosis(root_cause="transient_error", explanation=why + ".", confidence=0.9)
    if isinstance(error, UsageLimitExceeded):
        return Diagnosis(
            root_cause="logic_error",
            explanation=f"usage limit reached ({clip(error.message, 160)}): the episode's one budget, shared by "
            "every run, the Clinic and the Summarizer, is spent; no rerun can be paid for.",
            confidence=1.0,
        )
    if isinstance(error, UnexpectedModelBehavior) and not isinstance(
        error, ContentFilterError | OutputTokenLimitExceeded
    ):
        cause, tool = last_retry(failure)
        cause_text = str(error.__cause__ or "")
        if cause in ("unknown_tool", "unavailable_tool") or cause_text.startswith("Unknown tool name"):
            name = tool or _quoted(cause_text) or "?"
            return Diagnosis(
                root_cause="hallucinated_tool",
                explanation=f"the model kept calling {name!r}, which is not one of its tools "
                f"({', '.join(failure.trauma.available_tools) or 'none'}).",
                confidence=0.98,
            )
        if cause == "validation_error" or isinstance(error.__cause__, ValidationError):
            what = f"tool {tool!r}" if tool and not is_output_tool(failure, tool) else "the final answer"
            return Diagnosis(
                root_cause="invalid_tool_arguments",
                explanation=f"the model kept sending arguments for {what} that fail validation.",
                confidence=0.95,
            )
    return None


def _quoted(text: str) -> str | None:
    match = re.search(r"'([^']+)'", text)
    return match.group(1) if match else None


def is_output_tool(failure: Failure, name: str) -> bool:
    return any(t.name == name for t in failure.output_tools)


def render_case(failure: Failure, visits: Sequence[Visit], hint: Diagnosis | None = None) -> str:
    """The prompt the Clinic agent gets: the trauma as JSON (secrets redacted), the tools, what was tried."""
    trauma = failure.trauma.model_dump(mode="json", exclude_none=True)
    tools = [
        {"name": t.name, "description": clip(t.description or "", 300), "parameters": t.parameters_json_schema}
        for t in failure.tools
    ]
    tried = [
        {
            "attempt": v.attempt,
            "root_cause": v.diagnosis.root_cause,
            "action": v.prescription.action,
            "modified_prompt": v.prescription.modified_prompt,
            "modified_instructions": v.prescription.modified_instructions,
            "outcome": v.outcome,
        }
        for v in visits
    ]
    parts = [
        "The worker agent failed. Trauma context:",
        json.dumps(trauma, indent=1, ensure_ascii=False, default=str),
        "Tools that exist (name, description, JSON schema of the arguments):",
        json.dumps(tools, ensure_ascii=False, default=str) if tools else "(none)",
    ]
    if failure.output_tools:
        schema = failure.output_tools[0].parameters_json_schema
        parts += ["The worker's final answer must match this JSON schema:", json.dumps(schema, ensure_ascii=False)]
    if tried:
        parts += ["Already tried (do not repeat what relapsed):", json.dumps(tried, ensure_ascii=False)]
    if hint is not None:
        parts.append(
            f"Note: the error itself points to {hint.root_cause} ({hint.explanation}), "
            "but the standard remedy for it has already failed."
        )
    parts.append("Diagnose the root cause and prescribe one action.")
    return redact("\n".join(parts))
