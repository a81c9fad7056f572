"""An optional ``rateLimit`` query field: the caller's budget, GitHub-style.

Example::

    @strawberry.type
    class Query:
        rate_limit: RateLimit | None = rate_limit_field()
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import strawberry

from quotaql.plugin.extension import current_operation

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Unpack

    from strawberry.extensions.field_extension import FieldExtension
    from strawberry.permission import BasePermission

__all__ = ["RateLimit", "rate_limit_field"]


@strawberry.type(description="The caller's cost budget, as of this operation.")
class RateLimit:
    cost: float = strawberry.field(description="What this operation was charged (estimated).")
    limit: float = strawberry.field(description="The budget's size.")
    remaining: float = strawberry.field(description="What is left after this operation.")
    used: float = strawberry.field(description="limit - remaining.")
    reset_at: datetime = strawberry.field(description="When the budget is full again (UTC).")
    tier: str = strawberry.field(description="The caller's tier.")


def _rate_limit() -> RateLimit | None:
    operation = current_operation()
    if operation is None or operation.decision is None:
        return None  # no CostLimiter on this schema, or limiting is off for the caller
    decision = operation.decision
    return RateLimit(
        cost=operation.cost,
        limit=decision.limit,
        remaining=decision.remaining,
        used=max(0.0, decision.limit - decision.remaining),
        reset_at=datetime.now(UTC) + timedelta(seconds=decision.reset_after),
        tier=operation.tier.name,
    )


class _FieldOptions(TypedDict, total=False):
    """``strawberry.field``'s keywords, typed as Strawberry types them for a field with a
    resolver (``resolver`` is this one's)."""

    name: str | None
    is_subscription: bool
    description: str | None
    permission_classes: list[type[BasePermission]] | None
    deprecation_reason: str | None
    default: Any
    default_factory: Callable[..., object] | object
    metadata: Mapping[Any, Any] | None
    directives: Sequence[object] | None
    extensions: list[FieldExtension] | None
    graphql_type: Any | None
    init: Literal[False]


def rate_limit_field(**kwargs: Unpack[_FieldOptions]) -> Any:
    """A ``rateLimit: RateLimit`` field for your ``Query`` type (extra kwargs go to the field).

    It answers null when no :class:`~quotaql.plugin.CostLimiter` decided on the operation.
    """
    kwargs.setdefault("name", "rateLimit")
    kwargs.setdefault("description", "Your cost budget: what this query cost and what is left.")
    return strawberry.field(resolver=_rate_limit, **kwargs)
