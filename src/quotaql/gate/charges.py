"""What an operation pays: the quotas it is debited from and how much, and the lease sets it
takes a lease in.

The configuration holds the values (``[tiers]``, ``[tenants]``, ``[global]``,
``[adaptive]``); the rules that turn them into one operation's charges are the gate's, and
are here, as functions of the configuration: :func:`charges_for` (every quota an operation
pays, with its amount), :func:`quotas_for` (those that do not depend on who asks or what is
selected), :func:`scaled` (the amounts under adaptive limits), :func:`delayed` (the quotas of
an operation that may wait for its turn) and :func:`in_flight` (a tier's concurrency limits
as lease specs).

Example:
    >>> from quotaql.config import default_config
    >>> [quota.name for quota in quotas_for(default_config(), "acme", "ExportOrders")]
    ['tenant']
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from quotaql.config.locator import render_key
from quotaql.config.values import DEFAULT_TIME, TIME_MS_PER_POINT
from quotaql.config.values import time_quota as time_quota_of
from quotaql.contract import capacity_warning
from quotaql.cost_analysis._compile import graphql_schema
from quotaql.errors import ConfigError
from quotaql.gate.settle import restore_rate
from quotaql.storage.leases import LeaseSpec

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from quotaql.config import Config, TierConfig
    from quotaql.config.adaptive import AdaptiveConfig
    from quotaql.cost_analysis import CostReport
    from quotaql.gate.operation import Operation
    from quotaql.identity import Subject
    from quotaql.policy.quota import Quota

__all__ = [
    "FIELD_LEASES",
    "SUBSCRIPTION_LEASES",
    "TIER_LEASES",
    "InFlight",
    "charges_for",
    "check_fields",
    "debit",
    "delayed",
    "event_price",
    "fitted",
    "in_flight",
    "least",
    "quotas_for",
    "scaled",
    "text_length",
    "time_quota",
]

#: The names of the lease sets of a tenant (``quotaql.storage.leases``).
TIER_LEASES: Final = "tier"
SUBSCRIPTION_LEASES: Final = "subscriptions"
FIELD_LEASES: Final = "field:"


def quotas_for(
    config: Config,
    tenant: str | None,
    operation_name: str | None,
    tier: TierConfig | None = None,
) -> tuple[Quota, ...]:
    """The quotas that a request of ``tenant`` running ``operation_name`` spends from.

    In order: the tenant quota (the tenant's own, else its tier's), the tier's quota
    for ``operation_name`` if it has one, and the global quota if there is one.
    ``tier``, when given (a tier resolver chose it), replaces the ``[tenants]`` table.
    Not the ``per_user`` and root-field quotas, which depend on who asks and on what
    the operation selects: :func:`charges_for` has every quota an operation pays.
    """
    tier, own = _tier_quota(config, tenant, tier)
    quotas = [own]
    if operation_name is not None:
        operation = tier.operations.get(operation_name)
        if operation is not None:
            quotas.append(operation)
    if config.global_quota is not None:
        quotas.append(config.global_quota)
    return tuple(quotas)


def least(config: Config, op: Operation) -> float:
    """The least ``op`` pays: ``[limits] min_charge``, or its document's length over
    ``[cost] chars_per_point`` when more (parsing a large document is work, however cheap
    the operation it holds)."""
    minimum = config.limits.min_charge
    per_point = config.cost.chars_per_point
    if per_point is None or not op.chars:
        return minimum
    return max(minimum, op.chars / per_point)


def fitted(config: Config, least: float, quotas: Sequence[Quota]) -> float:
    """``least`` (what an operation pays at least, :func:`least`), never more than the
    smallest of ``quotas`` holds, nor below ``min_charge``: a size past a bucket's capacity
    would be refused ``exceeds_capacity`` and pay nothing; it empties the bucket instead."""
    if not quotas:
        return least
    most = min(quota.maximum for quota in quotas)
    return least if least <= most else max(most, config.limits.min_charge)


def debit(config: Config, op: Operation, report: CostReport, tier: TierConfig | None) -> None:
    """What ``op``, priced ``report``, is debited (``op.charge``, ``op.quotas``,
    ``op.costs``): its cost, or the least it pays when more (:func:`least`), and never
    refused for its size alone: a size past its smallest quota empties it (:func:`fitted`).
    ``op.least`` keeps that least, below which no refund goes."""
    op.charge, op.quotas, op.costs, op.least = _debited(config, op, report, tier)


def _debited(
    config: Config, op: Operation, report: CostReport, tier: TierConfig | None
) -> tuple[float, tuple[Quota, ...], tuple[float, ...] | None, float]:
    """:func:`debit`'s charge, quotas, amounts and least, without setting them on ``op``."""
    minimum = least(config, op)
    charge = max(report.cost, minimum)
    quotas, costs = charges_for(
        config, op.subject, report, tier, charge if charge != report.cost else None
    )
    if charge > report.cost and charge > config.limits.min_charge:  # its size
        fit = fitted(config, charge, quotas)
        if fit != charge:
            charge = max(report.cost, fit)
            minimum = min(minimum, fit)
            quotas, costs = charges_for(
                config, op.subject, report, tier, charge if charge != report.cost else None
            )
    return charge, quotas, costs, minimum


def beyond_capacity(
    config: Config, op: Operation, report: CostReport, tier: TierConfig | None
) -> list[dict[str, Any]] | None:
    """What ``GraphQL-Cost: validate`` warns of: each quota that ``op``, priced ``report``,
    would be debited more of than it can ever hold, as :func:`debit` would debit it
    (running it would be refused ``COST_EXCEEDS_CAPACITY``); None when it fits them all."""
    charge, quotas, costs, _ = _debited(config, op, report, tier)
    found = [
        capacity_warning(quota.name, amount, quota.maximum)
        for quota, amount in zip(quotas, costs or (charge,) * len(quotas), strict=True)
        if amount > quota.maximum
    ]
    return found or None


def event_price(
    config: Config,
    op: Operation,
    report: CostReport,
    tier: TierConfig | None,
    *,
    reloaded: bool = False,
) -> None:
    """From its second event on, subscription ``op`` pays its price (at least
    ``min_charge``), not the size of its document, which the first paid (parsed once);
    ``reloaded``: priced again under a new configuration (its weights, its quotas), up or
    down."""
    price = max(report.cost, config.limits.min_charge)
    if op.charge <= price and not reloaded:
        return
    op.quotas, op.costs = charges_for(
        config, op.subject, report, tier, price if price != report.cost else None
    )
    op.charge, op.base, op.multiplier = price, None, 1.0  # scaled again as it goes


def text_length(document: Any, longest: int | None) -> int:
    """The length of ``document``'s text: a parsed document's source (0 when parsed
    with ``no_location``), or the query text itself; 0 past ``longest`` (``max_length``:
    the parser refuses it before reading it, so there is no parse to pay for)."""
    if isinstance(document, str):
        length = len(document)
    else:
        loc = getattr(document, "loc", None)
        length = 0 if loc is None else len(loc.source.body)
    return length if longest is None or length <= longest else 0


def charges_for(
    config: Config,
    subject: Subject,
    report: CostReport | None,
    tier: TierConfig | None = None,
    charge: float | None = None,
    multiplier: float = 1.0,
) -> tuple[tuple[Quota, ...], tuple[float, ...] | None]:
    """The quotas one operation of ``subject`` pays into under ``config``, and what each is
    debited.

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
    what the quotas of an adaptive tier (``config.adaptive_tiers``) are debited, each at
    most its maximum (:func:`scaled`); other tiers ignore it.

    Returns:
        The quotas, and their amounts when they differ from the operation's cost
        (None: every quota pays :attr:`CostReport.cost`).
    """
    if multiplier < 1.0:
        paid, amounts = charges_for(config, subject, report, tier, charge)
        if _tier_quota(config, subject.tenant, tier)[0].name not in config.adaptive_tiers:
            return paid, amounts
        base = charge if charge is not None else report.cost if report is not None else 0.0
        return paid, scaled(config.adaptive, paid, amounts, base, multiplier)
    tier, own = _tier_quota(config, subject.tenant, tier)
    if not (tier.per_user or tier.operations or tier.fields or config.global_quota):
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
    if config.global_quota is not None:
        quotas.append(config.global_quota)
        costs.append(cost)
    differs = any(each != cost for each in costs)
    return tuple(quotas), tuple(costs) if differs else None


def scaled(
    adaptive: AdaptiveConfig,
    quotas: Sequence[Quota],
    costs: Sequence[float] | None,
    cost: float,
    multiplier: float,
) -> tuple[float, ...]:
    """What each of ``quotas`` is debited under ``multiplier``: its amount (its own of
    ``costs``, else ``cost``) divided by the multiplier, but never more than the quota's
    maximum unless the amount itself is (an operation that pressure alone would push
    over a quota's capacity is clamped to it: waiting still lets it through). The shared
    ``[global]`` quota keeps its amount unless ``adaptive.scale_global``."""
    amounts = costs if costs is not None else (cost,) * len(quotas)
    debits = []
    for quota, amount in zip(quotas, amounts, strict=True):
        if multiplier >= 1.0 or (quota.shared and not adaptive.scale_global):
            debits.append(amount)
            continue
        debit = amount / multiplier
        limit = quota.maximum
        debits.append(debit if debit <= limit else max(amount, limit))
    return tuple(debits)


def time_quota(config: Config, tier: TierConfig) -> Quota | None:
    """The time quota an operation of ``tier`` is charged its worker time to: the tier's
    own, else ``[limits] time``; unless that is set, the tier's points' worth of worker time
    (:func:`points_worth`). None: none."""
    own = tier.time
    if own is not True:
        return own or None
    limits = config.limits.time
    if limits is DEFAULT_TIME:  # not set: as large as the tier's budget
        return points_worth(tier.quota)
    return limits


_WORTH: dict[int, tuple[Quota, Quota]] = {}  # id(points) -> (points, its time quota)


def points_worth(points: Quota) -> Quota:
    """The time quota worth ``points`` at ``TIME_MS_PER_POINT`` (20 ms) a point: its
    capacity and its sustained rate in milliseconds, never below :data:`DEFAULT_TIME`'s. A
    tier of 1,000 points refilled 50 a second may take 20 s, refilled 1 s a second (a core)."""
    known = _WORTH.get(id(points))
    if known is not None and known[0] is points:
        return known[1]
    worth = time_quota_of(
        max(DEFAULT_TIME.maximum, points.maximum * TIME_MS_PER_POINT),
        max(DEFAULT_TIME.refill_per_second or 0.0, restore_rate(points) * TIME_MS_PER_POINT),
    )
    if len(_WORTH) >= _WORTH_SIZE:  # tiers of configurations reloaded many times
        _WORTH.clear()
    _WORTH[id(points)] = (points, worth)
    return worth


_WORTH_SIZE: Final = 1_024


def delayed(tier: TierConfig, quotas: tuple[Quota, ...]) -> tuple[Quota, ...]:
    """``quotas`` (what :func:`charges_for` gave for an operation of the delay tier ``tier``)
    as they are when the operation may wait: each of the subject's own with ``max_delay``
    and ``max_queued``; the shared ones (``[global]``) as they are."""
    delay, queued = tier.max_delay, tier.max_queued
    assert delay is not None  # a delay tier: both set
    assert queued is not None
    return tuple(quota if quota.shared else _delaying(quota, delay, queued)
                 for quota in quotas)  # fmt: skip


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


# The limits of each tier asked about, by the tier's identity (a tier is a frozen value of
# one configuration), with the tier itself: its id stays its own while it is here.
_LIMITS: dict[int, tuple[TierConfig, InFlight | None]] = {}
# Tiers kept at most; past it the table starts again (the tiers of configurations reloaded
# since are gone from it, the tiers in force come back on their next operation).
_MAX_LIMITS: Final = 1024


def in_flight(tier: TierConfig) -> InFlight | None:
    """The concurrency limits of ``tier`` as lease specs (:class:`InFlight`), None when it
    has none; built once per tier, as the gate asks for every operation."""
    known = _LIMITS.get(id(tier))
    if known is not None:
        return known[1]
    limits = InFlight.of(tier)
    if len(_LIMITS) >= _MAX_LIMITS:
        _LIMITS.clear()
    _LIMITS[id(tier)] = (tier, limits)
    return limits


def check_fields(config: Config, schema: Any) -> None:
    """Check that every ``[tiers.<t>.fields]`` coordinate of ``config`` is a root field of
    ``schema``, and can name a lease set.

    Raises:
        ConfigError: a coordinate that is not a field of the query, mutation or
            subscription type (naming the file, the key, its line and the closest
            root fields).
    """
    if not any(tier.fields or tier.fields_in_flight for tier in config.tiers.values()):
        return
    graphql = graphql_schema(schema)
    roots = [graphql.query_type, graphql.mutation_type, graphql.subscription_type]
    fields = {f"{root.name}.{name}" for root in roots if root is not None for name in root.fields}
    for tier in config.tiers.values():
        for coordinate in {**tier.fields, **tier.fields_in_flight}:
            if coordinate in fields:
                continue
            close = difflib.get_close_matches(coordinate, fields, n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ConfigError(
                f"{coordinate!r} is not a root field of the schema (a field of its query,"
                f" mutation or subscription type){hint}",
                file=config.source,
                key=render_key(("tiers", tier.name, "fields", coordinate)),
                line=tier.field_lines.get(coordinate),
            )
        for coordinate, maximum in tier.fields_in_flight.items():
            try:  # its lease set's name: checked now rather than on the first operation
                LeaseSpec(f"{FIELD_LEASES}{coordinate}", maximum)
            except ConfigError as error:
                raise ConfigError(
                    error.reason,
                    file=config.source,
                    key=render_key(("tiers", tier.name, "fields", coordinate)),
                    line=tier.field_lines.get(coordinate),
                ) from None


def _tier_quota(
    config: Config, tenant: str | None, tier: TierConfig | None
) -> tuple[TierConfig, Quota]:
    """The tier and the own quota of ``tenant`` (``tier``: what a tier resolver chose)."""
    if tier is not None:
        return tier, tier.quota
    known = config.tenants.get(tenant) if tenant is not None else None
    if known is None:
        tier = config.tiers[config.limits.default_tier]
        return tier, tier.quota
    tier = config.tiers[known.tier]
    return tier, tier.quota if known.quota is None else known.quota


@functools.lru_cache(maxsize=4096)
def _per_user(quota: Quota, user: str) -> Quota:
    """The ``per_user`` quota of one user: built once per user while it is busy."""
    return quota.scoped(user)


@functools.lru_cache(maxsize=4096)
def _delaying(quota: Quota, max_delay: float, max_queued: int) -> Quota:
    """``quota`` with a wait (its state is the same: only the refusal changes)."""
    return dataclasses.replace(quota, max_delay=max_delay, max_queued=max_queued)
