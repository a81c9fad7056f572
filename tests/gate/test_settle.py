"""``refunded``: a decision as it stands after a refund (or an overage charged), one quota.

The gate's tests reach it through real refunds; these pin its single-quota arithmetic at
the edges (clamped at the limit, at 0, scaled amounts, a decision without statuses).
"""

from __future__ import annotations

import pytest

from quotaql.gate.settle import refunded
from quotaql.policy.quota import Decision, QuotaStatus


def _decision(remaining: float, *, statuses: bool = True) -> Decision:
    quotas = (QuotaStatus("points", 100.0, remaining, 5.0, 0.0, True),) if statuses else ()
    return Decision(True, 10.0, remaining, 100.0, 0.0, 5.0, None, "memory", quotas=quotas)


@pytest.mark.parametrize(
    ("remaining", "amount", "amounts", "expected"),
    [
        (40.0, 7.0, None, 47.0),  # given back
        (95.0, 7.0, None, 100.0),  # never above the limit
        (93.0, 7.0, None, 100.0),  # exactly the limit
        (40.0, 7.0, (3.5,), 43.5),  # its own (scaled) amount
        (40.0, -15.0, None, 25.0),  # an overage charged
        (4.0, -15.0, None, 0.0),  # shown no lower than 0
        (4.0, -15.0, (-4.0,), 0.0),
    ],
)
def test_one_quota_gets_back_its_amount_within_its_limit(
    remaining: float, amount: float, amounts: tuple[float, ...] | None, expected: float
) -> None:
    decision = _decision(remaining)
    after = refunded(decision, amount, amounts)
    assert after.remaining == expected
    assert after.quotas == (decision.quotas[0]._replace(remaining=expected),)
    assert after._replace(remaining=remaining, quotas=decision.quotas) == decision


def test_a_decision_without_quota_statuses_keeps_none() -> None:
    decision = _decision(40.0, statuses=False)
    after = refunded(decision, 7.0, None)
    assert after.remaining == 47.0
    assert after.quotas == ()
    assert after.limit == decision.limit
