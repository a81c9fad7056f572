"""Settling an operation that ran: its actual cost, and what goes back to each quota."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from graphql import GraphQLError

    from quotaql.config.values import LimitsConfig
    from quotaql.gate.operation import Operation
    from quotaql.policy.quota import Decision, Quota

__all__ = ["has_path", "refund_amounts", "refunded", "restore_rate"]


def refund_amounts(
    op: Operation,
    data: Any,
    errors: Sequence[GraphQLError] | None,
    limits: LimitsConfig,
    tuning_sample: float,
) -> tuple[float, tuple[float, ...] | None]:
    """The actual cost (when shown or refunded), and what to give back to each quota:
    never below ``min_charge``; each quota's refund scaled by the factor adaptive limits
    scaled its debit by (``op.base``), whatever the multiplier is now. ``tuning_sample``:
    the share of operations whose list sizes are kept (``op.sizes``) for tuning."""
    report = op.report
    if report is None or op.error is not None or op.header == "validate":
        return 0.0, None
    if report.operation_type == "subscription":
        return 0.0, None  # each event is charged as it is delivered
    refund = limits.refund_unused and op.debited
    if not (refund or limits.expose_cost or op.header is not None):
        return 0.0, None
    if errors and not all(has_path(error) for error in errors):
        # The operation ran and an error says nothing of where (execution itself failed,
        # or a formatter dropped the paths): what it erased is unknown, nothing goes back.
        op.actual = report.cost
    else:  # the plan that priced it, walked against the data
        if tuning_sample and random.random() < tuning_sample:  # noqa: S311
            op.sizes = []
        op.actual = report.actual(data, errors or None, op.sizes)
    kept = max(op.actual, limits.min_charge)
    amount = max(0.0, op.charge - kept) if refund else 0.0
    quotas = op.quotas
    base, debits = op.base, op.costs
    if base is not None and debits is not None and amount > 0:
        # What the debit took per point of cost, for each quota: 1/m, or less where the
        # debit was clamped to the quota's maximum. Never the multiplier of now: a
        # tenant that paid before the pressure rose must not be refunded at its price.
        return amount, tuple(
            amount * (debit / paid if paid > 0 else 1.0) if quota.refundable else 0.0
            for quota, debit, paid in zip(quotas, debits, base, strict=True)
        )
    if amount <= 0 or (len(quotas) == 1 and quotas[0].refundable):
        return amount, None
    amounts = tuple(amount if quota.refundable else 0.0 for quota in quotas)
    return amount, None if 0.0 not in amounts else amounts


def refunded(decision: Decision, amount: float, amounts: Sequence[float] | None) -> Decision:
    """``decision`` as it stands after a refund: each quota got back its amount (``amount``,
    or its own of ``amounts``), and the tightest one now may be another."""
    statuses = decision.quotas
    if len(statuses) <= 1:
        given_back = amounts[0] if amounts else amount  # its own amount, when scaled
        remaining = min(decision.limit, decision.remaining + given_back)
        statuses = tuple(status._replace(remaining=remaining) for status in statuses)
        return decision._replace(remaining=remaining, quotas=statuses)
    given = amounts if amounts is not None else (amount,) * len(statuses)
    back = tuple(
        status._replace(remaining=min(status.limit, status.remaining + each))
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
