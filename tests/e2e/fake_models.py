"""Scripted local stand-ins for the Gemini API and the OpenAI Responses API, enough for the
Gemini CLI and Codex to hold a conversation offline (/work/shared/gemini-cli-e2e.md and
codex-cli-e2e.md describe the wire formats seen). Each model request takes the next scripted
answer (plain text; with ``hold``, the answer waits until that event is set: a model still
thinking), or ``fallback`` when the script has run out. Every request is recorded."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOLD_TIMEOUT = 300.0


@dataclass(frozen=True)
class Answer:
    text: str
    hold: threading.Event | None = field(default=None, compare=False)


@dataclass
class Request:
    path: str
    raw: bytes

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8", "replace")


class _FakeModel:
    """A threaded HTTP server on 127.0.0.1 (an ephemeral port) answering model requests."""

    def __init__(self, answers: Sequence[Answer] = (), *, fallback: str = "Done.") -> None:
        self._answers = list(answers)
        self.fallback = fallback
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _reply(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._reply(200, "application/json", b"{}")

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not fake.is_model_request(self.path):
                    self._reply(200, "application/json", b"{}")
                    return
                with fake._lock:
                    fake.requests.append(Request(self.path, raw))
                    answer = fake._answers.pop(0) if fake._answers else Answer(fake.fallback)
                if answer.hold is not None:
                    answer.hold.wait(HOLD_TIMEOUT)
                self._reply(200, "text/event-stream", fake.stream(answer.text))

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def is_model_request(self, path: str) -> bool:
        raise NotImplementedError

    def stream(self, text: str) -> bytes:
        raise NotImplementedError

    def __enter__(self) -> _FakeModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class FakeGemini(_FakeModel):
    """``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` (``GOOGLE_GEMINI_BASE_URL``)."""

    def is_model_request(self, path: str) -> bool:
        return ":streamGenerateContent" in path

    def stream(self, text: str) -> bytes:
        chunk = {
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        }
        return f"data: {json.dumps(chunk)}\n\n".encode()


class FakeOpenAI(_FakeModel):
    """``POST /v1/responses`` with ``stream: true`` (a Codex ``model_providers`` entry's ``base_url``)."""

    def is_model_request(self, path: str) -> bool:
        return path.split("?", maxsplit=1)[0].endswith("/responses")

    def stream(self, text: str) -> bytes:
        item = {
            "type": "message",
            "role": "assistant",
            "id": "msg_fake",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        usage = {
            "input_tokens": 10,
            "input_tokens_details": None,
            "output_tokens": 5,
            "output_tokens_details": None,
            "total_tokens": 15,
        }
        events = [
            ("response.created", {"type": "response.created", "response": {"id": "resp_fake"}}),
            ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
            ("response.completed", {"type": "response.completed", "response": {"id": "resp_fake", "usage": usage}}),
        ]
        return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)
