"""Issue 33 as it was found: pydantic-ai's OpenAI model (the real ``openai`` SDK, its real retries)
against a scripted local OpenAI-compatible HTTP server. Counts HTTP requests, not model calls.

Needs the ``openai`` SDK (``pydantic-ai-slim[openai]``, in the ``test`` extra).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

openai = pytest.importorskip("openai", reason="the openai SDK is not installed: pip install -e '.[test,clinic]'")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

from phoenix_protocol.clinic import Clinic, ClinicGaveUp, clinic_episode, provider_retries, recoverable_run_sync  # noqa: E402


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    }


BOOK = _completion(
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "book", "arguments": '{"room": "A"}'}}
        ],
    },
    "tool_calls",
)
DONE = _completion({"role": "assistant", "content": "Room A is booked."}, "stop")
OVERLOADED = (503, {"error": {"message": "The server is overloaded", "type": "server_error"}})


@dataclass
class Script:
    """The server's answers, in order (the last one repeats), and the requests it got."""

    answers: list[tuple[int, dict[str, Any]]]
    requests: list[dict[str, Any]] = field(default_factory=list)
    respond: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]] | None = None
    """When set, answers each request from its body instead."""


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script([])

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append(body)
            if script.respond is not None:
                status, answer = script.respond(body)
            else:
                status, answer = script.answers[min(len(script.requests), len(script.answers)) - 1]
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("retry-after-ms", "1")  # the SDK's own retries wait 1 ms
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script
    finally:
        httpd.shutdown()
        httpd.server_close()


def _agent(base_url: str, max_retries: int) -> tuple[Agent[None, str], dict[str, int]]:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="test", max_retries=max_retries)
    model = OpenAIChatModel("scripted", provider=OpenAIProvider(openai_client=client))
    agent: Agent[None, str] = Agent(model)
    booked = {"n": 0}

    @agent.tool_plain
    def book(room: str) -> str:
        """Book a room."""
        booked["n"] += 1
        return f"booked {room}"

    return agent, booked


async def _no_sleep(seconds: float) -> None:
    return None


def test_a_503_after_a_booking_through_the_openai_model_heals_with_one_booking(
    server: tuple[str, Script],
) -> None:
    base_url, script = server
    overloaded = {"once": False}

    def respond(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A model: books when the conversation ends with the user, answers after the tool, and
        the provider is overloaded once, on the request after the booking."""
        if body["messages"][-1]["role"] == "user":
            return 200, BOOK
        if not overloaded["once"]:
            overloaded["once"] = True
            return OVERLOADED
        return 200, DONE

    script.respond = respond
    agent, booked = _agent(base_url, max_retries=0)  # the Clinic is the one layer that retries
    result = recoverable_run_sync(agent, "Book room A.", clinic=Clinic(sleep=_no_sleep))
    assert result.output == "Room A is booked."
    assert booked["n"] == 1  # was 2
    assert len(script.requests) == 3  # was 4
    assert [m["role"] for m in script.requests[2]["messages"]] == ["user", "assistant", "tool"]  # resumed
    episode = clinic_episode(result)
    assert episode is not None and episode.spent["patient"].requests == 2


def test_a_persistent_503_is_not_retried_on_top_of_the_sdks_retries(server: tuple[str, Script]) -> None:
    base_url, script = server
    script.answers = [OVERLOADED]
    agent, _ = _agent(base_url, max_retries=2)
    assert provider_retries(agent.model) == 2
    with pytest.raises(ClinicGaveUp) as caught:
        recoverable_run_sync(agent, "Book room A.", 2, clinic=Clinic(sleep=_no_sleep))
    assert len(script.requests) == 3  # the SDK's three; was 9 (3 runs x 3)
    assert caught.value.diagnoses[0].root_cause == "transient_error"
    assert caught.value.__cause__ is not None and getattr(caught.value.__cause__, "status_code", None) == 503


def test_without_sdk_retries_the_clinic_retries_with_its_backoff(server: tuple[str, Script]) -> None:
    base_url, script = server
    script.answers = [OVERLOADED]
    agent, _ = _agent(base_url, max_retries=0)
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    with pytest.raises(ClinicGaveUp):
        recoverable_run_sync(agent, "Book room A.", 2, clinic=Clinic(sleep=sleep))
    assert len(script.requests) == 3  # one layer: the Clinic's
    assert delays == [1.0, 2.0]


def test_a_deterministic_400_from_the_openai_model_is_raised_unchanged(server: tuple[str, Script]) -> None:
    base_url, script = server
    script.answers = [(400, {"error": {"message": "Invalid parameter: temperature", "type": "invalid_request_error"}})]
    agent, _ = _agent(base_url, max_retries=2)
    with pytest.raises(Exception) as caught:
        recoverable_run_sync(agent, "Book room A.", 2, clinic=Clinic(sleep=_no_sleep))
    assert not isinstance(caught.value, ClinicGaveUp)
    assert getattr(caught.value, "status_code", None) == 400
    assert len(script.requests) == 1
