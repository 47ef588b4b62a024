"""The Clinic's one error: ``ClinicGaveUp``, an ``OperationError`` (see ``phoenix_protocol.core._errors``).

Failures the Clinic does not treat (credentials, an unknown model, an exhausted quota, a usage
mistake, a cancellation) are not wrapped: they propagate unchanged, as pydantic-ai raised them.
"""

from __future__ import annotations

from collections.abc import Sequence

from phoenix_protocol.clinic._models import Diagnosis, Episode, Prescription, TraumaContext
from phoenix_protocol.core._errors import OperationError

__all__ = ["ClinicGaveUp"]


class ClinicGaveUp(OperationError):
    """The agent kept failing: every recovery was spent, or the Clinic prescribed ``abort``.

    ``episode`` holds every visit; ``traumas`` every failure (one more than the diagnoses when the
    last rerun failed too), ``diagnoses`` and ``prescriptions`` one per visit. The last failure is
    chained as ``__cause__``.
    """

    def __init__(self, episode: Episode, *, errors: Sequence[BaseException] = ()) -> None:
        self.episode = episode
        self.errors: list[BaseException] = list(errors)
        """Every failure, as raised (the first is the original error, the last is ``__cause__``)."""
        super().__init__(_message(episode))

    @property
    def original_error(self) -> BaseException | None:
        """The failure that started the episode, as raised."""
        return self.errors[0] if self.errors else None

    @property
    def traumas(self) -> list[TraumaContext]:
        """Every failure, in order."""
        return self.episode.traumas

    @property
    def diagnoses(self) -> list[Diagnosis]:
        """One diagnosis per visit."""
        return [v.diagnosis for v in self.episode.visits]

    @property
    def prescriptions(self) -> list[Prescription]:
        """One prescription per visit."""
        return [v.prescription for v in self.episode.visits]


def _message(episode: Episode) -> str:
    visits = episode.visits
    last = episode.traumas[-1] if episode.traumas else None
    aborted = bool(visits) and visits[-1].outcome == "aborted"
    if aborted:
        head = f"the Clinic gave up: it prescribed abort at visit {len(visits)}"
    elif not visits:
        head = f"the agent failed and the Clinic had no recovery to spend (max_recoveries={episode.max_recoveries})"
    else:
        head = f"the Clinic gave up after {len(visits)} recover{'y' if len(visits) == 1 else 'ies'}"
    steps = "; ".join(
        f"{v.attempt}: {v.diagnosis.root_cause} -> {v.prescription.action} ({v.outcome or 'pending'})" for v in visits
    )
    error = ""
    first = episode.traumas[0] if episode.traumas else None
    if first is not None and last is not None and first is not last:
        text = " ".join(first.error_message.split())
        error += f"; first error {first.error_type}: {text[:200]}"
    if last is not None:
        text = " ".join(last.error_message.split())
        error += f"; last error {last.error_type}: {text[:300]}"
    tail = " (see .traumas, .diagnoses and .prescriptions)"
    return head + (f" [{steps}]" if steps else "") + error + tail
