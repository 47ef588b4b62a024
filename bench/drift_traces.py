"""Labelled synthetic agent traces for the drift-detector comparison (``bench/drift_compare.py``)
and the drift tests (``tests/test_drift_traces.py``).

Each trace is a list of ``Step``: a tool call (name, input dict, outcome: ok with its output or an
error text and, for shell commands, an exit code; duration), an assistant message without a tool
call, or a context-window error (the agent's prompt overflowed and was trimmed). Steps carry
their start time (ms) and the assistant text that came with them, so detectors that read text
(Gemini CLI's content loop, OpenHands' monologue) can be fed too. A trace has a label: ``normal``
or the drift pattern; for drift, ``drift_start`` is the index of the first step that belongs to
the drift (ground truth for steps-to-detection: the steps before it are ordinary work). A few
normal traces are marked ``hard``: legitimate work that *looks* like drift to any action-level
detector (polling a long build with the same command; a read-only review that edits nothing).

Everything is deterministic: ``traces()`` builds the same set on every call (one seeded
``random.Random`` per trace). Tool names and inputs are Claude Code's (``Read``, ``Bash`` with
``description``/``timeout``, ``Edit``...), which is what Phoenix's PostToolUse hook sees.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DRIFT_PATTERNS",
    "NORMAL_PATTERNS",
    "PHOENIX_CLAIMS",
    "Step",
    "Trace",
    "traces",
]

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z: every trace starts here (its work start)


@dataclass(frozen=True)
class Step:
    """One step of an agent trace."""

    ts_ms: int
    kind: str  # "tool" | "message" | "context_error"
    tool: str = ""
    input: dict[str, Any] | None = None
    ok: bool = True
    output: str = ""
    error: str | None = None
    exit_code: int | None = None  # shell commands only
    duration_ms: int = 0
    text: str | None = None  # the assistant's text: the message itself, or what preceded the call

    @property
    def end_ms(self) -> int:
        return self.ts_ms + self.duration_ms


@dataclass(frozen=True)
class Trace:
    """A labelled trace: ``label`` is ``normal`` or the drift pattern."""

    name: str
    label: str
    pattern: str
    steps: tuple[Step, ...]
    drift_start: int | None  # index of the first drifting step (None for normal traces)
    hard: bool = False
    note: str = ""

    @property
    def is_drift(self) -> bool:
        return self.label != "normal"


DRIFT_PATTERNS: dict[str, str] = {
    "repeat_identical": "the same tool call again and again (cosmetic differences: whitespace, Bash description/timeout, "
    "the text around it)",
    "cycle_ab": "an A-B cycle of two calls (e.g. read a file, run the same failing test)",
    "cycle_abc": "an A-B-C cycle of three calls",
    "repeat_error": "the same call failing with the same error",
    "error_rate": "the share of failing calls jumps (varied calls, varied errors: a broken environment)",
    "slowdown": "calls get steadily slower while work goes on",
    "no_progress": "busy without progress: many distinct reads/greps for 25+ minutes, nothing written",
    "monologue": "the same assistant message, turn after turn, without tool calls",
    "content_chant": "one assistant message that repeats a sentence over and over",
    "context_loop": "context-window errors in a loop (prompt trimmed, overflows again)",
    "edit_cycle": "edits that succeed but go nowhere: flip-flopping a change, rewriting the same content",
}

NORMAL_PATTERNS: dict[str, str] = {
    "exploration": "varied reads, greps, globs and edits",
    "edit_test_fix": "the same test command after each edit: fails, edit, fails differently, edit, passes "
    "(2 of 8: a tight 7-9 round loop)",
    "polling_build": "HARD: the same tail/poll every 30 s while a long build's log grows",
    "thinking_pause": "long pauses without calls (10-45 min), some followed by a burst of reads",
    "read_burst": "bursts of 12-25 distinct reads/greps before each edit",
    "batch_edits": "the same edit in many different files (license headers)",
    "reread_after_edit": "read a file, edit it, read it again, edit again (different edits)",
    "noisy_durations": "call durations vary a lot (long-tailed), with no trend",
    "flaky_errors": "scattered failures (~12 %) and one short burst of three",
    "status_checks": "git status / git diff after every edit",
    "review_task": "HARD: a read-only review (30+ min of distinct reads, the result is a message)",
}

PHOENIX_CLAIMS: dict[str, str] = {
    "repeat_identical": "repetition",
    "cycle_ab": "repetition",
    "cycle_abc": "repetition",
    "repeat_error": "repetition",
    "error_rate": "error_rate",
    "slowdown": "slowdown",
    "no_progress": "no_progress",
}
"""Drift patterns Phoenix's ``_drift.detect`` claims to catch, with the detector meant to catch it."""

MODULES = [
    "models",
    "auth",
    "views",
    "db",
    "cache",
    "cli",
    "config",
    "utils",
    "api",
    "routes",
    "schema",
    "serializers",
    "tasks",
    "queue",
    "worker",
    "storage",
    "events",
    "hooks",
    "metrics",
    "logging",
    "errors",
    "middleware",
    "session",
    "tokens",
    "pagination",
    "filters",
    "admin",
    "search",
    "export",
    "importer",
    "scheduler",
    "mailer",
]
TERMS = [
    "get_user",
    "parse_config",
    "retry_after",
    "build_index",
    "CacheEntry",
    "load_settings",
    "Session.commit",
    "validate_token",
    "TODO",
    "FIXME",
    "render_page",
    "timeout",
    "max_retries",
    "serialize",
    "encode_jwt",
    "QueueWorker",
    "on_startup",
    "handle_error",
    "paginate",
    "RateLimiter",
]
INFO_COMMANDS = (
    "git log --oneline -10",
    "git status --short",
    "ls -la src/app",
    "python --version",
    "pip list --format=freeze | head -40",
    "wc -l src/app/*.py",
    "git branch -a",
    "cat pyproject.toml",
    "env | grep -i python",
    "tree -L 2 src",
    "git show --stat HEAD",
    "du -sh .",
)
DESCRIPTIONS = (
    "Run the tests",
    "Run the failing test again",
    "Re-run tests to check",
    "Check the tests",
    "Run pytest",
    "Verify the fix",
    "Run the test suite once more",
)


def _file(k: int) -> str:
    return f"src/app/{MODULES[k % len(MODULES)]}.py"


def _test_file(k: int) -> str:
    return f"tests/test_{MODULES[k % len(MODULES)]}.py"


class _Builder:
    """Appends steps with a moving clock (think time before each step, then its duration)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.now = T0
        self.steps: list[Step] = []
        self.versions: dict[str, int] = {}
        self.uniq = 0

    def wait(self, lo: float, hi: float) -> None:
        self.now += int(self.rng.uniform(lo, hi) * 1000)

    def _add(self, step_kw: dict[str, Any], gap: tuple[float, float], duration_ms: int) -> int:
        self.wait(*gap)
        self.steps.append(Step(ts_ms=self.now, duration_ms=duration_ms, **step_kw))
        self.now += duration_ms
        return len(self.steps) - 1

    def tool(
        self,
        tool: str,
        inp: dict[str, Any],
        *,
        ok: bool = True,
        output: str = "",
        error: str | None = None,
        exit_code: int | None = None,
        duration_ms: int | None = None,
        text: str | None = None,
        gap: tuple[float, float] = (2.0, 12.0),
    ) -> int:
        duration = duration_ms if duration_ms is not None else self.rng.randint(40, 1500)
        kw: dict[str, Any] = {
            "kind": "tool",
            "tool": tool,
            "input": inp,
            "ok": ok,
            "output": output if ok else "",
            "error": None if ok else (error or "failed"),
            "exit_code": exit_code,
            "text": text,
        }
        return self._add(kw, gap, duration)

    # -- Claude Code tools ---------------------------------------------------------------------

    def read(self, path: str, **kw: Any) -> int:
        version = self.versions.get(path, 0)
        output = f"     1\t# {path} (revision {version})\n     2\t..." + "x" * (len(path) * 7 % 50)
        return self.tool("Read", {"file_path": path}, output=output, **kw)

    def grep(self, pattern: str, path: str = "src", **kw: Any) -> int:
        return self.tool(
            "Grep",
            {"pattern": pattern, "path": path, "output_mode": "content"},
            output=f"{path}/x.py:{len(pattern) * 3}: {pattern}",
            **kw,
        )

    def glob(self, pattern: str, **kw: Any) -> int:
        return self.tool("Glob", {"pattern": pattern}, output=f"{len(pattern)} files", **kw)

    def bash(
        self,
        command: str,
        *,
        description: str | None = None,
        timeout: int | None = None,
        ok: bool = True,
        output: str = "",
        error: str | None = None,
        exit_code: int | None = None,
        background: bool = False,
        **kw: Any,
    ) -> int:
        inp: dict[str, Any] = {"command": command}
        if description is not None:
            inp["description"] = description
        if timeout is not None:
            inp["timeout"] = timeout
        if background:
            inp["run_in_background"] = True
        code = exit_code if exit_code is not None else (0 if ok else 1)
        return self.tool("Bash", inp, ok=ok, output=output or f"$ {command}\n(ok)", error=error, exit_code=code, **kw)

    def edit(self, path: str, old: str | None = None, new: str | None = None, *, ok: bool = True, **kw: Any) -> int:
        if old is None or new is None:
            self.uniq += 1
            old = old if old is not None else f"value_{self.uniq} = compute({self.uniq})"
            new = new if new is not None else f"value_{self.uniq} = compute({self.uniq}, strict=True)"
        if ok:
            self.versions[path] = self.versions.get(path, 0) + 1
        kw.setdefault("duration_ms", self.rng.randint(30, 250))
        return self.tool(
            "Edit",
            {"file_path": path, "old_string": old, "new_string": new},
            ok=ok,
            output=f"The file {path} has been updated. Here's the result of running `cat -n` on a snippet:\n{new}",
            error="String to replace not found in file.",
            **kw,
        )

    def write(self, path: str, content: str, **kw: Any) -> int:
        self.versions[path] = self.versions.get(path, 0) + 1
        kw.setdefault("duration_ms", self.rng.randint(30, 250))
        return self.tool(
            "Write", {"file_path": path, "content": content}, output=f"File created successfully at: {path}", **kw
        )

    def message(self, text: str, gap: tuple[float, float] = (3.0, 9.0)) -> int:
        return self._add({"kind": "message", "text": text}, gap, 0)

    def context_error(self, gap: tuple[float, float] = (1.0, 4.0)) -> int:
        return self._add({"kind": "context_error"}, gap, 0)

    # -- composite ---------------------------------------------------------------------------

    def info(self, k: int) -> int:
        """One distinct information-gathering call (k chooses which)."""
        kind = k % 4
        if kind == 0:
            return self.read(_file(k // 4 + k % 7))
        if kind == 1:
            return self.grep(TERMS[k % len(TERMS)] + ("" if k < len(TERMS) else f"_{k}"), f"src/app/{k % 3}")
        if kind == 2:
            return self.read(_test_file(k // 4 + 3))
        return self.glob(f"src/**/*{MODULES[k % len(MODULES)]}*.py")

    def prefix(self, *, lo: int = 3, hi: int = 7, end_with_edit: bool = True) -> None:
        """Ordinary work before the drift begins."""
        n = self.rng.randint(lo, hi)
        base = self.rng.randint(0, 200)
        for j in range(n):
            self.info(base + j * 5 + 1)
        if end_with_edit:
            self.edit(_file(base))

    def build(self, name: str, label: str, pattern: str, start: int | None, **kw: Any) -> Trace:
        return Trace(name, label, pattern, tuple(self.steps), start, **kw)


# ------------------------------------------------------------------------------------------------
# drift


def _repeat_identical(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    b.prefix()
    n = rng.randint(6, 9)
    start = len(b.steps)
    variant = i % 4
    if variant == 0:
        path = _file(i + 2)
        for _ in range(n):
            b.read(path)
        note = "Read of the same file, identical input"
    elif variant == 1:
        cmd = ("cat config/settings.yaml", "ls -la build/", "docker compose ps")[i % 3]
        for j in range(n):
            b.bash(
                cmd, description=DESCRIPTIONS[j % len(DESCRIPTIONS)], timeout=60_000 + 30_000 * (j % 3), output="same"
            )
        note = "Bash: same command, changing description and timeout"
    elif variant == 2:
        forms = ("git log --oneline -5", "git  log --oneline -5", "git log --oneline  -5 ", " git log   --oneline -5")
        for j in range(n):
            b.bash(forms[j % len(forms)], output="a1b2 fix\nc3d4 wip")
        note = "Bash: same command, whitespace differences"
    else:
        texts = (
            "Let me search for the handler again.",
            "Searching once more.",
            "Let me look again.",
            "One more search.",
        )
        for j in range(n):
            b.grep("handle_request", "src", text=texts[j % len(texts)])
        note = "Grep: identical input, different text before each call"
    return b.build(f"repeat_identical-{i}", "repeat_identical", "repeat_identical", start, note=note)


def _cycle(rng: random.Random, i: int, period: int) -> Trace:
    b = _Builder(rng)
    b.prefix()
    cycles = rng.randint(5, 7)
    start = len(b.steps)
    path, test = _file(i + 5), _test_file(i + 5)
    variant = i % 3
    for c in range(cycles):
        if variant == 0:
            b.read(path)
            b.bash(
                f"pytest -x {test}",
                description=DESCRIPTIONS[c % len(DESCRIPTIONS)],
                ok=False,
                error="E   AssertionError: expected 3, got 2\n1 failed",
            )
            if period == 3:
                b.grep("expected", "tests")
        elif variant == 1:
            b.grep(TERMS[i % len(TERMS)], "src")
            b.read(path)
            if period == 3:
                b.read(test)
        else:
            if period == 3:
                b.glob("src/**/*.py")
            b.bash("git status", output="M src/app/x.py")
            b.bash("git diff", output="-a\n+b")
    note = ("read + failing test", "grep + read", "git status + git diff")[variant] + (
        " (+ a third call)" if period == 3 else ""
    )
    pattern = "cycle_ab" if period == 2 else "cycle_abc"
    return b.build(f"{pattern}-{i}", pattern, pattern, start, note=note)


def _repeat_error(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    b.prefix()
    n = rng.randint(5, 8)
    start = len(b.steps)
    variant = i % 4
    if variant == 0:
        for j in range(n):
            b.bash(
                "npm install",
                description=("Install dependencies", "Install deps again", "Retry npm install")[j % 3],
                ok=False,
                error="npm ERR! code ERESOLVE\nnpm ERR! ERESOLVE unable to resolve dependency tree",
                duration_ms=rng.randint(4000, 9000),
            )
        note = "Bash npm install, same error, description changing"
    elif variant == 1:
        for _ in range(n):
            b.edit(_file(i), "def handler(request):", "def handler(request, *, strict=False):", ok=False)
        note = "Edit whose old_string is not in the file (fails the same way)"
    elif variant == 2:
        for _ in range(n):
            b.tool("Read", {"file_path": "src/app/settings_local.py"}, ok=False, error="File does not exist.")
        note = "Read of a file that does not exist"
    else:
        for _ in range(n):
            b.tool(
                "WebFetch",
                {"url": "https://docs.example.com/api/v2", "prompt": "What are the rate limits?"},
                ok=False,
                error="Request failed with status code 403",
                duration_ms=rng.randint(800, 2000),
            )
        note = "WebFetch of a forbidden page"
    return b.build(f"repeat_error-{i}", "repeat_error", "repeat_error", start, note=note)


ERRORS = (
    "curl: (7) Failed to connect to localhost port 8080: Connection refused",
    "ERROR: Could not find a version that satisfies the requirement",
    "permission denied while trying to connect to the Docker daemon socket",
    "OSError: [Errno 28] No space left on device",
    "fatal: unable to access 'https://github.com/org/repo/': Could not resolve host",
    "psycopg2.OperationalError: could not connect to server",
    "EACCES: permission denied, open '/var/cache/app'",
)


def _error_rate(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    for j in range(rng.randint(12, 16)):
        if j % 6 == 5:
            b.edit(_file(i + j))
        elif j == 7 and i % 2:
            b.bash("pytest -q tests/test_api.py", ok=False, error="1 failed")  # one ordinary failure
        else:
            b.info(i * 11 + j * 3)
    start = len(b.steps)
    n = rng.randint(14, 20)
    for j in range(n):
        fails = j == 0 or rng.random() < 0.75
        k = i * 7 + j
        if j % 3 == 0:
            b.bash(
                f"curl -s http://localhost:{8080 + k % 5}/health?try={k}",
                ok=not fails,
                error=ERRORS[k % len(ERRORS)],
            )
        elif j % 3 == 1:
            b.bash(f"pip install -q pkg{k}", ok=not fails, error=ERRORS[(k + 1) % len(ERRORS)], exit_code=None)
        else:
            b.tool(
                "Read",
                {"file_path": f"/var/cache/app/item{k}.json"},
                ok=not fails,
                output="{}",
                error=ERRORS[(k + 3) % len(ERRORS)],
            )
    return b.build(f"error_rate-{i}", "error_rate", "error_rate", start, note="environment breaks: most calls fail")


def _slowdown(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    base = rng.randint(700, 1800)
    for j in range(rng.randint(6, 10)):
        if j % 5 == 4:
            b.edit(_file(j))
        else:
            b.info(i * 13 + j * 3)
        b.steps[-1] = _with_duration(b.steps[-1], int(base * rng.uniform(0.7, 1.3)))
    start = len(b.steps)
    n = rng.randint(40, 50)
    growth = rng.uniform(5.0, 8.0)
    for j in range(n):
        if j % 5 == 4:
            b.edit(_file(i + j))
            continue
        duration = int(base * (1 + (growth - 1) * j / n) * rng.uniform(0.8, 1.25))
        if j % 3 == 0:
            b.bash(f"pytest -q {_test_file(i + j)}", duration_ms=duration, output="3 passed")
        else:
            b.info(i * 17 + j * 5)
            b.steps[-1] = _with_duration(b.steps[-1], duration)
    return b.build(f"slowdown-{i}", "slowdown", "slowdown", start, note=f"durations grow ~{growth:.1f}x")


def _with_duration(step: Step, duration_ms: int) -> Step:
    return Step(
        step.ts_ms, step.kind, step.tool, step.input, step.ok, step.output, step.error, step.exit_code, duration_ms,
        step.text,
    )  # fmt: skip


def _no_progress(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    b.prefix()
    start = len(b.steps)
    end = b.now + rng.randint(28, 45) * 60_000
    k = i * 31
    while b.now < end:
        k += 1
        if k % 9 == 0:
            b.bash(INFO_COMMANDS[k % len(INFO_COMMANDS)] + f" # {k}", gap=(15.0, 45.0))
        else:
            b.info(k)
            b.steps[-1] = _shift(b.steps[-1], int(rng.uniform(13.0, 40.0) * 1000))
            b.now = b.steps[-1].end_ms
    return b.build(f"no_progress-{i}", "no_progress", "no_progress", start, note="distinct reads/greps, no edit")


def _shift(step: Step, by_ms: int) -> Step:
    return Step(
        step.ts_ms + by_ms, step.kind, step.tool, step.input, step.ok, step.output, step.error, step.exit_code,
        step.duration_ms, step.text,
    )  # fmt: skip


MONOLOGUES = (
    "I need to fix the failing test in test_auth.py. Let me look at the token validation logic first.",
    "The build is failing because of a missing dependency. I should add it to pyproject.toml and then "
    "re-run the installation, after which the import error in the CLI module should disappear and the "
    "tests that depend on it can be collected again. Once that is done I will check the remaining "
    "failures one by one, starting with the serializer tests, and then update the changelog.",
    "Now I will implement the caching layer. I'll start by writing the CacheEntry class.",
    "I apologize for the confusion. Let me try a different approach to solve this problem.",
)


def _monologue(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    b.prefix()
    start = len(b.steps)
    n = rng.randint(5, 8)
    text = MONOLOGUES[i % len(MONOLOGUES)]
    for j in range(n):
        b.message(text if i % 4 != 3 else f"{text} (attempt {j + 1})")
    note = "identical message each turn" if i % 4 != 3 else "the same message with a changing attempt counter"
    return b.build(f"monologue-{i}", "monologue", "monologue", start, note=note)


CHANTS = (
    "I will now run the tests again to make sure everything works. ",
    "Let me check the file. ",
    "The function returns the value of the variable, which is then passed to the function that "
    "returns the value of the variable. ",
    "Wait, ",
)


def _content_chant(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    b.prefix()
    phrase = CHANTS[i % len(CHANTS)]
    reps = max(15, 1800 // len(phrase)) if i % 4 != 2 else 16
    text = "Looking at the failure more closely. " + phrase * reps
    if i % 2 == 0:
        start = b.message(text, gap=(5.0, 10.0))
    else:
        start = b.bash("pytest -q", text=text, output="1 failed", ok=False, error="1 failed")
    b.read(_file(i))
    return b.build(f"content_chant-{i}", "content_chant", "content_chant", start, note=f"{phrase.strip()!r} x{reps}")


def _context_loop(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    b.prefix()
    start = len(b.steps)
    if i % 2 == 0:
        for _ in range(rng.randint(12, 16)):
            b.context_error()
        note = "context-window errors back to back (trimming does not help)"
    else:
        for _ in range(rng.randint(6, 8)):
            b.tool("Read", {"file_path": "data/dump.sql"}, output="-- 180 MB of SQL --", duration_ms=1200)
            b.context_error()
        note = "the same huge Read, then a context-window error, again and again"
    return b.build(f"context_loop-{i}", "context_loop", "context_loop", start, note=note)


def _edit_cycle(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    b.prefix()
    start = len(b.steps)
    path = _file(i + 3)
    x, y = "timeout = 30", "timeout = 60"
    cycles = rng.randint(4, 6)
    variant = i % 4
    for c in range(cycles):
        if variant == 0:
            b.edit(path, x, y)
            b.edit(path, y, x)
        elif variant == 1:
            b.edit(path, x, y)
            b.bash(f"pytest -x {_test_file(i)}", ok=False, error="E   TimeoutError\n1 failed")
            b.edit(path, y, x)
            b.bash(f"pytest -x {_test_file(i)}", ok=False, error="E   TimeoutError\n1 failed")
        elif variant == 2:
            b.write(path, "TIMEOUT = 30\n\ndef run():\n    return TIMEOUT\n")
            if c % 2:
                b.write(path, "TIMEOUT = 30\n\ndef run():\n    return TIMEOUT\n")
        else:
            b.edit(path, x, y)
            b.bash(f"pytest -x {_test_file(i)}", ok=False, error="E   TimeoutError\n1 failed")
            b.edit(path, y, x)
            b.bash(f"pytest -x {_test_file(i)}", ok=False, error="E   AssertionError: retry\n1 failed")
    note = (
        "flip-flop edit X->Y, Y->X",
        "flip-flop edit with the same failing test between",
        "Write of identical content, again and again",
        "flip-flop edit, two different test failures",
    )[variant]
    return b.build(f"edit_cycle-{i}", "edit_cycle", "edit_cycle", start, note=note)


# ------------------------------------------------------------------------------------------------
# normal


def _exploration(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    n = rng.randint(20, 40)
    since_edit = 0
    k = i * 19
    for _ in range(n):
        k += 1
        if since_edit >= rng.randint(5, 10):
            b.edit(_file(k))
            since_edit = 0
            continue
        roll = rng.random()
        if roll < 0.12:
            b.bash(INFO_COMMANDS[k % len(INFO_COMMANDS)])
        elif roll < 0.2 and b.steps:
            # a re-read of something seen a moment ago (at most twice in a row of edits)
            b.read(_file(k - 4))
        else:
            b.info(k)
        since_edit += 1
    b.edit(_file(k + 1))
    return b.build(f"exploration-{i}", "normal", "exploration", None)


FAILURES = (
    "E   AssertionError: assert 2 == 3\n1 failed, 11 passed",
    "E   KeyError: 'user_id'\n1 failed, 11 passed",
    "E   TypeError: handler() got an unexpected keyword argument 'strict'\n2 failed, 10 passed",
    "E   AttributeError: 'NoneType' object has no attribute 'id'\n1 failed, 11 passed",
)


def _edit_test_fix(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    b.prefix(lo=2, hi=5, end_with_edit=False)
    test = f"pytest -q {_test_file(i)}"
    tdd = i % 4 == 3  # a longer test-driven loop: edit, test fails differently, edit, ... (no reads)
    rounds = rng.randint(7, 9) if tdd else rng.randint(3, 6)
    for r in range(rounds):
        last = r == rounds - 1
        b.bash(
            test,
            description=DESCRIPTIONS[(i + r) % len(DESCRIPTIONS)],
            timeout=120_000,
            ok=False,
            error=FAILURES[(i + r) % len(FAILURES)],
            duration_ms=rng.randint(2000, 6000),
        )
        if r == 1 and i % 3 == 0:  # run it again to see whether it is flaky
            b.bash(test, description="Check whether it is flaky", ok=False, error=FAILURES[(i + r) % len(FAILURES)])
        if not tdd and rng.random() < 0.6:
            b.read(_file(i + r))
        b.edit(_file(i + r))
        if last:
            b.bash(test, description="Run the tests", output="12 passed", duration_ms=rng.randint(2000, 6000))
    note = f"{rounds} rounds" + (", no reads between (tight TDD loop)" if tdd else "")
    return b.build(f"edit_test_fix-{i}", "normal", "edit_test_fix", None, note=note)


def _polling_build(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    b.prefix(lo=2, hi=4)
    b.bash("make -j4 release > build.log 2>&1", background=True, description="Start the release build")
    polls = rng.randint(15, 30)
    variant = i % 4
    for p in range(polls):
        log = "\n".join(f"[{q + 1}/{polls}] compiling unit {q}" for q in range(max(0, p - 4), p + 1))
        if variant == 0:
            b.bash("tail -n 20 build.log", output=log, gap=(28.0, 32.0))
        elif variant == 1:
            b.bash("sleep 30 && tail -5 build.log", output=log, duration_ms=30_100, gap=(1.0, 3.0), timeout=60_000)
        elif variant == 2:
            b.tool("BashOutput", {"bash_id": "bash_1"}, output=log, gap=(28.0, 32.0))
        else:
            b.tool("Read", {"file_path": "build.log"}, output=log, gap=(28.0, 32.0))
    b.bash("ls -la dist/", output="app-1.0.tar.gz")
    b.edit("CHANGELOG.md")
    how = (
        "Bash tail",
        "Bash sleep 30 && tail",
        "BashOutput (Claude Code's poll of a background shell)",
        "Read of the log",
    )
    return b.build(
        f"polling_build-{i}", "normal", "polling_build", None, hard=True, note=f"{polls} polls by {how[variant]}"
    )


def _thinking_pause(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    k = i * 23
    burst_after = i % 5 in (1, 3)
    for block in range(3):
        for _ in range(rng.randint(4, 8)):
            k += 1
            b.info(k)
        b.edit(_file(k))
        if block < 2:
            b.wait(rng.uniform(10, 45) * 60, rng.uniform(10, 45) * 60 + 1)  # a long think, no calls
            if burst_after:
                for _ in range(rng.randint(10, 13)):
                    k += 1
                    b.info(k)
    note = "after each pause, a burst of 10-13 reads before the edit" if burst_after else "pauses between edits"
    return b.build(f"thinking_pause-{i}", "normal", "thinking_pause", None, note=note)


def _read_burst(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    k = i * 37
    for _ in range(rng.randint(2, 3)):
        for _ in range(rng.randint(12, 25)):
            k += 1
            b.info(k)
        b.edit(_file(k))
        b.edit(_file(k + 1))
    return b.build(f"read_burst-{i}", "normal", "read_burst", None)


def _batch_edits(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    b.glob("src/**/*.py")
    header = "# SPDX-License-Identifier: Apache-2.0\n"
    for j in range(rng.randint(15, 30)):
        path = f"src/app/{MODULES[j % len(MODULES)]}{'' if j < len(MODULES) else j}.py"
        if j % 4 == i % 4:
            b.read(path, gap=(1.0, 4.0))
        b.edit(path, '"""', header + '"""', gap=(1.0, 5.0))
    return b.build(f"batch_edits-{i}", "normal", "batch_edits", None)


def _reread_after_edit(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    path = _file(i + 7)
    b.grep("class Session", "src")
    for _ in range(rng.randint(5, 8)):
        b.read(path)
        b.edit(path)
    b.bash(f"pytest -q {_test_file(i + 7)}", output="8 passed")
    return b.build(f"reread_after_edit-{i}", "normal", "reread_after_edit", None)


def _noisy_durations(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    k = i * 41
    for j in range(rng.randint(45, 60)):
        k += 1
        if j % rng.randint(4, 7) == 3:
            b.edit(_file(k))
            continue
        if j % 3:
            b.info(k)
        else:
            b.bash(f"pytest -q {_test_file(k)}", output="ok")
        b.steps[-1] = _with_duration(b.steps[-1], int(min(120_000, rng.lognormvariate(7.6, 0.9))))
        b.now = b.steps[-1].end_ms
    return b.build(f"noisy_durations-{i}", "normal", "noisy_durations", None)


def _flaky_errors(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    k = i * 43
    n = rng.randint(30, 45)
    burst_at = rng.randint(10, n - 10)
    for j in range(n):
        k += 1
        if j % 6 == 5:
            b.edit(_file(k))
        elif burst_at <= j < burst_at + 3 or rng.random() < 0.12:
            b.bash(f"curl -s https://pypi.org/simple/pkg{k}/", ok=False, error=ERRORS[k % len(ERRORS)])
        else:
            b.info(k)
    return b.build(f"flaky_errors-{i}", "normal", "flaky_errors", None)


def _status_checks(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    for j in range(rng.randint(6, 10)):
        b.read(_file(i + j))
        b.edit(_file(i + j))
        b.bash("git status", output=f"M {_file(i + j)}")
        b.bash("git diff --stat", output=f" {j + 1} files changed")
    return b.build(f"status_checks-{i}", "normal", "status_checks", None)


def _review_task(rng: random.Random, i: int) -> Trace:
    b = _Builder(rng)
    end = b.now + rng.randint(30, 40) * 60_000
    k = i * 53
    while b.now < end:
        k += 1
        b.info(k)
        b.steps[-1] = _shift(b.steps[-1], int(rng.uniform(10.0, 35.0) * 1000))
        b.now = b.steps[-1].end_ms
    b.message("Review: the session handling in src/app/session.py has three issues ...")
    return b.build(
        f"review_task-{i}", "normal", "review_task", None, hard=True, note="read-only by design: no edit is progress"
    )


_GENERATORS: tuple[tuple[str, int, Any], ...] = (
    ("repeat_identical", 8, _repeat_identical),
    ("cycle_ab", 6, lambda rng, i: _cycle(rng, i, 2)),
    ("cycle_abc", 6, lambda rng, i: _cycle(rng, i, 3)),
    ("repeat_error", 6, _repeat_error),
    ("error_rate", 5, _error_rate),
    ("slowdown", 5, _slowdown),
    ("no_progress", 6, _no_progress),
    ("monologue", 4, _monologue),
    ("content_chant", 4, _content_chant),
    ("context_loop", 4, _context_loop),
    ("edit_cycle", 5, _edit_cycle),
    ("exploration", 8, _exploration),
    ("edit_test_fix", 8, _edit_test_fix),
    ("polling_build", 4, _polling_build),
    ("thinking_pause", 5, _thinking_pause),
    ("read_burst", 6, _read_burst),
    ("batch_edits", 4, _batch_edits),
    ("reread_after_edit", 4, _reread_after_edit),
    ("noisy_durations", 4, _noisy_durations),
    ("flaky_errors", 4, _flaky_errors),
    ("status_checks", 3, _status_checks),
    ("review_task", 2, _review_task),
)


def traces(seed: int = 3) -> list[Trace]:
    """The whole labelled set (drift traces first), the same for the same ``seed``."""
    out = []
    for g, (name, count, make) in enumerate(_GENERATORS):
        for i in range(count):
            trace = make(random.Random(seed * 1_000_003 + g * 1_009 + i), i)
            assert trace.pattern == name, (trace.pattern, name)
            out.append(trace)
    return out


if __name__ == "__main__":
    from collections import Counter

    every = traces()
    print(Counter((t.label == "normal", t.pattern) for t in every))
    print(sum(t.is_drift for t in every), "drift,", sum(not t.is_drift for t in every), "normal")
