"""Compile a schema and a cost model into flat lookup tables, once, for the analyzer's hot path."""

from __future__ import annotations

import difflib
import re
import threading
import weakref
from typing import Any

from graphql import (
    GraphQLArgument,
    GraphQLField,
    GraphQLInputType,
    GraphQLInt,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLSchema,
    GraphQLUnionType,
    Undefined,
    get_named_type,
    is_composite_type,
    is_leaf_type,
)
from graphql.type.introspection import SchemaMetaFieldDef, TypeMetaFieldDef

from quotaql._graphql_compat import argument_default
from quotaql.cost_analysis.directives import read_cost, read_list_size
from quotaql.cost_analysis.model import CostModel, FieldCost
from quotaql.errors import ConfigError

__all__ = ["CompiledField", "CompiledSchema", "CompiledType", "compiled_schema", "graphql_schema"]

_COORDINATE = re.compile(
    r"^(?P<type>[_A-Za-z][_0-9A-Za-z]*)"
    r"(?:\.(?P<field>[_A-Za-z][_0-9A-Za-z]*)(?:\((?P<arg>[_A-Za-z][_0-9A-Za-z]*):\))?)?$"
)


class CompiledField:
    """Everything the analyzer needs about one field, precomputed."""

    __slots__ = (
        "arg_types",
        "arg_weights",
        "child",
        "coordinate",
        "fixed_size",
        "int_arguments",
        "is_list",
        "leaf_cost",
        "own",
        "require_one",
        "sized_fields",
        "slicing",
        "slicing_defaults",
    )

    def __init__(self, coordinate: str) -> None:
        self.coordinate = coordinate
        self.own = 0.0
        # (argument name, weight) for arguments with a non-zero weight; () when none.
        self.arg_weights: tuple[tuple[str, float], ...] = ()
        self.is_list = False
        # Names of the arguments whose value sizes the list; () when none.
        self.slicing: tuple[str, ...] = ()
        # The largest schema default among the slicing arguments, if any has one.
        self.slicing_defaults: float | None = None
        self.arg_types: dict[str, GraphQLInputType] = {}
        # The slicing arguments of type Int (32-bit), whose literals are range-checked.
        self.int_arguments: frozenset[str] = frozenset()
        self.require_one = False
        # The size used when no slicing argument gives one (assumedSize or the default).
        self.fixed_size = 1.0
        self.sized_fields: frozenset[str] | None = None
        self.child: CompiledType | None = None
        # The whole cost of a leaf field whose cost does not depend on its arguments.
        self.leaf_cost: float | None = None


class CompiledType:
    """A composite type: its fields and, for interfaces and unions, its possible types."""

    __slots__ = ("abstract", "fields", "name", "possible")

    def __init__(self, name: str, abstract: bool) -> None:
        self.name = name
        self.abstract = abstract
        self.fields: dict[str, CompiledField] = {}
        self.possible: frozenset[str] = frozenset((name,))


class CompiledSchema:
    """Lookup tables of one (schema, model) pair."""

    __slots__ = ("has_negative", "model", "schema", "types")

    def __init__(self, schema: GraphQLSchema, model: CostModel) -> None:
        self.schema = schema
        self.model = model
        self.types: dict[str, CompiledType] = {}
        # Negative weights make partial sums useless as lower bounds for early stops.
        self.has_negative = False


def graphql_schema(schema: Any) -> GraphQLSchema:
    """The graphql-core schema behind a ``GraphQLSchema``, a ``strawberry.Schema`` or a
    ``graphene.Schema``."""
    if isinstance(schema, GraphQLSchema):
        return schema
    # strawberry.Schema keeps it in ``_schema``, graphene.Schema in ``graphql_schema``.
    for attribute in ("_schema", "graphql_schema"):
        inner = getattr(schema, attribute, None)
        if isinstance(inner, GraphQLSchema):
            return inner
    raise TypeError(
        "expected a graphql.GraphQLSchema, a strawberry.Schema or a graphene.Schema,"
        f" got {type(schema).__name__}"
    )


_cache: weakref.WeakKeyDictionary[GraphQLSchema, dict[CostModel, CompiledSchema]] = (
    weakref.WeakKeyDictionary()
)
_cache_lock = threading.Lock()
# Models per schema kept compiled; hot reloads replace models, so old ones must go.
_MODELS_PER_SCHEMA = 4


def compiled_schema(schema: GraphQLSchema, model: CostModel) -> CompiledSchema:
    """The compiled tables for ``(schema, model)``, built on first use and cached."""
    per_schema = _cache.get(schema)
    if per_schema is not None:
        compiled = per_schema.get(model)
        if compiled is not None:
            return compiled
    compiled = _Compiler(schema, model).compile()
    with _cache_lock:
        per_schema = _cache.setdefault(schema, {})
        per_schema[model] = compiled
        while len(per_schema) > _MODELS_PER_SCHEMA:
            del per_schema[next(iter(per_schema))]
    return compiled


class _Compiler:
    def __init__(self, schema: GraphQLSchema, model: CostModel) -> None:
        self.schema = schema
        self.model = model
        self.result = CompiledSchema(schema, model)
        self.type_weights: dict[str, float] = {}

    def compile(self) -> CompiledSchema:
        self._check_coordinates()
        self.result.has_negative = any(w < 0 for w in self.model.operation_weights.values())
        schema = self.schema
        types = self.result.types
        for named in schema.type_map.values():
            if isinstance(named, GraphQLObjectType):
                types[named.name] = CompiledType(named.name, abstract=False)
            elif isinstance(named, GraphQLInterfaceType | GraphQLUnionType):
                compiled = CompiledType(named.name, abstract=True)
                compiled.possible = frozenset(t.name for t in schema.get_possible_types(named))
                types[named.name] = compiled
        for named in schema.type_map.values():
            if isinstance(named, GraphQLObjectType | GraphQLInterfaceType):
                fields = types[named.name].fields
                for field_name, field in named.fields.items():
                    fields[field_name] = self._field(named.name, field_name, field)
        query = schema.query_type
        if query is not None:
            # The introspection entry points exist on the query root only.
            fields = types[query.name].fields
            fields["__schema"] = self._field(query.name, "__schema", SchemaMetaFieldDef)
            fields["__type"] = self._field(query.name, "__type", TypeMetaFieldDef)
        return self.result

    # -- weights -------------------------------------------------------------------------

    def _override(self, coordinate: str) -> float | FieldCost | None:
        return self.model.weights.get(coordinate)

    def _is_free(self, type_name: str, field_name: str) -> bool:
        return self.model.introspection == "free" and (
            type_name.startswith("__") or field_name.startswith("__")
        )

    def _type_weight(self, type_name: str) -> float:
        weight = self.type_weights.get(type_name)
        if weight is not None:
            return weight
        named = self.schema.type_map[type_name]
        override = self._override(type_name)
        if isinstance(override, float):
            weight = override
        else:
            weight_from_directive = read_cost(named, f"type {type_name}")
            if weight_from_directive is not None:
                weight = weight_from_directive
            elif isinstance(named, GraphQLInterfaceType | GraphQLUnionType):
                possible = self.schema.get_possible_types(named)
                weight = max((self._type_weight(t.name) for t in possible), default=1.0)
            elif is_leaf_type(named):
                weight = 0.0
            else:
                weight = 1.0
        self.type_weights[type_name] = weight
        return weight

    def _field(self, type_name: str, field_name: str, field: GraphQLField) -> CompiledField:
        coordinate = f"{type_name}.{field_name}"
        compiled = CompiledField(coordinate)
        named = get_named_type(field.type)
        override = self._override(coordinate)
        field_cost = override if isinstance(override, FieldCost) else None
        free = self._is_free(type_name, field_name)

        if free:
            compiled.own = 0.0
        elif isinstance(override, float):
            compiled.own = override
        elif field_cost is not None and field_cost.weight is not None:
            compiled.own = field_cost.weight
        else:
            directive_weight = read_cost(field, coordinate)
            compiled.own = (
                directive_weight if directive_weight is not None else self._type_weight(named.name)
            )

        arg_weights = []
        for arg_name, arg in field.args.items():
            arg_coordinate = f"{coordinate}({arg_name}:)"
            arg_override = self._override(arg_coordinate)
            if free:
                weight = None
            elif isinstance(arg_override, float):
                weight = arg_override
            else:
                weight = read_cost(arg, arg_coordinate)
            if weight:
                arg_weights.append((arg_name, weight))
                self.result.has_negative |= weight < 0
        compiled.arg_weights = tuple(arg_weights)
        self.result.has_negative |= compiled.own < 0

        unwrapped = field.type.of_type if isinstance(field.type, GraphQLNonNull) else field.type
        compiled.is_list = isinstance(unwrapped, GraphQLList)
        self._list_size(compiled, field, field_cost)
        if is_composite_type(named):
            compiled.child = self.result.types[named.name]
        elif not compiled.arg_weights and not compiled.slicing:
            compiled.leaf_cost = compiled.own * (compiled.fixed_size if compiled.is_list else 1.0)
        return compiled

    def _list_size(
        self, compiled: CompiledField, field: GraphQLField, field_cost: FieldCost | None
    ) -> None:
        coordinate = compiled.coordinate
        directive = read_list_size(field, coordinate)
        assumed = directive.assumed_size if directive else None
        slicing = directive.slicing_arguments if directive else None
        sized = directive.sized_fields if directive else None
        require_one = directive.require_one_slicing_argument if directive else False
        if field_cost is not None:
            if field_cost.assumed_size is not None:
                assumed = field_cost.assumed_size
            if field_cost.slicing_arguments is not None:
                slicing = field_cost.slicing_arguments
                require_one = bool(slicing) and directive is not None and require_one
            if field_cost.sized_fields is not None:
                sized = field_cost.sized_fields
            if field_cost.require_one_slicing_argument is not None:
                require_one = field_cost.require_one_slicing_argument
        if slicing is None:
            # The convention for schemas without @listSize: an Int `first`/`last`/`limit`.
            require_one = False
            slicing = ()
            if compiled.is_list:
                slicing = tuple(
                    name
                    for name in self.model.slicing_arguments
                    if name in field.args and get_named_type(field.args[name].type) is GraphQLInt
                )
        for name in slicing:
            if name not in field.args:
                raise self._error(
                    coordinate,
                    f"slicing argument {name!r} is not an argument of {coordinate}",
                    _suggest(name, field.args),
                )
        if sized:
            named = get_named_type(field.type)
            child_fields = getattr(named, "fields", None) or {}
            for name in sized:
                if name not in child_fields:
                    raise self._error(
                        coordinate,
                        f"sized field {name!r} is not a field of {named.name}",
                        _suggest(name, child_fields),
                    )
            compiled.sized_fields = frozenset(sized)
        compiled.slicing = slicing
        compiled.require_one = bool(slicing) and require_one
        compiled.arg_types = {name: field.args[name].type for name in slicing}
        compiled.int_arguments = frozenset(
            name for name in slicing if get_named_type(field.args[name].type) is GraphQLInt
        )
        defaults = [
            value
            for name in slicing
            if (value := _argument_default(field.args[name], f"{coordinate}({name}:)")) is not None
        ]
        compiled.slicing_defaults = max(defaults) if defaults else None
        if assumed is None:
            assumed = self.model.default_list_size
        compiled.fixed_size = float(assumed)

    # -- checks --------------------------------------------------------------------------

    def _error(self, coordinate: str, reason: str, suggestions: list[str]) -> ConfigError:
        hint = f"; did you mean {' or '.join(repr(s) for s in suggestions)}?" if suggestions else ""
        in_model = coordinate in self.model.weights
        return ConfigError(
            reason + hint,
            file=self.model.source if in_model else None,
            key=f'cost.weights."{coordinate}"' if in_model else None,
            line=self.model.locations.get(coordinate) if in_model else None,
        )

    def _check_coordinates(self) -> None:
        """Every coordinate in ``model.weights`` must name a real type, field or argument."""
        type_map = self.schema.type_map
        for coordinate, value in self.model.weights.items():
            match = _COORDINATE.match(coordinate)
            if match is None:
                raise self._error(
                    coordinate,
                    "not a schema coordinate (expected Type, Type.field or Type.field(arg:))",
                    [],
                )
            type_name, field_name, arg_name = match.group("type", "field", "arg")
            named = type_map.get(type_name)
            if named is None:
                raise self._error(
                    coordinate,
                    f"no type {type_name!r} in the schema",
                    _suggest(type_name, [n for n in type_map if not n.startswith("__")]),
                )
            if field_name is None:
                if isinstance(value, FieldCost):
                    raise self._error(coordinate, "a type takes a number, not a table", [])
                continue
            fields = getattr(named, "fields", None)
            if not isinstance(named, GraphQLObjectType | GraphQLInterfaceType) or not fields:
                raise self._error(coordinate, f"type {type_name!r} has no fields", [])
            field = fields.get(field_name)
            if field is None:
                raise self._error(
                    coordinate,
                    f"no field {field_name!r} on type {type_name!r}",
                    _suggest(coordinate, [f"{type_name}.{name}" for name in fields]),
                )
            if arg_name is not None:
                if isinstance(value, FieldCost):
                    raise self._error(coordinate, "an argument takes a number, not a table", [])
                if arg_name not in field.args:
                    raise self._error(
                        coordinate,
                        f"no argument {arg_name!r} on field {type_name}.{field_name}",
                        _suggest(
                            coordinate, [f"{type_name}.{field_name}({a}:)" for a in field.args]
                        ),
                    )


def _suggest(word: str, candidates: Any) -> list[str]:
    return difflib.get_close_matches(word, list(candidates), n=3, cutoff=0.6)


def _argument_default(arg: GraphQLArgument, where: str) -> float | None:
    """The schema default of a slicing argument, as a size (or None when it has none)."""
    value = argument_default(arg)
    if value is Undefined or value is None:
        return None
    size = list_size_value(value)
    if size is None:
        raise ConfigError(f"the default of slicing argument {where} is not a size: {value!r}")
    return size


def list_size_value(value: Any) -> float | None:
    """A slicing argument's value as a size: a number, or the length of a list; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list | tuple):
        return float(len(value))
    return None
