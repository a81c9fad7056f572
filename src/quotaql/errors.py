"""The quotaql error hierarchy: every error a caller can get carries a stable ``code``."""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "ConfigError",
    "CostAnalysisError",
    "EvictionRefused",
    "FragmentCycle",
    "IntrospectionDisabled",
    "InvalidArgument",
    "InvalidQuery",
    "InvalidVariables",
    "LimitExceeded",
    "OperationResolutionError",
    "QuerySyntaxError",
    "QueryTooComplex",
    "QueryTooDeep",
    "QueryTooLarge",
    "QuotaqlError",
    "SlicingArgumentRequired",
    "StorageError",
    "StorageTimeout",
    "TooManyAliases",
    "TooManyDirectives",
    "TooManyFieldPairs",
    "TooManyFields",
    "TooManyRootFields",
    "TooManyVariableValues",
]


class QuotaqlError(Exception):
    """Base class of every error raised by quotaql.

    A subclass gives its code in its header: ``class Refused(QuotaqlError, code="REFUSED")``;
    without one, it keeps its parent's.
    """

    code: str = "QUOTAQL_ERROR"

    def __init_subclass__(cls, *, code: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.code = code


class ConfigError(QuotaqlError, ValueError, code="CONFIG_ERROR"):
    """A configuration value is invalid.

    Attributes:
        reason: what is wrong, in words.
        file: the configuration file, when the value came from one.
        key: the dotted key of the offending value (``cost.weights."Query.users"``).
        line: the 1-based line of the key in ``file``, when known.
    """

    def __init__(
        self,
        reason: str,
        *,
        file: str | None = None,
        key: str | None = None,
        line: int | None = None,
    ) -> None:
        self.reason = reason
        self.file = file
        self.key = key
        self.line = line
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.file is not None:
            where = self.file + (f":{self.line}" if self.line is not None else "")
        if self.key is not None:
            where = f"{where}: {self.key}" if where else self.key
        return f"{where}: {self.reason}" if where else self.reason


class StorageError(QuotaqlError, code="RATE_LIMITER_UNAVAILABLE"):
    """The storage (Redis) failed; the limiter answers with its fail mode instead."""


class StorageTimeout(StorageError):
    """The storage did not answer within its timeout."""


class StorageNotReached(StorageError):
    """The call was not sent to the storage (a full queue, a closed storage): unlike other
    storage errors, it is known to have changed nothing."""


class EvictionRefused(StorageNotReached):
    """The storage refuses its Redis: a ``maxmemory-policy`` that evicts keys (an evicted
    budget is a full one again), which ``[redis] allow_eviction`` does not allow. Raised at
    start-up, and instead of every call (none is sent) until the policy changes: the
    limiter's fail mode answers."""


class CostAnalysisError(QuotaqlError, code="COST_ANALYSIS_FAILED"):
    """An operation cannot be priced, or its price breaks a static limit.

    Attributes:
        message: a sentence a client developer understands.
        locations: ``(line, column)`` pairs in the document that the error is about.
    """

    def __init__(self, message: str, *, locations: tuple[tuple[int, int], ...] = ()) -> None:
        self.message = message
        self.locations = locations
        super().__init__(message)

    @property
    def extensions(self) -> dict[str, Any]:
        """The ``extensions`` of the GraphQL error a server answers with."""
        return {"code": self.code}


class QuerySyntaxError(CostAnalysisError, code="GRAPHQL_PARSE_FAILED"):
    """The document is not valid GraphQL syntax (``locations`` holds line and column)."""


class InvalidQuery(CostAnalysisError, code="GRAPHQL_VALIDATION_FAILED"):
    """The document does not fit the schema (unknown field, fragment or type)."""


class OperationResolutionError(CostAnalysisError, code="OPERATION_RESOLUTION_FAILURE"):
    """The operation to price cannot be chosen: unknown name, or several and no name."""


class InvalidVariables(CostAnalysisError, code="BAD_USER_INPUT"):
    """The request's variables do not match the operation's variable definitions."""


class InvalidArgument(CostAnalysisError, code="BAD_USER_INPUT"):
    """An argument that sizes a list has a value that cannot be used (wrong type, negative)."""


class SlicingArgumentRequired(CostAnalysisError, code="SLICING_ARGUMENT_REQUIRED"):
    """A ``@listSize(requireOneSlicingArgument: true)`` field got none or several."""


class FragmentCycle(CostAnalysisError, code="FRAGMENT_CYCLE"):
    """A fragment spreads itself, directly or through other fragments."""


class IntrospectionDisabled(CostAnalysisError, code="INTROSPECTION_DISABLED"):
    """The operation selects ``__schema`` or ``__type`` where ``[cost] introspection = "off"``."""


class LimitExceeded(CostAnalysisError, code="LIMIT_EXCEEDED"):
    """A static limit was crossed; the analysis stopped there.

    A subclass names what it measures in its header (``subject="Query depth"``): the
    message begins with it.

    Attributes:
        value: the measured value: the count at which the limit was crossed.
        limit: the configured maximum.
        partial: the analysis stopped before the end, so the whole operation measures
            at least ``value`` (the message then says "at least").
    """

    subject: str = "Value"

    def __init_subclass__(cls, *, subject: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if subject is not None:
            cls.subject = subject

    def __init__(
        self,
        value: float,
        limit: float,
        *,
        partial: bool = False,
        message: str | None = None,
        locations: tuple[tuple[int, int], ...] = (),
    ) -> None:
        self.value = value
        self.limit = limit
        self.partial = partial
        measured = f"of at least {_number(value)}" if partial else _number(value)
        super().__init__(
            message or f"{self.subject} {measured} exceeds the maximum of {_number(limit)}",
            locations=locations,
        )

    @property
    def extensions(self) -> dict[str, Any]:
        return {"code": self.code, "value": self.value, "limit": self.limit}


class QueryTooComplex(LimitExceeded, code="QUERY_TOO_COMPLEX", subject="Query cost"):
    """The operation's cost is above ``max_cost``."""

    @property
    def extensions(self) -> dict[str, Any]:
        return {"code": self.code, "cost": self.value, "limit": self.limit}


class QueryTooDeep(LimitExceeded, code="QUERY_TOO_DEEP", subject="Query depth"):
    """The operation nests fields deeper than ``max_depth``."""


class TooManyAliases(LimitExceeded, code="TOO_MANY_ALIASES", subject="Number of aliases"):
    """The operation uses more aliases than ``max_aliases``."""


class TooManyRootFields(
    LimitExceeded, code="TOO_MANY_ROOT_FIELDS", subject="Number of root fields"
):
    """The operation selects more root fields than ``max_root_fields``."""


class TooManyFields(LimitExceeded, code="TOO_MANY_FIELDS", subject="Number of fields"):
    """The document selects more fields than ``max_fields`` (fragments expanded), or one
    selection set repeats a response name more than ``max_repeated_fields`` times."""


class TooManyFieldPairs(
    LimitExceeded, code="TOO_MANY_FIELD_PAIRS", subject="Number of field pairs"
):
    """Validating the document would compare more pairs of fields and fragment spreads
    than ``max_field_pairs`` (graphql-core's overlapping-fields rule)."""


class TooManyDirectives(LimitExceeded, code="TOO_MANY_DIRECTIVES", subject="Number of directives"):
    """A field (or fragment, or operation) carries more directives than ``max_directives``."""


class QueryTooLarge(LimitExceeded, code="QUERY_TOO_LARGE", subject="Document size"):
    """The document has more tokens or characters than the parser accepts."""


class TooManyVariableValues(
    LimitExceeded, code="TOO_MANY_VARIABLE_VALUES", subject="Number of variable values"
):
    """The request's variables hold more values than ``max_variable_values`` (each
    scalar, list and object counts one), counted on the JSON before anything coerces it."""


def _number(value: float) -> str:
    """Render a measured value without a spurious ``.0`` (``5230``, ``2.5``, ``1.2e+30``)."""
    if isinstance(value, int):
        return str(value)
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"
