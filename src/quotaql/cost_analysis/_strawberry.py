"""Strawberry schema directives for ``@cost`` and ``@listSize`` (needs ``quotaql[strawberry]``)."""

from __future__ import annotations

from typing import ClassVar

import strawberry
from strawberry.schema_directive import Location

__all__ = ["Cost", "ListSize"]


@strawberry.schema_directive(
    name="cost",
    locations=[
        Location.ARGUMENT_DEFINITION,
        Location.ENUM,
        Location.FIELD_DEFINITION,
        Location.INPUT_FIELD_DEFINITION,
        Location.OBJECT,
        Location.SCALAR,
    ],
    description="The relative cost of resolving this element (IBM GraphQL Cost Directives).",
)
class Cost:
    """``@cost(weight:)``: ``strawberry.field(directives=[Cost(weight="5")])``."""

    weight: str
    __quotaql_directive__: ClassVar[str] = "cost"


@strawberry.schema_directive(
    name="listSize",
    locations=[Location.FIELD_DEFINITION],
    description="How many items a list field returns (IBM GraphQL Cost Directives).",
)
class ListSize:
    """``@listSize``: ``strawberry.field(directives=[ListSize(slicing_arguments=["first"])])``."""

    assumed_size: int | None = None
    slicing_arguments: list[str] | None = None
    sized_fields: list[str] | None = None
    require_one_slicing_argument: bool = True
    __quotaql_directive__: ClassVar[str] = "listSize"
