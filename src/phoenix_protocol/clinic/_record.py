"""Recording episodes in a Phoenix home: one ``clinic_episode`` ops event per visit, and a recovery
checkpoint (the whole episode under ``extensions.clinic``) when the episode ends.

Nothing is written unless the caller passed ``phoenix=``. A write that fails is reported with a
``RuntimeWarning`` and never changes the run's outcome: a healed run stays healed, and a give-up
still raises ``ClinicGaveUp``.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from phoenix_protocol.clinic._models import Episode, TraumaContext, Visit
from phoenix_protocol.clinic._triage import clip
from phoenix_protocol.core._errors import PhoenixError
from phoenix_protocol.services._agent import Agent as PhoenixAgent
from phoenix_protocol.services._clinic_log import CHECKPOINT_SECTION, EVENT, SCHEMA_VERSION

if TYPE_CHECKING:
    from phoenix_protocol.services._checkpoints import CollectContext

__all__ = ["record_checkpoint", "record_visit", "resolve_phoenix"]

_STATUS = {"healed": "ok", "relapsed": "warn", "aborted": "error", "untreated": "error"}


def resolve_phoenix(phoenix: PhoenixAgent | str | bool | None) -> PhoenixAgent | None:
    """``None``/``False``: record nothing; ``True``: the agent of ``$PHOENIX_AGENT`` (or ``default``) in
    the home found from ``$PHOENIX_HOME`` or the working directory; a string: that agent id there."""
    if phoenix is None or phoenix is False:
        return None
    if phoenix is True:
        return PhoenixAgent.open()
    if isinstance(phoenix, str):
        return PhoenixAgent.open(phoenix)
    return phoenix


def _warn(what: str, exc: BaseException) -> None:
    warnings.warn(f"the Clinic could not record {what}: {exc}", RuntimeWarning, stacklevel=3)


def record_visit(
    pa: PhoenixAgent,
    episode: Episode,
    visit: Visit | None,
    *,
    final: bool,
    trauma: TraumaContext | None = None,
) -> None:
    """Append the ``clinic_episode`` event of ``visit`` (``None``: an episode with no recovery allowed)."""
    shown = visit.trauma if visit is not None else trauma
    outcome = visit.outcome if visit is not None else "untreated"
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "episode": episode.id,
        "attempt": visit.attempt if visit is not None else 0,
        "max_recoveries": episode.max_recoveries,
        "agent_name": episode.agent_name,
        "prompt": clip(" ".join(episode.original_prompt.split()), 200),
        "root_cause": visit.diagnosis.root_cause if visit is not None else None,
        "confidence": visit.diagnosis.confidence if visit is not None else None,
        "source": visit.source if visit is not None else None,
        "action": visit.prescription.action if visit is not None else None,
        "delay_seconds": visit.prescription.delay_seconds if visit is not None else None,
        "outcome": outcome,
        "error_type": shown.error_type if shown is not None else None,
        "error": clip(" ".join(shown.error_message.split()), 300) if shown is not None else None,
        "final": final,
        "episode_outcome": episode.outcome if final else None,
    }
    status = "error" if final and episode.outcome == "gave_up" else _STATUS.get(outcome or "", "warn")
    try:
        pa.record(EVENT, status, meta)
    except (PhoenixError, OSError) as exc:
        _warn(f"episode {episode.id} in the ops log", exc)


def record_checkpoint(pa: PhoenixAgent, episode: Episode) -> str | None:
    """Take the recovery checkpoint of a finished episode; returns its name (``None`` if it failed)."""
    store = pa.checkpoints
    if CHECKPOINT_SECTION not in store.sections():
        store.register(CHECKPOINT_SECTION, _collect)
    causes = ", ".join(dict.fromkeys(v.diagnosis.root_cause for v in episode.visits)) or "untreated"
    n = len(episode.visits)
    summary = f"clinic {episode.outcome.replace('_', ' ')}: {causes} after {n} recover{'y' if n == 1 else 'ies'} (episode {episode.id})"
    try:
        info = store.create("recovery", summary=summary, extra={CHECKPOINT_SECTION: episode.model_dump(mode="json")})
    except (PhoenixError, OSError) as exc:
        _warn(f"the recovery checkpoint of episode {episode.id}", exc)
        return None
    return info.name


def _collect(ctx: CollectContext) -> object:
    """The ``clinic`` section: the episode when the Clinic takes the checkpoint, else nothing."""
    return ctx.extra.get(CHECKPOINT_SECTION)
