"""The Clinic against a plain retry loop with the same budget, on scripted failure scenarios.

    .venv/bin/python bench/clinic_vs_retry.py        # prints Markdown (writes nothing)
    .venv/bin/python bench/clinic_vs_retry.py -v     # ... and every scenario's row
    .venv/bin/python bench/clinic_vs_retry.py --out bench/results/clinic_vs_retry.md   # also write the full table

Each scenario is a pydantic-ai agent whose model is a ``FunctionModel`` scripted to fail in one
way (a root cause of seed 001) and to behave once the cause is removed, the way a model usually
does: a rate limit lifts after ``retry_after`` seconds; a context window overflows past a size;
a model that calls a tool that does not exist stops when its instructions list the real ones;
a model that sends the wrong arguments fixes them when the prompt states the schema; a model
that reads a request the wrong way answers the clarified one. Some scenarios cannot be healed
by anything (a bug in a tool, a prompt larger than the window), and some would be healed by a
plain retry too (a one-off overload, a hallucination on the first run only).

Strategies, each with ``max_recoveries = 2`` (up to two reruns after the first failure):

* **plain retry**: run the same request again, immediately, up to twice (a ``try/except`` loop);
* **retry + backoff**: the same, waiting ``min(30, 2ⁿ)`` s and never less than the provider's
  ``Retry-After`` (what tenacity around ``agent.run`` gives);
* **pydantic-ai retries=3, worker obeys feedback**: one ``agent.run(retries=3)``, the worker
  following pydantic-ai's own retry feedback within the run (an unknown tool's list of the real
  ones, a validation error, a validator's ``ModelRetry``), as a capable model does; extra calls
  are counted from the first request that carried feedback;
* **request retry**: a wrapper model that re-sends the *failed model request* (not the run) on a
  transient error, with the same backoff (what pydantic-ai's retrying HTTP transport, or the
  provider SDK's ``max_retries``, gives): it keeps the run's progress;
* **FallbackModel (a second, healthy provider)**: pydantic-ai's ``FallbackModel`` with the
  patient's model first and, as the fallback, the same scripted model served through another
  model instance that stands for a second provider of the same model (OpenAI and Azure OpenAI,
  say), healthy: the provider-side failures (429, 5xx, 529, timeouts) do not happen there, but
  the model behaves the same and has the same context window (a context overflow, a hallucinated
  tool, wrong arguments recur). Default ``fallback_on`` (``ModelAPIError``), no backoff. It is
  the only strategy given a second provider; its best case (an outage that spares the fallback);
* **Clinic, fast path only**: ``Clinic(consult=False)``: pydantic-ai's own errors, no Clinic agent;
* **Clinic, worker obeys feedback**: the full Clinic with that worker (the Clinic on top of
  pydantic-ai's own retries);
* **Clinic**: the full pipeline; the Clinic agent's model is a ``FunctionModel`` too, scripted
  (``scripted_clinic``) to read the trauma context the way the seed's prompt asks: it is a
  stand-in for an LLM, so this measures the pipeline's mechanics and costs, not a model's judgement.

Simulated time: each model request of the worker takes 0.2 s, and the Clinic's backoff sleeps are
injected to advance the same clock (nothing really sleeps). *Extra model calls* are every model
request after the first run failed: the worker's reruns, the Clinic agent's consultations, the
Summarizer's calls. *Tokens* are estimated from characters (4 per token) of every model request
and response, in the same scenarios. *Repeated side effects*: tool calls made again with the same
arguments after they had completed (the booking scenarios; goal 0).

Scoring: the ``ambiguous_instruction`` scenarios and two ``logic_error`` ones (``KEYED``) are
healed by the scripted Clinic agent's words, which know what each scenario's worker wants (an
answer key); the totals are given with them and without them (the *scored* row).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_ai import (
    Agent,
    ModelHTTPError,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelRetry,
    TextPart,
    Tool,
    ToolCallPart,
    ToolReturnPart,
    UsageLimits,
)
from pydantic_ai.exceptions import (
    ModelContextWindowExceededError,
    ModelOverloadedError,
    ModelRateLimitError,
    ModelRequestTimeout,
    ModelServerError,
    ModelTimeoutError,
    ModelUnavailableError,
)
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.wrapper import WrapperModel

from phoenix_protocol.clinic import Backoff, Clinic, ClinicEvent, ClinicGaveUp
from phoenix_protocol.clinic._diagnose import fast_diagnosis
from phoenix_protocol.clinic._triage import Failure, Observer, triage

HERE = Path(__file__).resolve().parent
BUDGET = 2
LATENCY = 0.2
"""Simulated seconds per model request of the worker."""

Respond = Callable[[list[ModelMessage], AgentInfo], ModelResponse]


# -- the world: a clock and a meter ------------------------------------------------------------


@dataclass
class World:
    """Simulated time and model-call counts of one scenario run."""

    now: float = 0.0
    calls: dict[str, int] = field(default_factory=lambda: {"worker": 0, "fallback": 0, "clinic": 0, "summarizer": 0})
    waited: float = 0.0
    chars: int = 0
    effects: list[str] = field(default_factory=list)
    """Every side effect a tool made (its name and arguments), in order."""
    obeys_feedback: bool = False
    """Whether the worker follows pydantic-ai's own retry feedback (a validation error, an unknown
    tool, a validator's ModelRetry) within the run, as a capable model does."""
    first_feedback: int | None = None
    """Model calls made before the first request that carried retry feedback."""
    first_failure: int | None = None
    """Model calls made up to and including the worker's first failed model request."""
    worker: Respond | None = None
    """The scenario's scripted worker (its ``respond``), to serve it again through a fallback model."""
    serving: str = "worker"
    """Who answers the current model request: ``worker`` (the patient's provider) or ``fallback``
    (the same scripted model at a second, healthy provider: it has no provider-side failures)."""

    def model(self, role: str, respond: Respond) -> FunctionModel:
        if role == "worker":
            self.worker = respond

        def counted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if role == "worker" and self.first_feedback is None and feedback(messages):
                self.first_feedback = self.total
            self.calls[role] += 1
            self.chars += len(text_of(messages)) + len(info.instructions or "")
            if role in ("worker", "fallback"):
                self.now += LATENCY
                self.serving = role
            try:
                response = respond(messages, info)
            except Exception:
                if role in ("worker", "fallback") and self.first_failure is None:
                    self.first_failure = self.total
                raise
            self.chars += sum(len(str(getattr(p, "content", "") or getattr(p, "args", ""))) for p in response.parts)
            return response

        return FunctionModel(counted)

    @property
    def provider_down(self) -> bool:
        """Whether provider-side failures (429, 5xx, timeouts) can hit this request: only at the
        patient's provider, never at the fallback's (a healthy alternative provider)."""
        return self.serving == "worker"

    @property
    def tokens(self) -> int:
        return self.chars // 4

    @property
    def repeated(self) -> int:
        return len(self.effects) - len(set(self.effects))

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.waited += seconds

    @property
    def total(self) -> int:
        return sum(self.calls.values())


@dataclass
class Case:
    """What a scenario builds for one run: the agent, the prompt, run kwargs, and the success check."""

    agent: Agent[None, Any]
    prompt: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    check: Callable[[Any], bool] = lambda output: True


@dataclass
class Scenario:
    name: str
    root_cause: str
    build: Callable[[World], Case]
    healable_by_retry: bool = False
    """Written so that a plain retry may heal it too (for reading the table, not used in scoring)."""


# -- helpers for scripted models ---------------------------------------------------------------


def text_of(messages: list[ModelMessage]) -> str:
    out = []
    for m in messages:
        for p in m.parts:
            content = getattr(p, "content", None)
            if isinstance(content, str):
                out.append(content)
    return "\n".join(out)


def feedback(messages: list[ModelMessage]) -> str:
    """The retry feedback pydantic-ai put in the last request (unknown tool, validation errors, a
    validator's ModelRetry), as text; "" when there is none."""
    if not messages:
        return ""
    texts = []
    for p in messages[-1].parts:
        kind = getattr(p, "part_kind", "")
        content = str(getattr(p, "content", "") or "")
        if kind in ("retry-prompt", "retry-feedback") or (isinstance(p, ToolReturnPart) and p.outcome == "retried"):
            texts.append(content or str(p))
        elif kind == "user-prompt" and "<pyai:retry_feedback>" in content:
            texts.append(content)  # how a FunctionModel is shown a RetryFeedbackPart
    return "\n".join(texts)


def obeyed(world: World, messages: list[ModelMessage], word: str = "") -> bool:
    """Whether an obedient worker follows the last request's retry feedback (which mentions ``word``)."""
    text = feedback(messages)
    return world.obeys_feedback and bool(text) and word in text


def tool_result(messages: list[ModelMessage]) -> str | None:
    for p in messages[-1].parts:
        if isinstance(p, ToolReturnPart) and p.outcome == "success":
            return str(p.content)
    return None


def runs_started(messages: list[ModelMessage]) -> int:
    """How many user prompts the conversation holds (a stand-in for 'which run is this')."""
    return sum(1 for m in messages for p in m.parts if getattr(p, "part_kind", "") == "user-prompt")


def long_history(turns: int, words: int = 60) -> list[ModelMessage]:
    history: list[ModelMessage] = []
    for i in range(turns):
        history.append(ModelRequest.user_text_prompt(f"Q{i}: tell me about item {i}. " + "context " * words))
        history.append(ModelResponse(parts=[TextPart(f"A{i}: item {i} is fine. " + "detail " * words)]))
    return history


def city_tools(*names: str) -> list[Tool[None]]:
    """Simple tools, each taking ``city: str``."""

    def make(name: str) -> Callable[[str], str]:
        def tool(city: str) -> str:
            return f"{name}: 18 °C and sunny in {city}"

        return tool

    return [Tool(make(n), name=n, description=f"The {n.replace('_', ' ')} of a city.") for n in names]


# -- transient_error -------------------------------------------------------------------------


def rate_limited(retry_after: float, window: float | None = None) -> Callable[[World], Case]:
    """429 with ``retry_after`` until ``window`` seconds (default: retry_after) have passed."""

    def build(world: World) -> Case:
        until = window if window is not None else retry_after

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if world.provider_down and world.now < until + LATENCY:
                raise ModelHTTPError.for_category(
                    ModelRateLimitError, status_code=429, model_name="worker", retry_after=retry_after
                )
            return ModelResponse(parts=[TextPart("42")])

        return Case(Agent(world.model("worker", respond)), "What is 6 x 7?", check=lambda o: o == "42")

    return build


def failing_n_times(n: int, make: Callable[[], Exception]) -> Callable[[World], Case]:
    def build(world: World) -> Case:
        state = {"left": n}

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if world.provider_down and state["left"] > 0:
                state["left"] -= 1
                raise make()
            return ModelResponse(parts=[TextPart("42")])

        return Case(Agent(world.model("worker", respond)), "What is 6 x 7?", check=lambda o: o == "42")

    return build


def down_for(seconds: float, make: Callable[[], Exception]) -> Callable[[World], Case]:
    def build(world: World) -> Case:
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if world.provider_down and world.now < seconds + LATENCY:
                raise make()
            return ModelResponse(parts=[TextPart("42")])

        return Case(Agent(world.model("worker", respond)), "What is 6 x 7?", check=lambda o: o == "42")

    return build


def _http(category: type[Exception], status: int) -> Callable[[], Exception]:
    return lambda: ModelHTTPError.for_category(category, status_code=status, model_name="worker")  # type: ignore[arg-type]


TRANSIENT = [
    Scenario("429, retry_after 2 s", "transient_error", rate_limited(2)),
    Scenario("429, retry_after 5 s", "transient_error", rate_limited(5)),
    Scenario("429, retry_after 20 s", "transient_error", rate_limited(20)),
    Scenario("429, retry_after 0.3 s", "transient_error", rate_limited(0.3), healable_by_retry=True),
    Scenario("429, retry_after 10 min (too long to wait)", "transient_error", rate_limited(600)),
    Scenario("529 overloaded once", "transient_error", failing_n_times(1, _http(ModelOverloadedError, 529)), True),
    Scenario("529 overloaded for 3 s", "transient_error", down_for(3, _http(ModelOverloadedError, 529))),
    Scenario("503 unavailable once", "transient_error", failing_n_times(1, _http(ModelUnavailableError, 503)), True),
    Scenario("500 server error once", "transient_error", failing_n_times(1, _http(ModelServerError, 500)), True),
    Scenario("502 twice", "transient_error", failing_n_times(2, _http(ModelServerError, 502)), True),
    Scenario(
        "read timeout once",
        "transient_error",
        failing_n_times(1, lambda: ModelTimeoutError("worker", "read timed out", phase="read")),
        True,
    ),
    Scenario(
        "request_timeout once",
        "transient_error",
        failing_n_times(1, lambda: ModelRequestTimeout("worker", 30.0)),
        True,
    ),
    Scenario("500 for an hour (outage)", "transient_error", down_for(3600, _http(ModelServerError, 500))),
]


# -- context_length_exceeded -----------------------------------------------------------------


def _overflow(kind: str) -> Exception:
    if kind == "category":
        return ModelHTTPError.for_category(
            ModelContextWindowExceededError,
            status_code=400,
            model_name="worker",
            body={"error": {"code": "context_length_exceeded"}},
        )
    return ModelHTTPError(
        400,
        "worker",
        {"error": {"message": "This model's maximum context length is 8192 tokens. Please reduce the length."}},
    )


def long_history_case(turns: int, window: int, kind: str = "category") -> Callable[[World], Case]:
    def build(world: World) -> Case:
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if len(text_of(messages)) > window:
                raise _overflow(kind)
            return ModelResponse(parts=[TextPart("item 3 is fine")])

        return Case(
            Agent(world.model("worker", respond)),
            "Remind me what you said about item 3.",
            {"message_history": long_history(turns)},
            check=lambda o: o == "item 3 is fine",
        )

    return build


def huge_tool_output(chars: int, window: int) -> Callable[[World], Case]:
    """The run overflows after a tool returns a huge log; the rerun answers from the summary."""

    def build(world: World) -> Case:
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            text = text_of(messages)
            if len(text) > window:
                raise _overflow("category")
            if "Summary of the conversation so far" in text or tool_result(messages) is not None:
                return ModelResponse(parts=[TextPart("the build failed at step 7")])
            return ModelResponse(parts=[ToolCallPart("read_log", {"name": "build"})])

        agent: Agent[None, str] = Agent(world.model("worker", respond))

        @agent.tool_plain
        def read_log(name: str) -> str:
            """The full log of a job."""
            return "ok step\n" * (chars // 8) + "step 7: FAILED"

        return Case(agent, "Why did the build fail?", check=lambda o: "step 7" in o)

    return build


def token_limited(turns: int) -> Callable[[World], Case]:
    def build(world: World) -> Case:
        respond = lambda m, i: ModelResponse(parts=[TextPart("item 3 is fine")])  # noqa: E731
        return Case(
            Agent(world.model("worker", respond)),
            "Remind me what you said about item 3.",
            {"message_history": long_history(turns), "usage_limits": UsageLimits(input_tokens_limit=1_000)},
            check=lambda o: o == "item 3 is fine",
        )

    return build


def prompt_too_long(world: World) -> Case:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(text_of(messages)) > 4_000:
            raise _overflow("category")
        return ModelResponse(parts=[TextPart("ok")])

    return Case(Agent(world.model("worker", respond)), "Translate this: " + "word " * 2_000)


CONTEXT = [
    Scenario("history of 20 turns, window 5k chars", "context_length_exceeded", long_history_case(20, 5_000)),
    Scenario("history of 40 turns, window 5k chars", "context_length_exceeded", long_history_case(40, 5_000)),
    Scenario("history of 80 turns, window 8k chars", "context_length_exceeded", long_history_case(80, 8_000)),
    Scenario(
        "history of 30 turns, plain HTTP 400 'maximum context length'",
        "context_length_exceeded",
        long_history_case(30, 5_000, "http"),
    ),
    Scenario("history of 60 turns, plain HTTP 400", "context_length_exceeded", long_history_case(60, 6_000, "http")),
    Scenario("tool returns a 20k-char log", "context_length_exceeded", huge_tool_output(20_000, 8_000)),
    Scenario("tool returns a 60k-char log", "context_length_exceeded", huge_tool_output(60_000, 8_000)),
    Scenario("tool returns a 200k-char log", "context_length_exceeded", huge_tool_output(200_000, 16_000)),
    Scenario("input_tokens_limit, 25 turns of history", "context_length_exceeded", token_limited(25)),
    Scenario("the prompt alone exceeds the window", "context_length_exceeded", prompt_too_long),
]


# -- hallucinated_tool -----------------------------------------------------------------------


def hallucinates(
    tools: tuple[str, ...], wrong: str, *, until_run: int | None = None, obeys: bool = True, prompt: str | None = None
) -> Callable[[World], Case]:
    """Calls ``wrong`` (which does not exist); stops when its instructions list the real tools
    (``obeys``) or from the ``until_run``-th run on (a one-off slip)."""

    def build(world: World) -> Case:
        state = {"runs": 0}

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if any(getattr(p, "part_kind", "") == "user-prompt" for p in messages[-1].parts):
                state["runs"] += 1  # the first request of a run carries its prompt
            result = tool_result(messages)
            if result is not None:
                return ModelResponse(parts=[TextPart(result)])
            wanted = f"- {tools[0]}(" if tools else "You have no tools"
            told = obeys and (
                (info.instructions is not None and wanted in info.instructions) or obeyed(world, messages)
            )
            slip_over = until_run is not None and state["runs"] >= until_run
            if (told or slip_over) and tools:
                return ModelResponse(parts=[ToolCallPart(tools[0], {"city": "Paris"})])
            if (told or slip_over) and not tools:
                return ModelResponse(parts=[TextPart("18 °C and sunny in Paris")])
            return ModelResponse(parts=[ToolCallPart(wrong, {"city": "Paris"})])

        agent: Agent[None, str] = Agent(world.model("worker", respond), tools=city_tools(*tools))
        return Case(agent, prompt or "What is the weather in Paris?", check=lambda o: "Paris" in str(o))

    return build


HALLUCINATED = [
    Scenario(
        "calls search_web; only get_weather exists", "hallucinated_tool", hallucinates(("get_weather",), "search_web")
    ),
    Scenario(
        "calls weather_api; 3 tools exist",
        "hallucinated_tool",
        hallucinates(("get_weather", "get_forecast", "get_alerts"), "weather_api"),
    ),
    Scenario(
        "calls fetch_weather; 5 tools exist",
        "hallucinated_tool",
        hallucinates(("get_weather", "get_forecast", "get_alerts", "get_time", "get_news"), "fetch_weather"),
    ),
    Scenario(
        "the prompt names a tool that does not exist (teleport)",
        "hallucinated_tool",
        hallucinates(("get_weather",), "teleport", prompt="Teleport to Paris and tell me the weather."),
    ),
    Scenario(
        "the prompt says 'use the browser tool'",
        "hallucinated_tool",
        hallucinates(("get_weather",), "browser", prompt="Use the browser tool to find the weather in Paris."),
    ),
    Scenario("no tools exist; calls lookup", "hallucinated_tool", hallucinates((), "lookup")),
    Scenario(
        "slips on the first run only",
        "hallucinated_tool",
        hallucinates(("get_weather",), "weather", until_run=2, obeys=False),
        healable_by_retry=True,
    ),
    Scenario(
        "slips on the first two runs",
        "hallucinated_tool",
        hallucinates(("get_weather",), "weather", until_run=3, obeys=False),
        healable_by_retry=True,
    ),
    Scenario(
        "ignores every instruction",
        "hallucinated_tool",
        hallucinates(("get_weather",), "search_web", obeys=False),
    ),
    Scenario(
        "calls get_wether (typo); get_weather exists",
        "hallucinated_tool",
        hallucinates(("get_weather", "get_forecast"), "get_wether"),
    ),
]


# -- invalid_tool_arguments ------------------------------------------------------------------


def bad_arguments(
    good: dict[str, Any], bad: dict[str, Any], *, schema_word: str, first_run_only: bool = False, obeys: bool = True
) -> Callable[[World], Case]:
    """Calls ``book(**bad)`` until the prompt states the schema (mentions ``schema_word``)."""

    def build(world: World) -> Case:
        state = {"calls": 0}

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            state["calls"] += 1
            result = tool_result(messages)
            if result is not None:
                return ModelResponse(parts=[TextPart(result)])
            told = obeys and (
                ("JSON schema" in text_of(messages) and schema_word in text_of(messages)) or obeyed(world, messages)
            )
            slip_over = first_run_only and state["calls"] > 2
            return ModelResponse(parts=[ToolCallPart("book", good if told or slip_over else bad)])

        agent: Agent[None, str] = Agent(world.model("worker", respond))

        @agent.tool_plain
        def book(flight: str, date: str, passengers: int, passenger: Passenger | None = None) -> str:
            """Book a flight. `date` is YYYY-MM-DD."""
            return f"booked {flight} on {date} for {passengers}"

        return Case(agent, "Book AF123 on 2026-12-01 for 2 people.", check=lambda o: str(o).startswith("booked"))

    return build


GOOD = {"flight": "AF123", "date": "2026-12-01", "passengers": 2}


class Passenger(BaseModel):
    name: str
    seat: str


class Booking(BaseModel):
    flight: str
    date: str
    passengers: int


def bad_output(missing: str, *, obeys: bool = True) -> Callable[[World], Case]:
    def build(world: World) -> Case:
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            args = dict(GOOD)
            told = obeys and ("JSON schema" in text_of(messages) or obeyed(world, messages))
            if not told:
                del args[missing]
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

        agent: Agent[None, Booking] = Agent(world.model("worker", respond), output_type=Booking)
        return Case(agent, "Extract the booking: AF123, 1 Dec 2026, two people.", check=lambda o: o.passengers == 2)

    return build


INVALID = [
    Scenario(
        "renames flight to flight_number",
        "invalid_tool_arguments",
        bad_arguments(GOOD, {"flight_number": "AF123", "date": "2026-12-01", "passengers": 2}, schema_word="flight"),
    ),
    Scenario(
        "sends pax instead of passengers",
        "invalid_tool_arguments",
        bad_arguments(GOOD, {"flight": "AF123", "date": "2026-12-01", "pax": 2}, schema_word="passengers"),
    ),
    Scenario(
        "omits the date",
        "invalid_tool_arguments",
        bad_arguments(GOOD, {"flight": "AF123", "passengers": 2}, schema_word="date"),
    ),
    Scenario(
        "passengers as 'two'",
        "invalid_tool_arguments",
        bad_arguments(GOOD, {**GOOD, "passengers": "two"}, schema_word="integer"),
    ),
    Scenario(
        "passenger as a string",
        "invalid_tool_arguments",
        bad_arguments(
            {**GOOD, "passenger": {"name": "Ada", "seat": "1A"}}, {**GOOD, "passenger": "Ada in 1A"}, schema_word="seat"
        ),
    ),
    Scenario("structured output without passengers", "invalid_tool_arguments", bad_output("passengers")),
    Scenario("structured output without the date", "invalid_tool_arguments", bad_output("date")),
    Scenario(
        "wrong arguments on the first run only",
        "invalid_tool_arguments",
        bad_arguments(GOOD, {"flight": "AF123"}, schema_word="flight", first_run_only=True),
        healable_by_retry=True,
    ),
    Scenario(
        "ignores the schema",
        "invalid_tool_arguments",
        bad_arguments(GOOD, {"pax": 2}, schema_word="flight", obeys=False),
    ),
    Scenario("structured output, ignores the schema", "invalid_tool_arguments", bad_output("date", obeys=False)),
]


# -- ambiguous_instruction -------------------------------------------------------------------


def several_answers(
    prompt: str, constraint: str, answer: str, *, second_try_lucky: bool = False
) -> Callable[[World], Case]:
    """An output validator wants one answer; the model lists several until the prompt is clarified."""

    def build(world: World) -> Case:
        state = {"calls": 0}

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            state["calls"] += 1
            lucky = second_try_lucky and state["calls"] > 2
            if constraint in text_of(messages[:1]) or lucky or obeyed(world, messages, constraint):
                return ModelResponse(parts=[TextPart(answer)])
            return ModelResponse(parts=[TextPart(f"{answer}, or maybe something else, depending on what you mean")])

        agent: Agent[None, str] = Agent(world.model("worker", respond))

        @agent.output_validator
        def one(output: str) -> str:
            if "," in output:
                raise ModelRetry(constraint)
            return output

        return Case(agent, prompt, check=lambda o: o == answer)

    return build


class Place(BaseModel):
    city: str
    state: str


def asks_back(prompt: str, clarification: str, place: Place) -> Callable[[World], Case]:
    """Structured output wanted; the model asks a question back until the prompt says which one."""

    def build(world: World) -> Case:
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if clarification in text_of(messages[:1]):
                return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, place.model_dump())])
            return ModelResponse(parts=[TextPart(f"Which one do you mean? There are several. ({prompt})")])

        agent: Agent[None, Place] = Agent(world.model("worker", respond), output_type=Place)
        return Case(agent, prompt, check=lambda o: o == place)

    return build


AMBIGUOUS = [
    Scenario(
        "'the best city in France'",
        "ambiguous_instruction",
        several_answers("What is the best city in France?", "Answer with exactly one city", "Paris"),
    ),
    Scenario(
        "'a good year for Bordeaux'",
        "ambiguous_instruction",
        several_answers("Name a good year for Bordeaux.", "Answer with exactly one year", "2005"),
    ),
    Scenario(
        "'the tallest mountain'",
        "ambiguous_instruction",
        several_answers("What is the tallest mountain?", "Answer with exactly one mountain", "Everest"),
    ),
    Scenario(
        "'the date of the meeting'",
        "ambiguous_instruction",
        several_answers("When is the meeting?", "Answer with exactly one date", "2026-12-01"),
    ),
    Scenario(
        "'the capital' (list wanted one)",
        "ambiguous_instruction",
        several_answers("Capital of the Netherlands?", "Answer with exactly one city", "Amsterdam"),
    ),
    Scenario(
        "one answer on the second try by luck",
        "ambiguous_instruction",
        several_answers("Best pizza topping?", "Answer with exactly one topping", "basil", second_try_lucky=True),
        healable_by_retry=True,
    ),
    Scenario(
        "'Springfield' (which one?)",
        "ambiguous_instruction",
        asks_back("Where is Springfield?", "Springfield, Illinois", Place(city="Springfield", state="IL")),
    ),
    Scenario(
        "'Portland' (which one?)",
        "ambiguous_instruction",
        asks_back("Where is Portland?", "Portland, Oregon", Place(city="Portland", state="OR")),
    ),
    Scenario(
        "'Columbus' (which one?)",
        "ambiguous_instruction",
        asks_back("Where is Columbus?", "Columbus, Ohio", Place(city="Columbus", state="OH")),
    ),
]

CLARIFICATIONS = {
    "Where is Springfield?": "Springfield, Illinois",
    "Where is Portland?": "Portland, Oregon",
    "Where is Columbus?": "Columbus, Ohio",
}
"""What the scripted Clinic answers when a worker asked back (an LLM would pick the likeliest reading)."""


# -- logic_error -----------------------------------------------------------------------------


def loops(limit: int, *, obeys: bool = True) -> Callable[[World], Case]:
    """Calls the same tool again and again until the instructions tell it to converge."""

    def build(world: World) -> Case:
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            told = obeys and info.instructions is not None and "at most once" in info.instructions
            result = tool_result(messages)
            if told and result is not None:
                return ModelResponse(parts=[TextPart(result)])
            return ModelResponse(parts=[ToolCallPart("get_weather", {"city": "Rome"})])

        agent: Agent[None, str] = Agent(world.model("worker", respond), tools=city_tools("get_weather"))
        return Case(
            agent, "Weather in Rome?", {"usage_limits": UsageLimits(request_limit=limit)}, check=lambda o: "Rome" in o
        )

    return build


def wrong_date_format(world: World) -> Case:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        result = tool_result(messages)
        if result is not None:
            return ModelResponse(parts=[TextPart(result)])
        date = "2026-12-01" if "YYYY-MM-DD" in text_of(messages[:1]) else "tomorrow"
        return ModelResponse(parts=[ToolCallPart("agenda", {"date": date})])

    agent: Agent[None, str] = Agent(world.model("worker", respond))

    @agent.tool_plain
    def agenda(date: str) -> str:
        """The meetings on a date."""
        if len(date) != 10 or date[4] != "-":
            raise ValueError(f"expected a date as YYYY-MM-DD, got {date!r}")
        return f"2 meetings on {date}"

    return Case(agent, "What is on my agenda tomorrow (2026-12-01)?", check=lambda o: "2 meetings" in o)


def wrong_unit(world: World) -> Case:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        result = tool_result(messages)
        if result is not None:
            return ModelResponse(parts=[TextPart(result)])
        grams = 1500 if "in grams" in text_of(messages[:1]) else 1.5
        return ModelResponse(parts=[ToolCallPart("ship", {"weight": grams})])

    agent: Agent[None, str] = Agent(world.model("worker", respond))

    @agent.tool_plain
    def ship(weight: float) -> str:
        """Shipping cost for a parcel."""
        if weight < 10:
            raise ValueError("weight must be given in grams (an integer number of grams)")
        return f"{weight:.0f} g costs 7 EUR"

    return Case(agent, "How much to ship a 1.5 kg parcel?", check=lambda o: "costs" in o)


def buggy_tool(world: World) -> Case:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("average", {"values": []})])

    agent: Agent[None, str] = Agent(world.model("worker", respond))

    @agent.tool_plain
    def average(values: list[float]) -> float:
        """The mean of some values."""
        return sum(values) / len(values)

    return Case(agent, "Average of my expenses this month?")


def buggy_tool_2(world: World) -> Case:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("report", {"month": 12})])

    agent: Agent[None, str] = Agent(world.model("worker", respond))

    @agent.tool_plain
    def report(month: int) -> str:
        """The monthly report."""
        names: dict[int, str] = {}
        return names[month]

    return Case(agent, "December's report?")


def flaky_tool(world: World) -> Case:
    state = {"failed": False}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        result = tool_result(messages)
        if result is not None:
            return ModelResponse(parts=[TextPart(result)])
        return ModelResponse(parts=[ToolCallPart("stock", {"sku": "A1"})])

    agent: Agent[None, str] = Agent(world.model("worker", respond))

    @agent.tool_plain
    def stock(sku: str) -> str:
        """Units in stock."""
        if not state["failed"]:
            state["failed"] = True
            raise ConnectionResetError("inventory service reset the connection")
        return f"12 units of {sku}"

    return Case(agent, "How many A1 in stock?", check=lambda o: "12 units" in o)


LOGIC = [
    Scenario("loops until request_limit 3", "logic_error", loops(3)),
    Scenario("loops until request_limit 5", "logic_error", loops(5)),
    Scenario("loops until request_limit 8", "logic_error", loops(8)),
    Scenario("loops and ignores instructions", "logic_error", loops(4, obeys=False)),
    Scenario("passes 'tomorrow' where YYYY-MM-DD is required", "logic_error", wrong_date_format),
    Scenario("passes kilograms where grams are required", "logic_error", wrong_unit),
    Scenario("tool bug: mean of an empty list", "logic_error", buggy_tool),
    Scenario("tool bug: KeyError on a missing month", "logic_error", buggy_tool_2),
]

TRANSIENT.append(Scenario("a tool's connection reset once", "transient_error", flaky_tool, healable_by_retry=True))

# -- side effects: a booking, then a failure ----------------------------------------------------


def booking(fail: str) -> Callable[[World], Case]:
    """The worker books room A (a side effect), then its next model request fails once: ``503``
    (transient) or ``overflow`` (the context window: the history must be summarized)."""

    def build(world: World) -> Case:
        state = {"failed": False}

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            result = tool_result(messages)
            if result is not None or "booked" in text_of(messages[-2:]):
                # the 503 is the patient's provider's; the overflow is the model's window, which the
                # same model at the fallback provider has too (the same messages overflow it again)
                overflows = fail == "overflow" and (not state["failed"] or world.serving == "fallback")
                if overflows or (fail == "503" and not state["failed"] and world.provider_down):
                    state["failed"] = True
                    if fail == "503":
                        raise ModelHTTPError(503, "worker", {"error": {"message": "overloaded"}})
                    raise ModelHTTPError.for_category(
                        ModelContextWindowExceededError,
                        status_code=400,
                        model_name="worker",
                        body={"error": {"code": "context_length_exceeded"}},
                    )
                return ModelResponse(parts=[TextPart("Room A is booked.")])
            return ModelResponse(parts=[ToolCallPart("book", {"room": "A"})])

        agent: Agent[None, str] = Agent(world.model("worker", respond))

        @agent.tool_plain
        def book(room: str) -> str:
            """Book a room (a side effect: do it once)."""
            world.effects.append(f"book({room})")
            return f"booked room {room}"

        return Case(agent, "Book room A.", check=lambda o: "booked" in o)

    return build


BOOKING = [
    Scenario("booked, then a 503", "transient_error", booking("503"), healable_by_retry=True),
    Scenario("booked, then the context overflows", "context_length_exceeded", booking("overflow")),
]


SCENARIOS = TRANSIENT + CONTEXT + HALLUCINATED + INVALID + AMBIGUOUS + LOGIC + BOOKING
KEYED = {"passes 'tomorrow' where YYYY-MM-DD is required", "passes kilograms where grams are required"}
"""The logic_error scenarios whose worker is healed by the exact words the scripted Clinic writes."""
SCORED_WITHOUT_KEY = [
    i for i, s in enumerate(SCENARIOS) if s.root_cause != "ambiguous_instruction" and s.name not in KEYED
]
"""The scenarios the scripted Clinic agent holds no answer key for (the scored set)."""


# -- the scripted Clinic and Summarizer ------------------------------------------------------


def scripted_clinic(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A rule-based stand-in for the Clinic's LLM: reads the trauma JSON it is given and answers
    the way the seed's prompt asks (diagnosis + prescription)."""
    case = text_of(messages)
    trauma: dict[str, Any] = json.loads(case.split("Trauma context:\n", 1)[1].split("\nTools that exist", 1)[0])
    prompt = trauma.get("prompt_used") or trauma["original_prompt"]
    error = f"{trauma.get('error_message', '')} {trauma.get('cause_message', '')}"
    marker = "JSON schema of the arguments):\n"
    listed = case.split(marker, 1)[1].split("\n", 1)[0] if marker in case else ""
    tools = [t["name"] for t in json.loads(listed)] if listed.startswith("[") else []

    def answer(cause: str, explanation: str, action: str, **rx: Any) -> ModelResponse:
        report = {
            "diagnosis": {"root_cause": cause, "explanation": explanation, "confidence": 0.7},
            "prescription": {"action": action, **rx},
        }
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, report)])

    original = trauma["original_prompt"]
    if "Which one do you mean" in case and original in CLARIFICATIONS:
        clarified = f"{original} I mean {CLARIFICATIONS[original]}."
        return answer(
            "ambiguous_instruction", "the worker asked which one was meant", "modify_prompt", modified_prompt=clarified
        )
    if "Answer with exactly one" in error:
        constraint = error[error.index("Answer with exactly one") :].split(".", maxsplit=1)[0].strip()
        return answer(
            "ambiguous_instruction",
            "the request admits several answers",
            "modify_prompt",
            modified_prompt=f"{prompt} {constraint}.",
        )
    if "expected a date as YYYY-MM-DD" in error:
        return answer(
            "logic_error",
            "the worker passed a relative date",
            "modify_prompt",
            modified_prompt=f"{prompt} Pass dates as YYYY-MM-DD.",
        )
    if "in grams" in error:
        return answer(
            "logic_error",
            "the worker passed kilograms",
            "modify_prompt",
            modified_prompt=f"{prompt} Give weights in grams.",
        )
    if trauma["error_type"] in ("ConnectionResetError", "ConnectionError"):
        return answer("transient_error", "a service reset the connection", "retry")
    if trauma["error_type"] in ("ZeroDivisionError", "KeyError", "IndexError"):
        return answer("logic_error", "the tool itself raises on this input: a bug, not the request", "abort")
    if "Unknown tool name" in error and tools:
        return answer(
            "hallucinated_tool",
            "the worker keeps calling a missing tool",
            "modify_prompt",
            modified_prompt=f"{prompt} Use only these tools: {', '.join(tools)}.",
        )
    if "validation error" in error:
        return answer(
            "invalid_tool_arguments",
            "the worker ignores the schema",
            "modify_prompt",
            modified_prompt=f"{prompt} Follow the JSON schema exactly.",
        )
    if "context" in error and "400" in error:
        return answer("context_length_exceeded", "the request is still too long", "abort")
    return answer("logic_error", "unclear", "retry")


def scripted_summarizer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A stand-in Summarizer: keeps the first and last lines of what it is given, about 600 characters."""
    text = text_of(messages)
    lines = [line for line in text.splitlines() if line.strip()]
    kept = " ".join(lines[1:3] + lines[-3:])
    return ModelResponse(parts=[TextPart(kept[:600])])


# -- strategies --------------------------------------------------------------------------------


@dataclass
class Result:
    recovered: bool
    first_run_calls: int
    total_calls: int
    waited: float
    root_causes: list[str] = field(default_factory=list)
    error: str = ""
    tokens: int = 0
    repeated: int = 0

    @property
    def extra_calls(self) -> int:
        return self.total_calls - self.first_run_calls


def _done(world: World, recovered: bool, first: int | None, **kw: Any) -> Result:
    return Result(
        recovered,
        first if first is not None else world.total,
        world.total,
        world.waited,
        tokens=world.tokens,
        repeated=world.repeated,
        **kw,
    )


def _transient_retry_after(exc: BaseException) -> tuple[bool, float | None]:
    """Whether ``exc`` is transient (the Clinic's own fast-path reading), and its ``retry_after``."""
    failure = triage(exc, original_prompt="", prompt_used="", attempt=0, messages=[], observer=Observer())
    diagnosis = fast_diagnosis(Failure(exc, [], [], [], failure.trauma))
    retry_after = getattr(exc, "retry_after", None)
    return (
        diagnosis is not None and diagnosis.root_cause == "transient_error",
        retry_after if isinstance(retry_after, int | float) else None,
    )


async def plain_retry(scenario: Scenario, *, backoff: bool = False) -> Result:
    world = World()
    case = scenario.build(world)
    first: int | None = None
    waits = Backoff()
    for attempt in range(BUDGET + 1):
        try:
            result = await case.agent.run(case.prompt, **case.kwargs)
        except Exception as exc:  # noqa: BLE001 - the baseline retries anything
            if first is None:
                first = world.total
            if attempt == BUDGET:
                return _done(world, False, first, error=type(exc).__name__)
            if backoff:
                _, retry_after = _transient_retry_after(exc)
                await world.sleep(max(min(waits.max_delay, 2.0**attempt), retry_after or 0.0))
            continue
        return _done(world, case.check(result.output), first)
    raise AssertionError("unreachable")


class RequestRetry(WrapperModel):
    """Re-sends a failed model request on a transient error, with backoff (a retrying transport)."""

    def __init__(self, wrapped: Any, world: World, first: list[int]) -> None:
        super().__init__(wrapped)
        self.world = world
        self.first = first

    async def request(self, *args: Any, **kwargs: Any) -> ModelResponse:
        for attempt in range(BUDGET + 1):
            try:
                return await super().request(*args, **kwargs)
            except Exception as exc:
                if not self.first:
                    self.first.append(self.world.total)
                transient, retry_after = _transient_retry_after(exc)
                if not transient or attempt == BUDGET:
                    raise
                await self.world.sleep(max(min(30.0, 2.0**attempt), retry_after or 0.0))
        raise AssertionError("unreachable")


async def builtin_retries(scenario: Scenario) -> Result:
    """pydantic-ai's own ``retries`` (tools and output: 3), with a worker that obeys the feedback."""
    world = World(obeys_feedback=True)
    case = scenario.build(world)
    try:
        result = await case.agent.run(case.prompt, retries=BUDGET + 1, **case.kwargs)
    except Exception as exc:  # noqa: BLE001 - the baseline has no recovery beyond the run
        return _done(world, False, world.first_feedback, error=type(exc).__name__)
    return _done(world, case.check(result.output), world.first_feedback)


async def request_retry(scenario: Scenario) -> Result:
    world = World()
    case = scenario.build(world)
    first: list[int] = []
    model = case.kwargs.pop("model", None) or case.agent.model
    try:
        result = await case.agent.run(case.prompt, model=RequestRetry(model, world, first), **case.kwargs)
    except Exception as exc:  # noqa: BLE001 - the baseline gives up on anything else
        return _done(world, False, first[0] if first else world.total, error=type(exc).__name__)
    return _done(world, case.check(result.output), first[0] if first else None)


async def fallback_model(scenario: Scenario) -> Result:
    """pydantic-ai's ``FallbackModel(patient's model, fallback)``, default ``fallback_on``
    (``ModelAPIError``): the fallback is the same scripted model served by a second, healthy
    provider (no provider-side failures; the same behaviour and context window)."""
    world = World()
    case = scenario.build(world)
    primary = case.kwargs.pop("model", None) or case.agent.model
    assert isinstance(primary, FunctionModel) and world.worker is not None
    model = FallbackModel(primary, world.model("fallback", world.worker))
    try:
        result = await case.agent.run(case.prompt, model=model, **case.kwargs)
    except Exception as exc:  # noqa: BLE001 - the baseline has no recovery beyond the fallback
        first = world.first_failure if world.first_failure is not None else world.total
        return _done(world, False, first, error=type(exc).__name__)
    return _done(world, case.check(result.output), world.first_failure)


async def with_clinic(scenario: Scenario, *, consult: bool, obeys_feedback: bool = False) -> Result:
    world = World(obeys_feedback=obeys_feedback)
    case = scenario.build(world)
    first: list[int] = []
    causes: list[str] = []

    def on_event(event: ClinicEvent) -> None:
        if event.stage == "trauma" and not first:
            first.append(world.total)
        if event.stage == "diagnosis" and event.diagnosis is not None:
            causes.append(event.diagnosis.root_cause)

    clinic = Clinic(
        world.model("clinic", scripted_clinic),
        summarizer_model=world.model("summarizer", scripted_summarizer),
        consult=consult,
        sleep=world.sleep,
        on_event=on_event,
    )
    try:
        result = await clinic.treat(case.agent, case.prompt, BUDGET, **case.kwargs)
    except (ClinicGaveUp, Exception) as exc:  # noqa: BLE001 - untreated errors propagate unchanged
        start = first[0] if first else world.total
        cause = exc.__cause__ if isinstance(exc, ClinicGaveUp) else exc
        return _done(world, False, start, root_causes=causes, error=type(cause).__name__)
    return _done(world, case.check(result.output), first[0] if first else None, root_causes=causes)


FALLBACK = "FallbackModel (a second, healthy provider)"
STRATEGIES: dict[str, Callable[[Scenario], Any]] = {
    "plain retry": plain_retry,
    "retry + backoff": lambda s: plain_retry(s, backoff=True),
    "request retry": request_retry,
    FALLBACK: fallback_model,
    "pydantic-ai retries=3, worker obeys feedback": builtin_retries,
    "Clinic, fast path only": lambda s: with_clinic(s, consult=False),
    "Clinic": lambda s: with_clinic(s, consult=True),
    "Clinic, worker obeys feedback": lambda s: with_clinic(s, consult=True, obeys_feedback=True),
}


# -- report ------------------------------------------------------------------------------------


def run_all() -> dict[str, list[Result]]:
    results: dict[str, list[Result]] = {name: [] for name in STRATEGIES}
    for scenario in SCENARIOS:
        for name, strategy in STRATEGIES.items():
            results[name].append(asyncio.run(strategy(scenario)))
    return results


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f} %)" if d else "-"


def render(results: dict[str, list[Result]], elapsed: float, verbose: bool) -> str:
    names = list(STRATEGIES)
    causes = list(dict.fromkeys(s.root_cause for s in SCENARIOS))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    import pydantic_ai

    lines = [
        "# The Clinic vs retry baselines",
        "",
        f"{len(SCENARIOS)} scripted failure scenarios (FunctionModel), `max_recoveries = {BUDGET}` for every strategy; "
        f"{time.strftime('%Y-%m-%d')}, commit {commit or '?'}, Python {platform.python_version()}, "
        f"pydantic-ai {pydantic_ai.__version__}; {elapsed:.1f} s for all runs.",
        "",
        "## Recovery rate by root cause (scenario's intended cause)",
        "",
        "| root cause | scenarios | " + " | ".join(names) + " |",
        "|---|---:|" + "---|" * len(names),
    ]
    for cause in causes:
        idx = [i for i, s in enumerate(SCENARIOS) if s.root_cause == cause]
        row = [_pct(sum(results[n][i].recovered for i in idx), len(idx)) for n in names]
        lines.append(f"| {cause} | {len(idx)} | " + " | ".join(row) + " |")
    total = len(SCENARIOS)
    lines.append(
        f"| **all** | **{total}** | "
        + " | ".join(f"**{_pct(sum(r.recovered for r in results[n]), total)}**" for n in names)
        + " |"
    )
    keyless = SCORED_WITHOUT_KEY
    lines.append(
        f"| **scored** (without the scenarios the scripted Clinic holds the answer for) | "
        f"**{len(keyless)}** | "
        + " | ".join(f"**{_pct(sum(results[n][i].recovered for i in keyless), len(keyless))}**" for n in names)
        + " |"
    )
    lines += [
        "",
        "## Extra model calls (after the first run failed)",
        "",
        "| | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
        "| total | " + " | ".join(str(sum(r.extra_calls for r in results[n])) for n in names) + " |",
        "| mean per scenario | "
        + " | ".join(f"{sum(r.extra_calls for r in results[n]) / total:.2f}" for n in names)
        + " |",
        "| extra calls ÷ scenarios recovered | "
        + " | ".join(
            f"{sum(r.extra_calls for r in results[n]) / max(1, sum(r.recovered for r in results[n])):.2f}"
            for n in names
        )
        + " |",
        "| on scenarios not recovered | "
        + " | ".join(str(sum(r.extra_calls for r in results[n] if not r.recovered)) for n in names)
        + " |",
        "| simulated waiting (backoff), s | "
        + " | ".join(f"{sum(r.waited for r in results[n]):.1f}" for n in names)
        + " |",
        "| tokens, every call (estimated: 4 characters a token) | "
        + " | ".join(f"{sum(r.tokens for r in results[n]):,}" for n in names)
        + " |",
        "| tool side effects repeated (goal 0) | "
        + " | ".join(str(sum(r.repeated for r in results[n])) for n in names)
        + " |",
    ]
    by_cause_calls = [
        "",
        "Extra model calls by root cause:",
        "",
        "| root cause | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for cause in causes:
        idx = [i for i, s in enumerate(SCENARIOS) if s.root_cause == cause]
        by_cause_calls.append(
            f"| {cause} | " + " | ".join(str(sum(results[n][i].extra_calls for i in idx)) for n in names) + " |"
        )
    lines += by_cause_calls
    clinic = results["Clinic"]
    diagnosed = [(s, r) for s, r in zip(SCENARIOS, clinic, strict=True) if r.root_causes]
    agree = sum(1 for s, r in diagnosed if r.root_causes[0] == s.root_cause)
    lines += [
        "",
        f"First diagnosis matching the scenario's intended root cause (Clinic): {_pct(agree, len(diagnosed))}.",
    ]
    if verbose:
        lines += [
            "",
            "## Every scenario",
            "",
            "| scenario | cause | " + " | ".join(names) + " | Clinic's diagnoses |",
            "|---|---|" + "---|" * len(names) + "---|",
        ]
        for i, s in enumerate(SCENARIOS):
            cells = [f"{'✓' if results[n][i].recovered else '✗'} +{results[n][i].extra_calls}" for n in names]
            lines.append(
                f"| {s.name} | {s.root_cause} | "
                + " | ".join(cells)
                + f" | {', '.join(clinic[i].root_causes) or '-'} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The Clinic vs plain retry on scripted failure scenarios.")
    parser.add_argument("-v", "--verbose", action="store_true", help="Also print every scenario's row.")
    parser.add_argument(
        "--out", default=None, help="Also write the full table (every scenario) to this file; default: write nothing."
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results = run_all()
    elapsed = time.perf_counter() - started
    shown = render(results, elapsed, args.verbose)
    print(shown)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(render(results, elapsed, True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
