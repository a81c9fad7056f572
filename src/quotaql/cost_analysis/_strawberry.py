"""Strawberry schema directives for ``@cost`` and ``@listSize`` (needs ``quotaql[strawberry]``).

The analyzer recognises them by their ``__quotaql_directive__`` marker, not by name, so an
``@link`` that renames the directives in printed SDL does not change how they are read.
Strawberry's own ``strawberry.federation.schema_directives.Cost`` / ``ListSize`` (Apollo's
``weight: Int!``) are read too; one schema cannot use both pairs (both are ``@cost``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import strawberry
from strawberry import UNSET
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
    """``@listSize``: ``strawberry.field(directives=[ListSize(slicing_arguments=["first"])])``.

    ``slicing_argument_default_value`` is Hot Chocolate's ``slicingArgumentDefaultValue``:
    the size when the operation gives none of the slicing arguments.
    """

    # UNSET keeps an argument out of the printed SDL (None would print as `null`).
    assumed_size: int | None = UNSET
    slicing_arguments: list[str] | None = UNSET
    sized_fields: list[str] | None = UNSET
    require_one_slicing_argument: bool | None = True
    slicing_argument_default_value: int | None = UNSET
    __quotaql_directive__: ClassVar[str] = "listSize"

    def arguments(self) -> dict[str, Any]:
        """The directive's arguments by their GraphQL names, unset ones left out."""
        values = {
            "assumedSize": self.assumed_size,
            "slicingArguments": self.slicing_arguments,
            "sizedFields": self.sized_fields,
            "requireOneSlicingArgument": self.require_one_slicing_argument,
            "slicingArgumentDefaultValue": self.slicing_argument_default_value,
        }
        return {name: value for name, value in values.items() if value is not UNSET}
