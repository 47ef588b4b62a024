"""The Clinic's records (seed 001, section 3.1): trauma, diagnosis, prescription, and the episode.

``TraumaContext``, ``Diagnosis`` and ``Prescription`` are the seed's three models. The Clinic agent
answers with a ``ClinicReport`` (a diagnosis and a prescription in one structured output, so that
a consultation costs one model call). ``Visit`` is one recovery attempt; ``Episode`` is every
visit of one ``recoverable_run`` call, the record that goes into the recovery checkpoint and into
``ClinicGaveUp``.

Field docstrings are the field descriptions of the JSON schema the Clinic's model sees
(``use_attribute_docstrings``), so they are written for that model as much as for people.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ACTIONS",
    "ROOT_CAUSES",
    "Action",
    "ClinicReport",
    "Diagnosis",
    "Episode",
    "Prescription",
    "RootCause",
    "Spent",
    "ToolCall",
    "TraumaContext",
    "Visit",
]

RootCause = Literal[
    "context_length_exceeded",
    "hallucinated_tool",
    "invalid_tool_arguments",
    "ambiguous_instruction",
    "logic_error",
    "transient_error",
]
"""The seed's six root causes."""

Action = Literal["retry", "modify_prompt", "summarize_history", "abort"]
"""The seed's four prescription actions."""

ROOT_CAUSES: tuple[RootCause, ...] = (
    "context_length_exceeded",
    "hallucinated_tool",
    "invalid_tool_arguments",
    "ambiguous_instruction",
    "logic_error",
    "transient_error",
)
ACTIONS: tuple[Action, ...] = ("retry", "modify_prompt", "summarize_history", "abort")

_CONFIG = ConfigDict(use_attribute_docstrings=True, extra="ignore")

EPISODE_KIND: Final = "phoenix.clinic.episode"
EPISODE_SCHEMA_VERSION = 1


class ToolCall(BaseModel):
    """One tool call the failed run made, with what came back for it."""

    model_config = _CONFIG

    tool_name: str
    """The name the model called (which may not exist)."""
    args: dict[str, Any] | str | None = None
    """The arguments as the model sent them (a JSON object, or raw text when it was not valid JSON)."""
    tool_call_id: str | None = None
    """The call's id in the conversation."""
    outcome: str | None = None
    """What the call's return says: ``success``, ``failed``, ``retried``, ... (``None``: no return yet)."""
    retry_cause: str | None = None
    """Why pydantic-ai asked for the call again: ``unknown_tool``, ``validation_error``, ``model_retry``, ..."""
    result: str | None = None
    """The start of what the call returned (or the retry message), clipped."""


class TraumaContext(BaseModel):
    """Snapshot of the agent's state at the moment of failure."""

    model_config = _CONFIG

    original_prompt: str
    """The prompt the caller gave ``recoverable_run``."""
    error_type: str
    """The exception's class name, e.g. ``UnexpectedModelBehavior``, ``ModelRateLimitError``."""
    error_message: str
    """The exception's message (clipped)."""
    stack_trace: str
    """The formatted traceback, chained causes included (its end, clipped)."""
    tool_calls: list[ToolCall] | None = None
    """The tool calls of the failed run, from its captured messages (the latest ones); ``None`` if it made none."""
    history_summary: str | None = None
    """A short digest of the message history, present when the history was long."""
    attempt: int = 0
    """Which run failed: 0 is the first run, 1 the first rerun, ..."""
    prompt_used: str | None = None
    """The prompt of the failed run, when a prescription had changed it."""
    cause_type: str | None = None
    """The class name of the exception's ``__cause__`` (pydantic-ai chains the real reason there)."""
    cause_message: str | None = None
    """The message of the exception's ``__cause__`` (clipped)."""
    available_tools: list[str] = Field(default_factory=list)
    """The function tools the model was offered in the failed run's last request."""
    message_count: int = 0
    """Messages in the conversation when it failed (history included)."""
    history_chars: int = 0
    """Characters of text in those messages (a rough size; the model's tokens are about a quarter)."""


class Diagnosis(BaseModel):
    """The Clinic's analysis of the failure."""

    model_config = _CONFIG

    root_cause: RootCause
    """Why the worker failed: context_length_exceeded (the input no longer fits the model's context window),
    hallucinated_tool (it called a tool that does not exist), invalid_tool_arguments (it called a real tool, or
    gave its final answer, in the wrong format), ambiguous_instruction (the request can be read in several ways
    and the worker read it wrongly), logic_error (the worker's reasoning or a tool's logic went wrong),
    transient_error (rate limit, overload, server error, timeout: the same request may succeed later)."""
    explanation: str
    """One or two sentences: the evidence for this root cause."""
    confidence: float = Field(ge=0.0, le=1.0)
    """How sure the diagnosis is, from 0 to 1."""


class Prescription(BaseModel):
    """Actionable steps to recover."""

    model_config = _CONFIG

    action: Action
    """retry (run the same request again), modify_prompt (run again with a modified prompt and/or
    instructions), summarize_history (compress the message history and run again), abort (nothing will help)."""
    modified_prompt: str | None = None
    """For modify_prompt: the complete prompt to run instead of the failed one (it replaces it)."""
    modified_instructions: str | None = None
    """For modify_prompt: instructions to add to the worker's own (the seed's modified system prompt)."""
    delay_seconds: float | None = None
    """For retry: how long the Clinic waits before the rerun (set by the Clinic's backoff, not by the model)."""
    summary: str | None = None
    """For summarize_history: the summary that replaced the message history (set by the Clinic)."""


class ClinicReport(BaseModel):
    """The Clinic agent's answer: what went wrong, and what to do about it."""

    model_config = _CONFIG

    diagnosis: Diagnosis
    """Why the worker failed."""
    prescription: Prescription
    """How to run it again (or abort)."""


class Spent(BaseModel):
    """What one consumer of the episode's budget used: model requests and tokens."""

    model_config = _CONFIG

    requests: int = 0
    """Model requests."""
    input_tokens: int = 0
    """Input tokens, as the models reported them."""
    output_tokens: int = 0
    """Output tokens, as the models reported them."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


class Visit(BaseModel):
    """One recovery attempt: the trauma, its diagnosis, the prescription, and how the rerun went."""

    model_config = _CONFIG

    attempt: int
    """1 for the first recovery, 2 for the second, ..."""
    trauma: TraumaContext
    """The failure this visit treated."""
    diagnosis: Diagnosis
    """What the Clinic found."""
    prescription: Prescription
    """What the Clinic prescribed."""
    source: Literal["fast_path", "clinic", "fallback", "custom"]
    """Who diagnosed: the deterministic fast path (pydantic-ai's own errors), the Clinic agent, a
    registered custom diagnoser, or the fallback (no Clinic model, a Clinic agent that failed or was
    not confident enough: then the safe default, one plain retry, else abort)."""
    outcome: Literal["healed", "relapsed", "aborted"] | None = None
    """healed (the rerun succeeded), relapsed (it failed again), aborted (no rerun); ``None`` until known."""


class Episode(BaseModel):
    """Every visit of one ``recoverable_run`` call: what goes into the recovery checkpoint."""

    model_config = _CONFIG

    kind: Literal["phoenix.clinic.episode"] = EPISODE_KIND
    schema_version: int = EPISODE_SCHEMA_VERSION
    id: str
    """A short random id, the same in every ``clinic_episode`` ops event of this episode."""
    agent_name: str | None = None
    """The pydantic-ai agent's name, if it has one."""
    original_prompt: str
    """The prompt the caller gave."""
    started_at: str
    """When the first failure happened (ISO 8601 UTC)."""
    max_recoveries: int
    """The recovery budget."""
    visits: list[Visit] = Field(default_factory=list)
    """The recovery attempts, in order."""
    final_trauma: TraumaContext | None = None
    """The failure of the last rerun, when the budget was spent (not diagnosed: no budget left)."""
    outcome: Literal["in_progress", "healed", "gave_up"] = "in_progress"
    """How the episode ended."""
    spent: dict[str, Spent] = Field(default_factory=dict)
    """The one budget, by consumer: ``patient`` (every run of the agent, the first included),
    ``clinic`` (the Clinic agent's consultations) and ``summarizer``. They share one
    ``RunUsage`` and the caller's ``usage_limits``."""
    tools_run: list[str] = Field(default_factory=list)
    """The tool calls that really ran, in every run of the episode, in order (names)."""
    tools_replayed: list[str] = Field(default_factory=list)
    """The tool calls of reruns answered from the ledger instead of running the tool again (names)."""

    @property
    def traumas(self) -> list[TraumaContext]:
        """Every failure, in order."""
        return [v.trauma for v in self.visits] + ([self.final_trauma] if self.final_trauma else [])
