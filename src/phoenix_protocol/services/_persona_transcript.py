"""``phx persona check TRANSCRIPT``: the persona check (``_persona.check_persona``) over each
assistant message of a Claude Code transcript (its JSONL file).

Claude Code writes an assistant message as one or more lines of ``{"type": "assistant",
"message": {"id", "role": "assistant", "content": [...]}}`` (one per content block, sharing the
message id). A message's ``text`` blocks are its text; its ``tool_use`` blocks of a shell tool
(``Bash``) give the commands it ran, which the forbidden-action rules read as acts. Each message
is checked on its own (one drifted answer is not diluted by the others), nothing is recorded: the
check reads the transcript and the identity, and changes no state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phoenix_protocol.core._errors import UsageError

if TYPE_CHECKING:
    from phoenix_protocol.services._agent import Agent
    from phoenix_protocol.services._persona import PersonaScorer

__all__ = ["MAX_TRANSCRIPT_BYTES", "assistant_messages", "check_transcript"]

MAX_TRANSCRIPT_BYTES = 256 * 1024 * 1024
SHELL_TOOLS = frozenset({"Bash"})


def assistant_messages(path: str) -> list[dict[str, Any]]:
    """The assistant messages of a Claude Code transcript, in order: ``{"id", "line", "at",
    "text", "commands"}`` (blocks of one message id joined). ``UsageError`` for a file that cannot
    be read; lines that are not JSON are skipped."""
    from phoenix_protocol.core._jsonio import JSONError, loads

    try:
        with open(path, "rb") as f:
            data = f.read(MAX_TRANSCRIPT_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read the transcript {path}: {exc.strerror or exc}.") from None
    if len(data) > MAX_TRANSCRIPT_BYTES:
        raise UsageError(f"the transcript {path} is larger than {MAX_TRANSCRIPT_BYTES // (1024 * 1024)} MB.")
    messages: dict[str, dict[str, Any]] = {}
    for number, raw in enumerate(data.split(b"\n"), 1):
        if b'"assistant"' not in raw:
            continue
        try:
            record = loads(raw)
        except JSONError:
            continue
        if not isinstance(record, dict) or record.get("type") != "assistant":
            continue
        message = record.get("message")
        if not isinstance(message, dict):
            continue
        key = str(message.get("id") or record.get("uuid") or f"line-{number}")
        entry = messages.setdefault(
            key, {"id": key, "line": number, "at": record.get("timestamp"), "texts": [], "commands": []}
        )
        content = message.get("content")
        if isinstance(content, str):
            entry["texts"].append(content)
            continue
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                entry["texts"].append(block["text"])
            elif block.get("type") == "tool_use" and block.get("name") in SHELL_TOOLS:
                tool_input = block.get("input")
                command = tool_input.get("command") if isinstance(tool_input, dict) else None
                if isinstance(command, str):
                    entry["commands"].append(command)
    out = []
    for entry in messages.values():
        text = "\n\n".join(t for t in entry.pop("texts") if t.strip())
        if text or entry["commands"]:
            out.append({**entry, "text": text})
    return out


def check_transcript(
    agent: Agent,
    path: str,
    *,
    scorer: PersonaScorer | str | None = None,
    threshold: float | None = None,
) -> dict[str, Any]:
    """Check each assistant message of the transcript at ``path`` against ``agent``'s identity
    core: ``{"transcript", "messages": checked, "failed": n, "passed": bool, "results": [...]}``,
    a result per message (``id``, ``line``, ``at``, ``passed``, ``score``, ``signals``, and the
    start of its text). A core with nothing to check against: ``skipped`` with the reason."""
    from phoenix_protocol.services._persona import check_persona, get_scorer

    chosen = get_scorer(scorer) if isinstance(scorer, str) else scorer
    results = []
    skipped: str | None = None
    for message in assistant_messages(path):
        texts = [message["text"]] if message["text"] else []
        check = check_persona(
            agent, texts, scorer=chosen, threshold=threshold, record=False, commands=message["commands"]
        )
        if check.details.get("skipped"):
            skipped = str(check.details.get("note"))
            if "core" in skipped:
                break
            continue
        text = " ".join(message["text"].split())
        results.append(
            {
                "id": message["id"],
                "line": message["line"],
                "at": message["at"],
                "passed": check.passed,
                "score": round(check.score, 4),
                "scorer": check.scorer,
                "signals": check.details.get("signals", []),
                "text": text if len(text) <= 160 else text[:159] + "…",
            }
        )
    failed = sum(1 for r in results if not r["passed"])
    out: dict[str, Any] = {
        "transcript": path,
        "messages": len(results),
        "failed": failed,
        "passed": failed == 0,
        "results": results,
    }
    if skipped is not None and not results:
        out["skipped"] = skipped
    return out
