"""The Clinic's episodes in an agent's ops log: the event's shape, and reading episodes back.

``phoenix_protocol.clinic`` (which needs pydantic-ai) writes one ``clinic_episode`` event per
recovery attempt; this module (which does not) reads them back for ``phx clinic report``, so the
report works wherever Phoenix is installed, with or without the ``[clinic]`` extra.

An event's ``meta``::

    {"schema_version": 1, "episode": "3f2a9c1d0b7e", "attempt": 1, "max_recoveries": 2,
     "agent_name": "weather", "prompt": "What is the weather in Paris?",
     "root_cause": "hallucinated_tool", "confidence": 0.98, "source": "fast_path",
     "action": "modify_prompt", "delay_seconds": null, "outcome": "healed",
     "error_type": "UnexpectedModelBehavior", "error": "Tool 'teleport' exceeded max retries ...",
     "final": true, "episode_outcome": "healed"}

``outcome`` is the visit's (``healed``, ``relapsed``, ``aborted``, or ``untreated`` when no
recovery was allowed); ``episode_outcome`` (``healed`` or ``gave_up``) is set on the last event of
an episode. Strings in ``meta`` pass through the ops log's secret redaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phoenix_protocol.agent._seqlog import LogProblem
    from phoenix_protocol.services._agent import Agent

__all__ = ["CHECKPOINT_SECTION", "EVENT", "SCHEMA_VERSION", "EpisodeSummary", "read_episodes"]

EVENT = "clinic_episode"
"""The ops event written once per recovery attempt."""
SCHEMA_VERSION = 1
"""The version of the event's ``meta``; newer ones are listed but marked as such."""
CHECKPOINT_SECTION = "clinic"
"""The recovery checkpoint's section (under ``extensions``) holding the whole episode."""


@dataclass
class EpisodeSummary:
    """One episode as the ops log tells it."""

    id: str
    agent_id: str
    started_at: str
    prompt: str | None = None
    agent_name: str | None = None
    max_recoveries: int | None = None
    visits: list[dict[str, Any]] = field(default_factory=list)
    outcome: str = "in_progress"
    """``healed``, ``gave_up``, or ``in_progress`` (no final event: still running, or the process died)."""

    @property
    def root_causes(self) -> list[str]:
        return [str(v.get("root_cause")) for v in self.visits if v.get("root_cause")]

    @property
    def actions(self) -> list[str]:
        return [str(v.get("action")) for v in self.visits if v.get("action")]

    def as_dict(self) -> dict[str, Any]:
        return {
            "episode": self.id,
            "agent": self.agent_id,
            "started_at": self.started_at,
            "agent_name": self.agent_name,
            "prompt": self.prompt,
            "max_recoveries": self.max_recoveries,
            "recoveries": sum(1 for v in self.visits if v.get("attempt", 0)),
            "root_causes": self.root_causes,
            "actions": self.actions,
            "outcome": self.outcome,
            "visits": self.visits,
        }


def read_episodes(agent: Agent) -> tuple[list[EpisodeSummary], list[LogProblem]]:
    """Every Clinic episode in ``agent``'s ops log (across rotations), oldest first."""
    events, problems = agent.ops.read()
    episodes: dict[str, EpisodeSummary] = {}
    for event in events:
        if event.get("event") != EVENT:
            continue
        meta = event.get("meta")
        if not isinstance(meta, dict) or not isinstance(meta.get("episode"), str):
            continue
        episode = episodes.get(meta["episode"])
        if episode is None:
            episode = EpisodeSummary(meta["episode"], agent.id, str(event.get("ts", "")))
            episodes[episode.id] = episode
        episode.prompt = episode.prompt or meta.get("prompt")
        episode.agent_name = episode.agent_name or meta.get("agent_name")
        episode.max_recoveries = meta.get("max_recoveries", episode.max_recoveries)
        visit = {
            k: meta.get(k)
            for k in (
                "attempt",
                "root_cause",
                "confidence",
                "source",
                "action",
                "delay_seconds",
                "outcome",
                "error_type",
                "error",
            )
        }
        visit["seq"] = event.get("seq")
        visit["ts"] = event.get("ts")
        version = meta.get("schema_version", SCHEMA_VERSION)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            visit["newer_schema"] = version
        episode.visits.append(visit)
        if meta.get("final"):
            episode.outcome = str(meta.get("episode_outcome") or "gave_up")
    return list(episodes.values()), problems
