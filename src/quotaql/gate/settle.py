"""Settling an operation that ran: its actual cost, and what goes back to each quota or,
when it ran above its debit, what each pays more."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from quotaql._flow import Charge, Refund
from quotaql.gate import worktime
from quotaql.instrumentation import names

if TYPE_CHECKING:
    from collections.abc import Generator, Sequence

    from graphql import GraphQLError

    from quotaql.config.values import LimitsConfig
    from quotaql.gate.operation import Operation
    from quotaql.policy.quota import Decision, Quota

__all__ = [
    "has_path",
    "overage_amounts",
    "refund_amounts",
    "refunded",
    "restore_rate",
    "settling",
]


def refund_amounts(
    op: Operation,
    data: Any,
    errors: Sequence[GraphQLError] | None,
    limits: LimitsConfig,
    tuning_sample: float,
) -> tuple[float, tuple[float, ...] | None]:
    """The actual cost (when shown, refunded or charged over), and what to give back to
    each quota: never below ``min_charge`` (nor the document's size in points,
    ``op.least``); each quota's refund scaled by the factor
    adaptive limits scaled its debit by (``op.base``), whatever the multiplier is now.
    ``tuning_sample``: the share of operations whose list sizes are kept (``op.sizes``)
    for tuning, drawn here unless the adapter drew it when the request started
    (``op.sampled``: the operations whose resolvers it timed)."""
    report = op.report
    if report is None or op.error is not None or op.header == "validate":
        return 0.0, None
    if report.operation_type == "subscription":
        return 0.0, None  # each event is charged as it is delivered
    debited = op.debited
    refund = limits.refund_unused and debited
    overage = limits.charge_overage and debited
    if not (refund or overage or limits.expose_cost or limits.cost_headers or op.header):
        return 0.0, None
    if errors and not all(has_path(error) for error in errors):
        # The operation ran and an error says nothing of where (execution itself failed,
        # or a formatter dropped the paths): what it erased is unknown, nothing goes back.
        op.actual = report.cost
    else:  # the plan that priced it, walked against the data
        sampled = op.sampled  # drawn when its request started (its resolvers timed)
        if sampled is None:
            sampled = bool(tuning_sample) and random.random() < tuning_sample  # noqa: S311
        if sampled:
            op.sizes = []
        op.actual = report.actual(data, errors or None, op.sizes)
    # What it keeps: the largest of its actual cost, min_charge and its size (op.least,
    # when more), the first of equals as max() takes it, without its call.
    kept = op.actual
    if limits.min_charge > kept:  # noqa: PLR1730
        kept = limits.min_charge
    if op.least > kept:  # noqa: PLR1730
        kept = op.least
    amount = op.charge - kept if refund else 0.0
    if not amount > 0.0:
        amount = 0.0
    return amount, _per_quota(op, amount)


def overage_amounts(op: Operation, limits: LimitsConfig) -> tuple[float, tuple[float, ...] | None]:
    """What ``op`` ran above what it was debited (after :func:`refund_amounts` measured
    its actual cost), and what each quota is charged more: the quotas a refund would
    give back to (not a root field's, which pays its estimate), each scaled by the factor
    adaptive limits scaled its debit by (``op.base``). Nothing when the debit covered the
    actual cost, or nothing was debited (a refusal, failing open)."""
    actual = op.actual
    if actual is None or not (limits.charge_overage and op.debited):
        return 0.0, None
    amount = actual - op.charge
    if not amount > 0:
        return 0.0, None
    return amount, _per_quota(op, amount)


def _per_quota(op: Operation, amount: float) -> tuple[float, ...] | None:
    """What each of ``op``'s quotas gets back (a refund) or pays more (an overage) of
    ``amount`` points: None when every quota takes ``amount`` itself."""
    quotas = op.quotas
    base, debits = op.base, op.costs
    if base is not None and debits is not None and amount > 0:
        # What the debit took per point of cost, for each quota: 1/m, or less where the
        # debit was clamped to the quota's maximum. Never the multiplier of now: a
        # tenant that paid before the pressure rose must not be refunded at its price.
        return tuple(
            amount * (debit / paid if paid > 0 else 1.0) if quota.refundable else 0.0
            for quota, debit, paid in zip(quotas, debits, base, strict=True)
        )
    if amount <= 0 or (len(quotas) == 1 and quotas[0].refundable):
        return None
    amounts = tuple(amount if quota.refundable else 0.0 for quota in quotas)
    return None if 0.0 not in amounts else amounts


def settling(
    op: Operation,
    data: Any,
    errors: Sequence[GraphQLError] | None,
    limits: LimitsConfig,
    tuning_sample: float,
    ledger: worktime.Ledger,
) -> Generator[Any, Any, None]:
    """The flow that settles ``op`` once it ran: its actual cost measured, then what it
    did not use given back (a :class:`~quotaql._flow.Refund`, deferred on Redis) or what
    it ran above its debit charged (a :class:`~quotaql._flow.Charge`, at once), to the
    same quotas, in one storage call, with the worker time it took (its time quota, in
    the same call); ``op.decision`` then says what is left."""
    amount, amounts = refund_amounts(op, data, errors, limits, tuning_sample)
    key = op.subject.key
    op.refunded = amount
    if amount > 0:
        debit = op.decision
        if debit is not None:  # what is left once it is applied (an answer may be sent first)
            op.decision = refunded(debit, amount, amounts)
        yield Refund(key, amount, op.quotas, amounts, debit)
        if op.span is not None:
            op.span.add_event(names.EVENT_REFUND, {"quotaql.refund": amount})
    over, overs = overage_amounts(op, limits)
    overage = Charge(key, over, op.quotas, overs, op.decision) if over > 0 else None
    yield from worktime.charge(op, ledger, overage)
    if overage is None:
        return
    op.overage = over
    if op.span is not None:
        op.span.add_event(names.EVENT_OVERAGE, {names.ATTR_COST_OVERAGE: over})
    if op.decision is not None:
        op.decision = refunded(op.decision, -over, None if overs is None else
                               tuple(-each for each in overs))  # fmt: skip


def refunded(decision: Decision, amount: float, amounts: Sequence[float] | None) -> Decision:
    """``decision`` as it stands after a refund: each quota got back its amount (``amount``,
    or its own of ``amounts``), and the tightest one now may be another. Negative amounts
    are an overage charged: what remains is then shown no lower than 0, as a decision
    shows it (the debt is in the storage: the next decision's wait says it)."""
    statuses = decision.quotas
    if len(statuses) <= 1:
        given_back = amounts[0] if amounts else amount  # its own amount, when scaled
        # max(0.0, min(limit, remaining + given_back)), without their calls.
        remaining = decision.remaining + given_back
        if not remaining < decision.limit:
            remaining = decision.limit
        if not remaining > 0.0:
            remaining = 0.0
        if statuses:
            statuses = (statuses[0]._replace(remaining=remaining),)
        return decision._replace(remaining=remaining, quotas=statuses)
    given = amounts if amounts is not None else (amount,) * len(statuses)
    back = tuple(
        status._replace(remaining=max(0.0, min(status.limit, status.remaining + each)))
        for status, each in zip(statuses, given, strict=True)
    )
    tightest = min(back, key=lambda status: status.remaining)  # the first of equals
    return decision._replace(
        remaining=tightest.remaining,
        limit=tightest.limit,
        reset_after=tightest.reset_after,
        quotas=back,
    )


def has_path(error: Any) -> bool:
    """An execution error that says which field it erased (a ``GraphQLError``'s ``path``,
    or a formatted error's ``"path"``)."""
    path = error.get("path") if isinstance(error, dict) else getattr(error, "path", None)
    return bool(path)


def restore_rate(quota: Quota) -> float:
    if quota.refill_per_second is not None:
        return float(quota.refill_per_second)
    return quota.maximum / float(quota.window_seconds or 1)
