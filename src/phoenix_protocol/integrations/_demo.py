"""``phx demo``: a real agent session, crashed and recovered, through the real hook entry points.

In a temporary git project it installs Phoenix's hooks into ``.claude/settings.json`` exactly as
``phx install claude-code`` does, then starts an *agent process* that behaves like Claude Code:
it reads the hook commands from that settings file and runs them through the shell with
Claude Code's JSON on stdin, runs the model's Bash tool calls (``phx state working ...``,
``phx note ...``) with the environment the SessionStart hook exported through
``CLAUDE_ENV_FILE``, and fires PostToolUse / PostToolUseFailure after each tool. Mid-task the
demo kills the agent process with SIGKILL (no SessionEnd runs), checks the recorded process
against the real process table, starts a new agent process, and shows the recovery context its
SessionStart hook hands to the model, then the ops log.

The library part (``run_demo``) reports each step through a callback and never prints.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from phoenix_protocol.core._home import Home
from phoenix_protocol.core._process import liveness
from phoenix_protocol.integrations._install import install_claude_code
from phoenix_protocol.services._agent import Agent

__all__ = ["AGENT_PROGRAM", "DemoStep", "run_demo"]


class DemoStep:
    """One thing that happened in the demo."""

    def __init__(self, kind: str, title: str, **data: Any) -> None:
        self.kind = kind  # "setup" | "hook" | "tool" | "crash" | "check" | "recovery" | "log"
        self.title = title
        self.data = data

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "title": self.title, **self.data}


AGENT_PROGRAM = r'''
"""A stand-in for Claude Code: runs the hooks from .claude/settings.json like the real client."""
import json, os, subprocess, sys, time, uuid

project, session_id, script = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
settings = json.load(open(os.path.join(project, ".claude", "settings.json")))
env_file = os.path.join(project, ".claude", f"env-{session_id}.sh")
open(env_file, "w").close()
base_env = dict(os.environ, CLAUDE_PROJECT_DIR=project, CLAUDE_ENV_FILE=env_file)

def say(**kw):
    sys.stdout.write(json.dumps(kw) + "\n"); sys.stdout.flush()

def run_hooks(event, payload, matcher_value=None):
    payload = {"session_id": session_id, "transcript_path": os.path.join(project, ".claude", session_id + ".jsonl"),
               "cwd": project, "hook_event_name": event, **payload}
    outputs = []
    for group in settings.get("hooks", {}).get(event, []):
        m = group.get("matcher")
        if m not in (None, "", "*") and matcher_value is not None and m != matcher_value:
            continue
        for hook in group["hooks"]:
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(["/bin/sh", "-c", hook["command"]], input=json.dumps(payload).encode(),
                                      capture_output=True, cwd=project, env=base_env, timeout=hook.get("timeout", 60))
            except subprocess.TimeoutExpired:  # as Claude Code does: the hook is killed, the session goes on
                ms = round((time.perf_counter() - t0) * 1000, 1)
                outputs.append({"exit": None, "stdout": "", "stderr": "timed out", "ms": ms})
                continue
            ms = round((time.perf_counter() - t0) * 1000, 1)
            outputs.append({"exit": proc.returncode, "stdout": proc.stdout.decode(), "stderr": proc.stderr.decode(), "ms": ms})
    say(kind="hook", event=event, tool=payload.get("tool_name"), results=outputs)
    return outputs

def bash(command):
    # The Bash tool: the model's command, with what SessionStart hooks exported.
    full = f". {env_file}; {command}"
    proc = subprocess.run(["/bin/bash", "-c", full], capture_output=True, cwd=project, env=base_env)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()

say(kind="agent", pid=os.getpid())
for step in script:
    if step["do"] == "session_start":
        run_hooks("SessionStart", {"source": step.get("source", "startup")})
    elif step["do"] == "bash":
        code, out, err = bash(step["command"])
        say(kind="tool", tool="Bash", command=step["command"], exit=code)
        tool_input = {"command": step["command"], "description": step.get("description", "")}
        if code == 0:
            run_hooks("PostToolUse", {"tool_name": "Bash", "tool_input": tool_input, "tool_use_id": uuid.uuid4().hex,
                      "tool_response": {"stdout": out, "stderr": err, "interrupted": False, "isImage": False}}, "Bash")
        else:
            run_hooks("PostToolUseFailure", {"tool_name": "Bash", "tool_input": tool_input, "tool_use_id": uuid.uuid4().hex,
                      "error": f"Exit code {code}\n{(err or out).strip()}"}, "Bash")
    elif step["do"] == "write":
        path = os.path.join(project, step["path"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(step["content"])
        say(kind="tool", tool="Write", path=step["path"])
        run_hooks("PostToolUse", {"tool_name": "Write", "tool_input": {"file_path": path, "content": step["content"]},
                  "tool_use_id": uuid.uuid4().hex, "tool_response": {"filePath": path, "success": True}}, "Write")
    elif step["do"] == "think":
        say(kind="thinking")
        time.sleep(step["seconds"])
    elif step["do"] == "session_end":
        run_hooks("SessionEnd", {"reason": step.get("reason", "other")})
say(kind="done")
'''

FIRST_SESSION: list[dict[str, Any]] = [
    {"do": "session_start", "source": "startup"},
    {
        "do": "bash",
        "command": 'phx state working "Add JWT authentication to the API"',
        "description": "Record the task",
    },
    {
        "do": "write",
        "path": "src/auth.py",
        "content": 'def verify(token: str) -> bool:\n    """Validate a JWT (signature, expiry)."""\n    raise NotImplementedError\n',
    },
    {"do": "bash", "command": 'phx note open-loop "Refresh tokens are not implemented yet"'},
    {
        "do": "bash",
        "command": 'phx note next-action "Make test_login_rejects_expired_token pass, then add refresh tokens"',
    },
    {
        "do": "bash",
        "command": "python3 -c \"raise SystemExit('FAILED tests/test_auth.py::test_login_rejects_expired_token')\"",
        "description": "Run the tests",
    },
    {"do": "think", "seconds": 60},
]
SECOND_SESSION: list[dict[str, Any]] = [
    {"do": "session_start", "source": "startup"},
    {"do": "session_end", "reason": "other"},
]


def _git(project: str, *args: str) -> None:
    env = dict(os.environ, GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    subprocess.run(
        [
            "git",
            "-c",
            "user.name=Phoenix Demo",
            "-c",
            "user.email=demo@phoenix.invalid",
            "-c",
            "init.defaultBranch=main",
            *args,
        ],
        cwd=project,
        env=env,
        capture_output=True,
        check=False,
    )


def _start_agent(
    project: str, session_id: str, script: list[dict[str, Any]], env: dict[str, str]
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", AGENT_PROGRAM, project, session_id, json.dumps(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=project,
    )


def run_demo(workdir: str, on_step: Callable[[DemoStep], None]) -> dict[str, Any]:
    """Play the demo in ``workdir`` (an empty directory); report steps to ``on_step``.

    Returns a summary: the recovery context, whether it was detected, and the ops events.
    """
    project = os.path.join(workdir, "project")
    os.makedirs(os.path.join(project, "src"))
    _git(project, "init", "-q")
    with open(os.path.join(project, "README.md"), "w", encoding="utf-8") as fh:
        fh.write("# demo API\n")
    _git(project, "add", "README.md")
    _git(project, "commit", "-q", "-m", "Initial commit")
    home = Home(os.path.join(project, ".phoenix"))
    result = install_claude_code("project", project_dir=project)
    on_step(
        DemoStep("setup", "Installed the hooks into .claude/settings.json", path=result.path, actions=result.actions)
    )

    bindir = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "CLAUDE"))}
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["PHOENIX_HOME"] = home.root

    # Session 1: works, then dies mid-task.
    agent_proc = _start_agent(project, "demo-session-1", FIRST_SESSION, env)
    agent_pid = None
    if agent_proc.stdout is None:  # pragma: no cover - stdout=PIPE always gives one
        raise RuntimeError("agent process has no stdout")
    for line in agent_proc.stdout:
        msg = json.loads(line)
        if msg["kind"] == "agent":
            agent_pid = msg["pid"]
            on_step(DemoStep("setup", "Started the agent process", pid=agent_pid, session_id="demo-session-1"))
        elif msg["kind"] == "hook":
            on_step(DemoStep("hook", msg["event"], tool=msg.get("tool"), results=msg["results"]))
        elif msg["kind"] == "tool":
            on_step(DemoStep("tool", msg["tool"], **{k: v for k, v in msg.items() if k not in ("kind", "tool")}))
        elif msg["kind"] == "thinking":
            break
    agent_proc.send_signal(signal.SIGKILL)
    agent_proc.wait()
    if agent_proc.stdout:
        agent_proc.stdout.close()
    if agent_proc.stderr:
        agent_proc.stderr.close()
    on_step(DemoStep("crash", "Killed the agent process with SIGKILL mid-task (no SessionEnd hook ran)", pid=agent_pid))

    agent = Agent.open("default", home=home)
    state = agent.state.read()
    alive = liveness(state.pid, state.pid_start_time, state.host, tolerance=agent.config.process_start_tolerance)
    on_step(
        DemoStep(
            "check",
            "state.json after the crash, checked against the process table",
            state=state.to_dict(),
            recorded_pid=state.pid,
            process_alive=alive,
        )
    )

    # Session 2: a fresh process; its SessionStart hook hands over the recovery context.
    time.sleep(0.05)
    agent2 = _start_agent(project, "demo-session-2", SECOND_SESSION, env)
    out, err = agent2.communicate(timeout=120)
    context = ""
    for line in out.splitlines():
        msg = json.loads(line)
        if msg["kind"] == "hook" and msg["event"] == "SessionStart":
            for res in msg["results"]:
                if res["stdout"].strip():
                    context = json.loads(res["stdout"])["hookSpecificOutput"]["additionalContext"]
            on_step(DemoStep("recovery", "New session: the SessionStart hook's additionalContext", context=context))
        elif msg["kind"] == "hook":
            on_step(DemoStep("hook", msg["event"], tool=msg.get("tool"), results=msg["results"]))
    events, _problems = agent.ops.read()
    on_step(DemoStep("log", "The ops log (ops.jsonl)", events=events))
    return {
        "project": project,
        "home": home.root,
        "recovery_detected": "RECOVERY DETECTED" in context,
        "context": context,
        "events": events,
        "agent_stderr": err,
    }
