"""What every framework adapter shares: one :class:`~quotaql.gate.Gate`, built from the
same keywords."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

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

T = TypeVar("T")


class _FromGate(Generic[T]):
    """An adapter's read-only attribute that is its gate's attribute of the same name."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, adapter: Adapter | None, owner: type | None = None) -> T:
        if adapter is None:
            return self  # type: ignore[return-value]  # the class's attribute: the descriptor
        value: T = getattr(adapter.gate, self.name)
        return value


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
        self._ready()

    def _ready(self) -> None:
        """What an adapter sets up once its gate exists (its own state, its log filters)."""

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

    config: _FromGate[Config] = _FromGate("The configuration in force.")
    storage: _FromGate[Any] = _FromGate("Where budgets live.")
    limiter: _FromGate[Limiter | AsyncLimiter] = _FromGate("The limiter in front of the storage.")
    is_async: _FromGate[bool] = _FromGate("The storage is async: only async entry points work.")
    tracing: _FromGate[Tracing | None] = _FromGate("The spans' source (None without a provider).")
    metrics: _FromGate[PrometheusMetrics | None] = _FromGate("The Prometheus metrics, if any.")

    def check(self, schema: Any) -> None:
        """Check the cost model and root-field quotas against ``schema`` (at startup).

        Raises:
            ConfigError: a weight or a field quota names a coordinate that is not in it.
        """
        self.gate.check(schema)
