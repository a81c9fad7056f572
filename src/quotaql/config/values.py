"""The frozen values that ``quotaql.toml`` is read into, and the checks each makes of itself."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, Literal, TypeGuard, cast, get_args

from quotaql.config.adaptive import AdaptiveConfig
from quotaql.config.alerts import AlertsConfig
from quotaql.config.identity import IdentityConfig
from quotaql.cost_analysis.model import SAFE_LIMITS, CostLimits, CostModel
from quotaql.errors import ConfigError
from quotaql.policy.modes import BackendErrorMode, Mode
from quotaql.policy.quota import MAX_DELAY_SECONDS, TIME_QUOTA, Algorithm, Quota

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "DEFAULT_TIME",
    "TIME_MS_PER_POINT",
    "TIME_QUOTA",
    "Config",
    "CostConfig",
    "DelaySync",
    "LimitsConfig",
    "Mode",
    "OnLimit",
    "RedisConfig",
    "TenantConfig",
    "TierConfig",
    "time_quota",
]

#: The modes in the order an error lists them (``enforce``, ``shadow``, ``off``).
MODES: Final = tuple(Mode)
ALGORITHMS: Final = cast("tuple[Algorithm, ...]", get_args(Algorithm))
BACKEND_ERROR_MODES: Final = cast("tuple[BackendErrorMode, ...]", get_args(BackendErrorMode))
DEFAULT_TIER: Final = "free"
MIN_HTTP_STATUS: Final = 400
MAX_HTTP_STATUS: Final = 599
#: ``[limits] lease_ttl`` (seconds): a lease lives this long past its last renewal.
MIN_LEASE_TTL: Final = 1.0
MAX_LEASE_TTL: Final = 3600.0
#: ``[limits] concurrency_retry_after`` (seconds), above 0.
MAX_CONCURRENCY_RETRY_AFTER: Final = 60.0
#: ``[tiers.<t>] on_limit``: what a request that does not fit now gets.
OnLimit = Literal["refuse", "delay"]
ON_LIMIT: Final = cast("tuple[OnLimit, ...]", get_args(OnLimit))
#: ``[limits] delay_sync``: what a sync server does with a delay tier's request.
DelaySync = Literal["refuse", "sleep"]
DELAY_SYNC: Final = cast("tuple[DelaySync, ...]", get_args(DelaySync))
#: ``[tiers.<t>] max_delay`` (seconds) and ``max_queued`` when ``on_limit = "delay"``.
DEFAULT_MAX_DELAY: Final = 1.0
DEFAULT_MAX_QUEUED: Final = 10
#: ``[limits] on_field_limit``: what an operation gets when only root-field quotas refuse.
OnFieldLimit = Literal["refuse", "skip"]
ON_FIELD_LIMIT: Final = cast("tuple[OnFieldLimit, ...]", get_args(OnFieldLimit))
#: ``[limits] cost_header_names``: the response headers of ``cost_headers = true``.
DEFAULT_COST_HEADER_NAMES: Final = MappingProxyType(
    {"estimated": "X-Cost-Estimated", "actual": "X-Cost-Actual"}
)
#: The least time quota a tier gets by default: 10 s of worker time at once, refilled at
#: 500 ms a second; unset, ``[limits] time`` gives each tier its points' worth, at
#: :data:`TIME_MS_PER_POINT`, never less (docs/limiter.md "The time quota").
DEFAULT_TIME_CAPACITY_MS: Final = 10_000.0
DEFAULT_TIME_REFILL_MS_PER_SECOND: Final = 500.0
#: Unless ``[limits] time`` is set, a tier's time quota is its points' worth of worker time
#: at this rate (never less than :data:`DEFAULT_TIME`): a point buys 20 ms, the yardstick at
#: which a client's refill buys what it costs (gate/charges.py, ``time_quota``).
TIME_MS_PER_POINT: Final = 20.0


#: A response header's name (an RFC 9110 token, as quotaql writes them: letters, digits, -).
HEADER_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,63}")
#: The response headers ``cost_header_names`` may not take (lower case): quotaql's own
#: rate-limit headers, and those that frame or route a response (quotaql replaces or removes
#: the cost headers on every response: a ``Content-Length`` of its own would break them).
RESERVED_HEADER_NAMES: Final = frozenset({
    "ratelimit", "ratelimit-policy", "retry-after", "x-ratelimit-limit",
    "x-ratelimit-remaining", "x-ratelimit-reset", "content-length", "content-type",
    "content-encoding", "transfer-encoding", "connection", "keep-alive", "upgrade", "te",
    "trailer", "set-cookie", "location", "date", "server", "host", "vary", "cache-control",
})  # fmt: skip


def time_quota(capacity_ms: float, refill_ms_per_second: float) -> Quota:
    """The time quota of a budget: a token bucket of milliseconds of worker time, named
    ``time``, that a refund never touches (it is charged what was measured).

    Example:
        >>> time_quota(10_000, 500).policy
        '"time";q=10000;w=20'
    """
    return Quota(
        TIME_QUOTA,
        capacity=capacity_ms,
        refill_per_second=refill_ms_per_second,
        algorithm="token_bucket",
        refundable=False,
    )


DEFAULT_TIME: Final = time_quota(DEFAULT_TIME_CAPACITY_MS, DEFAULT_TIME_REFILL_MS_PER_SECOND)


def _is_number(value: object) -> TypeGuard[float]:
    """An int or a float, not a bool (which Python counts as an int)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: object) -> TypeGuard[int]:
    """An int, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class CostConfig:
    """The ``[cost]`` table of ``quotaql.toml``.

    Attributes:
        model: weights, list sizes and operation weights that price an operation.
        limits: static limits checked before any resolver runs (:data:`SAFE_LIMITS`
            unless the file says otherwise).
        tuning_sample: the share of the operations that ran whose returned list sizes
            are recorded against the sizes assumed (``quotaql_list_size_*``, read by
            ``quotaql tune``) and whose resolvers are timed (``quotaql_resolver_seconds``,
            ``quotaql tune --weights``); 0 records none. Only with metrics enabled.
        chars_per_point: the document's size is paid too: a request pays at least its
            text's length divided by this (graphql-core parses up to ~1.9 µs a character, and
            a list literal's values are validated and coerced too: 1,000 characters are
            ~9 ms of worker time a point at worst, measured), as a floor under
            ``[limits] min_charge`` and under a priced operation's cost; None: off.
        candidate: the path of a candidate weights file (its ``[cost]`` table), relative
            to this file's directory as written, absolute here; None: no candidate.
            A sampled share of operations is also priced with it, never charged
            (docs/tuning.md, "Candidate weights").
        candidate_sample: the share of operations priced with the candidate too (0 to 1).
    """

    model: CostModel = field(default_factory=CostModel)
    limits: CostLimits = SAFE_LIMITS
    tuning_sample: float = 0.05
    chars_per_point: int | None = 1_000
    candidate: str | None = None
    candidate_sample: float = 0.05


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """The ``[limits]`` table of ``quotaql.toml``: how the limiter behaves.

    Attributes:
        mode: ``enforce`` refuses requests over quota, ``shadow`` lets them through and
            only reports them, ``off`` checks nothing; a tier may set its own.
        algorithm: the algorithm of every quota that does not name its own.
        on_backend_error: what to do when the storage fails: let requests through
            (``open``), refuse them (``closed``) or count in process memory (``local``).
        default_tier: the tier of a tenant that ``[tenants]`` does not name.
        refund_unused: give back the part of the cost that the operation did not use.
        charge_overage: charge, after execution, what the operation's actual cost ran
            above its debit (the budget may go below empty: the subject waits until it
            refills).
        expose_cost: report the cost and the quota state in the response's extensions.
        http_status: the status of a refused request (400 to 599).
        reload_interval: seconds between checks of the file for edits; 0 never reloads.
        max_subscriptions: the most subscriptions one subject may have open at once, over
            all its connections, in each server process (``TOO_MANY_SUBSCRIPTIONS``
            beyond); None (in code only: TOML has no null) for no limit.
        min_charge: what every request that reaches quotaql pays at least: a document
            that does not parse or validate or names no operation, a static-limit
            refusal, an operation that can never fit (``COST_EXCEEDS_CAPACITY``), a
            ``GraphQL-Cost: validate`` request, an operation the model prices below it.
            A request refused for lack of budget pays nothing.
        retry_jitter: a refusal's ``Retry-After`` and ``retryAfter`` are the exact wait
            plus up to this share of it, at random (0.1: up to +10 %), so that refused
            clients do not all come back at once.
        deny_cache_size: most subjects the local deny cache keeps (0: no cache).
        local_share: the share of a quota's capacity a subject starts from in the
            ``local`` fallback when Redis never reported its state to this process.
        open_cap: with ``on_backend_error = "open"``, the share of each quota's capacity
            a subject may use per process while the storage is down; None: no limit.
        lease_ttl: seconds a concurrency lease (``max_in_flight``) lives after it was taken
            or last renewed: the process that holds it renews it every third of that, so a
            crashed worker's slots come back within it (1 to 3600).
        concurrency_retry_after: the ``Retry-After`` of a ``TOO_MANY_CONCURRENT`` refusal
            (jittered by ``retry_jitter``; shorter when the earliest lease of the full set
            expires sooner), in seconds (above 0, at most 60).
        max_delayed: the most operations of delay tiers (``on_limit = "delay"``) waiting
            for their turn at once in this process, over all tenants; one more is decided
            as if its tier refused (0: nothing waits in this process).
        delayed_share: the share of ``max_delayed`` one subject may hold (at least one
            place): one tenant's waiters cannot take everyone's places (0 to 1).
        delay_sync: what a sync server (WSGI, a thread per request) does with an operation
            of a delay tier: ``refuse`` (the default) decides it as if its tier refused,
            ``sleep`` parks the thread until its turn (each counts against
            ``max_delayed``: keep that well below the server's threads).
        time: the time quota of every tier that does not set its own (``time = {
            capacity_ms, refill_ms_per_second }``: :func:`time_quota`): the worker time
            each subject's operations may take; None (``time = false``): none.
        enforce_share: of the subjects of an ``enforce`` tier, the share that is enforced
            (0 to 1); the others run in shadow. A subject's place is a keyed hash of it:
            stable across requests, workers and restarts; raising the share only adds
            subjects. A tier may set its own.
        on_field_limit: when only root-field quotas (``[tiers.<t>.fields]``) refuse an
            operation: ``refuse`` it (the default), or ``skip`` those fields where they are
            nullable (each ``null`` with a ``RATE_LIMITED`` error at its path, not charged).
        cost_headers: send the estimated cost, and the actual one where the response is
            complete, in response headers (for an edge that counts them).
        cost_header_names: the names of those headers: ``{ estimated = "...", actual =
            "..." }`` (default ``X-Cost-Estimated``, ``X-Cost-Actual``).
        warn_at: once an operation leaves its subject with less than ``1 - warn_at`` of a
            quota, the response carries a warning (``extensions.cost.warning`` and a
            header); None (``warn_at = false``, the default): no warning. A tier may set
            its own.
    """

    mode: Mode = Mode.ENFORCE
    algorithm: Algorithm = "token_bucket"
    on_backend_error: BackendErrorMode = "local"
    default_tier: str = DEFAULT_TIER
    refund_unused: bool = True
    charge_overage: bool = True
    expose_cost: bool = True
    http_status: int = 429
    reload_interval: float = 2.0
    max_subscriptions: int | None = 100
    min_charge: float = 1.0
    retry_jitter: float = 0.1
    deny_cache_size: int = 10_000
    local_share: float = 0.1
    open_cap: float | None = None
    lease_ttl: float = 30.0
    concurrency_retry_after: float = 1.0
    max_delayed: int = 1000
    delayed_share: float = 0.25
    delay_sync: DelaySync = "refuse"
    time: Quota | None = DEFAULT_TIME
    enforce_share: float = 1.0
    on_field_limit: OnFieldLimit = "refuse"
    cost_headers: bool = False
    cost_header_names: Mapping[str, str] = field(default_factory=lambda: DEFAULT_COST_HEADER_NAMES)
    warn_at: float | None = None

    def __post_init__(self) -> None:
        _check_time(self.time, "time")
        for name, choices in (
            ("mode", MODES),
            ("algorithm", ALGORITHMS),
            ("on_backend_error", BACKEND_ERROR_MODES),
            ("delay_sync", DELAY_SYNC),
            ("on_field_limit", ON_FIELD_LIMIT),
        ):
            if getattr(self, name) not in choices:
                raise ConfigError(
                    f"{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}"
                )
        object.__setattr__(self, "mode", Mode(self.mode))
        status = self.http_status
        if not (_is_integer(status) and MIN_HTTP_STATUS <= status <= MAX_HTTP_STATUS):
            raise ConfigError(f"http_status must be an integer from 400 to 599, got {status!r}")
        interval = self.reload_interval
        if not (_is_number(interval) and math.isfinite(interval) and interval >= 0):
            raise ConfigError(f"reload_interval must be a number >= 0, got {interval!r}")
        cap = self.max_subscriptions
        if cap is not None and not (_is_integer(cap) and cap >= 0):
            raise ConfigError(f"max_subscriptions must be an integer >= 0, got {cap!r}")
        for name in ("deny_cache_size", "max_delayed"):
            size = getattr(self, name)
            if not (_is_integer(size) and size >= 0):
                raise ConfigError(f"{name} must be an integer >= 0, got {size!r}")
        for name, low, high in (
            ("min_charge", 0.0, math.inf),
            ("retry_jitter", 0.0, 1.0),
            ("local_share", 0.0, 1.0),
            ("delayed_share", 0.0, 1.0),
            ("enforce_share", 0.0, 1.0),
        ):
            value = getattr(self, name)
            if not (_is_number(value) and math.isfinite(value) and low <= value <= high):
                bounds = f"from {low:g} to {high:g}" if high < math.inf else f">= {low:g}"
                raise ConfigError(f"{name} must be a number {bounds}, got {value!r}")
        share = self.open_cap
        if share is not None and not (_is_number(share) and 0 < share <= 1):
            raise ConfigError(f"open_cap must be a number above 0 and at most 1, got {share!r}")
        _check_warn_at(self.warn_at)
        names = dict(self.cost_header_names)
        if set(names) != {"estimated", "actual"} or not all(
            isinstance(name, str)
            and HEADER_NAME.fullmatch(name)
            and name.lower() not in RESERVED_HEADER_NAMES
            for name in names.values()
        ):
            raise ConfigError(
                "cost_header_names must name two headers, estimated and actual (letters,"
                f" digits and -; none that quotaql or HTTP owns), got {names!r}"
            )
        object.__setattr__(self, "cost_header_names", MappingProxyType(names))
        ttl = self.lease_ttl
        if not (_is_number(ttl) and MIN_LEASE_TTL <= ttl <= MAX_LEASE_TTL):
            raise ConfigError(
                f"lease_ttl must be a number of seconds from {MIN_LEASE_TTL:g} to"
                f" {MAX_LEASE_TTL:g}, got {ttl!r}"
            )
        retry = self.concurrency_retry_after
        if not (_is_number(retry) and 0 < retry <= MAX_CONCURRENCY_RETRY_AFTER):
            raise ConfigError(
                "concurrency_retry_after must be a number of seconds above 0 and at most"
                f" {MAX_CONCURRENCY_RETRY_AFTER:g}, got {retry!r}"
            )


@dataclass(frozen=True, slots=True)
class TierConfig:
    """One ``[tiers.<name>]`` table: the quotas of a plan.

    Attributes:
        name: the tier's name.
        quota: each tenant's quota (named ``tenant``).
        operations: quotas for single operations, by operation name (each named
            ``op:<OperationName>``), checked on top of ``quota``. Advisory: a client
            chooses its operation's name.
        mode: the tier's own mode; ``None`` when ``limits.mode`` applies.
        per_user: each authenticated user's quota inside a tenant (named ``user``),
            checked on top of ``quota`` for a known key with a principal.
        fields: quotas of root fields, by coordinate (``"Mutation.exportOrders"``, each
            named ``field:<coordinate>``), debited the cost of that field's selections
            whenever an operation selects it, under any alias or fragment.
        field_lines: the line of each of ``fields`` in the file (for error messages).
        essential: never scaled by adaptive limits (``[adaptive]``), whatever the pressure:
            the traffic to protect while the service is overloaded.
        max_in_flight: the most queries and mutations one tenant of the tier runs at once
            (``TOO_MANY_CONCURRENT`` beyond); None: no limit.
        max_subscriptions_in_flight: the most subscriptions one tenant of the tier has open
            at once, a limit of their own so that streams never starve queries; None: as
            ``max_in_flight``; 0: none.
        fields_in_flight: the most operations selecting a root field one tenant runs at
            once, by coordinate (``[tiers.<t>.fields] "Query.search" = { max_in_flight =
            2 }``), on top of the tier's limits.
        on_limit: what a query or mutation that does not fit now gets: ``refuse``
            (``RATE_LIMITED``) or ``delay``: its cost is reserved, it waits for its turn
            (at most ``max_delay`` seconds, behind at most ``max_queued`` others of its
            tenant) and then runs. Delays need bucket quotas (``token_bucket``, ``gcra``);
            the ``[global]`` quota and subscriptions never wait.
        max_delay: with ``delay``, the longest wait in seconds (default 1; at most 60).
        max_queued: with ``delay``, the most operations waiting at once per tenant (and
            per user for ``per_user``), across every server process (default 10).
        time: the tier's time quota (:func:`time_quota`); True: ``limits.time``, the
            default; False: none for this tier.
        enforce_share: the tier's own ``[limits] enforce_share``; None: that one.
        warn_at: the tier's own ``[limits] warn_at``; None: that one; False: no warning
            for this tier.
    """

    name: str
    quota: Quota
    operations: Mapping[str, Quota] = field(default_factory=dict)
    mode: Mode | None = None
    per_user: Quota | None = None
    fields: Mapping[str, Quota] = field(default_factory=dict)
    field_lines: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)
    essential: bool = False
    max_in_flight: int | None = None
    max_subscriptions_in_flight: int | None = None
    fields_in_flight: Mapping[str, int] = field(default_factory=dict)
    on_limit: OnLimit = "refuse"
    max_delay: float | None = None
    max_queued: int | None = None
    time: Quota | bool = True
    enforce_share: float | None = None
    warn_at: float | bool | None = None

    def __post_init__(self) -> None:
        share = self.enforce_share
        if share is not None and not (_is_number(share) and 0 <= share <= 1):
            raise ConfigError(f"enforce_share must be a number from 0 to 1, got {share!r}")
        if self.warn_at is not False:
            _check_warn_at(self.warn_at)
        if not isinstance(self.time, bool):
            _check_time(self.time, f"tier {self.name!r}: time")
        object.__setattr__(self, "operations", MappingProxyType(dict(self.operations)))
        object.__setattr__(self, "fields", MappingProxyType(dict(self.fields)))
        object.__setattr__(self, "field_lines", MappingProxyType(dict(self.field_lines)))
        object.__setattr__(self, "fields_in_flight", MappingProxyType(dict(self.fields_in_flight)))
        if self.mode is not None:
            if self.mode not in MODES:
                raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
            object.__setattr__(self, "mode", Mode(self.mode))
        for name, value, low in (
            ("max_in_flight", self.max_in_flight, 1),
            ("max_subscriptions_in_flight", self.max_subscriptions_in_flight, 0),
            *((f"{coordinate} max_in_flight", value, 1)
              for coordinate, value in self.fields_in_flight.items()),
        ):  # fmt: skip
            if value is not None and not (_is_integer(value) and value >= low):
                raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
        self._check_delay()

    @property
    def delays(self) -> bool:
        """Its operations wait for their turn rather than being refused."""
        return self.on_limit == "delay"

    def _check_delay(self) -> None:
        if self.on_limit not in ON_LIMIT:
            raise ConfigError(
                f"on_limit must be one of {', '.join(ON_LIMIT)}, got {self.on_limit!r}"
            )
        if not self.delays:
            for name in ("max_delay", "max_queued"):
                if getattr(self, name) is not None:
                    raise ConfigError(f'{name} needs on_limit = "delay"')
            return
        if self.max_delay is None:
            object.__setattr__(self, "max_delay", DEFAULT_MAX_DELAY)
        if self.max_queued is None:
            object.__setattr__(self, "max_queued", DEFAULT_MAX_QUEUED)
        delay, queued = self.max_delay, self.max_queued
        if not (_is_number(delay) and 0 < delay <= MAX_DELAY_SECONDS):
            raise ConfigError(
                f"max_delay must be seconds above 0 and at most {MAX_DELAY_SECONDS:g},"
                f" got {delay!r}"
            )
        if not (_is_integer(queued) and queued >= 1):
            raise ConfigError(f"max_queued must be an integer >= 1, got {queued!r}")
        quotas = [self.quota, *self.operations.values(), *self.fields.values()]
        if self.per_user is not None:
            quotas.append(self.per_user)
        for quota in quotas:
            check_delayable(quota)
            dataclasses.replace(quota, max_delay=delay, max_queued=queued)  # checks the wait

    @property
    def subscriptions_in_flight(self) -> int | None:
        """The subscription limit in force: ``max_subscriptions_in_flight``, else
        ``max_in_flight`` (None: none)."""
        if self.max_subscriptions_in_flight is not None:
            return self.max_subscriptions_in_flight
        return self.max_in_flight


def _check_time(quota: object, what: str) -> None:
    """Raise unless ``quota`` is a time quota (:func:`time_quota`) or None."""
    if quota is None:
        return
    if not (
        isinstance(quota, Quota)
        and quota.name == TIME_QUOTA
        and quota.algorithm == "token_bucket"
        and not quota.refundable
        and not quota.shared
    ):
        raise ConfigError(f"{what} must be made by time_quota(capacity_ms, refill_ms_per_second)")


def _check_warn_at(value: object) -> None:
    if value is not None and not (_is_number(value) and 0 < value < 1):
        raise ConfigError(f"warn_at must be a number above 0 and below 1, got {value!r}")


def check_delayable(quota: Quota) -> None:
    """Raise unless ``quota`` can be part of a delay tier (a bucket)."""
    if quota.algorithm not in ("token_bucket", "gcra"):
        raise ConfigError(
            f'on_limit = "delay" needs token_bucket or gcra quotas; {quota.name!r} is'
            f" {quota.algorithm} (a window has no turns to wait for)"
        )


@dataclass(frozen=True, slots=True)
class TenantConfig:
    """One ``[tenants.<name>]`` table: a tenant's tier, and maybe a quota of its own.

    Attributes:
        name: the tenant's name.
        tier: the name of its tier.
        quota: its quota (named ``tenant``) when it overrides the tier's; ``None``: the
            tier's quota applies.
    """

    name: str
    tier: str
    quota: Quota | None = None


@dataclass(frozen=True, slots=True)
class RedisConfig:
    """The ``[redis]`` table of ``quotaql.toml``: what the Redis storages accept of their
    server (docs/operations.md).

    Attributes:
        allow_eviction: run on a Redis whose ``maxmemory-policy`` may evict quotaql's keys
            (``allkeys-*``, ``volatile-*`` under a ``maxmemory``), where an evicted budget
            is a full one; without it such a Redis is refused at start-up. Read when the
            gate starts and at each reload (a check that passed is not made again).
    """

    allow_eviction: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.allow_eviction, bool):
            raise ConfigError(f"allow_eviction must be true or false, got {self.allow_eviction!r}")


@dataclass(frozen=True, slots=True)
class Config:
    """Everything ``quotaql.toml`` says.

    Example:
        >>> from quotaql.config import default_config
        >>> config = default_config()
        >>> config.tier_of("acme").name
        'free'
        >>> config.tier_of("acme").quota.capacity
        1000.0

    Which quotas an operation pays is the gate's policy (:mod:`quotaql.gate.charges`).

    Attributes:
        cost: the ``[cost]`` table.
        limits: the ``[limits]`` table.
        tiers: every tier, by name; ``limits.default_tier`` is one of them.
        tenants: the tenants that ``[tenants]`` names; any other tenant is on the
            default tier.
        global_quota: the ``[global]`` quota (named ``global``, shared by every tenant),
            or ``None``; ``[global] shards`` is its ``shards`` (N buckets of a N-th each).
        source: the file the configuration was read from; ``None`` for defaults.
        alerts: the ``[alerts]`` table.
        identity: the ``[identity]`` table: where subjects come from.
        declares_tiers: the file has a ``[tiers]`` table (else its one tier is the
            default ``free``): a reload never goes from one to a file without.
        adaptive: the ``[adaptive]`` table: which tiers adaptive limits scale, and how.
        adaptive_tiers: the names of the tiers adaptive limits scale (``adaptive.tiers``,
            else every tier that is not ``essential``), whatever the mode.
        redis: the ``[redis]`` table: what the Redis storages accept of their server.
    """

    cost: CostConfig
    limits: LimitsConfig
    tiers: Mapping[str, TierConfig]
    tenants: Mapping[str, TenantConfig]
    global_quota: Quota | None
    source: str | None = None
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    identity: IdentityConfig = field(default_factory=IdentityConfig)
    declares_tiers: bool = field(default=False, compare=False)
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)
    adaptive_tiers: frozenset[str] = field(init=False, repr=False, compare=False)
    redis: RedisConfig = field(default_factory=RedisConfig)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tiers", MappingProxyType(dict(self.tiers)))
        object.__setattr__(self, "tenants", MappingProxyType(dict(self.tenants)))
        listed = self.adaptive.tiers
        for name in listed or ():
            tier = self.tiers.get(name)
            if tier is None:
                raise ConfigError(
                    f"[adaptive] tiers: {name!r} is not a tier (tiers: {', '.join(self.tiers)})"
                )
            if tier.essential:
                raise ConfigError(
                    f"[adaptive] tiers: {name!r} is essential: an essential tier is never scaled"
                )
        scaled = (
            frozenset(listed)
            if listed is not None
            else frozenset(name for name, tier in self.tiers.items() if not tier.essential)
        )
        object.__setattr__(self, "adaptive_tiers", scaled)
        if self.limits.default_tier not in self.tiers:
            raise ConfigError(
                f"default_tier {self.limits.default_tier!r} is not a tier"
                f" (tiers: {', '.join(self.tiers) or 'none'})"
            )
        for tenant in self.tenants.values():
            if tenant.tier not in self.tiers:
                raise ConfigError(f"tenant {tenant.name!r}: {tenant.tier!r} is not a tier")
            if tenant.quota is not None and self.tiers[tenant.tier].delays:
                try:
                    check_delayable(tenant.quota)
                except ConfigError as error:
                    raise ConfigError(f"tenant {tenant.name!r}: {error}") from None

    def tier_of(self, tenant: str | None) -> TierConfig:
        """The tier of ``tenant``: its own if ``[tenants]`` names it, else the default tier."""
        known = self.tenants.get(tenant) if tenant is not None else None
        return self.tiers[known.tier if known is not None else self.limits.default_tier]

    def enforce_share_of(self, tier: TierConfig) -> float:
        """The share of ``tier``'s subjects enforced (its own, else ``[limits]``'s)."""
        own = tier.enforce_share
        return self.limits.enforce_share if own is None else own

    def warn_at_of(self, tier: TierConfig) -> float | None:
        """Where ``tier``'s warning starts (its own, else ``[limits]``'s; None: none)."""
        own = tier.warn_at
        if own is None:
            return self.limits.warn_at
        return None if own is False or own is True else float(own)
