"""The Clinic: failure recovery for pydantic-ai agents (seed 001, "The Phoenix Protocol").

A failed run is treated as a clinical case: **triage** (capture the trauma context), **diagnosis**
(a deterministic fast path from pydantic-ai's own errors, else the Clinic agent), **prescription**
(retry with backoff, a modified prompt or instructions, a summarized history, or abort) and
**rehabilitation** (the rerun)::

    from phoenix_protocol.clinic import Clinic, recoverable_run

    result = await recoverable_run(agent, "What is the weather in Paris?", max_recoveries=2,
                                   clinic=Clinic("openai:gpt-5.2"))

Needs the ``[clinic]`` extra (``pip install 'phoenix-protocol[clinic]'``, which installs
``pydantic-ai-slim`` >= 2.68, < 3). Never imported by ``phoenix_protocol`` itself, nor by the hooks.
"""

from __future__ import annotations

try:
    import pydantic_ai as _pydantic_ai
except ImportError as _exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "phoenix_protocol.clinic needs pydantic-ai 2.x, which is not installed: pip install 'phoenix-protocol[clinic]'"
    ) from _exc

if not str(getattr(_pydantic_ai, "__version__", "2")).startswith("2."):  # pragma: no cover
    raise ImportError(
        f"phoenix_protocol.clinic needs pydantic-ai 2.x, found {_pydantic_ai.__version__}: "
        "pip install 'phoenix-protocol[clinic]'"
    )

from phoenix_protocol.clinic._diagnose import CLINIC_GUIDE, CLINIC_SYSTEM_PROMPT
from phoenix_protocol.clinic._errors import ClinicGaveUp
from phoenix_protocol.clinic._models import (
    ACTIONS,
    ROOT_CAUSES,
    Action,
    ClinicReport,
    Diagnosis,
    Episode,
    Prescription,
    RootCause,
    Spent,
    ToolCall,
    TraumaContext,
    Visit,
)
from phoenix_protocol.clinic._prescribe import SUMMARIZER_PROMPT, Backoff
from phoenix_protocol.clinic._progress import IDEMPOTENT_KEY, resumable
from phoenix_protocol.clinic._run import (
    Clinic,
    ClinicEvent,
    Diagnoser,
    Remedy,
    clinic_episode,
    provider_retries,
    recoverable_run,
    recoverable_run_sync,
)

__all__ = [
    "ACTIONS",
    "CLINIC_GUIDE",
    "CLINIC_SYSTEM_PROMPT",
    "IDEMPOTENT_KEY",
    "ROOT_CAUSES",
    "SUMMARIZER_PROMPT",
    "Action",
    "Backoff",
    "Clinic",
    "ClinicEvent",
    "ClinicGaveUp",
    "ClinicReport",
    "Diagnoser",
    "Diagnosis",
    "Episode",
    "Prescription",
    "Remedy",
    "RootCause",
    "Spent",
    "ToolCall",
    "TraumaContext",
    "Visit",
    "clinic_episode",
    "provider_retries",
    "recoverable_run",
    "recoverable_run_sync",
    "resumable",
]
