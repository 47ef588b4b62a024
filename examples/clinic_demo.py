"""The Clinic heals an agent that calls a tool that does not exist (seed 001's example).

    pip install 'phoenix-protocol[clinic]'
    python examples/clinic_demo.py

Offline: the worker's "model" is a pydantic-ai ``FunctionModel`` that behaves like a model that
latches on to a word in the prompt. Asked to "teleport" to Paris for the weather, it calls a
``teleport`` tool, which does not exist, until pydantic-ai gives up. The Clinic reads pydantic-ai's
error (fast path, no model call), prescribes instructions that list the tools that really exist,
and the rerun succeeds. The episode is recorded in a throwaway Phoenix home.
"""

from __future__ import annotations

import tempfile

from pydantic_ai import Agent, ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from phoenix_protocol import Agent as PhoenixAgent
from phoenix_protocol import Home
from phoenix_protocol.clinic import Clinic, ClinicEvent, recoverable_run_sync


def worker_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A toy model: it calls the tool its instructions name, else the one the prompt suggests."""
    last = messages[-1]
    result = next((p for p in last.parts if isinstance(p, ToolReturnPart) and p.outcome == "success"), None)
    if result is not None:
        return ModelResponse(parts=[TextPart(f"Here you go: {result.content}.")])
    tools = {t.name for t in info.function_tools}
    named = [name for name in tools if info.instructions and f"- {name}(" in info.instructions]
    if named:
        return ModelResponse(parts=[ToolCallPart(named[0], {"city": "Paris"})])
    return ModelResponse(parts=[ToolCallPart("teleport", {"destination": "Paris"})])


def no_clinic_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    raise AssertionError("the fast path diagnoses this one without asking the Clinic agent")


def show(event: ClinicEvent) -> None:
    """Print each stage of the visit as it happens."""
    if event.stage == "trauma":
        t = event.trauma
        run = "the first run" if t.attempt == 0 else f"rerun {t.attempt}"
        print(f"[injured] {run} failed: {t.error_type}: {t.error_message.split('. ')[0]}")
        if t.cause_message:
            print(f"          because: {t.cause_message}")
        for call in t.tool_calls or []:
            answer = f"{call.outcome} ({call.retry_cause})" if call.outcome else "no answer: pydantic-ai gave up"
            print(f"          tool call: {call.tool_name}({call.args}) -> {answer}")
        print(f"          tools that exist: {', '.join(t.available_tools)}")
    elif event.stage == "diagnosis" and event.diagnosis is not None:
        d = event.diagnosis
        source = {"fast_path": "the fast path", "clinic": "the Clinic agent"}.get(event.source or "", event.source)
        print(
            f"[clinic]  visit {event.attempt}, diagnosis: {d.root_cause} (confidence {d.confidence:.2f}, by {source})"
        )
        print(f"          {d.explanation}")
    elif event.stage == "prescription" and event.prescription is not None:
        p = event.prescription
        print(f"[clinic]  prescription: {p.action}")
        for line in (p.modified_instructions or "").splitlines():
            print(f"          | {line}")
    elif event.stage == "outcome":
        print(f"[{'healthy' if event.outcome == 'healed' else event.outcome}] the rerun {event.outcome}")


def main() -> None:
    worker: Agent[None, str] = Agent(FunctionModel(worker_model), name="travel-weather")

    @worker.tool_plain
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        return f"18 °C and sunny in {city}"

    with tempfile.TemporaryDirectory() as tmp:
        phoenix = PhoenixAgent.open("travel-weather", home=Home(tmp))
        clinic = Clinic(FunctionModel(no_clinic_model), on_event=show)  # a Clinic model only when named
        prompt = "Teleport to Paris and tell me the weather there."
        print(f"[healthy] running the worker: {prompt!r}")
        result = recoverable_run_sync(worker, prompt, max_recoveries=2, clinic=clinic, phoenix=phoenix)
        print(f"[healthy] output: {result.output}")
        events, _ = phoenix.ops.read()
        for event in events:
            if event["event"] == "clinic_episode":
                meta = event["meta"]
                print(
                    f"ops.jsonl: clinic_episode {meta['root_cause']} -> {meta['action']} ({meta['source']}): "
                    f"{meta['outcome']}"
                )
        checkpoint, _ = phoenix.checkpoints.latest("recovery")
        if checkpoint is not None:
            print(f"recovery checkpoint: {checkpoint.name}")


if __name__ == "__main__":
    main()
