"""The Clinic (seed 001): each root cause forced, diagnosed and healed, offline, with pydantic-ai's
FunctionModel and TestModel. No test sleeps: the backoff's sleep is injected and its delays asserted."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import (
    Agent,
    ModelHTTPError,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelRetry,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UsageLimits,
    UserError,
)
from pydantic_ai.exceptions import (
    ModelAuthenticationError,
    ModelContextWindowExceededError,
    ModelOverloadedError,
    ModelRateLimitError,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

import phoenix_protocol.clinic as clinic_module
from phoenix_protocol import Agent as PhoenixAgent
from phoenix_protocol import Home, PhoenixError, UsageError
from phoenix_protocol.cli._main import cli
from phoenix_protocol.clinic import (
    Backoff,
    Clinic,
    ClinicEvent,
    ClinicGaveUp,
    ClinicReport,
    recoverable_run,
    recoverable_run_sync,
)

ROOT = Path(__file__).resolve().parents[2]


# -- helpers ---------------------------------------------------------------------------------


@dataclass
class Sleeper:
    """The injected sleep: records the delays, never sleeps."""

    delays: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@dataclass
class Counted:
    """A FunctionModel that counts its calls."""

    respond: Callable[[list[ModelMessage], AgentInfo], ModelResponse]
    calls: int = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        return self.respond(messages, info)

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self)


def _never(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    raise AssertionError("the Clinic's model must not be called on the fast path")


def clinic_answering(report: dict[str, Any]) -> Counted:
    """A Clinic model that answers ``report`` through its output tool."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, report)])

    return Counted(respond)


def _text(messages: list[ModelMessage]) -> str:
    out = []
    for m in messages:
        for p in m.parts:
            content = getattr(p, "content", None)
            if isinstance(content, str):
                out.append(content)
    return "\n".join(out)


def _tool_succeeded(messages: list[ModelMessage]) -> bool:
    return any(isinstance(p, ToolReturnPart) and p.outcome == "success" for p in messages[-1].parts)


def weather_agent(
    respond: Callable[[list[ModelMessage], AgentInfo], ModelResponse],
) -> tuple[Agent[None, str], Counted]:
    patient = Counted(respond)
    agent: Agent[None, str] = Agent(patient.model, name="weather")

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    return agent, patient


def hallucinating(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Calls `teleport` (which does not exist) until its instructions list the real tools."""
    if _tool_succeeded(messages):
        return ModelResponse(parts=[TextPart("It is sunny in Paris.")])
    if info.instructions and "get_weather(" in info.instructions:
        return ModelResponse(parts=[ToolCallPart("get_weather", {"city": "Paris"})])
    return ModelResponse(parts=[ToolCallPart("teleport", {"to": "Paris"})])


# -- root causes -----------------------------------------------------------------------------


def test_hallucinated_tool_is_diagnosed_on_the_fast_path_and_healed() -> None:
    agent, _ = weather_agent(hallucinating)
    events: list[ClinicEvent] = []
    clinic = Clinic(FunctionModel(_never), on_event=events.append)
    result = recoverable_run_sync(agent, "What is the weather in Paris?", clinic=clinic)
    assert result.output == "It is sunny in Paris."
    assert [e.stage for e in events] == ["trauma", "diagnosis", "prescription", "outcome"]
    trauma = events[0].trauma
    assert trauma.error_type == "UnexpectedModelBehavior"
    assert "teleport" in trauma.error_message
    assert trauma.cause_message is not None and trauma.cause_message.startswith("Unknown tool name")
    assert trauma.available_tools == ["get_weather"]
    assert trauma.tool_calls and trauma.tool_calls[0].tool_name == "teleport"
    assert trauma.tool_calls[0].retry_cause == "unknown_tool"
    assert "Traceback" in trauma.stack_trace
    diagnosis = events[1].diagnosis
    assert diagnosis is not None and diagnosis.root_cause == "hallucinated_tool"
    assert events[1].source == "fast_path"
    prescription = events[2].prescription
    assert prescription is not None and prescription.action == "modify_prompt"
    assert prescription.modified_instructions and "get_weather(city: string)" in prescription.modified_instructions
    assert events[3].outcome == "healed"


def test_invalid_tool_arguments_get_a_prompt_that_states_the_format() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if _tool_succeeded(messages):
            return ModelResponse(parts=[TextPart("done")])
        if "required: city" in _text(messages):
            return ModelResponse(parts=[ToolCallPart("get_weather", {"city": "Oslo"})])
        return ModelResponse(parts=[ToolCallPart("get_weather", {"town": "Oslo"})])

    agent, _ = weather_agent(respond)
    events: list[ClinicEvent] = []
    result = recoverable_run_sync(
        agent, "Weather in Oslo?", clinic=Clinic(FunctionModel(_never), on_event=events.append)
    )
    assert result.output == "done"
    diagnosis, prescription = events[1].diagnosis, events[2].prescription
    assert diagnosis is not None and diagnosis.root_cause == "invalid_tool_arguments"
    assert prescription is not None and prescription.modified_prompt is not None
    assert prescription.modified_prompt.startswith("Weather in Oslo?")
    assert '"required": ["city"]' in prescription.modified_prompt


class City(BaseModel):
    name: str
    population: int


def test_invalid_structured_output_gets_the_output_schema() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        args: dict[str, Any] = {"name": "Paris"}
        if "required: name, population" in _text(messages):
            args["population"] = 2_100_000
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

    agent: Agent[None, City] = Agent(FunctionModel(respond), output_type=City)
    events: list[ClinicEvent] = []
    result = recoverable_run_sync(
        agent, "Biggest city in France?", clinic=Clinic(FunctionModel(_never), on_event=events.append)
    )
    assert result.output == City(name="Paris", population=2_100_000)
    assert events[1].diagnosis is not None and events[1].diagnosis.root_cause == "invalid_tool_arguments"


def _too_long(limit: int) -> Callable[[list[ModelMessage], AgentInfo], ModelResponse]:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(_text(messages)) > limit:
            raise ModelHTTPError.for_category(
                ModelContextWindowExceededError,
                status_code=400,
                model_name="patient",
                body={"error": {"code": "context_length_exceeded"}},
            )
        return ModelResponse(parts=[TextPart("answered from the summary")])

    return respond


def _long_history(n: int = 40) -> list[ModelMessage]:
    history: list[ModelMessage] = []
    for i in range(n):
        history.append(ModelRequest.user_text_prompt(f"question {i}: " + "details " * 60))
        history.append(ModelResponse(parts=[TextPart(f"answer {i}: " + "words " * 60)]))
    return history


def test_context_overflow_summarizes_the_history_and_reruns() -> None:
    patient = Counted(_too_long(5_000))
    agent: Agent[None, str] = Agent(patient.model)
    summarizer = Counted(lambda m, i: ModelResponse(parts=[TextPart("The user asked 40 questions about details.")]))
    events: list[ClinicEvent] = []
    clinic = Clinic(FunctionModel(_never), summarizer_model=summarizer.model, on_event=events.append)
    result = recoverable_run_sync(agent, "And the last one?", clinic=clinic, message_history=_long_history())
    assert result.output == "answered from the summary"
    assert summarizer.calls == 1
    assert patient.calls == 2
    trauma = events[0].trauma
    assert trauma.history_summary is not None and "81 messages" in trauma.history_summary
    assert events[1].diagnosis is not None and events[1].diagnosis.root_cause == "context_length_exceeded"
    prescription = events[2].prescription
    assert prescription is not None and prescription.action == "summarize_history"
    assert prescription.summary == "The user asked 40 questions about details."
    assert result.all_messages()[0].parts[0].content.startswith("Summary of the conversation so far")  # type: ignore[union-attr]


def test_context_overflow_as_a_plain_http_400_with_a_context_code() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) > 2:
            raise ModelHTTPError(
                400, "patient", {"error": {"message": "This model's maximum context length is 8192 tokens"}}
            )
        return ModelResponse(parts=[TextPart("ok")])

    agent: Agent[None, str] = Agent(FunctionModel(respond))
    events: list[ClinicEvent] = []
    summarizer = FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("short")]))
    clinic = Clinic(FunctionModel(_never), summarizer_model=summarizer, on_event=events.append)
    assert recoverable_run_sync(agent, "go", clinic=clinic, message_history=_long_history(2)).output == "ok"
    assert events[1].diagnosis is not None and events[1].diagnosis.root_cause == "context_length_exceeded"


def test_a_summarizer_that_fails_falls_back_to_clipping() -> None:
    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("summarizer down")

    agent: Agent[None, str] = Agent(FunctionModel(_too_long(5_000)))
    events: list[ClinicEvent] = []
    clinic = Clinic(FunctionModel(_never), summarizer_model=FunctionModel(broken), on_event=events.append)
    assert recoverable_run_sync(agent, "go", clinic=clinic, message_history=_long_history()).output
    prescription = events[2].prescription
    assert prescription is not None and prescription.summary is not None
    assert "characters left out" in prescription.summary


def test_transient_errors_retry_after_the_providers_retry_after() -> None:
    failures = [
        ModelHTTPError.for_category(ModelRateLimitError, status_code=429, model_name="p", headers={"retry-after": "7"}),
        ModelHTTPError.for_category(ModelRateLimitError, status_code=429, model_name="p", headers={"retry-after": "3"}),
    ]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if failures:
            raise failures.pop(0)
        return ModelResponse(parts=[TextPart("fine")])

    agent: Agent[None, str] = Agent(FunctionModel(respond))
    sleeper = Sleeper()
    events: list[ClinicEvent] = []
    clinic = Clinic(FunctionModel(_never), sleep=sleeper, on_event=events.append)
    assert recoverable_run_sync(agent, "hi", clinic=clinic).output == "fine"
    assert sleeper.delays == [7.0, 3.0]  # at least retry_after; the computed backoff (1 s, 2 s) is shorter
    diagnoses = [e.diagnosis for e in events if e.stage == "diagnosis"]
    assert [d.root_cause for d in diagnoses if d] == ["transient_error", "transient_error"]


def test_transient_errors_without_retry_after_back_off_exponentially() -> None:
    count = {"n": 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        count["n"] += 1
        if count["n"] <= 3:
            raise ModelHTTPError.for_category(ModelOverloadedError, status_code=529, model_name="p")
        return ModelResponse(parts=[TextPart("fine")])

    agent: Agent[None, str] = Agent(FunctionModel(respond))
    sleeper = Sleeper()
    clinic = Clinic(FunctionModel(_never), sleep=sleeper, backoff=Backoff(base=0.5, factor=3.0))
    assert recoverable_run_sync(agent, "hi", 3, clinic=clinic).output == "fine"
    assert sleeper.delays == [0.5, 1.5, 4.5]


def test_a_retry_after_longer_than_the_limit_aborts_without_waiting() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelHTTPError.for_category(ModelRateLimitError, status_code=429, model_name="p", retry_after=3600)

    sleeper = Sleeper()
    with pytest.raises(ClinicGaveUp) as caught:
        recoverable_run_sync(Agent(FunctionModel(respond)), "hi", clinic=Clinic(FunctionModel(_never), sleep=sleeper))
    assert sleeper.delays == []
    assert caught.value.prescriptions[0].action == "abort"
    assert caught.value.episode.visits[0].outcome == "aborted"


def test_ambiguous_instruction_is_diagnosed_by_the_clinic_agent() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if "exactly one city" in _text(messages):
            return ModelResponse(parts=[TextPart("Paris")])
        return ModelResponse(parts=[TextPart("Paris, Lyon or Marseille, depending on what you mean")])

    agent: Agent[None, str] = Agent(FunctionModel(respond))

    @agent.output_validator
    def one_city(output: str) -> str:
        if "," in output:
            raise ModelRetry("answer with one city")
        return output

    clinic_model = clinic_answering(
        {
            "diagnosis": {
                "root_cause": "ambiguous_instruction",
                "explanation": "'the best city' can mean several things",
                "confidence": 0.8,
            },
            "prescription": {
                "action": "modify_prompt",
                "modified_prompt": "Name exactly one city: the capital of France.",
            },
        }
    )
    events: list[ClinicEvent] = []
    result = recoverable_run_sync(
        agent, "What is the best city in France?", clinic=Clinic(clinic_model.model, on_event=events.append)
    )
    assert result.output == "Paris"
    assert clinic_model.calls == 1
    assert events[1].source == "clinic"
    assert events[1].diagnosis is not None and events[1].diagnosis.root_cause == "ambiguous_instruction"
    assert events[2].prescription is not None
    assert events[2].prescription.modified_prompt == "Name exactly one city: the capital of France."


def test_a_usage_limit_is_the_episodes_one_budget_and_is_not_spent_again() -> None:
    """Issue 33, item 3: request_limit=3 with a looping model made 9 requests (a fresh budget per rerun)."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("get_weather", {"city": "Rome"})])

    agent, patient = weather_agent(respond)
    events: list[ClinicEvent] = []
    with pytest.raises(ClinicGaveUp) as caught:
        recoverable_run_sync(
            agent,
            "Weather in Rome?",
            clinic=Clinic(FunctionModel(_never), on_event=events.append),
            usage_limits=UsageLimits(request_limit=3),
        )
    assert patient.calls == 3  # one budget: no rerun gets a fresh one
    assert events[1].diagnosis is not None and events[1].diagnosis.root_cause == "logic_error"
    assert "usage limit reached" in events[1].diagnosis.explanation
    assert events[1].source == "fast_path"
    assert [v.prescription.action for v in caught.value.episode.visits] == ["abort"]
    assert type(caught.value.__cause__).__name__ == "UsageLimitExceeded"
    assert caught.value.episode.spent["patient"].requests == 3


def test_a_logic_error_the_clinic_cannot_fix_is_aborted() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("divide", {"a": 1, "b": 0})])

    agent: Agent[None, str] = Agent(FunctionModel(respond))

    @agent.tool_plain
    def divide(a: float, b: float) -> float:
        """a / b."""
        return a / b

    clinic_model = clinic_answering(
        {
            "diagnosis": {"root_cause": "logic_error", "explanation": "the tool divides by zero", "confidence": 0.9},
            "prescription": {"action": "abort"},
        }
    )
    with pytest.raises(ClinicGaveUp) as caught:
        recoverable_run_sync(agent, "1/0?", clinic=Clinic(clinic_model.model))
    error = caught.value
    assert isinstance(error, PhoenixError)
    assert isinstance(error.__cause__, ZeroDivisionError)
    assert [d.root_cause for d in error.diagnoses] == ["logic_error"]
    assert "prescribed abort" in str(error)
    assert error.traumas[0].error_type == "ZeroDivisionError"


# -- the budget, a failing Clinic, the fast path ------------------------------------------


def test_max_recoveries_is_respected_and_the_give_up_carries_every_trauma() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("teleport", {})])

    agent, patient = weather_agent(respond)
    clinic_model = clinic_answering(
        {
            "diagnosis": {"root_cause": "hallucinated_tool", "explanation": "still teleporting", "confidence": 0.9},
            "prescription": {"action": "modify_prompt", "modified_prompt": "Use get_weather for Paris."},
        }
    )
    with pytest.raises(ClinicGaveUp) as caught:
        recoverable_run_sync(agent, "Weather in Paris?", 2, clinic=Clinic(clinic_model.model))
    error = caught.value
    assert len(error.traumas) == 3
    assert len(error.diagnoses) == len(error.prescriptions) == 2
    assert [v.source for v in error.episode.visits] == ["fast_path", "clinic"]  # the relapse escalates
    assert [v.outcome for v in error.episode.visits] == ["relapsed", "relapsed"]
    assert patient.calls == 3 * 2  # each run: the call, the retry the tool budget allows
    assert clinic_model.calls == 1
    assert "gave up after 2 recoveries" in str(error)
    assert error.episode.outcome == "gave_up"


@pytest.mark.parametrize("budget", [0, 1])
def test_small_budgets(budget: int) -> None:
    agent, patient = weather_agent(lambda m, i: ModelResponse(parts=[ToolCallPart("teleport", {})]))
    events: list[ClinicEvent] = []
    with pytest.raises(ClinicGaveUp) as caught:
        recoverable_run_sync(
            agent, "x", budget, clinic=Clinic(FunctionModel(_never), consult=False, on_event=events.append)
        )
    assert (events[-1].stage, events[-1].outcome, events[-1].attempt) == ("outcome", "gave_up", budget)
    assert [e.outcome for e in events if e.stage == "outcome"] == ["relapsed"] * budget + ["gave_up"]
    assert len(caught.value.traumas) == budget + 1
    assert len(caught.value.diagnoses) == budget
    assert patient.calls == 2 * (budget + 1)


def test_a_negative_budget_is_a_usage_error() -> None:
    agent, _ = weather_agent(hallucinating)
    with pytest.raises(UsageError):
        recoverable_run_sync(agent, "x", -1)


def _odd_failure_once() -> Callable[[list[ModelMessage], AgentInfo], ModelResponse]:
    state = {"failed": False}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not state["failed"]:
            state["failed"] = True
            raise KeyError("cache entry vanished")
        return ModelResponse(parts=[TextPart("ok")])

    return respond


@pytest.mark.parametrize(
    "clinic_respond",
    [
        lambda m, i: (_ for _ in ()).throw(RuntimeError("the Clinic's provider is down")),
        lambda m, i: ModelResponse(parts=[TextPart("I refuse to answer in JSON")]),
    ],
    ids=["clinic-raises", "clinic-answers-garbage"],
)
def test_a_clinic_that_fails_falls_back_to_a_plain_retry(
    clinic_respond: Callable[[list[ModelMessage], AgentInfo], ModelResponse],
) -> None:
    agent: Agent[None, str] = Agent(FunctionModel(_odd_failure_once()))
    events: list[ClinicEvent] = []
    result = recoverable_run_sync(agent, "go", clinic=Clinic(FunctionModel(clinic_respond), on_event=events.append))
    assert result.output == "ok"
    assert events[1].source == "fallback"
    assert events[1].diagnosis is not None and events[1].diagnosis.confidence == 0.0
    assert "the Clinic agent failed" in events[1].diagnosis.explanation
    assert events[2].prescription is not None and events[2].prescription.action == "retry"


def test_consult_false_keeps_to_the_fast_path() -> None:
    agent: Agent[None, str] = Agent(FunctionModel(_odd_failure_once()))
    events: list[ClinicEvent] = []
    assert recoverable_run_sync(
        agent, "go", clinic=Clinic(FunctionModel(_never), consult=False, on_event=events.append)
    )
    assert events[1].source == "fallback"


def _fast_path_cases() -> list[tuple[str, Callable[[], tuple[Agent[None, Any], dict[str, Any]]]]]:
    def hallucinated() -> tuple[Agent[None, Any], dict[str, Any]]:
        return weather_agent(hallucinating)[0], {}

    def invalid() -> tuple[Agent[None, Any], dict[str, Any]]:
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if _tool_succeeded(messages):
                return ModelResponse(parts=[TextPart("done")])
            ok = "required: city" in _text(messages)
            return ModelResponse(parts=[ToolCallPart("get_weather", {"city": "X"} if ok else {"place": "X"})])

        return weather_agent(respond)[0], {}

    def context() -> tuple[Agent[None, Any], dict[str, Any]]:
        return Agent(FunctionModel(_too_long(5_000))), {"message_history": _long_history()}

    def transient() -> tuple[Agent[None, Any], dict[str, Any]]:
        state = {"n": 0}

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            state["n"] += 1
            if state["n"] == 1:
                raise ModelHTTPError(503, "p")
            return ModelResponse(parts=[TextPart("ok")])

        return Agent(FunctionModel(respond)), {}

    return [
        ("hallucinated_tool", hallucinated),
        ("invalid_tool_arguments", invalid),
        ("context_length_exceeded", context),
        ("transient_error", transient),
    ]


@pytest.mark.parametrize("cause,build", _fast_path_cases(), ids=[c for c, _ in _fast_path_cases()])
def test_the_fast_path_never_calls_the_clinic_model(
    cause: str, build: Callable[[], tuple[Agent[None, Any], dict[str, Any]]]
) -> None:
    agent, kwargs = build()
    clinic_model = Counted(_never)
    summarizer = FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("summary")]))
    events: list[ClinicEvent] = []
    clinic = Clinic(clinic_model.model, summarizer_model=summarizer, sleep=Sleeper(), on_event=events.append)
    recoverable_run_sync(agent, "go", clinic=clinic, **kwargs)
    assert clinic_model.calls == 0
    assert [(e.diagnosis.root_cause if e.diagnosis else None) for e in events if e.stage == "diagnosis"] == [cause]
    assert {e.source for e in events if e.source} == {"fast_path"}


# -- what the Clinic does not treat ----------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        ModelHTTPError.for_category(ModelAuthenticationError, status_code=401, model_name="p"),
        UserError("bad setup"),
    ],
    ids=["auth", "user-error"],
)
def test_untreatable_errors_propagate_unchanged(error: Exception, tmp_path: Path) -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise error

    pa = PhoenixAgent.open("untreated", home=Home(str(tmp_path / "home")))
    with pytest.raises(type(error)) as caught:
        recoverable_run_sync(Agent(FunctionModel(respond)), "x", clinic=Clinic(FunctionModel(_never)), phoenix=pa)
    assert caught.value is error
    assert not pa.exists()  # no episode: nothing recorded


# -- recording in a Phoenix home ---------------------------------------------------------------


def test_episodes_are_recorded_in_the_home_and_reported(tmp_path: Path) -> None:
    home = Home(str(tmp_path / "home"))
    pa = PhoenixAgent.open("worker", home=home)
    agent, _ = weather_agent(hallucinating)
    recoverable_run_sync(agent, "What is the weather in Paris?", clinic=Clinic(FunctionModel(_never)), phoenix=pa)

    events, problems = pa.ops.read()
    assert not problems
    episodes = [e for e in events if e["event"] == "clinic_episode"]
    assert len(episodes) == 1
    meta = episodes[0]["meta"]
    assert meta["root_cause"] == "hallucinated_tool"
    assert meta["action"] == "modify_prompt"
    assert meta["source"] == "fast_path"
    assert (meta["outcome"], meta["final"], meta["episode_outcome"]) == ("healed", True, "healed")
    assert episodes[0]["status"] == "ok"

    checkpoint, _ = pa.checkpoints.latest("recovery")
    assert checkpoint is not None
    record = checkpoint.data["extensions"]["clinic"]
    assert record["kind"] == "phoenix.clinic.episode"
    assert record["visits"][0]["diagnosis"]["root_cause"] == "hallucinated_tool"
    assert record["visits"][0]["trauma"]["tool_calls"][0]["tool_name"] == "teleport"

    with pytest.raises(ClinicGaveUp):
        broken, _ = weather_agent(lambda m, i: ModelResponse(parts=[ToolCallPart("teleport", {})]))
        recoverable_run_sync(broken, "Fly me", 1, clinic=Clinic(consult=False), phoenix=pa)

    report = _report(home, "worker")
    assert [e["outcome"] for e in report["episodes"]] == ["healed", "gave_up"]
    assert report["healed"] == 1 and report["gave_up"] == 1
    assert report["episodes"][1]["root_causes"] == ["hallucinated_tool"]
    assert report["episodes"][1]["prompt"] == "Fly me"


def _report(home: Home, agent_id: str) -> dict[str, Any]:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = cli(["clinic", "report", "--home", home.root, "--agent", agent_id, "--json"])
    assert code == 0
    data: dict[str, Any] = json.loads(buffer.getvalue())
    return data


def test_plain_library_use_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHOENIX_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    agent, _ = weather_agent(hallucinating)
    recoverable_run_sync(agent, "Weather?", clinic=Clinic(FunctionModel(_never)))
    assert not (tmp_path / "home").exists()
    recoverable_run_sync(agent, "Weather?", clinic=Clinic(FunctionModel(_never)), phoenix=True)
    assert (tmp_path / "home" / "agents" / "default" / "ops.jsonl").exists()


def test_a_recording_failure_warns_and_keeps_the_outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pa = PhoenixAgent.open("w", home=Home(str(tmp_path / "home")))

    def refuse(*args: Any, **kwargs: Any) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pa, "record", refuse)
    agent, _ = weather_agent(hallucinating)
    with pytest.warns(RuntimeWarning, match="could not record"):
        result = recoverable_run_sync(agent, "Weather?", clinic=Clinic(FunctionModel(_never)), phoenix=pa)
    assert result.output == "It is sunny in Paris."


def test_phx_clinic_report_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = Home(str(tmp_path / "home"))
    agent, _ = weather_agent(hallucinating)
    recoverable_run_sync(
        agent, "Weather?", clinic=Clinic(FunctionModel(_never)), phoenix=PhoenixAgent.open("w", home=home)
    )
    assert cli(["clinic", "report", "--home", home.root, "--agent", "w"]) == 0
    out = capsys.readouterr().out
    assert "hallucinated_tool" in out and "healed" in out
    assert cli(["clinic", "report", "--home", home.root, "--agent", "nobody"]) == 0
    assert "no Clinic episodes" in capsys.readouterr().out


# -- the API -----------------------------------------------------------------------------------


def test_async_api_and_caller_instructions_and_capabilities_are_kept() -> None:
    seen: list[str | None] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info.instructions)
        return hallucinating(messages, info)

    agent, _ = weather_agent(respond)
    result = asyncio.run(
        recoverable_run(agent, "Weather?", clinic=Clinic(FunctionModel(_never)), instructions="Be brief.")
    )
    assert result.output == "It is sunny in Paris."
    assert seen[0] == "Be brief."
    assert seen[-1] is not None and seen[-1].startswith("Be brief.") and "get_weather(" in seen[-1]


def test_the_sync_twin_refuses_a_running_loop() -> None:
    agent, _ = weather_agent(hallucinating)

    async def inside() -> None:
        recoverable_run_sync(agent, "x")

    with pytest.raises(UsageError, match="running event loop"):
        asyncio.run(inside())


def test_test_model_patient_and_test_model_clinic() -> None:
    ok: Agent[None, str] = Agent(TestModel(custom_output_text="fine"))
    assert recoverable_run_sync(ok, "hi", clinic=Clinic(FunctionModel(_never))).output == "fine"

    report = {
        "diagnosis": {"root_cause": "logic_error", "explanation": "a flaky cache", "confidence": 0.8},
        "prescription": {"action": "retry"},
    }
    agent: Agent[None, str] = Agent(FunctionModel(_odd_failure_once()))
    events: list[ClinicEvent] = []
    clinic = Clinic(TestModel(custom_output_args=report), on_event=events.append)
    assert recoverable_run_sync(agent, "go", clinic=clinic).output == "ok"
    assert events[1].source == "clinic"
    assert events[2].prescription is not None and events[2].prescription.action == "retry"


def test_the_clinic_agent_uses_the_seeds_system_prompt_and_structured_output() -> None:
    seen: dict[str, Any] = {}

    def clinic_fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen["system"] = _text(messages[:1])
        seen["schema"] = info.output_tools[0].parameters_json_schema
        seen["case"] = _text(messages)
        report = {
            "diagnosis": {"root_cause": "logic_error", "explanation": "x", "confidence": 0.5},
            "prescription": {"action": "retry"},
        }
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, report)])

    agent: Agent[None, str] = Agent(FunctionModel(_odd_failure_once()))
    recoverable_run_sync(agent, "go", clinic=Clinic(FunctionModel(clinic_fn)))
    assert clinic_module.CLINIC_SYSTEM_PROMPT in seen["system"]
    assert "You are an expert AI debugger and psychologist." in seen["system"]
    assert set(seen["schema"]["properties"]) == {"diagnosis", "prescription"}
    assert '"error_type": "KeyError"' in seen["case"]
    assert ClinicReport.model_validate(
        {
            "diagnosis": {"root_cause": "logic_error", "explanation": "", "confidence": 1},
            "prescription": {"action": "abort"},
        }
    )


def test_backoff() -> None:
    backoff = Backoff(base=1, factor=2, max_delay=5, max_retry_after=60)
    assert [backoff.delay(n, None) for n in range(5)] == [1, 2, 4, 5, 5]
    assert backoff.delay(0, 10) == 10
    assert backoff.delay(3, 1) == 5
    assert backoff.delay(0, 61) is None


def test_public_names() -> None:
    public = {n for n in dir(clinic_module) if not n.startswith("_")} - {"annotations"}
    submodules = {n for n in public if n.startswith("_") or type(getattr(clinic_module, n)).__name__ == "module"}
    assert public - submodules == set(clinic_module.__all__)
    for name in clinic_module.__all__:
        value = getattr(clinic_module, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__doc__, name
    assert issubclass(ClinicGaveUp, PhoenixError)
    import phoenix_protocol

    assert "clinic" not in phoenix_protocol.__all__


def test_without_pydantic_ai_the_import_names_the_extra_and_the_report_still_works(tmp_path: Path) -> None:
    probe = r"""
import sys
sys.modules["pydantic_ai"] = None
try:
    import phoenix_protocol.clinic
except ImportError as exc:
    print("IMPORT-ERROR:", exc)
from phoenix_protocol.cli._main import cli
sys.exit(cli(["clinic", "report", "--json", "--home", sys.argv[1]]))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHOENIX_")}
    proc = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "home")], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "IMPORT-ERROR:" in proc.stdout
    assert "pip install 'phoenix-protocol[clinic]'" in proc.stdout
    assert '"episodes": []' in proc.stdout


# -- the example and the benchmark ---------------------------------------------------------------


def test_the_demo_prints_trauma_diagnosis_prescription_and_heals() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "clinic_demo.py")], capture_output=True, text=True, check=True
    )
    out = proc.stdout
    assert "[injured] the first run failed" in out and "Unknown tool name: 'teleport'" in out
    assert "attempt 0" not in out and "_UnknownTool" not in out  # issue 33, item 9
    assert "diagnosis: hallucinated_tool" in out
    assert "prescription: modify_prompt" in out and "- get_weather(city: string)" in out
    assert "the rerun healed" in out and "18 °C and sunny in Paris" in out
    assert "clinic_episode hallucinated_tool -> modify_prompt (fast_path): healed" in out


def test_the_benchmark_covers_every_root_cause_and_the_clinic_beats_plain_retry() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from clinic_vs_retry import SCENARIOS, run_all

    assert len(SCENARIOS) >= 50
    assert {s.root_cause for s in SCENARIOS} == set(clinic_module.ROOT_CAUSES)
    results = run_all()
    recovered = {name: sum(r.recovered for r in rs) for name, rs in results.items()}
    extra = {name: sum(r.extra_calls for r in rs) for name, rs in results.items()}
    assert recovered["Clinic"] > recovered["Clinic, fast path only"] > recovered["plain retry"]
    assert extra["Clinic"] < extra["plain retry"]
    repeated = {name: sum(r.repeated for r in rs) for name, rs in results.items()}
    assert repeated["Clinic"] == repeated["Clinic, fast path only"] == 0  # issue 33: no tool side effect twice
    assert repeated["plain retry"] > 0
    # FallbackModel: the same scripted model at a second, healthy provider (its best case)
    from clinic_vs_retry import FALLBACK

    fallback = {s.name: r for s, r in zip(SCENARIOS, results[FALLBACK], strict=True)}
    assert fallback["500 for an hour (outage)"].recovered  # the other provider is up
    assert not results["request retry"][[s.name for s in SCENARIOS].index("500 for an hour (outage)")].recovered
    overflow = fallback["history of 20 turns, window 5k chars"]
    assert not overflow.recovered and overflow.extra_calls == 1  # the same window overflows at the fallback too
    assert not fallback["calls search_web; only get_weather exists"].recovered  # not a provider failure
    assert repeated[FALLBACK] == 0 and recovered[FALLBACK] < recovered["Clinic"]


def test_the_benchmark_writes_no_file_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import clinic_vs_retry as bench

    monkeypatch.setattr(bench, "SCENARIOS", bench.SCENARIOS[-2:])  # the booking scenarios: quick
    monkeypatch.setattr(bench, "SCORED_WITHOUT_KEY", [0, 1])
    tracked = ROOT / "bench" / "results" / "clinic_vs_retry.md"
    before = tracked.read_bytes()
    monkeypatch.chdir(tmp_path)
    assert bench.main([]) == 0
    assert tracked.read_bytes() == before and list(tmp_path.iterdir()) == []
    assert "# The Clinic vs retry baselines" in capsys.readouterr().out
    assert bench.main(["--out", str(tmp_path / "table.md")]) == 0
    assert "booked, then a 503" in (tmp_path / "table.md").read_text(encoding="utf-8")
    assert tracked.read_bytes() == before
