"""Scripted local stand-ins for the model APIs the agent CLIs talk to, enough for each CLI to hold
a conversation offline (/work/shared/claude-code-e2e.md, gemini-cli-e2e.md and codex-cli-e2e.md
describe the wire formats seen):

* ``FakeModel``: the shared part, a threaded HTTP server on ``127.0.0.1`` (an ephemeral port)
  that records every request it gets (``requests``, in arrival order) and answers the agent's
  turns from a script of ``Turn`` s; a held turn waits, its request open, until the test sets
  its event (a model still thinking), while other requests are answered.
* ``FakeAnthropic``: the Anthropic Messages API (Claude Code, ``ANTHROPIC_BASE_URL``).
* ``FakeGemini``: the Gemini API, ``:streamGenerateContent`` (Gemini CLI, ``GOOGLE_GEMINI_BASE_URL``).
* ``FakeResponses``: the OpenAI Responses API, ``POST /v1/responses`` (a Codex ``model_providers``
  entry's ``base_url``; the OpenAI Agents SDK's ``AsyncOpenAI(base_url=...)``).

A request that offers tools is the agent's own turn (``kind == "main"``): it takes the next
scripted turn, or ``fallback_text`` when the script has run out. Other model calls (titles,
summaries, compaction) get a short answer and do not use up the script.
"""

from __future__ import annotations

import gzip
import itertools
import json
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Generic, Self, TypeVar
from urllib.parse import urlsplit

HOLD_TIMEOUT = 300.0  # the longest a held answer (``Turn.held``) waits to be released
CLAUDE_MODEL = "claude-opus-5-5"  # what Claude Code 2.1.330 asks for when no model is configured


@dataclass(frozen=True)
class Turn:
    """One scripted model answer: a shell command (Claude Code's ``Bash``, Gemini CLI's
    ``run_shell_command``, Codex's ``exec_command``), another tool call (Gemini, the Responses
    API: ``tool`` with ``args``), a patch (Codex's freeform ``apply_patch``) or plain ``text``. ``tokens``: the input
    usage it reports (Codex: a large one makes it compact its context before the next request).
    With ``hold``, the answer waits until that event is set (a model that is still thinking: the
    session stays alive, its request open, until the test releases it or kills the session)."""

    text: str | None = None
    command: str | None = None
    tool: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)
    patch: str | None = None
    tokens: int = 20
    hold: threading.Event | None = field(default=None, compare=False)

    @classmethod
    def bash(cls, command: str, *, tokens: int = 20) -> Turn:
        return cls(command=command, tokens=tokens)

    shell = bash

    @classmethod
    def call(cls, tool: str, **args: Any) -> Turn:
        return cls(tool=tool, args=args)

    @classmethod
    def apply_patch(cls, patch: str) -> Turn:
        return cls(patch=patch)

    @classmethod
    def say(cls, text: str, *, tokens: int = 20) -> Turn:
        return cls(text=text, tokens=tokens)

    @classmethod
    def held(cls, until: threading.Event, text: str = "Done.") -> Turn:
        return cls(text=text, hold=until)


@dataclass
class RecordedRequest:
    """One HTTP request a fake received."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any = None
    kind: str = "other"  # "main" (a scripted turn), or what the fake calls the others
    received: float = field(default_factory=time.monotonic)
    """When it arrived (``time.monotonic()``)."""

    @property
    def route(self) -> str:
        return urlsplit(self.path).path

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8", "replace")


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


R = TypeVar("R", bound=RecordedRequest)


class FakeModel(Generic[R]):
    """The threaded HTTP server every fake is: subclasses answer in ``_respond`` (returning
    ``(status, content type, body)``), take scripted turns with ``_take`` and record the others
    with ``_record``."""

    request_class: type[R]  # what it records requests as (set by the subclass)
    url_path: ClassVar[str] = ""  # what ``url`` ends with (the API's base path)

    def __init__(self, turns: Sequence[Turn] = (), *, fallback_text: str = "Done.") -> None:
        self._turns = list(turns)
        self.fallback_text = fallback_text
        self.requests: list[R] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # the stdlib's signature
                pass

            def _read_body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            break
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    data = b"".join(chunks)
                else:
                    data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = self.headers.get("Content-Encoding", "").lower()
                if encoding == "gzip":
                    data = gzip.decompress(data)
                elif encoding == "deflate":
                    data = zlib.decompress(data)
                elif encoding == "zstd":  # pragma: no cover - not seen
                    raise RuntimeError(f"zstd request bodies are not supported by {type(fake).__name__}")
                return data

            def _handle(self) -> None:
                raw = self._read_body() if self.command not in ("GET", "HEAD") else b""
                body: Any = None
                if raw:
                    try:
                        body = json.loads(raw)
                    except ValueError:
                        body = None
                headers = {k.lower(): v for k, v in self.headers.items()}
                request = fake.request_class(self.command, self.path, headers, raw, body)
                status, content_type, payload = fake._respond(request)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("request-id", f"req_fake_{next(fake._ids)}")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)
                    self.wfile.flush()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        name = f"fake-{type(self).__name__.lower()}"
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)

    # -- lifecycle

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{self.url_path}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what was received

    def main_requests(self) -> list[R]:
        """The requests that took (or would have taken) a scripted turn, in order."""
        with self._lock:
            return [r for r in self.requests if r.kind == "main"]

    @property
    def turns_left(self) -> int:
        with self._lock:
            return len(self._turns)

    # -- answering

    def _respond(self, request: R) -> tuple[int, str, bytes]:
        raise NotImplementedError

    def _record(self, request: R, kind: str = "other") -> None:
        with self._lock:
            request.kind = kind
            self.requests.append(request)

    def _take(self, request: R, *, main: bool, kind: str, otherwise: str) -> Turn:
        """Record ``request``; a main one (``kind`` "main") takes the next scripted turn, any other
        (``kind``) is answered ``otherwise``. A held turn waits here, in this request's own thread
        (the others are answered meanwhile)."""
        with self._lock:
            if main:
                request.kind = "main"
                turn = self._turns.pop(0) if self._turns else Turn.say(self.fallback_text)
            else:
                request.kind = kind
                turn = Turn.say(otherwise)
            self.requests.append(request)
        if turn.hold is not None:
            turn.hold.wait(HOLD_TIMEOUT)
        return turn


# -- the Anthropic Messages API ----------------------------------------------------------------


class AnthropicRequest(RecordedRequest):
    """A request to ``FakeAnthropic``; ``kind``: "main", "side" (a model call without tools),
    "count_tokens" or "other"."""

    @property
    def is_tool_follow_up(self) -> bool:
        """Whether the last message holds a tool_result (the request after a tool ran)."""
        if not isinstance(self.body, dict):
            return False
        messages = self.body.get("messages")
        if not isinstance(messages, list) or not messages:
            return False
        content = messages[-1].get("content") if isinstance(messages[-1], dict) else None
        return isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        )


def _usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


class FakeAnthropic(FakeModel[AnthropicRequest]):
    """A scripted Anthropic Messages API.

    ``POST /v1/messages`` requests that offer tools are the agent's main loop: each one takes the
    next scripted ``Turn`` (a ``command`` is a Bash ``tool_use``). Model calls without tools
    (titles, quota probes and other side requests) get ``fallback_text``.
    ``/v1/messages/count_tokens`` gets a token count; anything else a JSON ``{}``. Answers are
    streamed (SSE, the real event sequence) when the request asks for it."""

    request_class = AnthropicRequest

    def messages_requests(self) -> list[AnthropicRequest]:
        """Every ``POST /v1/messages`` (main loop and side requests), in order."""
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and r.route == "/v1/messages"]

    def _respond(self, request: AnthropicRequest) -> tuple[int, str, bytes]:
        route = request.route
        body = request.body if isinstance(request.body, dict) else {}
        if request.method == "POST" and route == "/v1/messages/count_tokens":
            self._record(request, "count_tokens")
            return 200, "application/json", json.dumps({"input_tokens": max(1, len(request.raw) // 4)}).encode()
        if request.method == "POST" and route == "/v1/messages":
            turn = self._take(request, main=bool(body.get("tools")), kind="side", otherwise=self.fallback_text)
            model = body["model"] if isinstance(body.get("model"), str) else CLAUDE_MODEL
            if body.get("stream"):
                return 200, "text/event-stream", self._stream(turn, model)
            return 200, "application/json", json.dumps(self._message(turn, model)).encode()
        self._record(request)
        return 200, "application/json", b"{}"

    @staticmethod
    def _stop_reason(turn: Turn) -> str:
        return "tool_use" if turn.command is not None else "end_turn"

    def _block(self, turn: Turn) -> dict[str, Any]:
        if turn.command is not None:
            return {
                "type": "tool_use",
                "id": f"toolu_fake{next(self._ids):08d}",
                "name": "Bash",
                "input": {"command": turn.command, "description": "Run the scripted command"},
            }
        return {"type": "text", "text": turn.text or ""}

    def _message(self, turn: Turn, model: str) -> dict[str, Any]:
        return {
            "id": f"msg_fake{next(self._ids):08d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [self._block(turn)],
            "stop_reason": self._stop_reason(turn),
            "stop_sequence": None,
            "usage": _usage(12, 8),
        }

    def _stream(self, turn: Turn, model: str) -> bytes:
        block = self._block(turn)
        start: dict[str, Any]
        if block["type"] == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            partial = json.dumps(block["input"])
            cut = len(partial) // 2  # two deltas, as the real API sends the input in pieces
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in (partial[:cut], partial[cut:])]
        else:
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        message: dict[str, Any] = {
            "id": f"msg_fake{next(self._ids):08d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _usage(12, 1),
        }
        events = [
            _sse("message_start", {"type": "message_start", "message": message}),
            _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}),
            *(_sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": d}) for d in deltas),
            _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
            _sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": self._stop_reason(turn), "stop_sequence": None},
                    "usage": {"output_tokens": 8},
                },
            ),
            _sse("message_stop", {"type": "message_stop"}),
        ]
        return b"".join(events)


# -- the Gemini API --------------------------------------------------------------------------


class GeminiRequest(RecordedRequest):
    """A request to ``FakeGemini``; ``kind``: "main" or "other"."""

    def texts(self) -> str:
        """Every text part of the request's contents (and function responses), joined."""
        out: list[str] = []
        contents = self.body.get("contents") if isinstance(self.body, dict) else None
        for content in contents if isinstance(contents, list) else []:
            for part in content.get("parts") or [] if isinstance(content, dict) else []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    out.append(part["text"])
                elif isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
                    out.append(json.dumps(part["functionResponse"].get("response")))
        return "\n".join(out)


class FakeGemini(FakeModel[GeminiRequest]):
    """A scripted Gemini API.

    Each ``POST …:streamGenerateContent`` whose body offers tools takes the next scripted
    ``Turn`` (a ``command`` is a ``run_shell_command`` call, ``tool`` another call) and is
    answered as one SSE event; any other model request gets ``fallback_text``
    (``generateContent`` as JSON), anything else ``{}``."""

    request_class = GeminiRequest

    def _respond(self, request: GeminiRequest) -> tuple[int, str, bytes]:
        body = request.body if isinstance(request.body, dict) else {}
        streamed = request.route.endswith(":streamGenerateContent")
        if request.method == "POST" and streamed:
            turn = self._take(request, main=bool(body.get("tools")), kind="other", otherwise=self.fallback_text)
            return 200, "text/event-stream", b"data: " + json.dumps(self._chunk(turn)).encode() + b"\n\n"
        self._record(request)
        if request.route.endswith(":generateContent"):
            return 200, "application/json", json.dumps(self._chunk(Turn.say(self.fallback_text))).encode()
        return 200, "application/json", b"{}"

    @staticmethod
    def _chunk(turn: Turn) -> dict[str, Any]:
        part: dict[str, Any]
        if turn.command is not None:
            part = {"functionCall": {"name": "run_shell_command", "args": {"command": turn.command}}}
        elif turn.tool is not None:
            part = {"functionCall": {"name": turn.tool, "args": dict(turn.args)}}
        else:
            part = {"text": turn.text or ""}
        return {
            "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 8, "totalTokenCount": 20},
        }


# -- the OpenAI Responses API ------------------------------------------------------------------


class ResponsesRequest(RecordedRequest):
    """A request to ``FakeResponses``; ``kind``: "main", "compact" (no tools) or "other"."""

    def inputs(self) -> list[dict[str, Any]]:
        items = self.body.get("input") if isinstance(self.body, dict) else None
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    def texts(self, role: str | None = None) -> list[str]:
        """The text of every message of the request's input (of ``role`` only, when given)."""
        out = []
        for item in self.inputs():
            if item.get("type") != "message" or (role is not None and item.get("role") != role):
                continue
            content = item.get("content")
            for part in content if isinstance(content, list) else [content]:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    out.append(part["text"])
                elif isinstance(part, str):
                    out.append(part)
        return out

    def tool_outputs(self) -> list[str]:
        return [
            str(i.get("output"))
            for i in self.inputs()
            if i.get("type") in ("function_call_output", "custom_tool_call_output")
        ]


class FakeResponses(FakeModel[ResponsesRequest]):
    """A scripted OpenAI Responses API; ``url`` ends with ``/v1`` (a ``base_url``).

    ``POST /v1/responses`` requests that offer tools are the agent's turns: each one takes the
    next scripted ``Turn`` (a ``command`` is an ``exec_command`` call, a ``patch`` an
    ``apply_patch`` call, a ``tool`` a call of that function with ``args``). One without tools
    (Codex's compaction asks for a summary) gets ``summary``. Anything else gets a 404. A request
    with ``stream: true`` (Codex) is answered with SSE events, one without (the OpenAI Agents
    SDK's ``Runner.run``) with a whole ``Response`` object as JSON."""

    request_class = ResponsesRequest
    url_path = "/v1"

    def __init__(self, turns: Sequence[Turn] = (), *, fallback_text: str = "Done.", summary: str = "Summary.") -> None:
        super().__init__(turns, fallback_text=fallback_text)
        self.summary = summary

    def _respond(self, request: ResponsesRequest) -> tuple[int, str, bytes]:
        if request.method != "POST" or not request.route.rstrip("/").endswith("/responses"):
            self._record(request)
            return 404, "application/json", b'{"error": "not found"}'
        body = request.body if isinstance(request.body, dict) else {}
        turn = self._take(request, main=bool(body.get("tools")), kind="compact", otherwise=self.summary)
        if not body.get("stream"):
            return 200, "application/json", self._json(turn, str(body.get("model") or "fake"))
        return 200, "text/event-stream", self._stream(turn)

    def _output(self, turn: Turn, rid: str) -> dict[str, Any]:
        """The one output item of ``turn``'s answer (``rid``: the response's id)."""
        item: dict[str, Any]
        if turn.command is not None:
            arguments = json.dumps({"cmd": turn.command})
            item = {"type": "function_call", "id": f"fc_{rid}", "call_id": f"call_{rid}", "name": "exec_command"}
            item["arguments"] = arguments
        elif turn.tool is not None:
            item = {"type": "function_call", "id": f"fc_{rid}", "call_id": f"call_{rid}", "name": turn.tool}
            item["arguments"] = json.dumps(dict(turn.args))
        elif turn.patch is not None:
            item = {"type": "custom_tool_call", "id": f"ctc_{rid}", "call_id": f"call_{rid}", "name": "apply_patch"}
            item.update(input=turn.patch, status="completed")
        else:
            content = [{"type": "output_text", "text": turn.text or ""}]
            item = {"type": "message", "role": "assistant", "id": f"msg_{rid}", "content": content}
        return item

    def _json(self, turn: Turn, model: str) -> bytes:
        """A whole ``Response`` object: the answer to a request without ``stream`` (the OpenAI
        Agents SDK's ``Runner.run``)."""
        rid = f"resp_{next(self._ids)}"
        item = self._output(turn, rid)
        if item["type"] == "message":
            item.update(status="completed")
            item["content"][0]["annotations"] = []
        else:
            item.setdefault("status", "completed")
        usage = {
            "input_tokens": turn.tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": turn.tokens + 5,
        }
        response = {
            "id": rid,
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": model,
            "output": [item],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": usage,
        }
        return json.dumps(response).encode()

    def _stream(self, turn: Turn) -> bytes:
        rid = f"resp_{next(self._ids)}"
        item = self._output(turn, rid)
        usage = {"input_tokens": turn.tokens, "output_tokens": 5, "total_tokens": turn.tokens + 5}
        return b"".join(
            [
                _sse("response.created", {"type": "response.created", "response": {"id": rid}}),
                _sse("response.output_item.done", {"type": "response.output_item.done", "item": item}),
                _sse("response.completed", {"type": "response.completed", "response": {"id": rid, "usage": usage}}),
            ]
        )
