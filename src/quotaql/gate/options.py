"""The gate's keyword options as one type, for the adapters that pass them on.

An adapter (:class:`quotaql.plugin.CostLimiter`, :class:`quotaql.ariadne.CostLimiter`)
takes every keyword of :class:`~quotaql.gate.Gate` but ``config`` and hands them to the
gate it builds. Typed as ``**options: Unpack[GateOptions]``, they are checked where the
adapter is built: ``mypy --strict`` and editors see ``CostLimiter(storge=...)`` or
``CostLimiter(pressure=0.5)`` as errors, not the gate's ``TypeError`` at run time.
``GateOptions`` holds exactly the gate's keyword-only parameters with their types (a test
keeps the two in step), ``FromConfigOptions`` all of them but the ``config_path`` that a
``from_config`` sets itself; what each means is said on :class:`~quotaql.gate.Gate`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    import os
    from collections.abc import Callable

    from quotaql.gate.operation import Operation
    from quotaql.gate.tiers import TierResolver
    from quotaql.instrumentation.logs import StructuredLog
    from quotaql.instrumentation.metrics import PrometheusMetrics
    from quotaql.limiter import CircuitBreaker, Recorder
    from quotaql.storage.leases import AsyncLeases, Leases

__all__ = ["AdmitOptions", "FromConfigOptions", "GateOptions"]


class FromConfigOptions(TypedDict, total=False):
    """The keyword-only parameters of :class:`~quotaql.gate.Gate` that a ``from_config``
    takes: all but ``config_path`` (the path it is given is that)."""

    storage: Any
    identify: Callable[[Any], Any] | None
    key_resolver: Callable[[str, Any], Any] | None
    principal: Callable[[Any], Any] | None
    tier_resolver: TierResolver | None
    metrics: PrometheusMetrics | None
    tracer_provider: Any
    log: StructuredLog | None
    recorder: Recorder | None
    breaker: CircuitBreaker | None
    pressure: Callable[[], float] | None
    leases: Leases | AsyncLeases | None


class GateOptions(FromConfigOptions, total=False):
    """The keyword-only parameters of :class:`~quotaql.gate.Gate`, each optional."""

    config_path: str | os.PathLike[str] | None


class AdmitOptions(TypedDict, total=False):
    """The keywords of :meth:`~quotaql.gate.Gate.admit` (and ``admit_async``): where the
    operation comes from (see there)."""

    context: Any
    request: Any
    op: Operation | None
