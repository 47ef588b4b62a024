"""Offline re-implementations of two well-known agent loop detectors, for ``drift_compare.py``.

Both are ported rule by rule from their sources (read, not recalled); each is fed a trace of
``drift_traces.Step`` the way its agent would see it, and answers at which step it would first
stop the agent (``Detection``) or ``None``.

Gemini CLI: ``LoopDetectionService``
    google-gemini/gemini-cli, packages/core/src/services/loopDetectionService.ts (as stored at
    commit 022f913dc748df9dbc4d88c6555fe475606cb379). Constants: ``TOOL_CALL_LOOP_THRESHOLD = 5``,
    ``CONTENT_LOOP_THRESHOLD = 10``, ``CONTENT_CHUNK_SIZE = 50``, ``MAX_HISTORY_LENGTH = 5000``.

    * tool-call loop (``checkToolCallLoop``): the key is sha256(``name + ":" + JSON.stringify(args)``)
      of the raw arguments, no normalization; the same key ``TOOL_CALL_LOOP_THRESHOLD`` (5) times
      *consecutively* is a loop. Only a different tool call (or a new user prompt: ``reset``)
      resets the count; text between calls does not.
    * content loop (``checkContentLoop`` / ``analyzeContentChunksForLoop``): streamed text is
      appended to a history (truncated to the last 5,000 characters); every 50-character window
      (sliding by one character) is hashed; a window seen ``CONTENT_LOOP_THRESHOLD`` (10) times
      whose last 10 occurrences are on average at most 5 x 50 = 250 characters apart and whose
      9 "periods" (the text between consecutive occurrences) have at most 10 // 2 = 5 distinct
      values is a loop. A chunk with a code fence, table, list item, heading, blockquote or a
      divider resets the tracking; text inside a code block is skipped; a tool call resets it.
    * left out: the LLM-based check (``turnStarted`` / ``checkForLoopWithLLM``: after
      ``LLM_CHECK_AFTER_TURNS`` = 30 turns in one prompt, every ``DEFAULT_LLM_CHECK_INTERVAL`` =
      10 (5..15) turns, a model judges the last 20 turns, confidence >= 0.9, double-checked by a
      second model). It needs the model and cannot run offline, so it is not part of this
      baseline; it would be the only Gemini rule able to see slowdown-free "busy without
      progress" or cycles, and only after 30 turns.

    Every trace is one user prompt (``reset`` is called once, at the start). The text of an
    assistant message is streamed in chunks of 17-60 characters (``_stream``), like the API's
    deltas; message-only turns in one prompt keep the content history (a continuation,
    ``checkNextSpeaker``, keeps the prompt id, so there is no reset between them).

OpenHands: ``StuckDetector``
    OpenHands/OpenHands, openhands/controller/stuck.py (V0 controller; stored at commit
    331a1a43145f185f7596431e2a19668a0e0a6daa, which marks it legacy: V1 moved the agent core to
    the Software Agent SDK, openhands-sdk/openhands/sdk/conversation/stuck_detector.py, with the
    same default thresholds in ``StuckDetectionThresholds``: action_observation=4,
    action_error=3, monologue=3, alternating_pattern=6, and the context-window rule disabled
    (a TODO)). ``is_stuck(headless_mode=True)``: the whole history, user messages and null
    events filtered out, checked after every step (the controller calls it before each agent
    step). Scenarios:

    1. the last 4 actions all equal and the last 4 observations all equal;
    2. the last 3 actions equal and the last 3 observations all ``ErrorObservation`` (the
       IPython ``SyntaxError`` sub-case needs Jupyter cells: not applicable here);
    3. monologue: the last 3 agent ``MessageAction`` equal, no observation between them;
    4. the last 6 actions and 6 observations alternate A, B, A, B, A, B (history >= 6 events);
    5. context window: >= 10 ``AgentCondensationObservation`` and, among the last 10, two with no
       other event between them (history >= 10 events);
    6. empty responses: 3 consecutive empty agent messages.

    Equality is ``_eq_no_pid``: ``CmdOutputObservation`` compare only ``command`` and
    ``exit_code`` (not the output); everything else is dataclass equality (all fields, the
    action's ``thought`` included, no whitespace normalization; ids and timeouts are not fields).
    Mapping of Claude Code's tools: ``Bash`` -> ``CmdRunAction(command, thought)`` with a
    ``CmdOutputObservation`` (a failing command is an observation with its exit code, not an
    ``ErrorObservation``; ``description`` has no counterpart and ``timeout`` is set by
    ``set_hard_timeout``, outside the compared fields); other tools -> an action comparing the
    whole input and the thought, with an observation comparing the output, or an
    ``ErrorObservation`` comparing the error text; an assistant message without a call ->
    ``MessageAction(source=agent)``; a context-window error -> ``AgentCondensationObservation``.
    Claude Code's ``BashOutput`` (poll a background shell) has no exact counterpart and is
    treated like any other tool.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from drift_traces import Step, Trace

__all__ = ["Detection", "GeminiLoopDetection", "OpenHandsStuckDetector", "run_gemini", "run_openhands"]


@dataclass(frozen=True)
class Detection:
    """Where a detector first fired: the trace step, the rule, a detail."""

    index: int
    kind: str
    detail: str = ""


# ------------------------------------------------------------------------------------------------
# Gemini CLI

TOOL_CALL_LOOP_THRESHOLD = 5
CONTENT_LOOP_THRESHOLD = 10
CONTENT_CHUNK_SIZE = 50
MAX_HISTORY_LENGTH = 5000

# checkContentLoop's element checks, with JavaScript's semantics (note `[*-+]` is the range
# '*'..'+', so a "- " bullet is not a list item there; `[+-_...]` is the range '+'..'_').
_TABLE = re.compile(r"(^|\n)\s*(\|.*\||[|+-]{3,})")
_LIST = re.compile(r"(^|\n)\s*[*-+]\s")
_NUMBERED = re.compile(r"(^|\n)\s*\d+\.\s")
_HEADING = re.compile(r"(^|\n)#+\s")
_QUOTE = re.compile(r"(^|\n)>\s")
_DIVIDER = re.compile(r"[+-_=*\u2500-\u257F]+")  # JS /^...+$/ without the m flag: fullmatch


class GeminiLoopDetection:
    """The deterministic part of Gemini CLI's ``LoopDetectionService`` (no LLM check)."""

    def __init__(self) -> None:
        self.last_tool_call_key: str | None = None
        self.tool_call_repetition_count = 0
        self.history = ""
        self.stats: dict[str, list[int]] = {}  # the chunk itself stands for its sha256
        self.last_index = 0
        self.in_code_block = False
        self.loop_detected = False

    def reset_content_tracking(self) -> None:
        self.history = ""
        self.stats.clear()
        self.last_index = 0

    def tool_call(self, name: str, args: dict[str, object]) -> bool:
        """``addAndCheck`` of a ``ToolCallRequest``."""
        if self.loop_detected:
            return True
        self.reset_content_tracking()
        # JSON.stringify: insertion order, no spaces, non-ASCII kept.
        key = name + ":" + json.dumps(args, separators=(",", ":"), ensure_ascii=False)
        if self.last_tool_call_key == key:
            self.tool_call_repetition_count += 1
        else:
            self.last_tool_call_key = key
            self.tool_call_repetition_count = 1
        self.loop_detected = self.tool_call_repetition_count >= TOOL_CALL_LOOP_THRESHOLD
        return self.loop_detected

    def content(self, content: str) -> bool:
        """``addAndCheck`` of a ``Content`` event (one streamed chunk)."""
        if self.loop_detected:
            return True
        fences = content.count("```")
        is_divider = _DIVIDER.fullmatch(content) is not None
        if (
            fences
            or _TABLE.search(content)
            or _LIST.search(content)
            or _NUMBERED.search(content)
            or _HEADING.search(content)
            or _QUOTE.search(content)
            or is_divider
        ):
            self.reset_content_tracking()
        was_in_code_block = self.in_code_block
        if fences % 2:
            self.in_code_block = not self.in_code_block
        if was_in_code_block or self.in_code_block or is_divider:
            return False
        self.history += content
        self._truncate()
        self.loop_detected = self._analyze()
        return self.loop_detected

    def _truncate(self) -> None:
        if len(self.history) <= MAX_HISTORY_LENGTH:
            return
        cut = len(self.history) - MAX_HISTORY_LENGTH
        self.history = self.history[cut:]
        self.last_index = max(0, self.last_index - cut)
        for chunk in list(self.stats):
            kept = [i - cut for i in self.stats[chunk] if i - cut >= 0]
            if kept:
                self.stats[chunk] = kept
            else:
                del self.stats[chunk]

    def _analyze(self) -> bool:
        while self.last_index + CONTENT_CHUNK_SIZE <= len(self.history):
            chunk = self.history[self.last_index : self.last_index + CONTENT_CHUNK_SIZE]
            if self._loop_for_chunk(chunk):
                return True
            self.last_index += 1
        return False

    def _loop_for_chunk(self, chunk: str) -> bool:
        indices = self.stats.get(chunk)
        if indices is None:
            self.stats[chunk] = [self.last_index]
            return False
        if self.history[indices[0] : indices[0] + CONTENT_CHUNK_SIZE] != chunk:  # isActualContentMatch
            return False
        indices.append(self.last_index)
        if len(indices) < CONTENT_LOOP_THRESHOLD:
            return False
        recent = indices[-CONTENT_LOOP_THRESHOLD:]
        if (recent[-1] - recent[0]) / (CONTENT_LOOP_THRESHOLD - 1) > CONTENT_CHUNK_SIZE * 5:
            return False
        periods = {self.history[recent[k] : recent[k + 1]] for k in range(len(recent) - 1)}
        return len(periods) <= CONTENT_LOOP_THRESHOLD // 2


_STREAM_SIZES = (23, 41, 17, 60, 35, 48, 29)


def _stream(text: str) -> list[str]:
    """Split an assistant message into streamed deltas (deterministic sizes, 17-60 chars)."""
    out, pos, k = [], 0, 0
    while pos < len(text):
        size = _STREAM_SIZES[k % len(_STREAM_SIZES)]
        out.append(text[pos : pos + size])
        pos += size
        k += 1
    return out


def run_gemini(trace: Trace) -> Detection | None:
    """Feed a trace to Gemini CLI's rules (one prompt); the first step at which it fires."""
    service = GeminiLoopDetection()
    for i, step in enumerate(trace.steps):
        if step.text:
            for delta in _stream(step.text):
                if service.content(delta):
                    return Detection(i, "content_loop", "repeating content")
        if step.kind == "tool" and service.tool_call(step.tool, step.input or {}):
            return Detection(i, "tool_call_loop", f"{step.tool} {TOOL_CALL_LOOP_THRESHOLD} times in a row")
    return None


# ------------------------------------------------------------------------------------------------
# OpenHands


@dataclass(frozen=True)
class _Event:
    cls: str  # OpenHands event class
    is_action: bool
    fields: tuple[object, ...]  # what _eq_no_pid compares (with the class)
    content: str = ""  # MessageAction content (empty-response rule)

    def same(self, other: _Event) -> bool:
        return self.cls == other.cls and self.fields == other.fields


CONDENSATION = _Event("AgentCondensationObservation", False, ("Trimming prompt to meet context window limitations",))


def _events(step: Step) -> list[_Event]:
    if step.kind == "message":
        text = step.text or ""
        return [_Event("MessageAction", True, (text,), text)]
    if step.kind == "context_error":
        return [CONDENSATION]
    inp = step.input or {}
    thought = step.text or ""
    if step.tool == "Bash":
        command = str(inp.get("command", ""))
        action = _Event("CmdRunAction", True, (command, thought))
        code = step.exit_code if step.exit_code is not None else (0 if step.ok else 1)
        return [action, _Event("CmdOutputObservation", False, (command, code))]
    action = _Event("Action:" + step.tool, True, (json.dumps(inp, sort_keys=True), thought))
    if step.ok:
        return [action, _Event("Observation:" + step.tool, False, (step.output,))]
    return [action, _Event("ErrorObservation", False, (step.error or "",))]


class OpenHandsStuckDetector:
    """``StuckDetector.is_stuck(headless_mode=True)`` over a growing history."""

    def __init__(self) -> None:
        self.history: list[_Event] = []

    def _last(self, n: int) -> tuple[list[_Event], list[_Event]]:
        actions: list[_Event] = []
        observations: list[_Event] = []
        for event in reversed(self.history):
            if event.is_action and len(actions) < n:
                actions.append(event)
            elif not event.is_action and len(observations) < n:
                observations.append(event)
            if len(actions) == n and len(observations) == n:
                break
        return actions, observations

    def is_stuck(self) -> str | None:
        """The name of the scenario that fires, or ``None``."""
        history = self.history
        if len(history) < 3:
            return None
        actions, observations = self._last(4)
        # scenario 1: same action, same observation, 4 times
        if (
            len(actions) == 4
            and len(observations) == 4
            and all(actions[0].same(a) for a in actions)
            and all(observations[0].same(o) for o in observations)
        ):
            return "repeating_action_observation"
        # scenario 2: same action, error observations, 3 times
        if (
            len(actions) >= 3
            and len(observations) >= 3
            and all(actions[0].same(a) for a in actions[:3])
            and all(o.cls == "ErrorObservation" for o in observations[:3])
        ):
            return "repeating_action_error"
        # scenario 3: monologue
        messages = [(i, e) for i, e in enumerate(history) if e.cls == "MessageAction"]
        if len(messages) >= 3:
            last3 = messages[-3:]
            if all(last3[0][1].same(m[1]) for m in last3):
                first, last = last3[0][0], last3[-1][0]
                if not any(not e.is_action for e in history[first + 1 : last]):
                    return "monologue"
        # scenario 4: A, B, A, B, A, B over the last six actions and observations
        if len(history) >= 6:
            actions6, observations6 = self._last(6)
            if len(actions6) == 6 and len(observations6) == 6:
                a, o = actions6, observations6
                if (
                    a[0].same(a[2])
                    and a[0].same(a[4])
                    and a[1].same(a[3])
                    and a[1].same(a[5])
                    and o[0].same(o[2])
                    and o[0].same(o[4])
                    and o[1].same(o[3])
                    and o[1].same(o[5])
                ):
                    return "repeating_action_observation_pattern"
        # scenario 5: context window errors
        if len(history) >= 10:
            condensations = [i for i, e in enumerate(history) if e.cls == CONDENSATION.cls]
            if len(condensations) >= 10:
                last10 = condensations[-10:]
                for j in range(len(last10) - 1):
                    between = history[last10[j] + 1 : last10[j + 1]]
                    if not any(e.cls != CONDENSATION.cls for e in between):
                        return "context_window_error"
        # scenario 6: empty responses
        empty = 0
        for event in reversed(history):
            if event.cls == "MessageAction":
                if event.content.strip():
                    break
                empty += 1
            else:
                break
        if empty >= 3:
            return "empty_response_loop"
        return None


def run_openhands(trace: Trace) -> Detection | None:
    """Feed a trace to OpenHands' stuck detector; the first step after which it is stuck."""
    detector = OpenHandsStuckDetector()
    for i, step in enumerate(trace.steps):
        detector.history.extend(_events(step))
        found = detector.is_stuck()
        if found:
            return Detection(i, found)
    return None
