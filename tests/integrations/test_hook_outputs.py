"""Every hook output in the shape its CLI accepts (``_clients.adapt_output`` and the table
``Client.outputs``), for every event each CLI fires to Phoenix (issue 36, found 1: the drift
warning of a failing loop named PostToolUse in the output of PostToolUseFailure, which Claude Code
2.1.330 refuses: "Hook returned incorrect event name"). The real CLIs take these outputs in
tests/e2e (test_claude_code_failure_loop.py, test_failure_outputs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phoenix_protocol.core._home import Home
from phoenix_protocol.integrations._clients import (
    CLAUDE_CODE,
    CLIENTS,
    CODEX,
    GEMINI_CLI,
    OUTPUT_CONTEXT,
    OUTPUT_MESSAGE,
    OUTPUT_SILENT,
    Client,
    adapt_output,
)
from phoenix_protocol.integrations._hooks import run
from phoenix_protocol.services._agent import Agent

FULL = {"systemMessage": "for the user", "hookSpecificOutput": {"hookEventName": "Wrong", "additionalContext": "ctx"}}

CASES = [(client, native, ours) for client in CLIENTS.values() for native, ours, _, _ in client.hooks]


def test_every_event_every_cli_registers_has_an_output_rule() -> None:
    for client, native, _ours in CASES:
        assert native in client.outputs, (client, native)
        assert client.outputs[native] in (OUTPUT_CONTEXT, OUTPUT_MESSAGE, OUTPUT_SILENT)


@pytest.mark.parametrize(("client", "native", "ours"), CASES, ids=[f"{c.name}-{n}" for c, n, _ in CASES])
def test_output_has_the_shape_the_cli_accepts(client: Client, native: str, ours: str) -> None:
    payload = {"hook_event_name": native}
    out = adapt_output(client, ours, json.dumps(FULL), payload)
    kind = client.outputs[native]
    if kind == OUTPUT_SILENT:
        assert out is None
        return
    assert out is not None
    document = json.loads(out)
    assert document["systemMessage"] == "for the user"
    if kind == OUTPUT_CONTEXT:
        assert document["hookSpecificOutput"] == {"hookEventName": native, "additionalContext": "ctx"}
    else:
        assert "hookSpecificOutput" not in document
    # Without the payload's name, the CLI's name for Phoenix's event.
    bare = adapt_output(client, ours, json.dumps(FULL))
    if kind == OUTPUT_CONTEXT:
        assert json.loads(bare or "")["hookSpecificOutput"]["hookEventName"] == native


def test_an_output_already_right_is_left_as_it_is() -> None:
    right = '{"hookSpecificOutput": {"hookEventName": "PostToolUseFailure", "additionalContext": "x"}}'
    assert adapt_output(CLAUDE_CODE, "post-tool-use-failure", right, {"hook_event_name": "PostToolUseFailure"}) == right
    assert adapt_output(CLAUDE_CODE, "post-tool-use", None) is None
    assert adapt_output(CLAUDE_CODE, "post-tool-use", "not json") == "not json"
    # Only a systemMessage left: dropped whole when nothing else remains.
    context_only = '{"hookSpecificOutput": {"hookEventName": "PreCompact", "additionalContext": "x"}}'
    assert adapt_output(CLAUDE_CODE, "pre-compact", context_only) is None


def test_the_event_that_fired_wins_over_the_registration() -> None:
    """An older install ran ``phx hook post-tool-use`` for PostToolUseFailure too: the output names
    the event that fired (the payload's), which is what Claude Code checks."""
    out = adapt_output(CLAUDE_CODE, "post-tool-use", json.dumps(FULL), {"hook_event_name": "PostToolUseFailure"})
    assert json.loads(out or "")["hookSpecificOutput"]["hookEventName"] == "PostToolUseFailure"
    # A name the CLI does not fire for that event is not taken.
    out = adapt_output(CLAUDE_CODE, "post-tool-use", json.dumps(FULL), {"hook_event_name": "SessionStart"})
    assert json.loads(out or "")["hookSpecificOutput"]["hookEventName"] == "PostToolUse"
    out = adapt_output(GEMINI_CLI, "post-tool-use", json.dumps(FULL), {"hook_event_name": "AfterTool"})
    assert json.loads(out or "")["hookSpecificOutput"]["hookEventName"] == "AfterTool"


def test_codex_session_start_always_carries_hook_specific_output() -> None:
    out = adapt_output(CODEX, "session-start", '{"systemMessage": "x"}', {"hook_event_name": "SessionStart"})
    assert json.loads(out or "") == {"systemMessage": "x", "hookSpecificOutput": {"hookEventName": "SessionStart"}}
    assert adapt_output(CLAUDE_CODE, "session-start", '{"systemMessage": "x"}') == '{"systemMessage": "x"}'


def _payload(project: Path, event: str, **extra: object) -> bytes:
    body = {"session_id": "s1", "cwd": str(project), "hook_event_name": event, "transcript_path": "/dev/null"}
    return json.dumps({**body, **extra}).encode()


@pytest.mark.parametrize(
    ("client", "argv", "event", "call"),
    [
        ("claude-code", ["post-tool-use-failure"], "PostToolUseFailure", {"tool_name": "Bash", "error": "exit 1"}),
        ("claude-code", ["post-tool-use"], "PostToolUseFailure", {"tool_name": "Bash", "error": "exit 1"}),
        (
            "gemini-cli",
            ["post-tool-use", "--client", "gemini-cli"],
            "AfterTool",
            {
                "tool_name": "run_shell_command",
                "tool_response": {"llmContent": "Output: no\nExit Code: 1", "returnDisplay": "no"},
            },
        ),
        ("codex", ["post-tool-use", "--client", "codex"], "PostToolUse", {"tool_name": "Bash", "tool_response": ""}),
    ],
    ids=["claude-failure", "claude-failure-old-registration", "gemini-aftertool", "codex-posttooluse"],
)
def test_a_failing_loop_warning_names_the_event_that_fired(
    project: Path, monkeypatch: pytest.MonkeyPatch, client: str, argv: list[str], event: str, call: dict[str, object]
) -> None:
    """The same failing call again and again (the repetition rule): the hook's one warning is an
    output the CLI takes for the event it fired."""
    monkeypatch.setenv("PHOENIX_HOOK_INLINE", "1")
    extra = argv[1:]
    run(["session-start", *extra], _payload(project, "SessionStart", source="startup"))
    agent = Agent.open("default", home=Home(str(project / ".phoenix")))
    agent.state.set_status("working", "Make the build pass", session_id="s1")
    outputs = []
    for _ in range(6):
        body = _payload(project, event, tool_input={"command": "make build"}, **call)
        code, out, err = run(argv, body)
        assert code == 0 and not err, err
        outputs.append(out)
    warnings = [json.loads(out) for out in outputs if out.strip() not in ("", "{}")]
    assert len(warnings) == 1, outputs
    specific = warnings[0]["hookSpecificOutput"]
    assert specific["hookEventName"] == event
    assert "going in circles" in specific["additionalContext"]
