"""OpenTelemetry spans for a Clinic episode, each run and each visit: through the user's tracer
provider (logfire, or any OpenTelemetry SDK) when ``opentelemetry`` is importable; no-ops otherwise.

No new dependency: ``opentelemetry-api`` comes with pydantic-ai; without a configured SDK its
tracer is a no-op, as for pydantic-ai's own instrumentation.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

__all__ = ["Span", "span"]

_trace: Any
try:
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - opentelemetry-api comes with pydantic-ai
    _trace = None


class Span:
    """A span's attributes setter (a no-op without OpenTelemetry)."""

    def __init__(self, inner: Any = None) -> None:
        self._inner = inner

    def set(self, key: str, value: str | int | float | bool) -> None:
        """Set an attribute on the span."""
        if self._inner is not None:
            self._inner.set_attribute(key, value)


@contextmanager
def span(name: str, attributes: Mapping[str, str | int | float | bool]) -> Iterator[Span]:
    """A span named ``name`` around the block (exceptions recorded by OpenTelemetry itself)."""
    if _trace is None:  # pragma: no cover
        yield Span()
        return
    tracer = _trace.get_tracer("phoenix_protocol.clinic")
    with tracer.start_as_current_span(name, attributes=dict(attributes)) as inner:
        yield Span(inner)
