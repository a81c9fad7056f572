"""The ``[alerts]`` table of ``quotaql.toml``: the thresholds of the Prometheus alert rules."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from quotaql.config.document import describe_value
from quotaql.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ALERT_EXPECTED",
    "ALERT_KINDS",
    "AlertKind",
    "AlertsConfig",
    "alert_value",
    "describe_value",
]

#: A Prometheus duration: units from years to milliseconds, each at most once, in order.
_DURATION: Final = re.compile(r"(?:\d+y)?(?:\d+w)?(?:\d+d)?(?:\d+h)?(?:\d+m)?(?:\d+s)?(?:\d+ms)?")
_DEFAULT_RUNBOOK: Final = "https://github.com/quotaql/quotaql/blob/main/docs/runbook.md"
#: The default p99 threshold of the check-latency alert: the bucket edge
#: ``quotaql.instrumentation.names.CHECK_LATENCY_ALERT_SECONDS`` of
#: ``quotaql_check_duration_seconds``, so that the comparison is exact (a test holds them equal).
_CHECK_LATENCY_P99: Final = 0.025

#: What each kind of ``[alerts]`` value must be, as the end of "expected ...".
ALERT_EXPECTED: Final = {
    "url": "a non-empty URL without a #fragment (each alert adds its section's)",
    "window": 'a Prometheus duration > 0 such as "30s", "5m" or "1h30m"',
    "duration": 'a Prometheus duration such as "0s", "5m" or "1h30m"',
    "ratio": "a number > 0 and <= 1",
    "positive": "a finite number > 0",
    "non_negative": "a finite number >= 0",
    "count": "an integer >= 1",
}
AlertKind = Literal["url", "window", "duration", "ratio", "positive", "non_negative", "count"]


def alert_value(kind: AlertKind, value: object) -> object | None:
    """``value`` as an ``[alerts]`` value of ``kind`` (numbers as floats); None if it is not one."""
    if kind in ("url", "window", "duration"):
        if not isinstance(value, str) or not value:
            return None
        if kind == "url":
            return value if "#" not in value and not any(c.isspace() for c in value) else None
        if _DURATION.fullmatch(value) is None:
            return None
        if kind == "window" and not any(int(n) for n in re.findall(r"\d+", value)):
            return None
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if kind == "count":
        return value if isinstance(value, int) and value >= 1 else None
    if not math.isfinite(value):
        return None
    ok = {"ratio": 0 < value <= 1, "positive": value > 0, "non_negative": value >= 0}[kind]
    return float(value) if ok else None


@dataclass(frozen=True, slots=True)
class AlertsConfig:
    """The ``[alerts]`` table of ``quotaql.toml``: the thresholds of the Prometheus alert rules
    that ``quotaql alerts`` writes (:func:`quotaql.observability.alerts.write_alerts`).

    Every key is optional. Rates are per second, summed over the instances of a scrape
    ``job``; durations are Prometheus duration strings (``"30s"``, ``"5m"``, ``"1h30m"``,
    ``"1d"``). A ``*_for`` key is how long a condition must hold before its alert fires.

    Attributes:
        runbook_base_url: the URL of ``docs/runbook.md``; each alert's ``runbook_url`` is it
            plus ``#<its section>``.
        rate_window: the range of ``rate()`` in the alerts that do not have their own (5m).
        blocked_ratio: ``QuotaqlBlockedRatioHigh`` fires when more than this fraction of a
            job's operations are refused by their budget (0.2).
        blocked_ratio_min_rate: ... and the job serves more than this many operations a
            second, so that a few refusals on an idle job stay quiet (0.1).
        blocked_ratio_for: 10m.
        block_spike_factor: ``QuotaqlBlockSpike`` fires when a job blocks more than this
            many times as many operations a second as it did ``block_spike_offset`` earlier,
            or blocks some when it blocked none (or had no data) then (3.0).
        block_spike_min_rate: ... and more than this many a second (1.0).
        block_spike_window: the range of the spike's ``rate()``, now and then (10m).
        block_spike_offset: how far back the baseline is (1d, the same time yesterday).
        block_spike_for: 5m.
        check_latency_p99_seconds: ``QuotaqlCheckLatencyHigh`` fires when the 99th
            percentile of the limiter's decision time on a backend is above this (0.025, a
            bucket edge of ``quotaql_check_duration_seconds``, so the comparison is exact).
        check_latency_for: 10m.
        backend_errors_per_second: ``QuotaqlBackendErrors`` fires when a backend fails more
            than this many calls a second (0.1; 0 fires on any error).
        backend_errors_for: 5m.
        failing_window: the range of ``rate()`` in ``QuotaqlFailingOpen`` and
            ``QuotaqlFailingClosed``, which fire on any decision taken without the storage;
            at least two scrape intervals (2m).
        failing_for: 3m: longer than ``failing_window``, so that one failed call does not
            fire, a failing storage does.
        circuit_open_for: how long a circuit breaker must stay open before
            ``QuotaqlCircuitOpen`` fires (1m).
        many_tenants_limited: ``QuotaqlManyTenantsLimited`` fires when at least this many
            tenants (labelled in ``quotaql_tenant_requests_total``, not ``other``) of a job
            have operations blocked at once (10).
        many_tenants_limited_for: 10m.
        anonymous_per_second: ``QuotaqlAnonymousRequests`` fires when a job serves more
            than this many operations a second identified as ``anonymous`` (no API key, no
            principal, no client address: every such client shares one budget) (0: any).
        anonymous_for: 10m: longer than ``rate_window``, so that a stray request does not
            fire, a proxy or server setup that loses every client's address does.
        unknown_keys_per_second: ``QuotaqlUnknownApiKeys`` fires when a job receives more
            than this many operations a second with an API key no tenant has (``source``
            ``unknown_key``, ``rejected_key`` or ``limited_key``: key guessing, or a
            misconfigured client) (0.1).
        unknown_keys_for: 5m.
        unverified_keys_for: how long operations with unknown keys taken as tenants of their
            own (``source="unverified_key"``: ``[identity] unknown_keys = "tenant"``) must go
            on before ``QuotaqlUnverifiedApiKeys`` fires (5m).
        adaptive_engaged_for: how long adaptive limits must stay engaged on an instance
            before ``QuotaqlAdaptiveEngaged`` fires (1m).
        leases_expired_for: how long a job must keep finding concurrency leases expired at
            their release (``quotaql_leases_total{outcome="expired"}``: workers crash or stall
            longer than ``lease_ttl``, or Redis is out that long) before
            ``QuotaqlLeasesExpired`` fires (10m).
        refunds_lost_window: the range of ``increase()`` in ``QuotaqlRefundsLost``, which
            fires on any deferred refund lost or of unknown fate within it (10m).
        refunds_lost_for: 0s: a lost refund is a fact, not a trend.
        delay_p99_seconds: ``QuotaqlDelaysLong`` fires when the 99th percentile of how long
            a job's operations of delay tiers (``on_limit = "delay"``) waited for their turn
            is above this (1.0, a bucket edge of ``quotaql_delay_seconds``, so the
            comparison is exact).
        delays_long_for: 10m.
        delay_process_full_for: how long a job must keep refusing operations of delay tiers
            because a process had ``[limits] max_delayed`` waiting already
            (``quotaql_delay_refused_total{reason="process_full"}``) before
            ``QuotaqlDelayProcessFull`` fires (5m).
        memory_overflow_for: how long a job's memory storages must keep deciding new
            subjects on overflow states, their table full of live states
            (``quotaql_overflow_total``), before ``QuotaqlMemoryOverflow`` fires (10m).
        variable_values_refused_per_second: ``QuotaqlVariableValuesRefused`` fires when a
            job refuses more than this many operations a second whose variables held more
            than ``[cost] max_variable_values`` values
            (``quotaql_rejections_total{code="TOO_MANY_VARIABLE_VALUES"}``) (0: any).
        variable_values_refused_for: 15m: a client whose bulk operations outgrew the limit
            keeps sending them; a stray one stays quiet.
        metrics_absent_for: how long ``quotaql_build_info`` may be missing before
            ``QuotaqlMetricsAbsent`` fires (10m).
        redis_eviction_refused_for: how long a process's Redis storage must refuse its
            server for an evicting ``maxmemory-policy``
            (``quotaql_redis_eviction{verdict="refused"}``) before
            ``QuotaqlRedisEvictionRefused`` fires (1m).
    """

    runbook_base_url: str = _DEFAULT_RUNBOOK
    rate_window: str = "5m"
    blocked_ratio: float = 0.2
    blocked_ratio_min_rate: float = 0.1
    blocked_ratio_for: str = "10m"
    block_spike_factor: float = 3.0
    block_spike_min_rate: float = 1.0
    block_spike_window: str = "10m"
    block_spike_offset: str = "1d"
    block_spike_for: str = "5m"
    check_latency_p99_seconds: float = _CHECK_LATENCY_P99
    check_latency_for: str = "10m"
    backend_errors_per_second: float = 0.1
    backend_errors_for: str = "5m"
    failing_window: str = "2m"
    failing_for: str = "3m"
    circuit_open_for: str = "1m"
    many_tenants_limited: int = 10
    many_tenants_limited_for: str = "10m"
    anonymous_per_second: float = 0.0
    anonymous_for: str = "10m"
    unknown_keys_per_second: float = 0.1
    unknown_keys_for: str = "5m"
    unverified_keys_for: str = "5m"
    adaptive_engaged_for: str = "1m"
    leases_expired_for: str = "10m"
    refunds_lost_window: str = "10m"
    refunds_lost_for: str = "0s"
    delay_p99_seconds: float = 1.0
    delays_long_for: str = "10m"
    delay_process_full_for: str = "5m"
    memory_overflow_for: str = "10m"
    variable_values_refused_per_second: float = 0.0
    variable_values_refused_for: str = "15m"
    metrics_absent_for: str = "10m"
    redis_eviction_refused_for: str = "1m"

    def __post_init__(self) -> None:
        for name, kind in ALERT_KINDS.items():
            value = getattr(self, name)
            checked = alert_value(kind, value)
            if checked is None:
                raise ConfigError(
                    f"{name} must be {ALERT_EXPECTED[kind]}, got {describe_value(value)}"
                )
            object.__setattr__(self, name, checked)


#: The kind of each ``[alerts]`` key, in the order of :class:`AlertsConfig`'s fields.
ALERT_KINDS: Final[Mapping[str, AlertKind]] = {
    "runbook_base_url": "url",
    "rate_window": "window",
    "blocked_ratio": "ratio",
    "blocked_ratio_min_rate": "non_negative",
    "blocked_ratio_for": "duration",
    "block_spike_factor": "positive",
    "block_spike_min_rate": "non_negative",
    "block_spike_window": "window",
    "block_spike_offset": "window",
    "block_spike_for": "duration",
    "check_latency_p99_seconds": "positive",
    "check_latency_for": "duration",
    "backend_errors_per_second": "non_negative",
    "backend_errors_for": "duration",
    "failing_window": "window",
    "failing_for": "duration",
    "circuit_open_for": "duration",
    "many_tenants_limited": "count",
    "many_tenants_limited_for": "duration",
    "anonymous_per_second": "non_negative",
    "anonymous_for": "duration",
    "unknown_keys_per_second": "non_negative",
    "unknown_keys_for": "duration",
    "unverified_keys_for": "duration",
    "adaptive_engaged_for": "duration",
    "leases_expired_for": "duration",
    "refunds_lost_window": "window",
    "refunds_lost_for": "duration",
    "delay_p99_seconds": "positive",
    "delays_long_for": "duration",
    "delay_process_full_for": "duration",
    "memory_overflow_for": "duration",
    "variable_values_refused_per_second": "non_negative",
    "variable_values_refused_for": "duration",
    "metrics_absent_for": "duration",
    "redis_eviction_refused_for": "duration",
}
