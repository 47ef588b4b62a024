"""Issue 33: the Clinic heals without redoing work. Each test fails on the Clinic before the issue.

pydantic-ai's real classes (Agent, capture_run_messages, UsageLimits, FallbackModel, the
ModelHTTPError its OpenAI model raises for a 503), with ``FunctionModel`` as the provider: the
OpenAI SDK is not installed here, so the provider's own retries are exercised through a model
that exposes a client with ``max_retries`` as OpenAI's does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import (
    Agent,
    BinaryContent,
    ModelHTTPError,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UsageLimits,
    UserPromptPart,
)
from pydantic_ai.exceptions import ModelContextWindowExceededError
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import AgentInfo, FunctionModel

import phoenix_protocol.clinic._run as run_module
from phoenix_protocol.clinic import (
    Clinic,
    ClinicEvent,
    ClinicGaveUp,
    Diagnosis,
    Prescription,
    TraumaContext,
    clinic_episode,
    provider_retries,
    recoverable_run,
    recoverable_run_sync,
)


@dataclass
class Sleeper:
    delays: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@dataclass
class Counted:
    respond: Callable[[list[ModelMessage], AgentInfo], ModelResponse]
    calls: int = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        return self.respond(messages, info)

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self)


def _never(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    raise AssertionError("this model must not be called")


def _returned(messages: list[ModelMessage], name: str) -> bool:
    return any(
        isinstance(p, ToolReturnPart) and p.tool_name == name and p.outcome == "success" for p in messages[-1].parts
    )


def booking_agent(
    respond: Callable[[list[ModelMessage], AgentInfo], ModelResponse], *, idempotent: bool = False
) -> tuple[Agent[None, str], Counted, dict[str, int]]:
    """An agent whose ``book`` tool has a side effect: a counter of bookings."""
    patient = Counted(respond)
    agent: Agent[None, str] = Agent(patient.model, name="travel")
    booked = {"n": 0}

    @agent.tool_plain(metadata={"idempotent": True} if idempotent else None)
    def book(room: str) -> str:
        """Book a room."""
        booked["n"] += 1
        return f"booked {room} (#{booked['n']})"

    return agent, patient, booked


def _503_after_booking() -> Callable[[list[ModelMessage], AgentInfo], ModelResponse]:
    """Books, then the next model request gets a 503 once, then answers."""
    state = {"failed": False}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if _returned(messages, "book"):
            if not state["failed"]:
                state["failed"] = True
                raise ModelHTTPError(503, "patient", {"error": {"message": "overloaded"}})
            return ModelResponse(parts=[TextPart("Room A is booked.")])
        return ModelResponse(parts=[ToolCallPart("book", {"room": "A"})])

    return respond


# -- 1. recovery keeps progress ---------------------------------------------------------------


def test_a_503_after_a_booking_heals_without_booking_twice() -> None:
    agent, patient, booked = booking_agent(_503_after_booking())
    sleeper = Sleeper()
    result = recoverable_run_sync(agent, "Book room A.", clinic=Clinic(sleep=sleeper))
    assert result.output == "Room A is booked."
    assert booked["n"] == 1  # was 2: the rerun started from the prompt again
    assert patient.calls == 3  # was 4; pydantic-ai's own request retry also makes 3
    assert sleeper.delays == [1.0]
    episode = clinic_episode(result)
    assert episode is not None and episode.outcome == "healed"
    assert episode.tools_run == ["book"] and episode.tools_replayed == []
    kinds = [[p.part_kind for p in m.parts] for m in result.all_messages()]
    assert kinds == [["user-prompt"], ["tool-call"], ["tool-return"], ["text"]]  # one conversation, no restart


def test_a_summarized_restart_answers_a_completed_tool_call_from_the_ledger() -> None:
    """Context overflow after a booking: the history must be replaced by a summary, the rerun
    starts again, the model books again, and the booking is not made twice."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if _returned(messages, "book"):
            if "Summary of the conversation" not in str(messages[0].parts[0]):
                raise ModelHTTPError.for_category(
                    ModelContextWindowExceededError, status_code=400, model_name="p", body={"code": "x"}
                )
            return ModelResponse(parts=[TextPart("Booked.")])
        return ModelResponse(parts=[ToolCallPart("book", {"room": "A"})])

    agent, _, booked = booking_agent(respond)
    summarizer = FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("The user wants room A.")]))
    result = recoverable_run_sync(agent, "Book room A.", clinic=Clinic(summarizer_model=summarizer))
    assert result.output == "Booked."
    assert booked["n"] == 1
    episode = clinic_episode(result)
    assert episode is not None and episode.tools_replayed == ["book"]


def test_a_tool_marked_idempotent_runs_again_after_a_restart() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if _returned(messages, "book"):
            if "Summary of the conversation" not in str(messages[0].parts[0]):
                raise ModelHTTPError.for_category(
                    ModelContextWindowExceededError, status_code=400, model_name="p", body={"code": "x"}
                )
            return ModelResponse(parts=[TextPart("Booked.")])
        return ModelResponse(parts=[ToolCallPart("book", {"room": "A"})])

    agent, _, booked = booking_agent(respond, idempotent=True)
    summarizer = FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("room A")]))
    recoverable_run_sync(agent, "Book room A.", clinic=Clinic(summarizer_model=summarizer))
    assert booked["n"] == 2


class Booking(BaseModel):
    room: str
    nights: int


def test_a_modified_prompt_is_applied_in_the_resumed_history_and_not_kept_after_healing() -> None:
    """The final answer fails validation after a booking: the rerun continues from the booking with
    the schema added to the prompt, and the healed history carries the caller's prompt."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(p, ToolReturnPart) and p.tool_name == "book" for m in messages for p in m.parts):
            return ModelResponse(parts=[ToolCallPart("book", {"room": "A"})])
        first = str(messages[0].parts[-1])
        output = info.output_tools[0].name
        if "required: room, nights" in first:
            return ModelResponse(parts=[ToolCallPart(output, {"room": "A", "nights": 2})])
        return ModelResponse(parts=[ToolCallPart(output, {"room": "A"})])

    patient = Counted(respond)
    agent: Agent[None, Booking] = Agent(patient.model, output_type=Booking)
    booked = {"n": 0}

    @agent.tool_plain
    def book(room: str) -> str:
        """Book a room."""
        booked["n"] += 1
        return "ok"

    result = recoverable_run_sync(agent, "Book room A for 2 nights.", clinic=Clinic())
    assert result.output == Booking(room="A", nights=2)
    assert booked["n"] == 1
    prompts = [p.content for m in result.all_messages() for p in m.parts if isinstance(p, UserPromptPart)]
    assert prompts == ["Book room A for 2 nights."]


def test_the_schema_note_is_added_once_on_relapse() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"room": "A"})])

    agent: Agent[None, Booking] = Agent(FunctionModel(respond), output_type=Booking)
    events: list[ClinicEvent] = []
    with pytest.raises(ClinicGaveUp):
        recoverable_run_sync(agent, "Book.", 2, clinic=Clinic(on_event=events.append))
    prompts = [e.prescription.modified_prompt for e in events if e.stage == "prescription" and e.prescription]
    assert prompts and all(p is not None and p.count("JSON schema") == 1 for p in prompts)


# -- 2. one budget ------------------------------------------------------------------------------


def test_the_clinic_and_the_summarizer_spend_the_same_budget_and_it_is_reported() -> None:
    state = {"n": 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        state["n"] += 1
        if state["n"] == 1:
            raise KeyError("cache entry vanished")
        return ModelResponse(parts=[TextPart("ok")])

    clinic_model = Counted(
        lambda m, i: ModelResponse(
            parts=[
                ToolCallPart(
                    i.output_tools[0].name,
                    {
                        "diagnosis": {"root_cause": "logic_error", "explanation": "flaky", "confidence": 0.9},
                        "prescription": {"action": "retry"},
                    },
                )
            ]
        )
    )
    agent: Agent[None, str] = Agent(FunctionModel(respond))
    result = recoverable_run_sync(agent, "go", clinic=Clinic(clinic_model.model))
    episode = clinic_episode(result)
    assert episode is not None
    assert episode.spent["patient"].requests == 1  # pydantic-ai counts the requests that got a response
    assert episode.spent["clinic"].requests == 1
    assert result.usage.requests == 2  # the result's usage is the episode's one budget

    with pytest.raises(ClinicGaveUp) as caught:  # a budget of 1 is spent by the Clinic's consultation
        state["n"] = 0
        recoverable_run_sync(agent, "go", clinic=Clinic(clinic_model.model), usage_limits=UsageLimits(request_limit=1))
    assert "usage limit" in caught.value.diagnoses[-1].explanation


def test_a_total_tokens_limit_is_not_read_as_a_context_overflow() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("book", {"room": "A"})])

    agent, _patient, _ = booking_agent(respond)
    summarizer = Counted(_never)
    with pytest.raises(ClinicGaveUp) as caught:
        recoverable_run_sync(
            agent,
            "Book.",
            clinic=Clinic(summarizer_model=summarizer.model),
            usage_limits=UsageLimits(total_tokens_limit=200),
        )
    assert [d.root_cause for d in caught.value.diagnoses] == ["logic_error"]
    assert [p.action for p in caught.value.prescriptions] == ["abort"]
    assert summarizer.calls == 0


class _SDKClient:
    def __init__(self, max_retries: int) -> None:
        self.max_retries = max_retries


class SDKModel(FunctionModel):
    """A FunctionModel that exposes a provider client as pydantic-ai's OpenAI model does."""

    def __init__(self, function: Any, max_retries: int) -> None:
        super().__init__(function)
        self.client = _SDKClient(max_retries)


def test_a_provider_sdk_that_retries_is_not_retried_again_by_the_clinic() -> None:
    patient = Counted(lambda m, i: (_ for _ in ()).throw(ModelHTTPError(503, "p")))
    agent: Agent[None, str] = Agent(SDKModel(patient, max_retries=2))
    sleeper = Sleeper()
    with pytest.raises(ClinicGaveUp) as caught:
        recoverable_run_sync(agent, "go", 2, clinic=Clinic(sleep=sleeper))
    assert patient.calls == 1  # the SDK's 3 HTTP requests, not 3 x 3
    assert sleeper.delays == []
    assert [p.action for p in caught.value.prescriptions] == ["abort"]

    patient.calls = 0
    agent0: Agent[None, str] = Agent(SDKModel(patient, max_retries=0))
    with pytest.raises(ClinicGaveUp):
        recoverable_run_sync(agent0, "go", 2, clinic=Clinic(sleep=sleeper))
    assert patient.calls == 3  # max_retries=0: the Clinic is the one layer that retries
    assert sleeper.delays == [1.0, 2.0]


def test_provider_retries() -> None:
    assert provider_retries(None) == 0
    assert provider_retries("openai:gpt-5") == 0
    assert provider_retries(FunctionModel(_never)) == 0
    assert provider_retries(SDKModel(_never, 2)) == 2
    assert provider_retries(FallbackModel(FunctionModel(_never), SDKModel(_never, 3))) == 3


# -- 3. a Clinic model only when named; confidence; deterministic 4xx ---------------------------


def test_the_default_clinic_never_consults_the_patients_model() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if info.output_tools and any("ClinicReport" in (t.description or "") for t in info.output_tools):
            raise AssertionError("the patient's model was consulted as the Clinic")
        raise KeyError("always")

    patient = Counted(respond)
    agent: Agent[None, str] = Agent(patient.model)
    with pytest.raises(ClinicGaveUp) as caught:
        recoverable_run_sync(agent, "go", 2)
    assert patient.calls == 2  # the run, one safe-default retry; then abort (was 10 calls)
    assert [v.source for v in caught.value.episode.visits] == ["fallback", "fallback"]
    assert [p.action for p in caught.value.prescriptions] == ["retry", "abort"]
    assert "no Clinic model was named" in caught.value.diagnoses[0].explanation


def test_a_diagnosis_below_the_confidence_threshold_is_not_acted_on() -> None:
    agent: Agent[None, str] = Agent(FunctionModel(lambda m, i: ModelResponse(parts=[ToolCallPart("divide", {})])))

    @agent.tool_plain
    def divide() -> float:
        """1/0."""
        return 1 / 0

    clinic_model = Counted(
        lambda m, i: ModelResponse(
            parts=[
                ToolCallPart(
                    i.output_tools[0].name,
                    {
                        "diagnosis": {"root_cause": "context_length_exceeded", "explanation": "?", "confidence": 0.0},
                        "prescription": {"action": "summarize_history"},
                    },
                )
            ]
        )
    )
    summarizer = Counted(_never)
    with pytest.raises(ClinicGaveUp) as caught:
        recoverable_run_sync(agent, "go", 2, clinic=Clinic(clinic_model.model, summarizer_model=summarizer.model))
    assert summarizer.calls == 0
    assert "summarize_history" not in [p.action for p in caught.value.prescriptions]
    assert "below min_confidence" in caught.value.diagnoses[0].explanation
    assert isinstance(caught.value.__cause__, ZeroDivisionError)


def test_a_deterministic_400_is_raised_at_once_unchanged() -> None:
    error = ModelHTTPError(400, "p", {"error": {"message": "Invalid parameter: temperature"}})
    patient = Counted(lambda m, i: (_ for _ in ()).throw(error))
    clinic_model = Counted(_never)
    agent: Agent[None, str] = Agent(patient.model)
    with pytest.raises(ModelHTTPError) as caught:
        recoverable_run_sync(agent, "go", clinic=Clinic(clinic_model.model))
    assert caught.value is error
    assert patient.calls == 1 and clinic_model.calls == 0


# -- 4. any prompt; the original error chained ---------------------------------------------------


def test_prompt_none_continues_the_history_and_is_healed() -> None:
    agent, _patient, booked = booking_agent(_503_after_booking())
    history: list[ModelMessage] = [ModelRequest.user_text_prompt("Book room A.")]
    result = recoverable_run_sync(agent, None, clinic=Clinic(sleep=Sleeper()), message_history=history)
    assert result.output == "Room A is booked." and booked["n"] == 1


def test_a_multimodal_prompt_is_healed_and_its_image_kept() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"room": "A", "nights": 1})])

    seen: list[Any] = []

    def first_bad(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages[0].parts[-1])
        if len(seen) == 1:
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"room": "A"})])
        return respond(messages, info)

    agent: Agent[None, Booking] = Agent(FunctionModel(first_bad), output_type=Booking, retries={"output": 0})
    image = BinaryContent(b"\x89PNG....", media_type="image/png")
    result = recoverable_run_sync(agent, ["Book the room in this picture.", image], clinic=Clinic())
    assert result.output == Booking(room="A", nights=1)
    rerun_prompt = seen[-1].content
    assert rerun_prompt[1] == image and "JSON schema" in rerun_prompt[0]


def test_giving_up_keeps_every_error_and_chains_the_last() -> None:
    errors = [KeyError("first"), ValueError("second"), RuntimeError("third")]
    state = {"n": 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        state["n"] += 1
        raise errors[state["n"] - 1]

    clinic_model = Counted(
        lambda m, i: ModelResponse(
            parts=[
                ToolCallPart(
                    i.output_tools[0].name,
                    {
                        "diagnosis": {"root_cause": "logic_error", "explanation": "?", "confidence": 0.9},
                        "prescription": {"action": "retry"},
                    },
                )
            ]
        )
    )
    with pytest.raises(ClinicGaveUp) as caught:
        recoverable_run_sync(Agent(FunctionModel(respond)), "go", 2, clinic=Clinic(clinic_model.model))
    assert caught.value.errors == errors
    assert caught.value.original_error is errors[0]
    assert caught.value.__cause__ is errors[2]
    assert "first error KeyError" in str(caught.value)


def test_a_failure_inside_the_clinic_raises_the_patients_error_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_triage(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("clinic bug")

    monkeypatch.setattr(run_module, "triage", broken_triage)
    error = KeyError("the patient's")
    agent: Agent[None, str] = Agent(FunctionModel(lambda m, i: (_ for _ in ()).throw(error)))
    with pytest.raises(KeyError) as caught:
        recoverable_run_sync(agent, "go")
    assert caught.value is error
    assert any("clinic bug" in note for note in getattr(caught.value, "__notes__", []))


# -- 5. FallbackModel with mixed failures ---------------------------------------------------------


def test_a_fallback_model_with_a_503_and_a_context_overflow_is_a_context_overflow() -> None:
    def overloaded(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelHTTPError(503, "a")

    def small(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if "Summary of the conversation" not in str(messages[0].parts[0]):
            raise ModelHTTPError.for_category(
                ModelContextWindowExceededError, status_code=400, model_name="b", body={"code": "x"}
            )
        return ModelResponse(parts=[TextPart("ok")])

    agent: Agent[None, str] = Agent(FallbackModel(FunctionModel(overloaded), FunctionModel(small)))
    events: list[ClinicEvent] = []
    summarizer = FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("short")]))
    clinic = Clinic(summarizer_model=summarizer, on_event=events.append, sleep=Sleeper())
    history: list[ModelMessage] = [ModelRequest.user_text_prompt("long " * 100), ModelResponse(parts=[TextPart("x")])]
    assert recoverable_run_sync(agent, "go", clinic=clinic, message_history=history).output == "ok"
    diagnosis = next(e.diagnosis for e in events if e.stage == "diagnosis")
    assert diagnosis is not None and diagnosis.root_cause == "context_length_exceeded"


# -- 7. registry; spans ----------------------------------------------------------------------------


def test_custom_diagnoses_and_remedies_are_registered() -> None:
    class QuotaCooldown(Exception):
        pass

    state = {"n": 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        state["n"] += 1
        if state["n"] == 1:
            raise QuotaCooldown("tenant quota cooling down")
        return ModelResponse(parts=[TextPart("ok")])

    def diagnose(error: BaseException, trauma: TraumaContext) -> Diagnosis | None:
        if isinstance(error, QuotaCooldown):
            return Diagnosis(root_cause="transient_error", explanation="tenant quota", confidence=1.0)
        return None

    clinic = Clinic(sleep=Sleeper())
    clinic.register(diagnose, remedy=("transient_error", lambda d, t: Prescription(action="retry", delay_seconds=7)))
    events: list[ClinicEvent] = []
    clinic.on_event = events.append
    assert recoverable_run_sync(Agent(FunctionModel(respond)), "go", clinic=clinic).output == "ok"
    assert events[1].source == "custom"
    assert clinic.sleep.delays == [7]  # type: ignore[attr-defined]


def test_an_episode_and_its_visits_are_opentelemetry_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    import phoenix_protocol.clinic._telemetry as telemetry

    spans: list[tuple[str, dict[str, Any]]] = []

    class FakeSpan:
        def __init__(self, attributes: dict[str, Any]) -> None:
            self.attributes = attributes

        def set_attribute(self, key: str, value: Any) -> None:
            self.attributes[key] = value

        def __enter__(self) -> FakeSpan:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    class FakeTracer:
        def start_as_current_span(self, name: str, attributes: dict[str, Any]) -> FakeSpan:
            spans.append((name, attributes))
            return FakeSpan(attributes)

    class FakeTrace:
        def get_tracer(self, name: str) -> FakeTracer:
            return FakeTracer()

    monkeypatch.setattr(telemetry, "_trace", FakeTrace())
    agent, _, _ = booking_agent(_503_after_booking())
    recoverable_run_sync(agent, "Book room A.", clinic=Clinic(sleep=Sleeper()))
    names = [n for n, _ in spans]
    assert names == ["phoenix.clinic.episode", "phoenix.clinic.run", "phoenix.clinic.visit", "phoenix.clinic.run"]
    assert spans[0][1]["phoenix.clinic.outcome"] == "healed"
    assert spans[2][1]["phoenix.clinic.root_cause"] == "transient_error"


def test_the_async_wrapper_keeps_progress_too() -> None:
    import asyncio

    agent, _, booked = booking_agent(_503_after_booking())
    result = asyncio.run(recoverable_run(agent, "Book room A.", clinic=Clinic(sleep=Sleeper())))
    assert result.output == "Room A is booked." and booked["n"] == 1


def test_a_failed_stream_continues_through_the_clinic_without_repeating_tools() -> None:
    import asyncio
    from collections.abc import AsyncIterator

    from pydantic_ai import capture_run_messages
    from pydantic_ai.models.function import DeltaToolCall, DeltaToolCalls

    from phoenix_protocol.clinic import resumable

    calls = {"n": 0}

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        calls["n"] += 1
        if calls["n"] == 2:
            raise ModelHTTPError(503, "p")
        if _returned(messages, "book"):
            yield "Room A is booked."
            return
        yield {0: DeltaToolCall(name="book", json_args='{"room": "A"}')}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise AssertionError("streamed only")

    agent: Agent[None, str] = Agent(FunctionModel(respond, stream_function=stream))
    booked = {"n": 0}

    @agent.tool_plain
    def book(room: str) -> str:
        """Book a room."""
        booked["n"] += 1
        return "booked"

    events: list[str] = []

    async def handler(ctx: Any, stream_events: Any) -> None:
        async for event in stream_events:
            events.append(type(event).__name__)

    async def main() -> str:
        with capture_run_messages() as captured:
            try:
                async with agent.run_stream("Book room A.") as streamed:
                    return await streamed.get_output()
            except ModelHTTPError:
                pass
        result = await recoverable_run(
            agent, None, message_history=resumable(captured), clinic=Clinic(), event_stream_handler=handler
        )
        return str(result.output)

    assert asyncio.run(main()) == "Room A is booked."
    assert booked["n"] == 1 and calls["n"] == 3
    assert "PartStartEvent" in events


def _503s_after_booking(n: int) -> Callable[[list[ModelMessage], AgentInfo], ModelResponse]:
    """Books, then the next ``n`` model requests get a 503, then answers."""
    state = {"left": n}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if _returned(messages, "book"):
            if state["left"] > 0:
                state["left"] -= 1
                raise ModelHTTPError(503, "patient", {"error": {"message": "overloaded"}})
            return ModelResponse(parts=[TextPart("Room A is booked.")])
        return ModelResponse(parts=[ToolCallPart("book", {"room": "A"})])

    return respond


@pytest.mark.parametrize("failures", [1, 2])
def test_a_failed_iter_continues_through_the_clinic_without_repeating_tools(failures: int) -> None:
    """docs/clinic.md's way for ``agent.iter``: capture the failed run's messages, continue from
    ``resumable(captured)`` through the Clinic; the booking made inside the ``iter`` is not made
    again, whether the continuation runs healthy (1 failure) or the Clinic heals it (2)."""
    import asyncio

    from pydantic_ai import capture_run_messages

    from phoenix_protocol.clinic import resumable

    agent, patient, booked = booking_agent(_503s_after_booking(failures))
    nodes: list[str] = []
    sleeper = Sleeper()

    async def main() -> str:
        with capture_run_messages() as captured:
            try:
                async with agent.iter("Book room A.") as run:
                    async for node in run:
                        nodes.append(type(node).__name__)
                    assert run.result is not None
                    return str(run.result.output)
            except ModelHTTPError:
                pass
        assert booked["n"] == 1 and patient.calls == 2  # the iter booked, then its next request failed
        continued = resumable(captured)
        assert [m.parts[-1].part_kind for m in continued] == ["user-prompt", "tool-call", "tool-return"]
        result = await recoverable_run(agent, None, message_history=continued, clinic=Clinic(sleep=sleeper))
        episode = clinic_episode(result)
        if failures == 1:
            assert episode is None  # the continuation ran healthy: no visit needed
        else:
            assert episode is not None and episode.outcome == "healed" and episode.tools_replayed == []
        return str(result.output)

    assert asyncio.run(main()) == "Room A is booked."
    assert booked["n"] == 1  # never booked again
    assert patient.calls == 2 + failures  # the iter's 2, then one request per remaining failure and the answer
    assert sleeper.delays == [1.0] * (failures - 1)
    assert "CallToolsNode" in nodes  # the iter really walked its graph up to the tool call
