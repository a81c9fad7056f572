"""The cost model: default weights, list sizes, per-coordinate overrides and static limits."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from quotaql._graphql_compat import GRAPHQL_CORE_VERSION, HAS_PARSER_LIMITS
from quotaql.errors import ConfigError

__all__ = [
    "INTROSPECTION_WEIGHTS",
    "SAFE_LIMITS",
    "CostLimits",
    "CostModel",
    "FieldCost",
    "IntrospectionMode",
    "ModelName",
    "OperationType",
]

OperationType = Literal["query", "mutation", "subscription"]
#: How introspection (``__schema``, ``__type``) is priced: ``"counted"`` by its work,
#: ``"free"`` at 0, ``"off"`` refused (``INTROSPECTION_DISABLED``).
IntrospectionMode = Literal["counted", "free", "off"]
INTROSPECTION_MODES: tuple[IntrospectionMode, ...] = ("counted", "free", "off")
#: The weights of the introspection types when introspection is counted (each overridable
#: by ``[cost.weights]``): what graphql-core's execution of them costs against a query of
#: one point, measured on this project's machine (docs/cost-model.md, "Introspection").
#: ``__Schema`` stands for the introspection document itself (one per ``__schema``); every
#: other introspection object costs a fraction of a point.
INTROSPECTION_WEIGHTS: Mapping[str, float] = {
    "__Schema": 5.0,
    "__Type": 0.015,
    "__Field": 0.015,
    "__InputValue": 0.015,
    "__EnumValue": 0.015,
    "__Directive": 0.015,
}
#: The two pricing models: Apollo Router's combined cost, or the IBM specification's
#: field cost and type cost (docs/cost-model.md, "Two models").
ModelName = Literal["apollo", "ibm"]
MODELS: tuple[ModelName, ...] = ("apollo", "ibm")

DEFAULT_OPERATION_WEIGHTS: Mapping[str, float] = {
    "query": 0.0,
    "mutation": 10.0,
    "subscription": 0.0,
}


class FrozenMap(Mapping[str, "float | FieldCost"]):
    """An immutable, hashable mapping, so that a :class:`CostModel` can key a cache."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[str, float | FieldCost]) -> None:
        self._data = dict(data)
        self._hash = hash(frozenset(self._data.items()))

    def __getitem__(self, key: str) -> float | FieldCost:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._hash == other._hash and self._data == other._data
        return isinstance(other, Mapping) and self._data == dict(other)

    def __repr__(self) -> str:
        return f"{self._data!r}"


@dataclass(frozen=True, slots=True)
class FieldCost:
    """Overrides for one field coordinate, the TOML form of ``@cost`` + ``@listSize``.

    Every attribute left at ``None`` keeps what the schema says.

    Attributes:
        weight: the field's own weight (replaces ``@cost`` and the type weight).
        assumed_size: list size used when no slicing argument gives one.
        slicing_arguments: arguments whose value is the list size.
        sized_fields: child fields the size applies to (Relay ``edges`` / ``nodes``).
        require_one_slicing_argument: reject operations that give none (or several).
        max_size: the most items the list may return: its size when a slicing argument
            is null (replaces the model's ``max_list_size`` for this field).
    """

    weight: float | None = None
    assumed_size: int | None = None
    slicing_arguments: tuple[str, ...] | None = None
    sized_fields: tuple[str, ...] | None = None
    require_one_slicing_argument: bool | None = None
    max_size: int | None = None

    def __post_init__(self) -> None:
        if self.weight is not None:
            object.__setattr__(self, "weight", float(_check_number("weight", self.weight)))
        for name in ("assumed_size", "max_size"):
            size = getattr(self, name)
            if size is not None and (
                isinstance(size, bool) or not isinstance(size, int) or size < 0
            ):
                raise ConfigError(f"{name} must be an integer >= 0, got {size!r}")
        for name in ("slicing_arguments", "sized_fields"):
            value = getattr(self, name)
            if value is not None:
                if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                    raise ConfigError(f"{name} must be a list of names, got {value!r}")
                object.__setattr__(self, name, tuple(value))


@dataclass(frozen=True, slots=True)
class CostModel:
    """Weights and defaults that price an operation (IBM cost directives, Apollo weights).

    A model is immutable and hashable; the analyzer compiles it once per schema.

    Example:
        >>> model = CostModel(default_list_size=20, weights={"Post": 2, "Query.search": 5})
        >>> model.operation_weights["mutation"]
        10.0

    Attributes:
        model: ``"apollo"`` (the default: one combined cost, a list field's own weight
            paid per item, as Apollo Router's ``static_estimated``) or ``"ibm"`` (the IBM
            specification's field cost and type cost, computed apart; the budget is
            debited by the larger of the two).
        default_list_size: size of a list field that no argument or ``@listSize`` sizes.
        max_list_size: the size of a list whose slicing argument is null (written
            ``null``, a variable sent as null, or a null default), since a resolver
            slicing ``items[:first]`` then returns everything: the most items a list may
            return (never less than its assumed size). A :class:`FieldCost`'s
            ``max_size`` overrides it for one field.
        slicing_arguments: argument names that size a list field without ``@listSize``
            (an ``Int`` argument called ``first``, ``last`` or ``limit``); ``()`` turns
            the convention off.
        operation_weights: added once per operation, by operation type.
        connections: size Relay connections without directives: a field returning a
            type with ``pageInfo`` and ``edges`` (items with a ``node``) or ``nodes``
            sizes them by its ``first`` / ``last``, as ``@listSize(slicingArguments:
            ["first", "last"], sizedFields: ["edges", "nodes"])`` would; an explicit
            ``@listSize`` always wins.
        connections_exclude: connection types the convention leaves alone.
        introspection: ``"counted"`` (the default) prices ``__schema`` / ``__type`` by
            their work: the introspection types weigh :data:`INTROSPECTION_WEIGHTS` and
            their lists are as long as the schema makes them (``__Schema.types`` the
            number of types, ``__Type.fields`` the fields per type on average, ...);
            ``"free"`` prices them at 0 (they still count for depth); ``"off"`` refuses
            them (``INTROSPECTION_DISABLED``).
        weights: overrides by schema coordinate: ``"Type"`` (type weight),
            ``"Type.field"`` (a number, or a :class:`FieldCost`), ``"Type.field(arg:)"``
            (argument weight).
        source: the file the model was read from (for error messages only).
        locations: line of each ``weights`` key in ``source`` (for error messages only).
    """

    model: ModelName = "apollo"
    default_list_size: int = 10
    max_list_size: int = 1000
    slicing_arguments: tuple[str, ...] = ("first", "last", "limit")
    connections: bool = True
    connections_exclude: frozenset[str] = frozenset()
    operation_weights: Mapping[str, float] = field(
        default_factory=lambda: dict(DEFAULT_OPERATION_WEIGHTS)
    )
    introspection: IntrospectionMode = "counted"
    weights: Mapping[str, float | FieldCost] = field(default_factory=dict)
    source: str | None = field(default=None, compare=False, repr=False)
    locations: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ConfigError(f"model must be 'apollo' or 'ibm', got {self.model!r}")
        exclude: object = self.connections_exclude
        if isinstance(exclude, str) or not all(
            isinstance(name, str) for name in self.connections_exclude
        ):
            raise ConfigError(f"connections_exclude must be a list of type names, got {exclude!r}")
        object.__setattr__(self, "connections_exclude", frozenset(self.connections_exclude))
        size = self.default_list_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ConfigError(f"default_list_size must be an integer >= 0, got {size!r}")
        bound = self.max_list_size
        if isinstance(bound, bool) or not isinstance(bound, int) or bound < 0:
            raise ConfigError(f"max_list_size must be an integer >= 0, got {bound!r}")
        names: object = self.slicing_arguments
        if isinstance(names, str) or not all(
            isinstance(name, str) for name in self.slicing_arguments
        ):
            raise ConfigError(
                f"slicing_arguments must be a list of names, got {self.slicing_arguments!r}"
            )
        object.__setattr__(self, "slicing_arguments", tuple(self.slicing_arguments))
        if self.introspection not in INTROSPECTION_MODES:
            raise ConfigError(
                f"introspection must be 'counted', 'free' or 'off', got {self.introspection!r}"
            )
        operation_weights = dict(DEFAULT_OPERATION_WEIGHTS)
        for name, value in self.operation_weights.items():
            if name not in DEFAULT_OPERATION_WEIGHTS:
                raise ConfigError(
                    f"operation_weights has no operation type {name!r}"
                    " (expected query, mutation or subscription)"
                )
            operation_weights[name] = float(_check_number(f"operation_weights.{name}", value))
        object.__setattr__(self, "operation_weights", FrozenMap(operation_weights))
        weights: dict[str, float | FieldCost] = {}
        for coordinate, weight in self.weights.items():
            weights[coordinate] = (
                weight
                if isinstance(weight, FieldCost)
                else float(_check_number(f"weights[{coordinate!r}]", weight))
            )
        object.__setattr__(self, "weights", FrozenMap(weights))
        object.__setattr__(self, "locations", dict(self.locations))


@dataclass(frozen=True, slots=True)
class CostLimits:
    """Static limits checked before any resolver runs; ``None`` turns a limit off.

    Attributes:
        max_cost: highest accepted operation cost.
        max_depth: deepest accepted field nesting (root fields are at depth 1).
        max_aliases: most aliases in the operation, counted with fragments expanded.
        max_root_fields: most fields in the root selection set, fragments expanded.
        max_tokens: most lexical tokens the parser reads before giving up.
        max_length: most characters in a document the parser accepts.
        max_fields: most fields the whole document selects, fragments expanded where
            they are spread (an unused fragment counted once).
        max_repeated_fields: most fields one selection set may select under the same
            response name, fragments expanded (graphql-core's overlapping-fields rule
            compares each pair of them).
        max_directives: most directives on one field, fragment or operation.
        max_variable_values: most values the request's variables may hold, each scalar,
            list and object counting one; counted on the JSON before anything coerces it
            (graphql-core's coercion of a list costs ~2 µs an item).
        max_field_pairs: most pairs graphql-core's overlapping-fields rule may compare:
            fields sharing a response name in a merged selection set, and fragment
            spreads with each other and with the selection sets beside them (the static
            pass's count, an upper bound).

    A ``CostLimits()`` limits nothing (the analyzer's API); a configuration starts from
    :data:`SAFE_LIMITS`.
    """

    max_cost: float | None = None
    max_depth: int | None = None
    max_aliases: int | None = None
    max_root_fields: int | None = None
    max_tokens: int | None = None
    max_length: int | None = None
    max_fields: int | None = None
    max_repeated_fields: int | None = None
    max_directives: int | None = None
    max_variable_values: int | None = None
    max_field_pairs: int | None = None

    @property
    def screens(self) -> bool:
        """Whether any limit of the document's shape is set (the gate's static pass)."""
        return (
            self.max_depth is not None
            or self.max_aliases is not None
            or self.max_root_fields is not None
            or self.max_fields is not None
            or self.max_repeated_fields is not None
            or self.max_directives is not None
            or self.max_field_pairs is not None
        )

    def __post_init__(self) -> None:
        for name in self.__slots__:
            value = getattr(self, name)
            if value is None:
                continue
            integral = name != "max_cost"
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or (integral and not isinstance(value, int))
                or not math.isfinite(value)
                or value < 0
            ):
                kind = "an integer" if integral else "a number"
                raise ConfigError(f"{name} must be {kind} >= 0, got {value!r}")
        if not HAS_PARSER_LIMITS and (self.max_tokens is not None or self.max_length is not None):
            # Refused here, when the config is read, rather than on the first request.
            raise ConfigError(
                "max_tokens and max_length need graphql-core 3.2.14 or later (3.3.2 or later"
                f" on 3.3); graphql-core {GRAPHQL_CORE_VERSION} is installed"
            )


#: The default ``max_field_pairs``: the worst document within it costs graphql-core's
#: validation no more than 50 ms (docs/cost-model.md, "Validation work").
MAX_FIELD_PAIRS = 2_000

#: The limits every configuration starts from (``[cost]`` keys override each): chosen so
#: that the introspection queries of GraphiQL, Apollo's tools and Strawberry pass, and so
#: that no document within them costs graphql-core's validation more than a few
#: milliseconds (docs/operations.md, "Hostile traffic").
SAFE_LIMITS: CostLimits = CostLimits(
    max_depth=20,
    max_aliases=100,
    max_tokens=15_000,
    max_length=100_000,
    max_fields=1_000,
    max_repeated_fields=30,
    max_directives=20,
    # ~10 ms of graphql-core's coercion (~2 µs a value), measured over uvicorn: within the
    # 20 ms of worker time one point of min_charge pays for (docs/cost-model.md, Variables).
    max_variable_values=5_000,
    max_field_pairs=MAX_FIELD_PAIRS,
)


def _check_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    return value
