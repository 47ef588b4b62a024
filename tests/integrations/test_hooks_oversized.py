"""A hook payload over the 64 MiB limit (a tool's whole output): the real hook process still
records the heartbeat, reads stdin to its end (its writer never gets a broken pipe), holds the
payload once (its large values are never decoded) and exits 0."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import HOOK_PREFIX
from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations import _hooks
from phoenix_protocol.services._agent import Agent

BIG = 70_000_000  # characters of tool output: the payload is over _MAX_STDIN (64 MiB)

# Claude Code's side: writes the payload into the hook's stdin, in pieces, then waits for it.
# It runs as a process of its own so that the hook's peak memory (os.wait4) is the hook's, not
# that of the test process it would otherwise be forked from.
WRITER = r"""
import json, os, subprocess, sys, time
payload, hook = sys.argv[1], sys.argv[2:]
proc = subprocess.Popen(hook, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
start = time.monotonic()
broken = False
with open(payload, "rb") as f:
    try:
        while piece := f.read(1 << 20):
            proc.stdin.write(piece)
        proc.stdin.close()
    except BrokenPipeError:
        broken = True
out, err = proc.stdout.read(), proc.stderr.read()
_, status, usage = os.wait4(proc.pid, 0)
print(json.dumps({
    "code": os.waitstatus_to_exitcode(status), "stdout": out.decode(), "stderr": err.decode(),
    "broken_pipe": broken, "seconds": time.monotonic() - start, "max_rss_mb": usage.ru_maxrss / 1024,
}))
"""


def _run_writer(tmp_path: Path, project: Path, command: list[str], payload: bytes) -> dict[str, Any]:
    path = tmp_path / "payload.json"
    path.write_bytes(payload)
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "PHOENIX_HOME": str(tmp_path / "phoenix-home"),
        "CLAUDE_PROJECT_DIR": str(project),
    }
    proc = subprocess.run(
        [sys.executable, "-c", WRITER, str(path), *command],
        capture_output=True,
        check=True,
        env=env,
        cwd=project,
        timeout=120,
    )
    path.unlink()
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _agent(tmp_path: Path) -> Agent:
    return Agent.open("default", home=Home(str(tmp_path / "phoenix-home")))


def _body(project: Path, event: str, **extra: Any) -> dict[str, Any]:
    return {
        "session_id": "sess-big",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": str(project),
        "permission_mode": "default",
        "hook_event_name": event,
        **extra,
    }


def test_post_tool_use_over_the_limit_is_still_the_heartbeat(tmp_path: Path, project: Path) -> None:
    # The Bash tool's response: its output first, the flag that it was interrupted after it.
    stdout = 'line of build output \\ with "quotes"\n' * (BIG // 38)
    response = {"stdout": stdout, "stderr": "", "interrupted": True, "isImage": False}
    body = _body(project, "PostToolUse", tool_name="Bash", tool_input={"command": "make"}, tool_response=response)
    payload = json.dumps({**body, "tool_use_id": "toolu_1"}).encode()
    assert len(payload) > _hooks._MAX_STDIN

    done = _run_writer(tmp_path, project, [*HOOK_PREFIX, "post-tool-use"], payload)

    assert (done["code"], done["stdout"], done["stderr"]) == (0, "", "")
    assert not done["broken_pipe"]  # all of stdin was read
    assert done["max_rss_mb"] < 120  # the 78 MB were held once, the output never decoded (twice: 157 MB)
    agent = _agent(tmp_path)
    state = agent.state.read()
    assert state.session_id == "sess-big" and state.heartbeat_seq == 1
    assert state.last_tool is not None
    assert state.last_tool["name"] == "Bash" and state.last_tool["ok"] is False
    assert state.last_tool["error"] == "tool call interrupted"
    assert state.last_tool["input_digest"] == _hooks._digest({"command": "make"})
    events, _ = agent.ops.read()
    oversized = [e for e in events if e["event"] == "hook_payload_oversized"]
    assert len(oversized) == 1 and oversized[0]["status"] == "warn"
    assert oversized[0]["meta"] == {
        "hook": "post-tool-use",
        "bytes": len(payload),
        "limit": _hooks._MAX_STDIN,
        "left_out": {"tool_response.stdout": len(json.dumps(stdout))},
    }
    assert [e["event"] for e in events if e["event"] in ("tool_failed", "hook_failed")] == ["tool_failed"]


def test_post_tool_use_failure_over_the_limit_through_phx_hook(tmp_path: Path, project: Path) -> None:
    # A Write of 70 MB: the large value is the tool's input, and the error comes after it.
    tool_input = {"file_path": str(project / "big.txt"), "content": "é" * (BIG // 2)}
    body = _body(project, "PostToolUseFailure", tool_name="Write", tool_input=tool_input)
    extra = {"tool_use_id": "t", "error": "ENOSPC: no space left", "is_interrupt": False}
    payload = json.dumps({**body, **extra}, ensure_ascii=False)  # as Claude Code writes it: UTF-8
    command = [sys.executable, "-c", "import sys; from phoenix_protocol.cli._entry import main; sys.exit(main())"]

    done = _run_writer(tmp_path, project, [*command, "hook", "PostToolUseFailure"], payload.encode())

    assert (done["code"], done["stdout"], done["stderr"], done["broken_pipe"]) == (0, "", "", False)
    state = _agent(tmp_path).state.read()
    assert state.session_id == "sess-big" and state.last_tool is not None
    assert state.last_tool["name"] == "Write" and state.last_tool["ok"] is False
    assert state.last_tool["error"] == "ENOSPC: no space left"
    assert state.last_tool["input_digest"]  # of the input with its content left out
    events, _ = _agent(tmp_path).ops.read()
    [note] = [e["meta"] for e in events if e["event"] == "hook_payload_oversized"]
    assert note["left_out"] == {
        "tool_input.content": len(json.dumps(tool_input["content"], ensure_ascii=False).encode())
    }


def test_payload_over_the_limit_that_is_not_json_fails_softly_and_is_read_to_its_end(
    tmp_path: Path, project: Path
) -> None:
    # Cut off in the middle of its output: the hook reads it all, then reports it.
    payload = json.dumps(_body(project, "PostToolUse", tool_name="Read")).encode()[:-1]
    payload += b', "tool_response": {"content": "' + b"x" * BIG

    done = _run_writer(tmp_path, project, [*HOOK_PREFIX, "post-tool-use"], payload)

    assert (done["code"], done["broken_pipe"]) == (0, False)
    assert json.loads(done["stdout"])["systemMessage"].startswith(  # the user is told, once
        "Phoenix Protocol: the PostToolUse hook failed: stdin is not JSON (Input data was truncated)"
    )
    assert done["stderr"].count("\n") == 1
    assert done["stderr"].startswith("phoenix: post-tool-use hook: stdin is not JSON (Input data was truncated)")
    events, _ = _agent(tmp_path).ops.read()
    assert events[-1]["event"] == "hook_failed" and "stdin is not JSON" in events[-1]["meta"]["error"]


def _main(stdin: bytes) -> None:
    """``_hooks.main`` in this process, with ``stdin`` as its standard input."""
    old = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    try:
        with pytest.raises(SystemExit) as exc:
            _hooks.main(["post-tool-use"])
        assert exc.value.code == 0
    finally:
        sys.stdin = old


def test_the_limit_is_the_largest_payload_read_whole(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    monkeypatch.setattr(_hooks, "_MAX_VALUE", 100, raising=False)
    body = _body(project, "PostToolUse", tool_name="Read", tool_input={}, tool_response={"content": "x" * 200})
    payload = json.dumps(body).encode()
    agent = Agent.open("default", home=Home(str(project / ".phoenix")))

    monkeypatch.setattr(_hooks, "_MAX_STDIN", len(payload))
    _main(payload)
    assert agent.state.read().heartbeat_seq == 1
    assert "hook_payload_oversized" not in [e["event"] for e in agent.ops.read()[0]]

    monkeypatch.setattr(_hooks, "_MAX_STDIN", len(payload) - 1)
    _main(payload)
    assert agent.state.read().heartbeat_seq == 2
    [note] = [e["meta"] for e in agent.ops.read()[0] if e["event"] == "hook_payload_oversized"]
    assert note["bytes"] == len(payload) and note["left_out"] == {"tool_response.content": 202}


def test_over_the_limit_objects_keep_their_members_three_keys_deep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_hooks, "_MAX_VALUE", 40)
    big = "x" * 50
    inner = {"b": {"c": big, "d": 1}, "e": [big], "g": 2}
    doc = {"session_id": "s", "tool_input": {"a": inner, "f": big, "h": None}, "n": [big], "t": True}
    size = {name: len(json.dumps(value)) for name, value in (("b", inner["b"]), ("e", inner["e"]), ("big", big))}

    payload, note = _hooks._loads_oversized(json.dumps(doc).encode())

    assert payload == {
        "session_id": "s",
        "tool_input": {
            "a": {"b": f"<{size['b']} bytes left out>", "e": f"<{size['e']} bytes left out>", "g": 2},
            "f": f"<{size['big']} bytes left out>",
            "h": None,
        },
        "n": f"<{size['e']} bytes left out>",
        "t": True,
    }
    left_out = {"tool_input.a.b": size["b"], "tool_input.a.e": size["e"], "tool_input.f": size["big"], "n": size["e"]}
    assert note["left_out"] == left_out


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b'[1, "' + b"x" * 50 + b'"]', "stdin JSON is not an object"),
        (b'{"session_id": "s", "a": 1} x', "stdin is not JSON"),
        (b'{"session_id": "s", "a": "\\ud83d"}', "stdin is not JSON"),  # the standard library would take it
        (b'{"session_id": "s", "a": ' + b"[" * 5000 + b"]" * 5000 + b"}", "stdin is not JSON"),
    ],
)
def test_over_the_limit_what_is_refused(
    text: bytes, problem: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)  # where the hook_failed event goes
    monkeypatch.setattr(_hooks, "_MAX_STDIN", 10)
    code, out, err = _hooks.run(["post-tool-use"], text)
    assert code == 0 and f"hook: {problem}" in err
    # The user is told once per session, in the systemMessage (docs/hooks.md), naming the doctor.
    assert out == "" or (problem in json.loads(out)["systemMessage"] and "phx doctor" in out)
