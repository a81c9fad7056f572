"""The frozen values that ``quotaql.toml`` is read into, and the checks each makes of itself."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, cast, get_args

from quotaql.adaptive import AdaptiveConfig
from quotaql.config.locator import render_key
from quotaql.cost_analysis._compile import graphql_schema
from quotaql.cost_analysis.model import SAFE_LIMITS, CostLimits, CostModel
from quotaql.errors import ConfigError
from quotaql.identity import IdentityConfig
from quotaql.limiter import BackendErrorMode
from quotaql.observability.thresholds import AlertsConfig
from quotaql.policy.quota import MAX_DELAY_SECONDS, Algorithm, Quota
from quotaql.storage.leases import LeaseSpec

if TYPE_CHECKING:
    from collections.abc import Mapping

    from quotaql.cost_analysis import CostReport
    from quotaql.identity import Subject

__all__ = [
    "Config",
    "CostConfig",
    "DelaySync",
    "InFlight",
    "LimitsConfig",
    "Mode",
    "OnLimit",
    "TenantConfig",
    "TierConfig",
]

#: What the limiter does with a request over its quota: refuse it (``enforce``), let it
#: through and only report it (``shadow``), or not check at all (``off``).
Mode = Literal["enforce", "shadow", "off"]

MODES: Final = cast("tuple[Mode, ...]", get_args(Mode))
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
#: The names of the lease sets of a tenant (``quotaql.storage.leases``).
TIER_LEASES: Final = "tier"
SUBSCRIPTION_LEASES: Final = "subscriptions"
FIELD_LEASES: Final = "field:"


@dataclass(frozen=True, slots=True)
class CostConfig:
    """The ``[cost]`` table of ``quotaql.toml``.

    Attributes:
        model: weights, list sizes and operation weights that price an operation.
        limits: static limits checked before any resolver runs (:data:`SAFE_LIMITS`
            unless the file says otherwise).
        tuning_sample: the share of the operations that ran whose returned list sizes
            are recorded against the sizes assumed (``quotaql_list_size_*``, read by
            ``quotaql tune``); 0 records none. Only with metrics enabled.
    """

    model: CostModel = field(default_factory=CostModel)
    limits: CostLimits = SAFE_LIMITS
    tuning_sample: float = 0.05


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
        delay_sync: what a sync server (WSGI, a thread per request) does with an operation
            of a delay tier: ``refuse`` (the default) decides it as if its tier refused,
            ``sleep`` parks the thread until its turn (each counts against
            ``max_delayed``: keep that well below the server's threads).
    """

    mode: Mode = "enforce"
    algorithm: Algorithm = "token_bucket"
    on_backend_error: BackendErrorMode = "local"
    default_tier: str = DEFAULT_TIER
    refund_unused: bool = True
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
    delay_sync: DelaySync = "refuse"

    def __post_init__(self) -> None:
        for name, choices in (
            ("mode", MODES),
            ("algorithm", ALGORITHMS),
            ("on_backend_error", BACKEND_ERROR_MODES),
            ("delay_sync", DELAY_SYNC),
        ):
            if getattr(self, name) not in choices:
                raise ConfigError(
                    f"{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}"
                )
        status = self.http_status
        if (
            isinstance(status, bool)
            or not isinstance(status, int)
            or not MIN_HTTP_STATUS <= status <= MAX_HTTP_STATUS
        ):
            raise ConfigError(f"http_status must be an integer from 400 to 599, got {status!r}")
        interval = self.reload_interval
        if (
            isinstance(interval, bool)
            or not isinstance(interval, int | float)
            or not math.isfinite(interval)
            or interval < 0
        ):
            raise ConfigError(f"reload_interval must be a number >= 0, got {interval!r}")
        cap = self.max_subscriptions
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
            raise ConfigError(f"max_subscriptions must be an integer >= 0, got {cap!r}")
        for name in ("deny_cache_size", "max_delayed"):
            size = getattr(self, name)
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise ConfigError(f"{name} must be an integer >= 0, got {size!r}")
        for name, low, high in (
            ("min_charge", 0.0, math.inf),
            ("retry_jitter", 0.0, 1.0),
            ("local_share", 0.0, 1.0),
        ):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not low <= value <= high
                or math.isnan(value)
                or (high == math.inf and not math.isfinite(value))
            ):
                bounds = f"from {low:g} to {high:g}" if high < math.inf else f">= {low:g}"
                raise ConfigError(f"{name} must be a number {bounds}, got {value!r}")
        share = self.open_cap
        if share is not None and (
            isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1
        ):
            raise ConfigError(f"open_cap must be a number above 0 and at most 1, got {share!r}")
        ttl = self.lease_ttl
        if (
            isinstance(ttl, bool)
            or not isinstance(ttl, int | float)
            or not MIN_LEASE_TTL <= ttl <= MAX_LEASE_TTL
        ):
            raise ConfigError(
                f"lease_ttl must be a number of seconds from {MIN_LEASE_TTL:g} to"
                f" {MAX_LEASE_TTL:g}, got {ttl!r}"
            )
        retry = self.concurrency_retry_after
        if (
            isinstance(retry, bool)
            or not isinstance(retry, int | float)
            or not 0 < retry <= MAX_CONCURRENCY_RETRY_AFTER
        ):
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
        in_flight: the tier's concurrency limits as lease specs (:class:`InFlight`),
            None when it has none: the one attribute the gate reads for a tier without.
        on_limit: what a query or mutation that does not fit now gets: ``refuse``
            (``RATE_LIMITED``) or ``delay``: its cost is reserved, it waits for its turn
            (at most ``max_delay`` seconds, behind at most ``max_queued`` others of its
            tenant) and then runs. Delays need bucket quotas (``token_bucket``, ``gcra``);
            the ``[global]`` quota and subscriptions never wait.
        max_delay: with ``delay``, the longest wait in seconds (default 1; at most 60).
        max_queued: with ``delay``, the most operations waiting at once per tenant (and
            per user for ``per_user``), across every server process (default 10).
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
    in_flight: InFlight | None = field(init=False, repr=False, compare=False)
    on_limit: OnLimit = "refuse"
    max_delay: float | None = None
    max_queued: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "operations", MappingProxyType(dict(self.operations)))
        object.__setattr__(self, "fields", MappingProxyType(dict(self.fields)))
        object.__setattr__(self, "field_lines", MappingProxyType(dict(self.field_lines)))
        object.__setattr__(self, "fields_in_flight", MappingProxyType(dict(self.fields_in_flight)))
        if self.mode is not None and self.mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        for name, value, low in (
            ("max_in_flight", self.max_in_flight, 1),
            ("max_subscriptions_in_flight", self.max_subscriptions_in_flight, 0),
            *((f"{coordinate} max_in_flight", value, 1)
              for coordinate, value in self.fields_in_flight.items()),
        ):  # fmt: skip
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < low
            ):
                raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
        object.__setattr__(self, "in_flight", InFlight.of(self))
        self._check_delay()

    @property
    def delays(self) -> bool:
        """Its operations wait for their turn rather than being refused."""
        return self.on_limit == "delay"

    def delayed(self, quotas: tuple[Quota, ...]) -> tuple[Quota, ...]:
        """``quotas`` (what :meth:`Config.charges_for` gave for this tier) as they are when
        the operation may wait: each of the subject's own with ``max_delay`` and
        ``max_queued``; the shared ones (``[global]``) as they are."""
        delay, queued = self.max_delay, self.max_queued
        assert delay is not None  # a delay tier: both set
        assert queued is not None
        return tuple(quota if quota.shared else _delaying(quota, delay, queued)
                     for quota in quotas)  # fmt: skip

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
        if (
            isinstance(delay, bool)
            or not isinstance(delay, int | float)
            or not 0 < delay <= MAX_DELAY_SECONDS
        ):
            raise ConfigError(
                f"max_delay must be seconds above 0 and at most {MAX_DELAY_SECONDS:g},"
                f" got {delay!r}"
            )
        if isinstance(queued, bool) or not isinstance(queued, int) or queued < 1:
            raise ConfigError(f"max_queued must be an integer >= 1, got {queued!r}")
        quotas = [self.quota, *self.operations.values(), *self.fields.values()]
        if self.per_user is not None:
            quotas.append(self.per_user)
        for quota in quotas:
            check_delayable(quota)
            _delaying(quota, delay, queued)

    @property
    def subscriptions_in_flight(self) -> int | None:
        """The subscription limit in force: ``max_subscriptions_in_flight``, else
        ``max_in_flight`` (None: none)."""
        if self.max_subscriptions_in_flight is not None:
            return self.max_subscriptions_in_flight
        return self.max_in_flight


def check_delayable(quota: Quota) -> None:
    """Raise unless ``quota`` can be part of a delay tier (a bucket)."""
    if quota.algorithm not in ("token_bucket", "gcra"):
        raise ConfigError(
            f'on_limit = "delay" needs token_bucket or gcra quotas; {quota.name!r} is'
            f" {quota.algorithm} (a window has no turns to wait for)"
        )


@functools.lru_cache(maxsize=4096)
def _delaying(quota: Quota, max_delay: float, max_queued: int) -> Quota:
    """``quota`` with a wait (its state is the same: only the refusal changes)."""
    return dataclasses.replace(quota, max_delay=max_delay, max_queued=max_queued)


@dataclass(frozen=True, slots=True)
class InFlight:
    """A tier's concurrency limits, as the lease sets an operation takes a lease in.

    Each tenant has a set per limit: ``tier`` (queries and mutations, ``max_in_flight``),
    ``subscriptions`` (``max_subscriptions_in_flight``), and ``field:<coordinate>`` per root
    field with a ``max_in_flight``. A query or a mutation takes a lease in ``tier`` and in
    the set of each limited root field it selects; a subscription in ``subscriptions`` and
    its field's; all or none.

    Attributes:
        operations: the ``tier`` spec, or nothing (the tier limits only root fields).
        subscriptions: the ``subscriptions`` spec or nothing; None when the tier allows no
            subscription at all (``max_subscriptions_in_flight = 0``).
        fields: the spec of each limited root field, by coordinate.
    """

    operations: tuple[LeaseSpec, ...]
    subscriptions: tuple[LeaseSpec, ...] | None
    fields: Mapping[str, LeaseSpec]

    @staticmethod
    def of(tier: TierConfig) -> InFlight | None:
        """The limits of ``tier``, None when it has none."""
        fields = {
            coordinate: LeaseSpec(f"{FIELD_LEASES}{coordinate}", maximum)
            for coordinate, maximum in tier.fields_in_flight.items()
        }
        subscriptions = tier.subscriptions_in_flight
        if tier.max_in_flight is None and subscriptions is None and not fields:
            return None
        return InFlight(
            (LeaseSpec(TIER_LEASES, tier.max_in_flight),) if tier.max_in_flight else (),
            None
            if subscriptions == 0
            else (LeaseSpec(SUBSCRIPTION_LEASES, subscriptions),)
            if subscriptions
            else (),
            MappingProxyType(fields),
        )

    def specs(
        self, operation_type: str | None, root_fields: Mapping[str, object]
    ) -> tuple[LeaseSpec, ...] | None:
        """The sets an operation of ``operation_type`` selecting ``root_fields`` (its
        coordinates) takes a lease in, in order (empty: none; None: refused outright, a
        subscription where the tier allows none)."""
        base = self.subscriptions if operation_type == "subscription" else self.operations
        if base is None:
            return None
        fields = self.fields
        if not fields:
            return base
        return (*base, *(fields[name] for name in root_fields if name in fields))


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
class Config:
    """Everything ``quotaql.toml`` says.

    Example:
        >>> from quotaql.config import default_config
        >>> config = default_config()
        >>> [quota.name for quota in config.quotas_for("acme", "ExportOrders")]
        ['tenant']
        >>> config.tier_of("acme").quota.capacity
        1000.0

    Attributes:
        cost: the ``[cost]`` table.
        limits: the ``[limits]`` table.
        tiers: every tier, by name; ``limits.default_tier`` is one of them.
        tenants: the tenants that ``[tenants]`` names; any other tenant is on the
            default tier.
        global_quota: the ``[global]`` quota (named ``global``, shared by every tenant),
            or ``None``.
        source: the file the configuration was read from; ``None`` for defaults.
        alerts: the ``[alerts]`` table.
        identity: the ``[identity]`` table: where subjects come from.
        declares_tiers: the file has a ``[tiers]`` table (else its one tier is the
            default ``free``): a reload never goes from one to a file without.
        adaptive: the ``[adaptive]`` table: which tiers adaptive limits scale, and how.
        adaptive_tiers: the names of the tiers adaptive limits scale (``adaptive.tiers``,
            else every tier that is not ``essential``), whatever the mode.
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

    def quotas_for(
        self, tenant: str | None, operation_name: str | None, tier: TierConfig | None = None
    ) -> tuple[Quota, ...]:
        """The quotas that a request of ``tenant`` running ``operation_name`` spends from.

        In order: the tenant quota (the tenant's own, else its tier's), the tier's quota
        for ``operation_name`` if it has one, and the global quota if there is one.
        ``tier``, when given (a tier resolver chose it), replaces the ``[tenants]`` table.
        Not the ``per_user`` and root-field quotas, which depend on who asks and on what
        the operation selects: :meth:`charges_for` has every quota an operation pays.
        """
        tier, own = self._tier_quota(tenant, tier)
        quotas = [own]
        if operation_name is not None:
            operation = tier.operations.get(operation_name)
            if operation is not None:
                quotas.append(operation)
        if self.global_quota is not None:
            quotas.append(self.global_quota)
        return tuple(quotas)

    def charges_for(
        self,
        subject: Subject,
        report: CostReport | None,
        tier: TierConfig | None = None,
        charge: float | None = None,
        multiplier: float = 1.0,
    ) -> tuple[tuple[Quota, ...], tuple[float, ...] | None]:
        """The quotas one operation of ``subject`` pays into, and what each is debited.

        In order: the subject's quota (its tenant's own, else its tier's); the tier's
        ``per_user`` quota of the user inside the tenant, if there is one; the tier's
        quota for the operation's name; a quota per root field the operation selects
        (``[tiers.<t>.fields]``: debited that field's cost, at least 1 a selection, so that
        a field the cost model prices at 0 still counts its calls); the global quota.
        All in one atomic call of the storage.

        ``charge`` is what the subject's, the user's, the operation's and the global quota
        pay (default: the report's cost); without a report (a request refused before it
        was priced pays ``charge``) no operation or root-field quota applies.

        ``multiplier`` (adaptive limits, below 1 while the service is overloaded) divides
        what the quotas of an adaptive tier (:attr:`adaptive_tiers`) are debited, each at
        most its maximum (:meth:`AdaptiveConfig.scale`); other tiers ignore it.

        Returns:
            The quotas, and their amounts when they differ from the operation's cost
            (None: every quota pays :attr:`CostReport.cost`).
        """
        if multiplier < 1.0:
            paid, amounts = self.charges_for(subject, report, tier, charge)
            if self._tier_quota(subject.tenant, tier)[0].name not in self.adaptive_tiers:
                return paid, amounts
            base = charge if charge is not None else report.cost if report is not None else 0.0
            return paid, self.adaptive.scale(paid, amounts, base, multiplier)
        tier, own = self._tier_quota(subject.tenant, tier)
        if not (tier.per_user or tier.operations or tier.fields or self.global_quota):
            return (own,), None  # the common case: one quota
        cost = charge if charge is not None else report.cost if report is not None else 0.0
        quotas, costs = [own], [cost]
        if subject.user is not None and tier.per_user is not None:
            quotas.append(_per_user(tier.per_user, subject.user))
            costs.append(cost)
        name = report.operation_name if report is not None else None
        operation = tier.operations.get(name) if name is not None else None
        if operation is not None:
            quotas.append(operation)
            costs.append(cost)
        fields = tier.fields
        if fields and report is not None:
            for coordinate, root in report.root_field_costs.items():
                quota = fields.get(coordinate)
                if quota is not None:
                    quotas.append(quota)
                    costs.append(max(root.cost, float(root.selections)))
        if self.global_quota is not None:
            quotas.append(self.global_quota)
            costs.append(cost)
        differs = any(each != cost for each in costs)
        return tuple(quotas), tuple(costs) if differs else None

    def check_fields(self, schema: Any) -> None:
        """Check that every ``[tiers.<t>.fields]`` coordinate is a root field of ``schema``.

        Raises:
            ConfigError: a coordinate that is not a field of the query, mutation or
                subscription type (naming the file, the key, its line and the closest
                root fields).
        """
        if not any(tier.fields or tier.fields_in_flight for tier in self.tiers.values()):
            return
        graphql = graphql_schema(schema)
        roots = [graphql.query_type, graphql.mutation_type, graphql.subscription_type]
        fields = {
            f"{root.name}.{name}" for root in roots if root is not None for name in root.fields
        }
        for tier in self.tiers.values():
            for coordinate in {**tier.fields, **tier.fields_in_flight}:
                if coordinate in fields:
                    continue
                close = difflib.get_close_matches(coordinate, fields, n=3)
                hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
                raise ConfigError(
                    f"{coordinate!r} is not a root field of the schema (a field of its query,"
                    f" mutation or subscription type){hint}",
                    file=self.source,
                    key=render_key(("tiers", tier.name, "fields", coordinate)),
                    line=tier.field_lines.get(coordinate),
                )

    def _tier_quota(self, tenant: str | None, tier: TierConfig | None) -> tuple[TierConfig, Quota]:
        """The tier and the own quota of ``tenant`` (``tier``: what a tier resolver chose)."""
        if tier is not None:
            return tier, tier.quota
        known = self.tenants.get(tenant) if tenant is not None else None
        if known is None:
            tier = self.tiers[self.limits.default_tier]
            return tier, tier.quota
        tier = self.tiers[known.tier]
        return tier, tier.quota if known.quota is None else known.quota


@functools.lru_cache(maxsize=4096)
def _per_user(quota: Quota, user: str) -> Quota:
    """The ``per_user`` quota of one user: built once per user while it is busy."""
    return quota.scoped(user)
