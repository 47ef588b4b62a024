"""The recovery pipeline (seed 001, section 2): run, triage, diagnose, prescribe, rerun.

``Clinic`` holds the configuration (the Clinic agent's model, separate from the patient's; the
Summarizer's; the backoff; the sleep function, injectable so that tests never sleep) and runs
the loop; ``recoverable_run`` and ``recoverable_run_sync`` are the seed's wrapper around it.
"""

from __future__ import annotations

import asyncio
import secrets
import warnings
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_ai import Agent, AgentRunResult, UsageLimitExceeded, capture_run_messages
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.models import KnownModelName, Model
from pydantic_ai.usage import RunUsage, UsageLimits

from phoenix_protocol.clinic._diagnose import (
    CLINIC_GUIDE,
    CLINIC_SYSTEM_PROMPT,
    fast_diagnosis,
    render_case,
    untreatable,
)
from phoenix_protocol.clinic._errors import ClinicGaveUp
from phoenix_protocol.clinic._models import ClinicReport, Diagnosis, Episode, Prescription, Spent, TraumaContext, Visit
from phoenix_protocol.clinic._prescribe import Backoff, Plan, apply, merge, remedy, summarize
from phoenix_protocol.clinic._progress import Prompt, ToolLedger, prompt_text, restore_prompt, resume_point
from phoenix_protocol.clinic._record import record_checkpoint, record_visit, resolve_phoenix
from phoenix_protocol.clinic._telemetry import span
from phoenix_protocol.clinic._triage import Failure, Observer, clip, render_messages, triage
from phoenix_protocol.core._clock import Clock, system_clock
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.services._agent import Agent as PhoenixAgent

__all__ = ["Clinic", "ClinicEvent", "clinic_episode", "provider_retries", "recoverable_run", "recoverable_run_sync"]

ModelLike = Model | KnownModelName | str
Source = Literal["fast_path", "clinic", "fallback", "custom"]
Diagnoser = Callable[[BaseException, TraumaContext], Diagnosis | None]
"""A custom diagnosis: ``(error, trauma) -> Diagnosis | None`` (``None``: not mine, ask the next)."""
Remedy = Callable[[Diagnosis, TraumaContext], Prescription | None]
"""A custom prescription for a root cause: ``(diagnosis, trauma) -> Prescription | None``."""


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
    """Who diagnosed: ``fast_path``, ``clinic`` (the Clinic agent), ``custom`` (a registered diagnoser) or ``fallback``."""
    prescription: Prescription | None = None
    """Set from the ``prescription`` stage on."""
    outcome: Literal["healed", "relapsed", "aborted", "gave_up"] | None = None
    """Set at the ``outcome`` stage: the visit's rerun ``healed`` or ``relapsed``, or it ``aborted``;
    ``gave_up`` comes last, with the failure no recovery was left for (or that is not treated)."""


class Clinic:
    """The Clinic: diagnoses a failed pydantic-ai run and prescribes the rerun (seed 001).

    ``model`` is the Clinic agent's model, separate from the patient's: without one the Clinic
    keeps to its fast path (pydantic-ai's own errors) and safe defaults, and never consults a
    model; ``use_patient_model=True`` opts in to consulting the patient's own model instead.
    ``summarizer_model`` compresses histories on context overflow (default: ``model``, else the
    patient's; the call is counted in the one budget). ``consult=False`` keeps to the fast path
    even with a model. ``min_confidence``: a Clinic agent's diagnosis below it is not acted on
    (the fast path's reading or the safe default wins). ``respect_sdk_retries``: when the
    patient's provider SDK already retries (an OpenAI or Anthropic client with ``max_retries`` >
    0), a transient error is not retried a second time by the Clinic (one layer retries). ``sleep``
    is awaited for backoff waits (inject a fake in tests); ``on_event`` sees each stage of each
    visit. ``diagnosers`` and ``remedies`` are the registry for custom diagnoses (see ``treat``).
    """

    def __init__(
        self,
        model: ModelLike | None = None,
        *,
        summarizer_model: ModelLike | None = None,
        consult: bool = True,
        use_patient_model: bool = False,
        min_confidence: float = 0.5,
        respect_sdk_retries: bool = True,
        backoff: Backoff | None = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        on_event: Callable[[ClinicEvent], None] | None = None,
        clock: Clock = system_clock,
        long_history_chars: int = 20_000,
        diagnosers: Sequence[Diagnoser] = (),
        remedies: Mapping[str, Remedy] | None = None,
    ) -> None:
        self.model = model
        self.summarizer_model = summarizer_model
        self.consult = consult
        self.use_patient_model = use_patient_model
        self.min_confidence = min_confidence
        self.respect_sdk_retries = respect_sdk_retries
        self.backoff = backoff or Backoff()
        self.sleep = sleep
        self.on_event = on_event
        self.clock = clock
        self.long_history_chars = long_history_chars
        self.diagnosers: list[Diagnoser] = list(diagnosers)
        """Custom diagnoses, tried in order before the fast path: ``(error, trauma) -> Diagnosis | None``."""
        self.remedies: dict[str, Remedy] = dict(remedies or {})
        """Custom prescriptions by root cause: ``(diagnosis, trauma) -> Prescription | None`` (``None``: the standard one)."""
        self.agent: Agent[None, ClinicReport] = Agent(
            output_type=ClinicReport,
            system_prompt=CLINIC_SYSTEM_PROMPT,
            instructions=CLINIC_GUIDE,
            name="phoenix-clinic",
        )
        """The Clinic agent (pydantic-ai, structured output ``ClinicReport``); its model is given per run."""

    def register(self, diagnoser: Diagnoser | None = None, *, remedy: tuple[str, Remedy] | None = None) -> None:
        """Add a custom diagnoser (tried before the fast path) and/or a custom remedy for a root cause."""
        if diagnoser is not None:
            self.diagnosers.append(diagnoser)
        if remedy is not None:
            self.remedies[remedy[0]] = remedy[1]

    # -- diagnosis -------------------------------------------------------------------------

    async def examine(
        self,
        failure: Failure,
        visits: Sequence[Visit],
        plan: Plan,
        *,
        patient_model: ModelLike | None,
        budget: Budget | None = None,
    ) -> tuple[Diagnosis, Prescription, Source]:
        """Diagnose ``failure`` and prescribe (no summary yet): a custom diagnoser's, else the fast
        path when pydantic-ai's error says what happened and its remedy has not already relapsed,
        else the Clinic agent (when it has a model and is confident enough), else the safe default."""
        transient_retries = sum(1 for v in visits if v.diagnosis.root_cause == "transient_error")
        custom = self._custom_diagnosis(failure)
        if custom is not None:
            return custom, self._prescribe(custom, failure, plan, visits, patient_model, transient_retries), "custom"
        fast = fast_diagnosis(failure)
        relapsed = fast is not None and any(
            v.diagnosis.root_cause == fast.root_cause and v.outcome == "relapsed" for v in visits
        )
        if fast is not None and (not relapsed or fast.root_cause == "transient_error" or budget_spent(failure.error)):
            return fast, self._prescribe(fast, failure, plan, visits, patient_model, transient_retries), "fast_path"
        model = self.model or (patient_model if self.use_patient_model else None)
        if not self.consult:
            problem = "the Clinic agent is off (consult=False)"
        else:
            problem = "no Clinic model was named (Clinic(model=...), or use_patient_model=True)"
        if self.consult and model is not None:
            try:
                report = await self.consult_agent(failure, visits, model=model, hint=fast, budget=budget)
            except UsageLimitExceeded as exc:
                diagnosis = Diagnosis(
                    root_cause="logic_error",
                    explanation=f"usage limit reached while consulting the Clinic agent ({clip(exc.message, 160)}): "
                    "the episode's one budget is spent.",
                    confidence=1.0,
                )
                return diagnosis, Prescription(action="abort"), "fallback"
            except Exception as exc:  # noqa: BLE001 - a Clinic that fails must not sink the patient
                problem = f"the Clinic agent failed ({type(exc).__name__}: {clip(str(exc), 200)})"
            else:
                if report.diagnosis.confidence >= self.min_confidence:
                    rx = merge(
                        report.prescription,
                        report.diagnosis,
                        failure,
                        plan,
                        backoff=self.backoff,
                        transient_retries=transient_retries,
                    )
                    return report.diagnosis, rx, "clinic"
                problem = (
                    f"the Clinic agent's diagnosis ({report.diagnosis.root_cause}, confidence "
                    f"{report.diagnosis.confidence:.2f}) is below min_confidence {self.min_confidence:.2f}"
                )
        if fast is not None:
            return fast, self._prescribe(fast, failure, plan, visits, patient_model, transient_retries), "fast_path"
        retried = any(v.source == "fallback" and v.prescription.action == "retry" for v in visits)
        if retried:
            diagnosis = Diagnosis(
                root_cause="logic_error",
                explanation=f"undiagnosed: {problem}; the safe default (one plain retry) already relapsed.",
                confidence=0.0,
            )
            return diagnosis, Prescription(action="abort"), "fallback"
        diagnosis = Diagnosis(
            root_cause="logic_error",
            explanation=f"undiagnosed: the fast path could not read this error and {problem}; "
            "safe default: one plain retry, from where the run failed.",
            confidence=0.0,
        )
        return diagnosis, Prescription(action="retry"), "fallback"

    def _custom_diagnosis(self, failure: Failure) -> Diagnosis | None:
        for diagnoser in self.diagnosers:
            found = diagnoser(failure.error, failure.trauma)
            if found is not None:
                return found
        return None

    def _prescribe(
        self,
        diagnosis: Diagnosis,
        failure: Failure,
        plan: Plan,
        visits: Sequence[Visit],
        patient_model: ModelLike | None,
        transient_retries: int,
    ) -> Prescription:
        custom = self.remedies.get(diagnosis.root_cause)
        if custom is not None:
            found = custom(diagnosis, failure.trauma)
            if found is not None:
                return found
        if diagnosis.root_cause == "transient_error" and self.respect_sdk_retries:
            sdk = provider_retries(patient_model)
            if sdk:
                return Prescription(action="abort")
        return remedy(diagnosis, failure, plan, backoff=self.backoff, transient_retries=transient_retries)

    async def consult_agent(
        self,
        failure: Failure,
        visits: Sequence[Visit],
        *,
        model: ModelLike,
        hint: Diagnosis | None = None,
        budget: Budget | None = None,
    ) -> ClinicReport:
        """Ask the Clinic agent (one structured-output run, in the episode's budget); raises whatever the run raises."""
        prompt = render_case(failure, visits, hint)
        if budget is None:
            return (await self.agent.run(prompt, model=model)).output
        with budget.charge("clinic"):
            result = await self.agent.run(prompt, model=model, usage=budget.usage, usage_limits=budget.limits)
        return result.output

    # -- the loop --------------------------------------------------------------------------

    async def treat(
        self,
        agent: AbstractAgent[Any, Any],
        prompt: Prompt = None,
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
        budget = Budget(run_kwargs.pop("usage", None) or RunUsage(), run_kwargs.pop("usage_limits", None))
        history = _as_history(run_kwargs.pop("message_history", None))
        plan = Plan(prompt, [], history, base=len(history or []))
        patient_model: ModelLike | None = run_kwargs.get("model") or agent.model
        ledger = ToolLedger()
        episode: Episode | None = None
        pa: PhoenixAgent | None = None
        errors: list[BaseException] = []
        attempt = 0
        with span("phoenix.clinic.episode", {"phoenix.clinic.agent": agent.name or ""}) as episode_span:
            while True:
                observer = Observer()
                ledger.replaying = attempt > 0
                with (
                    capture_run_messages() as captured,
                    span("phoenix.clinic.run", {"phoenix.clinic.attempt": attempt}),
                ):
                    try:
                        with budget.charge("patient"):
                            result = await agent.run(
                                None if plan.resume is not None else plan.prompt,
                                deps=deps,
                                message_history=plan.resume if plan.resume is not None else plan.history,
                                instructions=_instructions(user_instructions, plan.instructions),
                                capabilities=[*user_capabilities, observer, ledger],
                                usage=budget.usage,
                                usage_limits=budget.limits,
                                **run_kwargs,
                            )
                    except Exception as exc:  # noqa: BLE001 - every failure of the patient is triaged
                        error: Exception | None = exc
                        messages = list(captured)
                    else:
                        error = None
                last = episode.visits[-1] if episode is not None and episode.visits else None
                if error is None:
                    restore_prompt(result.all_messages(), plan.prompt, prompt)
                    if episode is not None and last is not None:
                        last.outcome = "healed"
                        episode.outcome = "healed"
                        self._close(episode, budget, ledger)
                        self._emit("outcome", last)
                        self._record(pa, episode, last, final=True)
                        episode_span.set("phoenix.clinic.outcome", "healed")
                        setattr(result, _EPISODE_ATTRIBUTE, episode)
                    return result
                errors.append(error)
                if untreatable(error) and episode is None:
                    episode_span.set("phoenix.clinic.outcome", "untreated")
                    raise error
                step: tuple[Episode, PhoenixAgent | None, Plan] | None = None
                try:
                    step = await self._visit(
                        agent,
                        error,
                        messages,
                        observer,
                        prompt=prompt,
                        plan=plan,
                        attempt=attempt,
                        max_recoveries=max_recoveries,
                        episode=episode,
                        phoenix=phoenix,
                        pa=pa,
                        budget=budget,
                        ledger=ledger,
                        patient_model=patient_model,
                    )
                except _GiveUp as gave_up:
                    stop: BaseException | None = (
                        error if untreatable(error) else ClinicGaveUp(gave_up.episode, errors=errors)
                    )
                except Exception as clinic_failure:  # noqa: BLE001 - a bug in the Clinic must not hide the patient's error
                    error.add_note(
                        f"phoenix Clinic: treating this error failed ({type(clinic_failure).__name__}: {clinic_failure})"
                    )
                    stop = error
                else:
                    stop = None
                if stop is error:
                    episode_span.set("phoenix.clinic.outcome", "untreated")
                    raise error
                if stop is not None:
                    episode_span.set("phoenix.clinic.outcome", "gave_up")
                    raise stop from error
                if step is None:  # pragma: no cover - without a stop, the visit returned its step
                    raise error
                episode, pa, plan = step
                attempt += 1
                if plan.delay:
                    await self.sleep(plan.delay)

    async def _visit(
        self,
        agent: AbstractAgent[Any, Any],
        error: Exception,
        messages: list[Any],
        observer: Observer,
        *,
        prompt: Prompt,
        plan: Plan,
        attempt: int,
        max_recoveries: int,
        episode: Episode | None,
        phoenix: PhoenixAgent | str | bool | None,
        pa: PhoenixAgent | None,
        budget: Budget,
        ledger: ToolLedger,
        patient_model: ModelLike | None,
    ) -> tuple[Episode, PhoenixAgent | None, Plan]:
        """One visit: triage, diagnosis, prescription; returns the rerun's plan, or raises ``_GiveUp``."""
        last = episode.visits[-1] if episode is not None and episode.visits else None
        failure = triage(
            error,
            original_prompt=prompt_text(prompt),
            prompt_used=prompt_text(plan.prompt),
            attempt=attempt,
            messages=messages,
            observer=observer,
            long_history_chars=self.long_history_chars,
        )
        if episode is None:
            episode = Episode(
                id=secrets.token_hex(6),
                agent_name=agent.name,
                original_prompt=prompt_text(prompt),
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
            self._close(episode, budget, ledger)
            self._emit_event(ClinicEvent(stage="outcome", attempt=attempt, trauma=failure.trauma, outcome="gave_up"))
            self._record(pa, episode, last, final=True, trauma=failure.trauma)
            raise _GiveUp(episode)
        if last is not None:
            self._record(pa, episode, last, final=False)
        visit_number = attempt + 1
        with span("phoenix.clinic.visit", {"phoenix.clinic.attempt": visit_number}) as visit_span:
            self._emit_event(ClinicEvent(stage="trauma", attempt=visit_number, trauma=failure.trauma))
            diagnosis, prescription, source = await self.examine(
                failure, episode.visits, plan, patient_model=patient_model, budget=budget
            )
            self._emit_event(
                ClinicEvent(
                    stage="diagnosis", attempt=visit_number, trauma=failure.trauma, diagnosis=diagnosis, source=source
                )
            )
            if prescription.action == "summarize_history":
                prescription = await self._summarize(prescription, failure, patient_model, budget)
            visit = Visit(
                attempt=visit_number,
                trauma=failure.trauma,
                diagnosis=diagnosis,
                prescription=prescription,
                source=source,
            )
            episode.visits.append(visit)
            visit_span.set("phoenix.clinic.root_cause", diagnosis.root_cause)
            visit_span.set("phoenix.clinic.action", prescription.action)
            visit_span.set("phoenix.clinic.source", source)
            self._emit("prescription", visit)
            if prescription.action == "abort":
                visit.outcome = "aborted"
                episode.outcome = "gave_up"
                self._close(episode, budget, ledger)
                self._emit("outcome", visit)
                self._record(pa, episode, visit, final=True)
                raise _GiveUp(episode)
        kept = resume_point(messages, plan.base)
        return episode, pa, apply(prescription, plan, kept)

    async def _summarize(
        self, prescription: Prescription, failure: Failure, patient_model: ModelLike | None, budget: Budget
    ) -> Prescription:
        model = self.summarizer_model or self.model or patient_model
        if model is None:
            summary = render_messages(failure.messages, part_limit=400, total_limit=4_000)
        else:
            with budget.charge("summarizer"):
                summary, _ = await summarize(failure.messages, model, usage=budget.usage, usage_limits=budget.limits)
        return prescription.model_copy(update={"summary": summary})

    # -- reporting -------------------------------------------------------------------------

    @staticmethod
    def _close(episode: Episode, budget: Budget, ledger: ToolLedger) -> None:
        episode.spent = {name: spent.model_copy() for name, spent in budget.spent.items()}
        episode.tools_run = list(ledger.ran)
        episode.tools_replayed = list(ledger.replayed)

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


class _GiveUp(Exception):
    def __init__(self, episode: Episode) -> None:
        self.episode = episode


_EPISODE_ATTRIBUTE = "phoenix_clinic_episode"


def clinic_episode(result: AgentRunResult[Any]) -> Episode | None:
    """The Clinic's ``Episode`` of a healed run (visits, the budget spent by consumer, the tool
    calls that ran and were replayed), or ``None`` when the first run succeeded."""
    episode = getattr(result, _EPISODE_ATTRIBUTE, None)
    return episode if isinstance(episode, Episode) else None


class Budget:
    """The episode's one budget: one ``RunUsage`` and the caller's ``UsageLimits``, shared by every
    run of the patient, the Clinic agent's consultations and the Summarizer; ``spent`` splits it by
    consumer."""

    def __init__(self, usage: RunUsage, limits: UsageLimits | None) -> None:
        self.usage = usage
        self.limits = limits
        self.spent: dict[str, Spent] = {}

    @contextmanager
    def charge(self, consumer: str) -> Iterator[None]:
        """Attribute what the block spends (requests, tokens) to ``consumer``, even when it raises."""
        before = (self.usage.requests, self.usage.input_tokens, self.usage.output_tokens)
        try:
            yield
        finally:
            spent = self.spent.setdefault(consumer, Spent())
            spent.requests += self.usage.requests - before[0]
            spent.input_tokens += self.usage.input_tokens - before[1]
            spent.output_tokens += self.usage.output_tokens - before[2]


def budget_spent(error: BaseException) -> bool:
    """Whether ``error`` is a usage limit of the run's budget (not a per-request size limit)."""
    return isinstance(error, UsageLimitExceeded) and "per_request" not in error.message


def provider_retries(model: Any) -> int:
    """How many times the patient's provider SDK retries a failed request itself (the
    ``max_retries`` of an OpenAI or Anthropic client the model wraps; 0 when unknown). For a
    ``FallbackModel``, the largest among its models."""
    if model is None or isinstance(model, str):
        return 0
    models = getattr(model, "models", None)
    if isinstance(models, list | tuple) and models:
        return max(provider_retries(m) for m in models)
    wrapped = getattr(model, "wrapped", None)
    if wrapped is not None and wrapped is not model:
        return provider_retries(wrapped)
    client = getattr(model, "client", None)
    retries = getattr(client, "max_retries", None)
    return retries if isinstance(retries, int) and not isinstance(retries, bool) and retries > 0 else 0


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
    prompt: Prompt = None,
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

    ``prompt`` is anything ``agent.run`` takes: a string, multimodal user content, or ``None`` to
    continue ``message_history``. A rerun continues from where the failed run stopped (its
    captured messages), so tool calls that completed are not made again; a tool call repeated in
    a rerun is answered from the episode's ledger unless the tool's metadata says
    ``{"idempotent": True}``. Every run, the Clinic's consultations and the Summarizer share one
    budget: ``usage`` (a ``RunUsage``, created if not given; the healed result's ``usage`` is that
    total) and ``usage_limits``.

    ``clinic`` configures the Clinic (default ``Clinic()``: fast path and safe defaults only, no
    Clinic model; name one with ``Clinic(model=...)``).
    ``phoenix`` records each episode in a Phoenix home (ops events ``clinic_episode`` and a
    recovery checkpoint): a Phoenix ``Agent``, an agent id, or ``True`` for ``Agent.open()``;
    ``None`` (the default) writes nothing. ``run_kwargs`` go to ``agent.run`` (``message_history``,
    ``instructions``, ``capabilities``, ``model``, ``usage_limits``, ...); the Clinic's changes are
    added to them.
    """
    return await (clinic or Clinic()).treat(agent, prompt, max_recoveries, deps, phoenix=phoenix, **run_kwargs)


def recoverable_run_sync(
    agent: AbstractAgent[Any, Any],
    prompt: Prompt = None,
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
