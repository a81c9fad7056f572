"""What every framework adapter shares: one :class:`~quotaql.gate.Gate`, built from the
same keywords."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from quotaql.config import load_config
from quotaql.gate.core import Gate

if TYPE_CHECKING:
    import os
    from typing import Unpack

    from quotaql.config import Config
    from quotaql.gate.options import FromConfigOptions, GateOptions
    from quotaql.instrumentation.metrics import PrometheusMetrics
    from quotaql.instrumentation.tracing import Tracing
    from quotaql.limiter import AsyncLimiter, Limiter

__all__ = ["Adapter"]


class Adapter:
    """What every framework adapter shares: one :class:`Gate`, built from the same keywords.

    Every keyword but ``quiet_logs`` and ``gate`` configures the gate (see :class:`Gate`).

    Args:
        quiet_logs: drop the framework's own log record of each refusal quotaql answers
            (quotaql logs them itself, rate-limited); each adapter says which.
        gate: a gate built already (then no other keyword but ``quiet_logs``).
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        quiet_logs: bool = True,
        gate: Gate | None = None,
        **options: Unpack[GateOptions],
    ) -> None:
        if gate is not None and (config is not None or options):
            raise TypeError(f"{type(self).__name__}(gate=...) takes no other configuration")
        self.gate = gate if gate is not None else Gate(config, **options)
        self.quiet_logs = quiet_logs

    @classmethod
    def from_config(
        cls,
        path: str | os.PathLike[str],
        *,
        quiet_logs: bool = True,
        **options: Unpack[FromConfigOptions],
    ) -> Self:
        """An adapter configured by ``path`` (``quotaql.toml``), reloaded when it changes.

        Raises:
            ConfigError: the file is invalid (the error names the file, key and line).
        """
        return cls(load_config(path), config_path=path, quiet_logs=quiet_logs, **options)

    @property
    def config(self) -> Config:
        """The configuration in force."""
        return self.gate.config

    @property
    def storage(self) -> Any:
        """Where budgets live."""
        return self.gate.storage

    @property
    def limiter(self) -> Limiter | AsyncLimiter:
        """The limiter in front of the storage."""
        return self.gate.limiter

    @property
    def is_async(self) -> bool:
        """The storage is async: only the async entry points work."""
        return self.gate.is_async

    @property
    def tracing(self) -> Tracing | None:
        """The spans' source (None without a tracer provider)."""
        return self.gate.tracing

    @property
    def metrics(self) -> PrometheusMetrics | None:
        """The Prometheus metrics (None without them)."""
        return self.gate.metrics

    def check(self, schema: Any) -> None:
        """Check the cost model and root-field quotas against ``schema`` (at startup).

        Raises:
            ConfigError: a weight or a field quota names a coordinate that is not in it.
        """
        self.gate.check(schema)
