"""The recovery pipeline (seed 001, section 2): run, triage, diagnose, prescribe, rerun.

``Clinic`` holds the configuration (the Clinic agent's model, separate from the patient's; the
Summarizer's; the backoff; the sleep function, injectable so that tests never sleep) and runs
the loop; ``recoverable_run`` and ``recoverable_run_sync`` are the seed's wrapper around it.
"""

from __future__ import annotations

import asyncio
import secrets
import warnings
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_ai import Agent, AgentRunResult, capture_run_messages
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.models import KnownModelName, Model

from phoenix_protocol.clinic._diagnose import (
    CLINIC_GUIDE,
    CLINIC_SYSTEM_PROMPT,
    fast_diagnosis,
    render_case,
    untreatable,
)
from phoenix_protocol.clinic._errors import ClinicGaveUp
from phoenix_protocol.clinic._models import ClinicReport, Diagnosis, Episode, Prescription, TraumaContext, Visit
from phoenix_protocol.clinic._prescribe import Backoff, Plan, apply, merge, remedy, summarize
from phoenix_protocol.clinic._record import record_checkpoint, record_visit, resolve_phoenix
from phoenix_protocol.clinic._triage import Failure, Observer, clip, render_messages, triage
from phoenix_protocol.core._clock import Clock, system_clock
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.services._agent import Agent as PhoenixAgent

__all__ = ["Clinic", "ClinicEvent", "recoverable_run", "recoverable_run_sync"]

ModelLike = Model | KnownModelName | str
Source = Literal["fast_path", "clinic", "fallback"]


@dataclass(frozen=True, kw_only=True)
class ClinicEvent:
    """What ``Clinic(on_event=...)`` receives as a visit goes: everything known at that ``stage``."""

    stage: Literal["trauma", "diagnosis", "prescription", "outcome"]
    """trauma (triage done), diagnosis, prescription, outcome (the rerun's, or the give-up)."""
    attempt: int
    """The visit: 1 for the first recovery, ...; for ``gave_up``, the number of visits made."""
    trauma: TraumaContext
    """The failure being treated."""
    diagnosis: Diagnosis | None = None
    """Set from the ``diagnosis`` stage on."""
    source: Source | None = None
    """Who diagnosed: ``fast_path``, ``clinic`` (the Clinic agent) or ``fallback``."""
    prescription: Prescription | None = None
    """Set from the ``prescription`` stage on."""
    outcome: Literal["healed", "relapsed", "aborted", "gave_up"] | None = None
    """Set at the ``outcome`` stage: the visit's rerun ``healed`` or ``relapsed``, or it ``aborted``;
    ``gave_up`` comes last, with the failure no recovery was left for (or that is not treated)."""


class Clinic:
    """The Clinic: diagnoses a failed pydantic-ai run and prescribes the rerun (seed 001).

    ``model`` is the Clinic agent's model, separate from the patient's (default: the patient's
    own). ``summarizer_model`` compresses histories on context overflow (default: ``model``,
    else the patient's). ``consult=False`` keeps to the fast path: a failure it cannot read
    gets a plain retry. ``sleep`` is awaited for backoff waits (inject a fake in tests);
    ``on_event`` sees each stage of each visit.
    """

    def __init__(
        self,
        model: ModelLike | None = None,
        *,
        summarizer_model: ModelLike | None = None,
        consult: bool = True,
        backoff: Backoff | None = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        on_event: Callable[[ClinicEvent], None] | None = None,
        clock: Clock = system_clock,
        long_history_chars: int = 20_000,
    ) -> None:
        self.model = model
        self.summarizer_model = summarizer_model
        self.consult = consult
        self.backoff = backoff or Backoff()
        self.sleep = sleep
        self.on_event = on_event
        self.clock = clock
        self.long_history_chars = long_history_chars
        self.agent: Agent[None, ClinicReport] = Agent(
            output_type=ClinicReport,
            system_prompt=CLINIC_SYSTEM_PROMPT,
            instructions=CLINIC_GUIDE,
            name="phoenix-clinic",
        )
        """The Clinic agent (pydantic-ai, structured output ``ClinicReport``); its model is given per run."""

    # -- diagnosis -------------------------------------------------------------------------

    async def examine(
        self, failure: Failure, visits: Sequence[Visit], plan: Plan, *, patient_model: ModelLike | None
    ) -> tuple[Diagnosis, Prescription, Source]:
        """Diagnose ``failure`` and prescribe (no summary yet): the fast path when pydantic-ai's error
        says what happened and its remedy has not already relapsed, else the Clinic agent, else a
        plain retry."""
        fast = fast_diagnosis(failure)
        transient_retries = sum(1 for v in visits if v.diagnosis.root_cause == "transient_error")
        relapsed = fast is not None and any(
            v.diagnosis.root_cause == fast.root_cause and v.outcome == "relapsed" for v in visits
        )
        if fast is not None and (not relapsed or fast.root_cause == "transient_error"):
            rx = remedy(fast, failure, plan, backoff=self.backoff, transient_retries=transient_retries)
            return fast, rx, "fast_path"
        model = self.model or patient_model
        problem = "the Clinic agent is off (consult=False)" if not self.consult else "no model for the Clinic agent"
        if self.consult and model is not None:
            try:
                report = await self.consult_agent(failure, visits, model=model, hint=fast)
            except Exception as exc:  # noqa: BLE001 - a Clinic that fails must not sink the patient
                problem = f"the Clinic agent failed ({type(exc).__name__}: {clip(str(exc), 200)})"
            else:
                rx = merge(
                    report.prescription,
                    report.diagnosis,
                    failure,
                    plan,
                    backoff=self.backoff,
                    transient_retries=transient_retries,
                )
                return report.diagnosis, rx, "clinic"
        if fast is not None:
            rx = remedy(fast, failure, plan, backoff=self.backoff, transient_retries=transient_retries)
            return fast, rx, "fast_path"
        diagnosis = Diagnosis(
            root_cause="logic_error",
            explanation=f"undiagnosed: the fast path could not read this error and {problem}; plain retry.",
            confidence=0.0,
        )
        return diagnosis, Prescription(action="retry"), "fallback"

    async def consult_agent(
        self, failure: Failure, visits: Sequence[Visit], *, model: ModelLike, hint: Diagnosis | None = None
    ) -> ClinicReport:
        """Ask the Clinic agent (one structured-output run); raises whatever the run raises."""
        result = await self.agent.run(render_case(failure, visits, hint), model=model)
        return result.output

    # -- the loop --------------------------------------------------------------------------

    async def treat(
        self,
        agent: AbstractAgent[Any, Any],
        prompt: str,
        max_recoveries: int = 2,
        deps: Any = None,
        *,
        phoenix: PhoenixAgent | str | bool | None = None,
        **run_kwargs: Any,
    ) -> AgentRunResult[Any]:
        """Run ``agent`` on ``prompt``; on failure triage, diagnose, prescribe and rerun, at most
        ``max_recoveries`` times; then raise ``ClinicGaveUp``. See ``recoverable_run``."""
        if max_recoveries < 0:
            raise UsageError(f"max_recoveries must be 0 or more, not {max_recoveries}.")
        user_instructions = run_kwargs.pop("instructions", None)
        user_capabilities = list(run_kwargs.pop("capabilities", None) or [])
        plan = Plan(prompt, [], _as_history(run_kwargs.pop("message_history", None)))
        patient_model: ModelLike | None = run_kwargs.get("model") or agent.model
        episode: Episode | None = None
        pa: PhoenixAgent | None = None
        attempt = 0
        while True:
            observer = Observer()
            with capture_run_messages() as captured:
                try:
                    result = await agent.run(
                        plan.prompt,
                        deps=deps,
                        message_history=plan.history,
                        instructions=_instructions(user_instructions, plan.instructions),
                        capabilities=[*user_capabilities, observer],
                        **run_kwargs,
                    )
                except Exception as exc:  # noqa: BLE001 - every failure of the patient is triaged
                    error: Exception | None = exc
                    messages = list(captured)
                else:
                    error = None
            last = episode.visits[-1] if episode is not None and episode.visits else None
            if error is None:
                if episode is not None and last is not None:
                    last.outcome = "healed"
                    episode.outcome = "healed"
                    self._emit("outcome", last)
                    self._record(pa, episode, last, final=True)
                return result
            if untreatable(error) and episode is None:
                raise error
            failure = triage(
                error,
                original_prompt=prompt,
                prompt_used=plan.prompt,
                attempt=attempt,
                messages=messages,
                observer=observer,
                long_history_chars=self.long_history_chars,
            )
            if episode is None:
                episode = Episode(
                    id=secrets.token_hex(6),
                    agent_name=agent.name,
                    original_prompt=prompt,
                    started_at=self.clock.now_iso(),
                    max_recoveries=max_recoveries,
                )
                pa = resolve_phoenix(phoenix)
            if last is not None:
                last.outcome = "relapsed"
                self._emit("outcome", last)
            if untreatable(error) or attempt >= max_recoveries:
                episode.final_trauma = failure.trauma
                episode.outcome = "gave_up"
                self._emit_event(
                    ClinicEvent(stage="outcome", attempt=attempt, trauma=failure.trauma, outcome="gave_up")
                )
                self._record(pa, episode, last, final=True, trauma=failure.trauma)
                if untreatable(error):
                    raise error
                raise ClinicGaveUp(episode) from error
            if last is not None:
                self._record(pa, episode, last, final=False)
            attempt += 1
            self._emit_event(ClinicEvent(stage="trauma", attempt=attempt, trauma=failure.trauma))
            diagnosis, prescription, source = await self.examine(
                failure, episode.visits, plan, patient_model=patient_model
            )
            self._emit_event(
                ClinicEvent(
                    stage="diagnosis", attempt=attempt, trauma=failure.trauma, diagnosis=diagnosis, source=source
                )
            )
            if prescription.action == "summarize_history":
                prescription = await self._summarize(prescription, failure, patient_model)
            visit = Visit(
                attempt=attempt, trauma=failure.trauma, diagnosis=diagnosis, prescription=prescription, source=source
            )
            episode.visits.append(visit)
            self._emit("prescription", visit)
            if prescription.action == "abort":
                visit.outcome = "aborted"
                episode.outcome = "gave_up"
                self._emit("outcome", visit)
                self._record(pa, episode, visit, final=True)
                raise ClinicGaveUp(episode) from error
            plan = apply(prescription, plan)
            if prescription.delay_seconds:
                await self.sleep(prescription.delay_seconds)

    async def _summarize(
        self, prescription: Prescription, failure: Failure, patient_model: ModelLike | None
    ) -> Prescription:
        model = self.summarizer_model or self.model or patient_model
        if model is None:
            summary = render_messages(failure.messages, part_limit=400, total_limit=4_000)
        else:
            summary, _ = await summarize(failure.messages, model)
        return prescription.model_copy(update={"summary": summary})

    # -- reporting -------------------------------------------------------------------------

    def _emit(self, stage: Literal["prescription", "outcome"], visit: Visit) -> None:
        self._emit_event(
            ClinicEvent(
                stage=stage,
                attempt=visit.attempt,
                trauma=visit.trauma,
                diagnosis=visit.diagnosis,
                source=visit.source,
                prescription=visit.prescription,
                outcome=visit.outcome if stage == "outcome" else None,
            )
        )

    def _emit_event(self, event: ClinicEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def _record(
        self,
        pa: PhoenixAgent | None,
        episode: Episode,
        visit: Visit | None,
        *,
        final: bool,
        trauma: TraumaContext | None = None,
    ) -> None:
        if pa is None:
            return
        record_visit(pa, episode, visit, final=final, trauma=trauma)
        if final:
            record_checkpoint(pa, episode)


def _as_history(history: Any) -> list[Any] | None:
    return list(history) if history else None


def _instructions(user: Any, added: list[str]) -> Any:
    """The run's instructions: the caller's (``instructions=``) followed by the Clinic's. (``Any``:
    what pydantic-ai takes as instructions, a type private to it.)"""
    if not added:
        return user
    if user is None:
        return list(added)
    if isinstance(user, str) or callable(user):
        return [user, *added]
    return [*user, *added]


async def recoverable_run(
    agent: AbstractAgent[Any, Any],
    prompt: str,
    max_recoveries: int = 2,
    deps: Any = None,
    *,
    clinic: Clinic | None = None,
    phoenix: PhoenixAgent | str | bool | None = None,
    **run_kwargs: Any,
) -> AgentRunResult[Any]:
    """Run ``agent`` on ``prompt`` and heal its failures (seed 001's wrapper around ``Agent.run()``).

    On failure: triage (prompt, error, stack trace, the failed run's tool calls, a history digest
    when the history is long), diagnosis (the fast path from pydantic-ai's own errors, else the
    Clinic agent), prescription, and a rerun with it, at most ``max_recoveries`` times; then
    ``ClinicGaveUp``, carrying every trauma. Errors no rerun can fix (credentials, unknown model,
    quota, ``UserError``, cancellation) propagate unchanged.

    ``clinic`` configures the Clinic (default ``Clinic()``: its agent uses the patient's model).
    ``phoenix`` records each episode in a Phoenix home (ops events ``clinic_episode`` and a
    recovery checkpoint): a Phoenix ``Agent``, an agent id, or ``True`` for ``Agent.open()``;
    ``None`` (the default) writes nothing. ``run_kwargs`` go to ``agent.run`` (``message_history``,
    ``instructions``, ``capabilities``, ``model``, ``usage_limits``, ...); the Clinic's changes are
    added to them.
    """
    return await (clinic or Clinic()).treat(agent, prompt, max_recoveries, deps, phoenix=phoenix, **run_kwargs)


def recoverable_run_sync(
    agent: AbstractAgent[Any, Any],
    prompt: str,
    max_recoveries: int = 2,
    deps: Any = None,
    *,
    clinic: Clinic | None = None,
    phoenix: PhoenixAgent | str | bool | None = None,
    **run_kwargs: Any,
) -> AgentRunResult[Any]:
    """The synchronous twin of ``recoverable_run`` (like ``Agent.run_sync``: not inside a running event loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise UsageError(
            "recoverable_run_sync() cannot run inside a running event loop: use `await recoverable_run(...)`."
        )
    coro = recoverable_run(agent, prompt, max_recoveries, deps, clinic=clinic, phoenix=phoenix, **run_kwargs)
    return _thread_loop().run_until_complete(coro)


def _thread_loop() -> asyncio.AbstractEventLoop:
    """This thread's event loop, created if missing or closed. Reused across calls, as pydantic-ai's
    own ``run_sync`` does, so that provider clients bound to the loop keep working."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_event_loop()
        except RuntimeError:
            loop = None
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    return loop
