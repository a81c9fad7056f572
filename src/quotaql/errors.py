"""The quotaql error hierarchy: every error a caller can get carries a stable ``code``."""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "ConfigError",
    "CostAnalysisError",
    "FragmentCycle",
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
    "TooManyFields",
    "TooManyRootFields",
]


class QuotaqlError(Exception):
    """Base class of every error raised by quotaql."""

    code: str = "QUOTAQL_ERROR"


class ConfigError(QuotaqlError, ValueError):
    """A configuration value is invalid.

    Attributes:
        reason: what is wrong, in words.
        file: the configuration file, when the value came from one.
        key: the dotted key of the offending value (``cost.weights."Query.users"``).
        line: the 1-based line of the key in ``file``, when known.
    """

    code = "CONFIG_ERROR"

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


class StorageError(QuotaqlError):
    """The storage (Redis) failed; the limiter answers with its fail mode instead."""

    code = "RATE_LIMITER_UNAVAILABLE"


class StorageTimeout(StorageError):
    """The storage did not answer within its timeout."""


class StorageNotReached(StorageError):
    """The call was not sent to the storage (a full queue, a closed storage): unlike other
    storage errors, it is known to have changed nothing."""


class CostAnalysisError(QuotaqlError):
    """An operation cannot be priced, or its price breaks a static limit.

    Attributes:
        message: a sentence a client developer understands.
        locations: ``(line, column)`` pairs in the document that the error is about.
    """

    code = "COST_ANALYSIS_FAILED"

    def __init__(self, message: str, *, locations: tuple[tuple[int, int], ...] = ()) -> None:
        self.message = message
        self.locations = locations
        super().__init__(message)

    @property
    def extensions(self) -> dict[str, Any]:
        """The ``extensions`` of the GraphQL error a server answers with."""
        return {"code": self.code}


class QuerySyntaxError(CostAnalysisError):
    """The document is not valid GraphQL syntax (``locations`` holds line and column)."""

    code = "GRAPHQL_PARSE_FAILED"


class InvalidQuery(CostAnalysisError):
    """The document does not fit the schema (unknown field, fragment or type)."""

    code = "GRAPHQL_VALIDATION_FAILED"


class OperationResolutionError(CostAnalysisError):
    """The operation to price cannot be chosen: unknown name, or several and no name."""

    code = "OPERATION_RESOLUTION_FAILURE"


class InvalidVariables(CostAnalysisError):
    """The request's variables do not match the operation's variable definitions."""

    code = "BAD_USER_INPUT"


class InvalidArgument(CostAnalysisError):
    """An argument that sizes a list has a value that cannot be used (wrong type, negative)."""

    code = "BAD_USER_INPUT"


class SlicingArgumentRequired(CostAnalysisError):
    """A ``@listSize(requireOneSlicingArgument: true)`` field got none or several."""

    code = "SLICING_ARGUMENT_REQUIRED"


class FragmentCycle(CostAnalysisError):
    """A fragment spreads itself, directly or through other fragments."""

    code = "FRAGMENT_CYCLE"


class LimitExceeded(CostAnalysisError):
    """A static limit was crossed; the analysis stopped there.

    Attributes:
        value: the measured value: the count at which the limit was crossed.
        limit: the configured maximum.
        partial: the analysis stopped before the end, so the whole operation measures
            at least ``value`` (the message then says "at least").
    """

    code = "LIMIT_EXCEEDED"
    subject = "Value"

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


class QueryTooComplex(LimitExceeded):
    """The operation's cost is above ``max_cost``."""

    code = "QUERY_TOO_COMPLEX"
    subject = "Query cost"

    @property
    def extensions(self) -> dict[str, Any]:
        return {"code": self.code, "cost": self.value, "limit": self.limit}


class QueryTooDeep(LimitExceeded):
    """The operation nests fields deeper than ``max_depth``."""

    code = "QUERY_TOO_DEEP"
    subject = "Query depth"


class TooManyAliases(LimitExceeded):
    """The operation uses more aliases than ``max_aliases``."""

    code = "TOO_MANY_ALIASES"
    subject = "Number of aliases"


class TooManyRootFields(LimitExceeded):
    """The operation selects more root fields than ``max_root_fields``."""

    code = "TOO_MANY_ROOT_FIELDS"
    subject = "Number of root fields"


class TooManyFields(LimitExceeded):
    """The document selects more fields than ``max_fields`` (fragments expanded), or one
    selection set repeats a response name more than ``max_repeated_fields`` times."""

    code = "TOO_MANY_FIELDS"
    subject = "Number of fields"


class TooManyDirectives(LimitExceeded):
    """A field (or fragment, or operation) carries more directives than ``max_directives``."""

    code = "TOO_MANY_DIRECTIVES"
    subject = "Number of directives"


class QueryTooLarge(LimitExceeded):
    """The document has more tokens or characters than the parser accepts."""

    code = "QUERY_TOO_LARGE"
    subject = "Document size"


def _number(value: float) -> str:
    """Render a measured value without a spurious ``.0`` (``5230``, ``2.5``, ``1.2e+30``)."""
    if isinstance(value, int):
        return str(value)
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"
