"""What a response says beyond its data: a warning before the wall (``warn_at``) and the cost
headers for an edge (``cost_headers``).

**The warning.** Once an operation that ran leaves its subject with less than ``1 - warn_at``
of a quota (what remains ÷ the quota's capacity), its response carries
``extensions.cost.warning`` (:func:`quotaql.contract.quota_warning`) and the quota's item of
the ``RateLimit`` header carries the parameter ``quotaql-warn``, whose value is the points a
second at which the budget holds (the quota's refill). Every quota of the decision is
considered, the one with the least share left is named; the ``[global]`` quota is never
named (it is every tenant's: what is left of it says what others spent). A refusal carries
no warning (its error says more); a shadow-mode operation warns too, saying "would".

**The cost headers.** With ``[limits] cost_headers``, the estimated cost (the
``requestedQueryCost``) of every priced operation and, where the response is complete (the
operation ran and its actual cost was measured: not a refusal, not ``GraphQL-Cost:
validate``, not a subscription or an incremental ``@defer`` / ``@stream`` answer), the
actual cost. Their names are quotaql's: a value of a client's, a resolver's or the
framework's under the same name is replaced, or removed where quotaql has none.

The operation knows both from the configuration it was begun under (``Operation.warn_at``,
``Operation.cost_names``): its :attr:`~quotaql.gate.operation.Operation.headers`, the
gate's ``results`` and its record read them whatever order an adapter asks in.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

from quotaql.contract import quota_warning
from quotaql.instrumentation.routes import granted_rate
from quotaql.policy import numbers
from quotaql.policy.modes import Mode

if TYPE_CHECKING:
    from collections.abc import Mapping

    from quotaql.gate.operation import Operation
    from quotaql.policy.quota import Decision, Quota, QuotaStatus

__all__ = [
    "WARN_PARAMETER",
    "Caution",
    "caution_of",
    "cost_headers",
    "cost_values",
    "warned_item",
]

#: The ``RateLimit`` item parameter of a warning (the IETF draft's rule for a service's own
#: parameters: prefixed with its name); its value is the sustainable rate (points a second).
WARN_PARAMETER = "quotaql-warn"

_NO_STATE = frozenset({"fail_open", "fail_closed"})  # no storage decided: nothing known


class Caution(NamedTuple):
    """One operation's warning: the quota that fell below its threshold, as it stands."""

    quota: str
    remaining: float
    capacity: float
    reset: float  # seconds until the quota is full again
    rate: float  # the points a second the quota refills
    enforced: bool  # False: shadow mode (nothing refused yet)

    def extension(self, whole: bool) -> dict[str, Any]:
        """``extensions.cost.warning``, what remains rounded down as ``throttleStatus``
        rounds it (to an integer when the operation's cost is ``whole``)."""
        return quota_warning(
            self.quota,
            numbers.left(self.remaining, whole),
            self.capacity,
            numbers.left(self.rate, numbers.is_whole(self.rate)),
            self.enforced,
        )


def caution_of(op: Operation) -> Caution | None:
    """``op``'s warning for its decision as it stands (worked out once per decision: a
    refund, an overage or a subscription's event makes a new one), under the ``warn_at``
    of the configuration it was begun under; None: no warning."""
    decision = op.decision
    known = op.caution
    if known is not None and known[0] is decision:
        return known[1]
    caution = _caution(op, decision, op.warn_at)
    op.caution = None if decision is None else (decision, caution)
    return caution


def _caution(op: Operation, decision: Decision | None, warn_at: float | None) -> Caution | None:
    if (
        warn_at is None
        or decision is None
        or op.error is not None  # a refusal: its error says more
        or op.header == "validate"  # priced, not run
        or op.mode is Mode.OFF
        or decision.source in _NO_STATE
    ):
        return None
    below = 1.0 - warn_at
    found: tuple[float, QuotaStatus, Quota] | None = None
    for status in decision.quotas:
        limit = status.limit
        if not (math.isfinite(limit) and limit > 0):
            continue
        share = status.remaining / limit
        if share >= below or (found is not None and share >= found[0]):
            continue
        quota = _quota(op, status.name)
        if quota is not None and not quota.shared:  # [global]: every tenant's, never told
            found = (share, status, quota)
    if found is None:
        return None
    _, status, quota = found
    enforced = op.mode is Mode.ENFORCE and decision.allowed
    rate = granted_rate(quota)
    return Caution(status.name, status.remaining, status.limit, status.reset_after, rate, enforced)


def _quota(op: Operation, name: str) -> Quota | None:
    for quota in op.quotas:
        if quota.name == name:
            return quota
    return None


def warned_item(header: str, caution: Caution) -> str:
    """The ``RateLimit`` header ``header`` with the warning: the ``quotaql-warn`` parameter
    on the warned quota's item, or that quota's item added when the header describes
    another (the draft's field is a list: one item per quota)."""
    rate = _decimal(numbers.left(caution.rate, numbers.is_whole(caution.rate)))
    warn = f"{WARN_PARAMETER}={rate}"
    if header.startswith(f'"{caution.quota}";'):
        return f"{header};{warn}"
    remaining = max(0, math.floor(caution.remaining))
    reset = max(0, math.ceil(caution.reset))
    return f'{header}, "{caution.quota}";r={remaining};t={reset};{warn}'


def _decimal(value: float) -> str:
    """A structured field's Integer or Decimal (at most three decimals, one at least)."""
    if isinstance(value, int):
        return str(value)
    text = f"{value:.3f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def cost_values(op: Operation) -> tuple[float | None, float | None, bool]:
    """What ``op`` puts in the cost headers: its estimated cost (None: not priced), its
    actual cost (None: it did not run to a complete answer), and whether it ran with its
    actual cost unknown (a stream's, or a subscription's: a batch then sends no actual
    cost at all)."""
    estimated = op.cost if op.report is not None else None
    if not op.runs:  # refused, or only priced: nothing ran
        return estimated, None, False
    if op.operation_type == "subscription" or op.actual is None:
        return estimated, None, True
    return estimated, op.actual, False


def cost_headers(
    names: Mapping[str, str], estimated: float | None, actual: float | None
) -> dict[str, str]:
    """The cost headers (``names``: ``cost_header_names``) of these costs, as
    ``extensions.cost`` rounds them."""
    headers: dict[str, str] = {}
    if estimated is not None:
        headers[names["estimated"]] = str(numbers.points(estimated))
    if actual is not None:
        headers[names["actual"]] = str(numbers.points(actual))
    return headers
