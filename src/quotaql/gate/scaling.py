"""Adaptive limits in the gate: the controller started, reconfigured and stopped with the
configuration, and each operation's debits divided by its multiplier."""

from __future__ import annotations

from typing import TYPE_CHECKING

from quotaql.adaptive import Adaptive, unexpected_error
from quotaql.errors import ConfigError
from quotaql.gate import charges
from quotaql.instrumentation import names

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from graphql import GraphQLError

    from quotaql.config import Config
    from quotaql.gate.operation import Operation
    from quotaql.gate.record import OperationRecorder

__all__ = ["Scaling"]


class Scaling:
    """The gate's adaptive limits: :attr:`adaptive` is the controller (None while
    ``[adaptive] mode`` is ``off``).

    Args:
        pressure: the gate's ``pressure`` callable (the ``callable`` source), if any.
        record: the gate's recorder (metrics and log).
    """

    _config: Config  # in force (configure: at once, and at each reload)

    def __init__(self, pressure: Callable[[], float] | None, record: OperationRecorder) -> None:
        if pressure is not None and not callable(pressure):
            raise TypeError(f"pressure must be a callable, got {type(pressure).__name__}")
        self._pressure = pressure
        self.metrics = record.metrics
        self.log = record.log
        self._say_once = record.say_once
        self.adaptive: Adaptive | None = None

    @property
    def multiplier(self) -> float:
        """What debits are divided by now (1: nothing)."""
        adaptive = self.adaptive
        return adaptive.multiplier if adaptive is not None else 1.0

    def check(self, config: Config) -> None:
        """``config``'s ``[adaptive]`` table against this gate's arguments."""
        adaptive = config.adaptive
        if adaptive.enabled and "callable" in adaptive.sources and self._pressure is None:
            raise ConfigError(
                'lists "callable", but the gate has no pressure callable: pass'
                " Gate(pressure=fn) (or the adapter's pressure= keyword), or drop it",
                file=config.source,
                key="adaptive.sources",
            )

    def multiplier_for(self, op: Operation) -> float:
        """What ``op``'s debits are divided by now: the multiplier, or its subject's own
        when its operations cause the pressure (1: nothing)."""
        adaptive = self.adaptive
        return adaptive.multiplier_for(op.subject.key) if adaptive is not None else 1.0

    def admit(self, op: Operation, adaptive: Adaptive, timed: bool) -> None:
        """Adaptive limits on ``op`` about to be debited: its start time (``timed``: its
        latency is a sample), the signal's update when a second has passed, and its debits
        divided by the multiplier (its subject's own, when lower: its operations cause the
        pressure) when its tier is one that adaptation scales."""
        config = self._config
        now = adaptive.clock()
        adaptive.poll(now)
        if timed:
            op.started = now
        multiplier = adaptive.multiplier_for(op.subject.key)
        if multiplier < 1.0 and op.tier.name in config.adaptive_tiers:
            op.base = op.costs if op.costs is not None else (op.charge,) * len(op.quotas)
            op.costs = charges.scaled(config.adaptive, op.quotas, op.costs, op.charge, multiplier)
            op.multiplier = multiplier
            if multiplier < adaptive.multiplier and op.span is not None:
                op.span.set_attribute(names.ATTR_ADAPTIVE_OWN, True)

    def rescale(self, op: Operation, multiplier: float) -> None:
        """``op``'s debits under ``multiplier`` (a subscription's later event)."""
        config = self._config
        if op.tier.name not in config.adaptive_tiers:
            return
        base = op.base if op.base is not None else op.costs
        if multiplier < 1.0:
            op.base = base if base is not None else (op.charge,) * len(op.quotas)
            op.costs = charges.scaled(config.adaptive, op.quotas, base, op.charge, multiplier)
        else:  # back to what it paid at the start: None when every quota paid the charge
            same = base is None or all(amount == op.charge for amount in base)
            op.base, op.costs = None, None if same else base
        op.multiplier = multiplier

    def observe(self, op: Operation, errors: Sequence[GraphQLError] | None) -> None:
        """``op``'s latency and errors: one sample of the signal (once per operation)."""
        started = op.started
        if started is not None:
            op.started = None
            adaptive = self.adaptive
            if adaptive is not None and adaptive.measures and op.runs:
                now = adaptive.clock()
                failed = unexpected_error(errors)
                adaptive.observe(op.subject.key, now - started, failed, now, op.charge)

    def configure(self, config: Config) -> None:
        """Start, reconfigure or stop the controller as ``config``'s ``[adaptive]`` says."""
        self._config = config
        adaptive, settings = self.adaptive, config.adaptive
        tiers = sorted(config.adaptive_tiers)
        if not settings.enabled:
            if adaptive is not None:  # turned off by a reload: nothing scaled from now on
                adaptive.configure(settings, tiers)
                self._updated(adaptive)
                self.adaptive = None
        elif adaptive is None:
            self.adaptive = adaptive = Adaptive(
                settings,
                pressure=self._pressure,
                log=self.log,
                tiers=tiers,
                on_update=self._measured,
                on_transition=self._transition,
            )
            if self.metrics is not None:
                self.metrics.adaptive_transitions()  # both series from 0
            self._updated(adaptive)
        else:
            adaptive.configure(settings, tiers)
            self._updated(adaptive)
        if self._pressure is not None and not (settings.enabled and "callable" in settings.sources):
            self._say_once(
                "pressure_unused",
                "quotaql: the gate has a pressure callable, but [adaptive] does not read it"
                ' (mode "off", or "callable" not in sources)',
            )
        if not settings.enabled:
            return
        share = settings.max_tenant_share
        if settings.min_subjects > 1:
            return  # one tenant alone is left out of the pressure that counts for everyone
        latency = "latency" in settings.sources and share >= 1.0 - settings.latency_percentile
        errors = "errors" in settings.sources and (
            share
            >= settings.error_target
            + settings.engage_at * (settings.error_saturate - settings.error_target)
        )
        if latency or errors:
            self._say_once(
                "adaptive_unfair",
                f"quotaql: [adaptive] max_tenant_share = {share:g} lets one tenant alone"
                " reach engage_at (keep it below 1 - latency_percentile and below the error"
                " share that reaches engage_at; docs/adaptive.md)",
            )

    def _measured(self, adaptive: Adaptive) -> None:
        """After each update: count the pressure left out for everyone, then export."""
        if self.metrics is not None:
            for source, reason in adaptive.ignored.items():
                self.metrics.pressure_ignored(source, reason)
        self._updated(adaptive)

    def _updated(self, adaptive: Adaptive) -> None:
        """Export the signal and the multiplier (once a second, and at configuration)."""
        metrics = self.metrics
        if metrics is None:
            return
        config = self._config
        scaled, m = config.adaptive_tiers, adaptive.computed
        multipliers = {name: m if name in scaled else 1.0 for name in config.tiers}
        metrics.adaptive(
            adaptive.pressures,
            multipliers,
            engaged=adaptive.engaged,
            culprits=len(adaptive.culprits),
        )

    def _transition(self, to: str) -> None:
        if self.metrics is not None:
            self.metrics.adaptive_transition(to)
