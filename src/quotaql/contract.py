"""What the client sees: GraphQL errors, ``extensions.cost`` and the HTTP rate-limit headers.

Pure functions of a decision and a price, so that every integration (Strawberry, Ariadne,
plain graphql-core) answers the same way. Nothing here imports a web framework.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from graphql import GraphQLError

from quotaql.policy import numbers
from quotaql.policy.quota import TIME_QUOTA

if TYPE_CHECKING:
    from collections.abc import Sequence

    from quotaql.errors import CostAnalysisError
    from quotaql.policy.quota import Decision, Quota

__all__ = [
    "BAD_COST_HEADER",
    "COST_EXCEEDS_CAPACITY",
    "RATE_LIMITED",
    "RATE_LIMITER_UNAVAILABLE",
    "REFUSAL_CODES",
    "TOO_MANY_CONCURRENT",
    "TOO_MANY_SUBSCRIPTIONS",
    "UNKNOWN_API_KEY",
    "QuotaqlGraphQLError",
    "bad_cost_header_error",
    "capacity_warning",
    "cost_extension",
    "graphql_error",
    "quota_warning",
    "rate_limit_error",
    "rate_limit_headers",
    "status_for",
    "too_many_concurrent_error",
    "too_many_subscriptions_error",
    "unknown_key_error",
]

RATE_LIMITED = "RATE_LIMITED"
COST_EXCEEDS_CAPACITY = "COST_EXCEEDS_CAPACITY"
RATE_LIMITER_UNAVAILABLE = "RATE_LIMITER_UNAVAILABLE"
UNKNOWN_API_KEY = "UNKNOWN_API_KEY"
TOO_MANY_SUBSCRIPTIONS = "TOO_MANY_SUBSCRIPTIONS"
TOO_MANY_CONCURRENT = "TOO_MANY_CONCURRENT"
#: A ``GraphQL-Cost`` header that is neither ``validate`` nor ``report``.
BAD_COST_HEADER = "BAD_COST_HEADER"
#: The codes of the refusals the limiter answers (the analysis has its own, on its errors).
REFUSAL_CODES = frozenset(
    {RATE_LIMITED, COST_EXCEEDS_CAPACITY, RATE_LIMITER_UNAVAILABLE, UNKNOWN_API_KEY,
     TOO_MANY_SUBSCRIPTIONS, TOO_MANY_CONCURRENT}
)  # fmt: skip
#: The ``limited_by`` (``extensions.quota``) of a concurrency refusal: the tier's
#: ``max_in_flight``, its ``max_subscriptions_in_flight``, or a root field's (``in_flight:``
#: and the field's lease set, ``field:Query.search``).
IN_FLIGHT = "in_flight"
IN_FLIGHT_SUBSCRIPTIONS = "in_flight:subscriptions"


class QuotaqlGraphQLError(GraphQLError):
    """A GraphQL error quotaql answers with: a refusal, or the analysis refusing a document.

    Adapters drop the framework's own log record of these (quotaql logs them itself, with
    fields and rate-limited), and only these: an application error with the same
    ``extensions.code`` is still logged.
    """


class _OwnRefusals(logging.Filter):
    """Drops a framework's own log record of each refusal quotaql answers.

    Strawberry and Ariadne log every error of every response (the record's message is the
    error); quotaql logs its refusals itself, with fields and rate-limited, so that a flood
    of refused requests cannot flood the logs. The application's own errors, whatever
    their code, are still logged.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not isinstance(record.msg, QuotaqlGraphQLError)


OWN_REFUSALS = _OwnRefusals()
"""The filter adapters with ``quiet_logs`` put on their framework's logger (idempotent)."""


def graphql_error(error: CostAnalysisError) -> QuotaqlGraphQLError:
    """The GraphQL error of an analysis refusal (``QUERY_TOO_DEEP``, ``BAD_USER_INPUT``...)."""
    return QuotaqlGraphQLError(str(error), extensions=error.extensions)


def _points(value: float) -> str:
    """``120``, ``0.5``: a cost or limit as a person reads it (:func:`numbers.points`)."""
    if value == math.inf:
        return "unlimited"
    return str(numbers.points(value))


def _counted(value: float) -> str:
    """``1 point``, ``120 points``."""
    text = _points(value)
    return f"{text} point" if text == "1" else f"{text} points"


def _milliseconds(value: float) -> str:
    return f"{_points(value)} ms"


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{math.ceil(value)} s"


def error_code(decision: Decision) -> str:
    """The ``extensions.code`` of a refused decision."""
    if decision.reason == "exceeds_capacity":
        return COST_EXCEEDS_CAPACITY
    if decision.reason == "backend_unavailable":
        return RATE_LIMITER_UNAVAILABLE
    return RATE_LIMITED


def rate_limit_error(
    decision: Decision, *, unpriced: bool = False, what: str = "query"
) -> QuotaqlGraphQLError:
    """The GraphQL error of a refused decision, with a message a person understands.

    ``unpriced``: refused before the query was read (the deny cache: the budget cannot
    hold even the least a request pays, ``decision.cost``). ``what`` was refused:
    ``"query"``, or ``"subscription event"`` (an event of an open subscription).

    Example:
        >>> from quotaql.policy.quota import Decision
        >>> refused = Decision(False, 120, 40.0, 1000.0, 1.6, 19.2, "tenant", "memory",
        ...                    "rate_limited")
        >>> rate_limit_error(refused).message
        'This query costs 120 points but only 40 of your 1000 remain; retry in 1.6 s.'
    """
    code = error_code(decision)
    cost, limit, remaining = decision.cost, decision.limit, decision.remaining
    # "your 100" for the tenant's own budget; a quota of its own is named.
    whose = "your" if decision.limited_by in (None, "tenant") else f"the '{decision.limited_by}'"
    left = numbers.left(remaining, numbers.is_whole(cost))
    extensions: dict[str, Any] = {
        "code": code,
        "cost": numbers.points(cost),
        "limit": numbers.points(limit),
        "remaining": left,
        "quota": decision.limited_by,
    }
    if code == COST_EXCEEDS_CAPACITY:
        message = (
            f"This {what} costs {_counted(cost)}, more than the {_points(limit)} your"
            f" '{decision.limited_by}' budget can ever hold; ask for less (smaller pages,"
            " fewer fields) to run it."
        )
    elif code == RATE_LIMITER_UNAVAILABLE:
        retry = numbers.seconds(decision.retry_after or 1.0)
        extensions["retryAfter"] = retry
        message = (
            "The rate limiter is unavailable and this API does not run queries it cannot"
            f" account for; retry in {_seconds(retry)}."
        )
    else:
        retry = numbers.seconds(decision.retry_after or 0.0)
        extensions["retryAfter"] = retry
        if decision.limited_by == TIME_QUOTA:
            message = (
                "Your operations have taken all the worker time they may"
                f" ({_milliseconds(limit)} at most, refilled over time); retry in"
                f" {_seconds(retry)}."
            )
        elif unpriced:
            message = (
                f"Only {left} of {whose} {_points(limit)} points remain, less"
                f" than any request costs ({_points(cost)}); retry in {_seconds(retry)}."
            )
        else:
            message = (
                f"This {what} costs {_counted(cost)} but only {left} of {whose}"
                f" {_points(limit)} remain; retry in {_seconds(retry)}."
            )
    return QuotaqlGraphQLError(message, extensions=extensions)


def unknown_key_error(header: str) -> QuotaqlGraphQLError:
    """The error of a request whose API key no tenant has (``unknown_keys = "reject"``).

    Example:
        >>> unknown_key_error("x-api-key").extensions["code"]
        'UNKNOWN_API_KEY'
    """
    return QuotaqlGraphQLError(
        f"The API key in the {header} header is not known; check the key, or send none.",
        extensions={"code": UNKNOWN_API_KEY},
    )


def bad_cost_header_error(value: str) -> QuotaqlGraphQLError:
    """The error of a ``GraphQL-Cost`` header quotaql does not know (HTTP 400; the request
    pays ``[limits] min_charge``, as a document that does not parse).

    Example:
        >>> bad_cost_header_error("estimate").message
        "The GraphQL-Cost header says 'estimate'; send 'validate' (price the operation without running it) or 'report' (run it and report its price)."
    """  # noqa: E501
    shown = value if len(value) <= 40 else value[:40] + "..."
    return QuotaqlGraphQLError(
        f"The GraphQL-Cost header says {shown!r}; send 'validate' (price the operation without"
        " running it) or 'report' (run it and report its price).",
        extensions={"code": BAD_COST_HEADER},
    )


def capacity_warning(quota: str, cost: float, limit: float) -> dict[str, Any]:
    """The ``extensions.warnings`` entry of an operation priced (``GraphQL-Cost: validate``)
    above what quota ``quota`` can ever hold: it would be refused ``COST_EXCEEDS_CAPACITY``.

    Example:
        >>> capacity_warning("tenant", 490.0, 300.0)["message"]
        "This query costs 490 points, more than the 300 your 'tenant' budget can ever hold: running it would be refused (COST_EXCEEDS_CAPACITY)."
    """  # noqa: E501
    return {
        "code": COST_EXCEEDS_CAPACITY,
        "message": (
            f"This query costs {_counted(cost)}, more than the {_points(limit)} your"
            f" '{quota}' budget can ever hold: running it would be refused"
            f" ({COST_EXCEEDS_CAPACITY})."
        ),
        "quota": quota,
        "cost": numbers.points(cost),
        "limit": numbers.points(limit),
    }


def quota_warning(
    quota: str,
    remaining: int | float,
    capacity: float,
    rate: int | float,
    enforced: bool,
) -> dict[str, Any]:
    """``extensions.cost.warning``: what is left of quota ``quota`` fell below the tier's
    ``warn_at`` threshold; ``rate`` is the points a second at which the subject's budget
    holds (what the quota refills), ``remaining`` and ``rate`` rounded down as clients see
    them (:mod:`quotaql.policy.numbers`). ``enforced``: False in shadow mode, where nothing
    is refused yet (the message says "would").

    Example:
        >>> quota_warning("tenant", 150, 1000.0, 50, True)["message"]
        'Only 150 of your 1000 points remain; spend at most 50 points a second (what the budget refills) or operations will be refused once it runs out.'
    """  # noqa: E501
    whose = "your" if quota == "tenant" else f"the '{quota}'"
    will = "will be refused" if enforced else "would be refused (shadow mode: nothing is yet)"
    return {
        "quota": quota,
        "remaining": remaining,
        "capacity": numbers.points(capacity),
        "sustainableRate": rate,
        "enforced": enforced,
        "message": (
            f"Only {remaining} of {whose} {_points(capacity)} points remain; spend at most"
            f" {rate} points a second (what the budget refills) or operations {will} once it"
            " runs out."
        ),
    }


def too_many_subscriptions_error(limit: int, retry_after: float = 1.0) -> QuotaqlGraphQLError:
    """The error of a subscription beyond ``[limits] max_subscriptions`` (per subject, in
    each server process)."""
    return QuotaqlGraphQLError(
        f"You have {limit} subscriptions open, the most this API allows at once;"
        " close one to open another.",
        extensions={
            "code": TOO_MANY_SUBSCRIPTIONS,
            "limit": limit,
            "retryAfter": numbers.seconds(retry_after),
        },
    )


def too_many_concurrent_error(
    limited_by: str, limit: int, retry_after: float
) -> QuotaqlGraphQLError:
    """The error of an operation refused by a concurrency limit (``max_in_flight``): the
    tenant already runs ``limit`` operations of that kind; one ending frees a slot, so
    the client retries after ``retry_after`` seconds. Nothing was debited.

    ``limited_by`` is ``in_flight`` (the tier's ``max_in_flight``),
    ``in_flight:subscriptions`` (its ``max_subscriptions_in_flight``) or
    ``in_flight:field:<Type.field>`` (a root field's ``max_in_flight``).

    Example:
        >>> error = too_many_concurrent_error("in_flight", 4, 1.0)
        >>> error.message
        'You have 4 operations running at once, the most this API allows; retry in 1.0 s.'
        >>> error.extensions["code"], error.extensions["retryAfter"]
        ('TOO_MANY_CONCURRENT', 1.0)
    """
    what = "operations running"
    if limited_by == IN_FLIGHT_SUBSCRIPTIONS:
        what = "subscriptions open"
    elif limited_by.startswith(f"{IN_FLIGHT}:field:"):
        what = f"operations selecting {limited_by.removeprefix(f'{IN_FLIGHT}:field:')} running"
    if limit <= 0:  # max_subscriptions_in_flight = 0: none at all, waiting never helps
        message = "This API allows no subscriptions on your plan."
    else:
        message = (
            f"You have {limit} {what} at once, the most this API allows;"
            f" retry in {_seconds(retry_after)}."
        )
    return QuotaqlGraphQLError(
        message,
        extensions={
            "code": TOO_MANY_CONCURRENT,
            "limit": limit,
            "quota": limited_by,
            "retryAfter": numbers.seconds(retry_after),
        },
    )


def status_for(code: str, rate_limited_status: int) -> int:
    """The HTTP status of a refusal: ``http_status`` (429) when waiting helps."""
    if code in (RATE_LIMITED, TOO_MANY_SUBSCRIPTIONS, TOO_MANY_CONCURRENT):
        return rate_limited_status
    if code == RATE_LIMITER_UNAVAILABLE:
        return 503
    if code == UNKNOWN_API_KEY:
        return 401
    return 400  # COST_EXCEEDS_CAPACITY: the same request will never pass


def rate_limit_headers(decision: Decision, quotas: Sequence[Quota]) -> dict[str, str]:
    """The IETF draft ``RateLimit`` / ``RateLimit-Policy`` and the ``X-RateLimit-*`` headers.

    The tightest quota (the one that refused, or the one with least remaining) is the one
    ``RateLimit`` and ``X-RateLimit-*`` describe; ``RateLimit-Policy`` lists every quota.
    A refusal adds ``Retry-After`` (whole seconds, rounded up).
    """
    headers: dict[str, str] = {}
    if not quotas or decision.limit == math.inf:
        return headers
    name = decision.limited_by or _tightest(decision)
    remaining = max(0, math.floor(decision.remaining))
    reset = max(0, math.ceil(decision.reset_after))
    headers["RateLimit-Policy"] = _policies(quotas)
    headers["RateLimit"] = f'"{name}";r={remaining};t={reset}'
    headers["X-RateLimit-Limit"] = _points(decision.limit)
    headers["X-RateLimit-Remaining"] = str(remaining)
    headers["X-RateLimit-Reset"] = str(reset)
    if not decision.allowed and decision.retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(decision.retry_after)))
    return headers


# ``RateLimit-Policy`` by the quotas it lists (their ids; the quotas held, compared by
# identity): the same few tuples of quotas answer every request.
_POLICIES: dict[tuple[int, ...], tuple[Sequence[Quota], str]] = {}
_POLICIES_SIZE = 1024


def _policies(quotas: Sequence[Quota]) -> str:
    key = tuple(map(id, quotas))
    found = _POLICIES.get(key)
    if found is not None:
        for held, quota in zip(found[0], quotas, strict=True):
            if held is not quota:
                break
        else:
            return found[1]
    value = ", ".join(quota.policy for quota in quotas)
    if len(_POLICIES) >= _POLICIES_SIZE:  # configurations reloaded many times
        _POLICIES.clear()
    _POLICIES[key] = (tuple(quotas), value)
    return value


def _tightest(decision: Decision) -> str:
    for status in decision.quotas:
        if status.remaining == decision.remaining and status.limit == decision.limit:
            return status.name
    return decision.quotas[0].name if decision.quotas else "tenant"


def cost_extension(
    requested: float,
    actual: float | None,
    decision: Decision | None,
    restore_rate: float | None,
    breakdown: dict[str, float] | None = None,
) -> dict[str, Any]:
    """``extensions.cost``: ``{requestedQueryCost, actualQueryCost, throttleStatus}``, its
    numbers rounded as clients see them (:mod:`quotaql.policy.numbers`)."""
    points = numbers.points
    cost: dict[str, Any] = {
        "requestedQueryCost": points(requested),
        "actualQueryCost": None if actual is None else points(actual),
    }
    if decision is not None and decision.limit != math.inf:
        cost["throttleStatus"] = {
            "maximumAvailable": points(decision.limit),
            "currentlyAvailable": numbers.left(decision.remaining, numbers.is_whole(requested)),
            "restoreRate": None if restore_rate is None else points(restore_rate),
        }
    if breakdown is not None:
        cost["breakdown"] = {name: points(value) for name, value in breakdown.items()}
    return cost
