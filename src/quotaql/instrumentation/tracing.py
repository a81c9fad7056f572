"""OpenTelemetry spans: one ``quotaql.check`` span per operation, from an injected provider.

Nothing here runs unless a ``TracerProvider`` is given: with tracing off, quotaql creates
no span, no attribute dictionary and imports nothing from OpenTelemetry.
"""

from __future__ import annotations

from typing import Any

from quotaql.instrumentation import names

__all__ = ["Tracing"]


class Tracing:
    """Starts ``quotaql.check`` spans as children of the current span (the operation's).

    Args:
        tracer_provider: an OpenTelemetry ``TracerProvider`` (the SDK's, or
            ``opentelemetry.trace.get_tracer_provider()`` for the global one).
    """

    def __init__(self, tracer_provider: Any) -> None:
        from quotaql.instrumentation.metrics import _quotaql_version  # noqa: PLC0415

        self._tracer = tracer_provider.get_tracer(names.TRACER_NAME, _quotaql_version())

    def start(self) -> Any:
        """A new ``quotaql.check`` span (not made current: quotaql starts no work under it)."""
        return self._tracer.start_span(names.SPAN_CHECK)
