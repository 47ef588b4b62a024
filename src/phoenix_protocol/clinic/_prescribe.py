"""Prescription (seed 001, steps 3 and 4): what to change, and the rerun plan that applies it.

The remedies of seed 001, section 4.3, one per root cause:

* transient_error: retry after a backoff that honours the provider's ``retry_after``;
* context_length_exceeded: summarize the message history with a Summarizer call, rerun from it;
* hallucinated_tool: instructions that list the tools that really exist;
* invalid_tool_arguments: a prompt that states the required format (the JSON schema);
* ambiguous_instruction: a clarified prompt (the Clinic agent's, else a generic clarification);
* logic_error: the Clinic agent's prescription; a run that looped until its usage limit gets an
  instruction to converge; a spent cost budget is not spent again (abort).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import Agent, ModelMessage, ModelRequest, UsageLimitExceeded
from pydantic_ai.models import KnownModelName, Model

from phoenix_protocol.clinic._diagnose import is_output_tool, last_retry
from phoenix_protocol.clinic._models import Diagnosis, Prescription
from phoenix_protocol.clinic._triage import Failure, clip, render_messages

__all__ = [
    "SUMMARIZER_PROMPT",
    "Backoff",
    "Plan",
    "apply",
    "merge",
    "remedy",
    "summarize",
]

SUMMARIZER_PROMPT = (
    "You compress conversations. Summarize the conversation you are given so that an assistant can carry on "
    "from the summary alone: keep the user's requests, every fact, number, name and tool result the answer "
    "depends on, and what is still to be done; drop pleasantries and repetition. At most 300 words."
)
"""The Summarizer's instructions (the seed's "simple LLM call" for context overflow)."""

SUMMARY_PREFIX = "Summary of the conversation so far (compacted after the model's context window overflowed):\n"

_CONVERGE = (
    "Work efficiently: call each tool at most once with the same arguments, and give your final answer as soon "
    "as you have what you need."
)
_CLARIFY = (
    "If the request can be read in more than one way, choose the most likely reading, state it in one "
    "sentence, and answer it."
)


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """How long to wait before rerunning after a transient error.

    The n-th wait (n = 0, 1, ...) is ``min(max_delay, base * factor ** n)``, and never shorter than
    the provider's ``retry_after``. A ``retry_after`` longer than ``max_retry_after`` is not waited
    for: the Clinic aborts (the caller's run should not hang for minutes)."""

    base: float = 1.0
    """The first wait, in seconds."""
    factor: float = 2.0
    """Each further wait is this many times the previous one."""
    max_delay: float = 30.0
    """The longest computed wait, in seconds."""
    max_retry_after: float = 120.0
    """The longest ``retry_after`` the Clinic honours, in seconds."""

    def delay(self, retries_so_far: int, retry_after: float | None) -> float | None:
        """Seconds to wait before the next rerun, or ``None`` when the provider asked for too long."""
        if retry_after is not None and retry_after > self.max_retry_after:
            return None
        computed = min(self.max_delay, self.base * self.factor**retries_so_far)
        return max(computed, retry_after or 0.0)


@dataclass
class Plan:
    """How the next run goes: its prompt, instructions added to the agent's, and message history."""

    prompt: str
    instructions: list[str] = field(default_factory=list)
    history: list[ModelMessage] | None = None


def apply(prescription: Prescription, plan: Plan) -> Plan:
    """The plan of the rerun once ``prescription`` is applied to ``plan``."""
    if prescription.action == "modify_prompt":
        instructions = list(plan.instructions)
        extra = prescription.modified_instructions
        if extra and extra not in instructions:
            instructions.append(extra)
        return Plan(prescription.modified_prompt or plan.prompt, instructions, plan.history)
    if prescription.action == "summarize_history" and prescription.summary is not None:
        return Plan(
            plan.prompt, list(plan.instructions), [ModelRequest.user_text_prompt(SUMMARY_PREFIX + prescription.summary)]
        )
    return plan


def _signature(schema: dict[str, Any]) -> str:
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    args = []
    for name, spec in props.items():
        kind = spec.get("type", "any") if isinstance(spec, dict) else "any"
        args.append(f"{name}: {kind}" + ("" if name in required else " (optional)"))
    return ", ".join(args)


def _tools_note(failure: Failure, bad: str | None) -> str:
    if not failure.tools:
        return (
            f"The tool {bad!r} does not exist. " if bad else ""
        ) + "You have no tools: answer directly, without calling any tool."
    lines = [
        f"- {t.name}({_signature(t.parameters_json_schema)})"
        + (f": {clip(t.description, 160)}" if t.description else "")
        for t in failure.tools
    ]
    head = f"The tool {bad!r} does not exist. " if bad else "Only the tools listed here exist. "
    return (
        head + "The only tools you can call are:\n" + "\n".join(lines) + "\nUse one of them, or answer without a tool."
    )


def _format_note(failure: Failure, tool: str | None) -> str:
    if tool and not is_output_tool(failure, tool):
        definition = next((t for t in failure.tools if t.name == tool), None)
        if definition is not None:
            schema = definition.parameters_json_schema
            required = ", ".join(schema.get("required") or []) or "none"
            return (
                f"When you call the tool {tool!r}, its arguments must be a JSON object matching this JSON schema "
                f"exactly (required: {required}; no other keys): {json.dumps(schema, ensure_ascii=False)}"
            )
    if failure.output_tools:
        schema = failure.output_tools[0].parameters_json_schema
        required = ", ".join(schema.get("required") or []) or "none"
        return (
            "Your final answer must be a JSON object matching this JSON schema exactly "
            f"(required: {required}): {json.dumps(schema, ensure_ascii=False)}"
        )
    return "Check every tool call's arguments against the tool's JSON schema before you call it."


def remedy(
    diagnosis: Diagnosis, failure: Failure, plan: Plan, *, backoff: Backoff, transient_retries: int
) -> Prescription:
    """The standard prescription for ``diagnosis`` (no model call; summarize_history gets its summary later)."""
    cause = diagnosis.root_cause
    if cause == "transient_error":
        retry_after = getattr(failure.error, "retry_after", None)
        delay = backoff.delay(transient_retries, retry_after if isinstance(retry_after, int | float) else None)
        if delay is None:
            return Prescription(action="abort")
        return Prescription(action="retry", delay_seconds=delay)
    if cause == "context_length_exceeded":
        return Prescription(action="summarize_history")
    if cause == "hallucinated_tool":
        bad = next(
            (
                c.tool_name
                for c in reversed(failure.trauma.tool_calls or [])
                if c.retry_cause in ("unknown_tool", "unavailable_tool")
            ),
            None,
        )
        return Prescription(action="modify_prompt", modified_instructions=_tools_note(failure, bad))
    if cause == "invalid_tool_arguments":
        _, tool = last_retry(failure)
        note = _format_note(failure, tool)
        return Prescription(action="modify_prompt", modified_prompt=f"{plan.prompt}\n\n{note}")
    if cause == "ambiguous_instruction":
        return Prescription(action="modify_prompt", modified_prompt=f"{plan.prompt}\n\n{_CLARIFY}")
    if isinstance(failure.error, UsageLimitExceeded) and "cost_limit" in failure.error.message:
        return Prescription(action="abort")
    if isinstance(failure.error, UsageLimitExceeded):
        return Prescription(action="modify_prompt", modified_instructions=_CONVERGE)
    return Prescription(action="retry")


def merge(
    clinic: Prescription,
    diagnosis: Diagnosis,
    failure: Failure,
    plan: Plan,
    *,
    backoff: Backoff,
    transient_retries: int,
) -> Prescription:
    """The Clinic agent's prescription, completed with what the standard remedy knows for sure
    (the real tool list, the real schema, the backoff) and made consistent (a modify_prompt that
    modifies nothing falls back to the standard remedy)."""
    standard = remedy(diagnosis, failure, plan, backoff=backoff, transient_retries=transient_retries)
    if clinic.action == "abort":
        return Prescription(action="abort")
    cause = diagnosis.root_cause
    if cause in ("transient_error", "context_length_exceeded"):
        return standard
    if clinic.action == "summarize_history":
        return Prescription(action="summarize_history")
    if clinic.action == "retry":
        return Prescription(action="retry") if cause in ("ambiguous_instruction", "logic_error") else standard
    if not (clinic.modified_prompt or clinic.modified_instructions):
        return standard
    extra = [x for x in (clinic.modified_instructions, standard.modified_instructions) if x]
    if cause == "invalid_tool_arguments" and standard.modified_prompt and clinic.modified_prompt:
        extra.append(standard.modified_prompt[len(plan.prompt) :].strip())
    return Prescription(
        action="modify_prompt",
        modified_prompt=clinic.modified_prompt or standard.modified_prompt,
        modified_instructions="\n\n".join(dict.fromkeys(extra)) or None,
    )


async def summarize(
    messages: Sequence[ModelMessage],
    model: Model | KnownModelName | str,
    *,
    part_limit: int = 2_000,
    input_limit: int = 24_000,
    output_limit: int = 4_000,
) -> tuple[str, bool]:
    """The Summarizer: one model call that compresses ``messages``. Returns ``(summary, by_model)``;
    when the call fails, the summary is the conversation clipped to ``output_limit`` characters
    (its beginning and end) and ``by_model`` is False."""
    text = render_messages(messages, part_limit=part_limit, total_limit=input_limit)
    summarizer: Agent[None, str] = Agent(instructions=SUMMARIZER_PROMPT, name="phoenix-clinic-summarizer")
    try:
        result = await summarizer.run(f"Conversation to summarize:\n{text}", model=model)
    except Exception:  # noqa: BLE001 - any failure of the Summarizer falls back to clipping
        return render_messages(messages, part_limit=400, total_limit=output_limit), False
    return clip(result.output.strip(), output_limit), True
