"""Prescription (seed 001, steps 3 and 4): what to change, and the rerun plan that applies it.

The remedies of seed 001, section 4.3, one per root cause:

* transient_error: retry after a backoff that honours the provider's ``retry_after``;
* context_length_exceeded: summarize the message history with a Summarizer call, rerun from it;
* hallucinated_tool: instructions that list the tools that really exist;
* invalid_tool_arguments: a prompt that states the required format (the JSON schema);
* ambiguous_instruction: a clarified prompt (the Clinic agent's, else a generic clarification);
* logic_error: the Clinic agent's prescription; a usage limit (the episode's one budget, spent) is
  not spent again: abort.

``apply`` turns a prescription into the rerun's ``Plan``: it continues from the failed run's
messages (``_progress.resume_point``) unless the history itself must change (a summary).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import Agent, ModelMessage, ModelRequest, UsageLimitExceeded
from pydantic_ai.models import KnownModelName, Model
from pydantic_ai.usage import RunUsage, UsageLimits

from phoenix_protocol.clinic._diagnose import is_output_tool, last_retry
from phoenix_protocol.clinic._models import Diagnosis, Prescription
from phoenix_protocol.clinic._progress import Prompt, prompt_text, replace_prompt, with_text
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
    """How the next run goes: its prompt, instructions added to the agent's, the message history,
    and, when it continues a failed run, the messages it continues from."""

    prompt: Prompt
    """The request's prompt as prescribed (the caller's, or a modified one)."""
    instructions: list[str] = field(default_factory=list)
    """Instructions the Clinic adds to the agent's, in order."""
    history: list[ModelMessage] | None = None
    """The history a fresh run starts from: the caller's, or a summary."""
    base: int = 0
    """The length of ``history``: a resume point never cuts into it."""
    resume: list[ModelMessage] | None = None
    """The failed run's messages to continue from (the run's prompt is then ``None``)."""
    delay: float = 0.0
    """Seconds to wait before the run (a transient error's backoff)."""


RESTATED = "The request, restated precisely:\n"


def apply(prescription: Prescription, plan: Plan, kept: list[ModelMessage] | None = None) -> Plan:
    """The plan of the rerun once ``prescription`` is applied to ``plan``. ``kept`` is what the failed
    run achieved (``resume_point``): the rerun continues from it, with the prescription applied in
    it, unless the history must be replaced (a summary: the run starts again from it)."""
    delay = prescription.delay_seconds or 0.0
    if prescription.action == "summarize_history" and prescription.summary is not None:
        summary: list[ModelMessage] = [ModelRequest.user_text_prompt(SUMMARY_PREFIX + prescription.summary)]
        return Plan(plan.prompt, list(plan.instructions), summary, base=1, delay=delay)
    instructions = list(plan.instructions)
    prompt = plan.prompt
    resume = kept
    if prescription.action == "modify_prompt":
        extra = prescription.modified_instructions
        if extra and extra not in instructions:
            instructions.append(extra)
        text = prescription.modified_prompt
        if text and text != prompt_text(plan.prompt, placeholders=False):
            if plan.prompt is None:
                restated = RESTATED + text
                if restated not in instructions:
                    instructions.append(restated)  # no prompt of this run to rewrite: say it as an instruction
            else:
                prompt = with_text(plan.prompt, text)
                resume = replace_prompt(kept, plan.prompt, prompt) if kept is not None else None
    return Plan(prompt, instructions, plan.history, base=plan.base, resume=resume, delay=delay)


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
        return _amended(plan, _format_note(failure, tool))
    if cause == "ambiguous_instruction":
        return _amended(plan, _CLARIFY)
    if isinstance(failure.error, UsageLimitExceeded):
        return Prescription(action="abort")  # the episode's one budget is spent: nothing left for a rerun
    return Prescription(action="retry")


def _amended(plan: Plan, note: str) -> Prescription:
    """``modify_prompt`` adding ``note`` to the prompt (once: a relapse does not add it again); as an
    instruction when the run has no prompt of its own (``None``: it continues a history)."""
    if plan.prompt is None:
        return Prescription(action="modify_prompt", modified_instructions=note)
    text = prompt_text(plan.prompt, placeholders=False)
    if note in text:
        return Prescription(action="modify_prompt", modified_prompt=text)
    return Prescription(action="modify_prompt", modified_prompt=f"{text}\n\n{note}" if text else note)


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
        note = standard.modified_prompt[len(prompt_text(plan.prompt, placeholders=False)) :].strip()
        if note and note not in clinic.modified_prompt:
            extra.append(note)
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
    usage: RunUsage | None = None,
    usage_limits: UsageLimits | None = None,
) -> tuple[str, bool]:
    """The Summarizer: one model call that compresses ``messages``. Returns ``(summary, by_model)``;
    when the call fails, the summary is the conversation clipped to ``output_limit`` characters
    (its beginning and end) and ``by_model`` is False."""
    text = render_messages(messages, part_limit=part_limit, total_limit=input_limit)
    summarizer: Agent[None, str] = Agent(instructions=SUMMARIZER_PROMPT, name="phoenix-clinic-summarizer")
    try:
        result = await summarizer.run(
            f"Conversation to summarize:\n{text}", model=model, usage=usage, usage_limits=usage_limits
        )
    except Exception:  # noqa: BLE001 - any failure of the Summarizer falls back to clipping
        return render_messages(messages, part_limit=400, total_limit=output_limit), False
    return clip(result.output.strip(), output_limit), True
