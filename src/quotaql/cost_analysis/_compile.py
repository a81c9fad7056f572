"""Compile a schema and a cost model into flat lookup tables, once, for the analyzer's hot path."""

from __future__ import annotations

import difflib
import re
import threading
import weakref
from typing import Any, cast

from graphql import (
    GraphQLArgument,
    GraphQLEnumType,
    GraphQLField,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLInt,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLSchema,
    GraphQLUnionType,
    GraphQLWrappingType,
    OperationType,
    Undefined,
    get_named_type,
    is_composite_type,
    is_leaf_type,
)
from graphql.type.introspection import SchemaMetaFieldDef, TypeMetaFieldDef

from quotaql._graphql_compat import argument_default
from quotaql.cost_analysis.directives import directive_names, read_cost, read_list_size
from quotaql.cost_analysis.model import INTROSPECTION_WEIGHTS, CostModel, FieldCost
from quotaql.cost_analysis.model import OperationType as OperationName
from quotaql.errors import ConfigError

__all__ = [
    "NO_VALUE",
    "CompiledField",
    "CompiledSchema",
    "CompiledType",
    "InputCost",
    "compiled_schema",
    "graphql_schema",
]

_COORDINATE = re.compile(
    r"^(?P<type>[_A-Za-z][_0-9A-Za-z]*)"
    r"(?:\.(?P<field>[_A-Za-z][_0-9A-Za-z]*)(?:\((?P<arg>[_A-Za-z][_0-9A-Za-z]*):\))?)?$"
)


_OPERATION_NAMES: dict[OperationType, OperationName] = {
    OperationType.QUERY: "query",
    OperationType.MUTATION: "mutation",
    OperationType.SUBSCRIPTION: "subscription",
}


class InputCost:
    """What a value in one input position costs: an argument, an input field, a list item.

    ``kind`` is 0 for a scalar or enum, 1 for a list (``item`` prices each item), 2 for
    an input object (``fields`` prices the fields it uses); ``weight`` is the position's
    own weight: its ``@cost``, else 1 for an input object and 0 otherwise (IBM §7.1,
    Apollo Router).
    """

    __slots__ = ("fields", "item", "kind", "weight")

    def __init__(
        self,
        kind: int,
        weight: float,
        item: InputCost | None = None,
        fields: dict[str, InputCost] | None = None,
    ) -> None:
        self.kind = kind
        self.weight = weight
        self.item = item
        self.fields: dict[str, InputCost] = fields if fields is not None else {}

    @property
    def may_cost(self) -> bool:
        """Whether some value in this position costs something."""
        if self.weight or self.kind == 2:
            return True
        return self.kind == 1 and self.item is not None and self.item.may_cost


#: A slicing argument with no value: not written, and no default.
NO_VALUE: Any = object()


class CompiledField:
    """Everything the planner needs about one field, precomputed."""

    __slots__ = (
        "a",
        "arg_costs",
        "b",
        "child",
        "coordinate",
        "disabled",
        "fixed_size",
        "free_leaf",
        "int_paths",
        "int_slice",
        "is_list",
        "list_depth",
        "list_paths",
        "nested_defaults",
        "null_size",
        "require_one",
        "required_paths",
        "sized_tree",
        "slicing",
        "slicing_fallback",
        "t",
    )

    def __init__(self, coordinate: str) -> None:
        self.coordinate = coordinate
        # a: paid per item (apollo: @cost on the field, else its type's weight), b: once
        # per execution (ibm's field weight), t: the returned type's weight per item (ibm's
        # type cost).
        self.a = self.b = self.t = 0.0
        # What each argument's value costs, for the arguments whose values may cost.
        self.arg_costs: dict[str, InputCost] = {}
        self.is_list = False
        # How many lists wrap the named type: 0 for a non-list field, 2 for [[T]].
        self.list_depth = 0
        # The paths of the arguments whose value is the size (("first",), or
        # ("input", "pagination", "first")), each with its argument's schema default
        # (NO_VALUE when none); () when none.
        self.slicing: tuple[tuple[tuple[str, ...], Any], ...] = ()
        self.slicing_fallback: float | None = None
        # The slicing paths of type Int (32-bit), whose values are range-checked.
        self.int_paths: frozenset[tuple[str, ...]] = frozenset()
        # The name of the one slicing argument when it is the only one, of type Int (not
        # a list, not in an input object) and not required one of several: the common
        # case, which the planner reads without the general rules.
        self.int_slice: str | None = None
        # The slicing paths of list type (a list's length is the size; one value where a
        # list is expected is a list of one), and the arguments that may not be null.
        self.list_paths: frozenset[tuple[str, ...]] = frozenset()
        # The schema defaults of the input fields along each nested slicing path.
        self.nested_defaults: dict[tuple[str, ...], tuple[Any, ...]] = {}
        self.required_paths: frozenset[tuple[str, ...]] = frozenset()
        self.require_one = False
        # The size used when no slicing argument gives one (assumedSize or the default).
        self.fixed_size = 1.0
        # The size when a slicing argument is null (a resolver's `items[:None]` is all of
        # them): the field's max_size, else the model's max_list_size, never below
        # fixed_size.
        self.null_size = 1.0
        # sizedFields as a tree: a name mapped to None is sized by the slicing argument;
        # mapped to a tree, the size applies further down ("results { page }").
        self.sized_tree: dict[str, Any] | None = None
        self.child: CompiledType | None = None
        # An entry point the model refuses: __schema and __type under introspection "off".
        self.disabled = False
        # A leaf that costs nothing whatever it returns or is given (no weight, no
        # argument that costs, no slicing argument to check): planned as a count only.
        self.free_leaf = False


class CompiledType:
    """A composite type: its fields and, for interfaces and unions, its possible types."""

    __slots__ = ("abstract", "fields", "free_names", "name", "possible", "weight")

    def __init__(self, name: str, abstract: bool) -> None:
        self.name = name
        self.abstract = abstract
        self.fields: dict[str, CompiledField] = {}
        # The names of its fields that cost nothing whatever they return (``free_leaf``).
        self.free_names: frozenset[str] = frozenset()
        self.possible: frozenset[str] = frozenset((name,))
        self.weight = 1.0  # the type's weight (the IBM type cost of the root type)


class CompiledSchema:
    """Lookup tables of one (schema, model) pair."""

    # Weakly referenced: the plans made with it are kept beside it (``_cache``), not in it.
    __slots__ = ("__weakref__", "directive_costs", "model", "operations", "schema", "types")

    def __init__(self, schema: GraphQLSchema, model: CostModel) -> None:
        self.schema = schema
        self.model = model
        self.types: dict[str, CompiledType] = {}
        # The arguments of directives that cost something when used (IBM Example 13).
        self.directive_costs: dict[str, dict[str, InputCost]] = {}
        # Each operation type: its name, its root type (None: the schema has none) and
        # the model's weight of an operation of that type.
        self.operations: tuple[
            tuple[OperationType, OperationName, CompiledType | None, float], ...
        ] = ()


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


# The last pair asked for, compared by identity: a server asks for the same one each time.
_last: tuple[GraphQLSchema, CostModel, CompiledSchema] | None = None


def compiled_schema(schema: GraphQLSchema, model: CostModel) -> CompiledSchema:
    """The compiled tables for ``(schema, model)``, built on first use and cached."""
    global _last
    last = _last
    if last is not None and last[0] is schema and last[1] is model:
        return last[2]
    compiled = _compiled_schema(schema, model)
    _last = (schema, model, compiled)
    return compiled


def _compiled_schema(schema: GraphQLSchema, model: CostModel) -> CompiledSchema:
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
        self.input_fields: dict[str, dict[str, InputCost]] = {}
        self.names = directive_names(schema)
        self.introspection_sizes = (
            _introspection_sizes(schema) if model.introspection == "counted" else {}
        )

    def compile(self) -> CompiledSchema:
        self._check_coordinates()
        schema = self.schema
        types = self.result.types
        for named in schema.type_map.values():
            if isinstance(named, GraphQLObjectType):
                types[named.name] = CompiledType(named.name, abstract=False)
            elif isinstance(named, GraphQLInterfaceType | GraphQLUnionType):
                compiled = CompiledType(named.name, abstract=True)
                compiled.possible = frozenset(t.name for t in schema.get_possible_types(named))
                types[named.name] = compiled
        for name, compiled in types.items():
            free = self._is_free(name, "")
            compiled.weight = 0.0 if free else max(0.0, self._type_weight(name))
        for named in schema.type_map.values():
            if isinstance(named, GraphQLObjectType | GraphQLInterfaceType):
                fields = types[named.name].fields
                for field_name, field in named.fields.items():
                    fields[field_name] = self._field(named, field_name, field)
        query = schema.query_type
        if query is not None:
            # The introspection entry points exist on the query root only.
            fields = types[query.name].fields
            fields["__schema"] = self._field(query, "__schema", SchemaMetaFieldDef)
            fields["__type"] = self._field(query, "__type", TypeMetaFieldDef)
            if self.model.introspection == "off":
                fields["__schema"].disabled = fields["__type"].disabled = True
        for compiled in types.values():
            if compiled.abstract and compiled.fields:
                self._most_expensive(compiled)
        for compiled in types.values():
            compiled.free_names = frozenset(
                name for name, field in compiled.fields.items() if field.free_leaf
            )
        for directive in schema.directives:
            costs = self._argument_costs(f"@{directive.name}", directive.args, free=False)
            if costs:
                self.result.directive_costs[directive.name] = costs
        operations = []
        for kind, name in _OPERATION_NAMES.items():
            root = schema.get_root_type(kind)
            weight = self.model.operation_weights[name]
            operations.append((kind, name, types[root.name] if root else None, weight))
        self.result.operations = tuple(operations)
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
            weight_from_directive = read_cost(named, f"type {type_name}", self.names.cost)
            if weight_from_directive is not None:
                weight = weight_from_directive
            elif type_name in INTROSPECTION_WEIGHTS and self.model.introspection == "counted":
                weight = INTROSPECTION_WEIGHTS[type_name]
            elif isinstance(named, GraphQLInterfaceType | GraphQLUnionType):
                possible = self.schema.get_possible_types(named)
                weight = max((self._type_weight(t.name) for t in possible), default=1.0)
            elif is_leaf_type(named):
                weight = 0.0
            else:
                weight = 1.0
        self.type_weights[type_name] = weight
        return weight

    def _field(
        self, parent: GraphQLObjectType | GraphQLInterfaceType, field_name: str, field: GraphQLField
    ) -> CompiledField:
        type_name = parent.name
        coordinate = f"{type_name}.{field_name}"
        compiled = CompiledField(coordinate)
        named = get_named_type(field.type)
        override = self._override(coordinate)
        field_cost = override if isinstance(override, FieldCost) else None
        free = self._is_free(type_name, field_name)

        explicit: float | None
        if free:
            explicit = 0.0
        elif isinstance(override, float):
            explicit = override
        elif field_cost is not None and field_cost.weight is not None:
            explicit = field_cost.weight
        else:
            explicit = read_cost(field, coordinate, self.names.cost)
        composite = is_composite_type(named)
        if self.model.model == "ibm":
            # The spec's field weight: @cost, else 1 for composite types, 0 for leaves;
            # the type's weight goes to the type cost. An introspection field, counted,
            # weighs what its introspection type does (a resolver call of graphql-core's).
            field_weight = 1.0
            if self.introspection_sizes and (
                type_name.startswith("__") or field_name.startswith("__")
            ):
                field_weight = self._type_weight(named.name)
            compiled.b = explicit if explicit is not None else (field_weight if composite else 0.0)
            # A negative type weight would cancel the type cost of other fields (scaled by
            # a list the client sizes): the type cost never decreases, as field costs.
            compiled.t = 0.0 if free else max(0.0, self._type_weight(named.name))
        else:
            compiled.a = explicit if explicit is not None else self._type_weight(named.name)
        compiled.arg_costs = self._argument_costs(coordinate, field.args, free=free)

        type_ = field.type
        while isinstance(type_, GraphQLWrappingType):
            if isinstance(type_, GraphQLList):
                compiled.list_depth += 1
            type_ = type_.of_type
        compiled.is_list = compiled.list_depth > 0
        self._list_size(compiled, parent, field_name, field, field_cost)
        if composite:
            compiled.child = self.result.types[named.name]
        compiled.free_leaf = (
            not composite
            and not compiled.a
            and not compiled.b
            and not compiled.t
            and not compiled.arg_costs
            and not compiled.slicing
        )
        return compiled

    def _most_expensive(self, interface: CompiledType) -> None:
        """A field read on an interface runs one of its implementations' fields: it costs
        what the most expensive of them would (weights and assumed size), never less than
        its own definition says (so that no spelling of a selection is cheaper)."""
        types = self.result.types
        for name, field in interface.fields.items():
            implementations = [
                found
                for type_name in interface.possible
                if (found := types[type_name].fields.get(name)) is not None
            ]
            if not implementations:
                continue
            field.a = max(field.a, *(found.a for found in implementations))
            field.b = max(field.b, *(found.b for found in implementations))
            field.t = max(field.t, *(found.t for found in implementations))
            field.fixed_size = max(field.fixed_size, *(f.fixed_size for f in implementations))
            field.null_size = max(field.null_size, *(f.null_size for f in implementations))
            field.free_leaf = field.free_leaf and all(f.free_leaf for f in implementations)

    def _argument_costs(
        self, where: str, args: dict[str, GraphQLArgument], *, free: bool
    ) -> dict[str, InputCost]:
        if free:
            return {}
        costs: dict[str, InputCost] = {}
        for arg_name, arg in args.items():
            arg_coordinate = f"{where}({arg_name}:)"
            override = self._override(arg_coordinate)
            if isinstance(override, float):
                weight: float | None = override
            else:
                weight = read_cost(arg, arg_coordinate, self.names.cost)
            cost = self._input_cost(arg.type, weight)
            if cost.may_cost:
                costs[arg_name] = cost
        return costs

    def _input_cost(self, type_: GraphQLInputType, weight: float | None) -> InputCost:
        if isinstance(type_, GraphQLNonNull):
            type_ = type_.of_type
        if isinstance(type_, GraphQLList):
            return InputCost(1, weight or 0.0, item=self._input_cost(type_.of_type, None))
        if isinstance(type_, GraphQLInputObjectType):
            return InputCost(2, 1.0 if weight is None else weight, fields=self._input_fields(type_))
        return InputCost(0, weight or 0.0)

    def _input_fields(self, type_: GraphQLInputObjectType) -> dict[str, InputCost]:
        found = self.input_fields.get(type_.name)
        if found is not None:
            return found
        found = self.input_fields[type_.name] = {}  # before the fields: types may recurse
        for name, input_field in type_.fields.items():
            weight = read_cost(input_field, f"{type_.name}.{name}", self.names.cost)
            cost = self._input_cost(input_field.type, weight)
            if cost.may_cost:
                found[name] = cost
        return found

    def _list_size(
        self,
        compiled: CompiledField,
        parent: GraphQLObjectType | GraphQLInterfaceType,
        field_name: str,
        field: GraphQLField,
        field_cost: FieldCost | None,
    ) -> None:
        coordinate = compiled.coordinate
        directive = read_list_size(field, coordinate, self.names.list_size)
        if directive is None and isinstance(parent, GraphQLObjectType):
            # An implementing field without @listSize sizes as its interface's field does.
            for interface in parent.interfaces:
                inherited = interface.fields.get(field_name)
                if inherited is not None:
                    where = f"{interface.name}.{field_name}"
                    directive = read_list_size(inherited, where, self.names.list_size)
                    if directive is not None:
                        break
        assumed = directive.assumed_size if directive else None
        slicing = directive.slicing_arguments if directive else None
        sized = directive.sized_fields if directive else None
        require_one = directive.require_one_slicing_argument if directive else False
        slice_default = directive.slicing_argument_default_value if directive else None
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
        if slicing is None and sized is None:
            connection = self._connection(field)
            if connection is not None:
                slicing, sized = connection
                require_one = False
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
        paths: list[tuple[tuple[str, ...], Any]] = []
        int_paths: set[tuple[str, ...]] = set()
        list_paths: set[tuple[str, ...]] = set()
        required: set[tuple[str, ...]] = set()
        nested_defaults: dict[tuple[str, ...], tuple[Any, ...]] = {}
        for name in slicing:
            path = tuple(name.split("."))
            part_defaults: list[Any] = []
            leaf = self._slicing_path(coordinate, field, path, part_defaults)
            if len(path) > 1:
                nested_defaults[path] = tuple(part_defaults)
            if get_named_type(leaf) is GraphQLInt:
                int_paths.add(path)
            if _is_list(leaf):
                list_paths.add(path)
            if len(path) == 1 and isinstance(leaf, GraphQLNonNull):
                required.add(path)
            default = NO_VALUE
            if len(path) == 1:
                value = argument_default(field.args[path[0]])
                if value is not Undefined:
                    default = value
                    _check_slicing_default(value, f"{coordinate}({name}:)")
            paths.append((path, default))
        if sized:
            compiled.sized_tree = self._sized_tree(coordinate, field, sized)
        compiled.slicing = tuple(paths)
        # Hot Chocolate's slicingArgumentDefaultValue: the size when no slicing argument
        # (nor a schema default) gives one.
        compiled.slicing_fallback = None if slice_default is None else float(slice_default)
        compiled.int_paths = frozenset(int_paths)
        compiled.list_paths = frozenset(list_paths)
        compiled.nested_defaults = nested_defaults
        compiled.required_paths = frozenset(required)
        compiled.require_one = bool(slicing) and require_one
        if len(paths) == 1 and not compiled.require_one:
            path = paths[0][0]
            if len(path) == 1 and path in int_paths and path not in list_paths:
                compiled.int_slice = path[0]
        fixed: float | None = assumed
        if fixed is None:
            fixed = self.introspection_sizes.get(coordinate)
        if fixed is None:
            fixed = self.model.default_list_size
        compiled.fixed_size = float(fixed)
        bound = self.model.max_list_size
        if field_cost is not None and field_cost.max_size is not None:
            bound = field_cost.max_size
        compiled.null_size = max(
            float(bound), compiled.fixed_size, compiled.slicing_fallback or 0.0
        )

    def _connection(self, field: GraphQLField) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """A Relay connection field's slicing arguments and sized fields, if it is one."""
        model = self.model
        if not model.connections:
            return None
        type_ = field.type.of_type if isinstance(field.type, GraphQLNonNull) else field.type
        if not isinstance(type_, GraphQLObjectType | GraphQLInterfaceType):
            return None
        if type_.name in model.connections_exclude or "pageInfo" not in type_.fields:
            return None
        sized = []
        for name in ("edges", "nodes"):
            child = type_.fields.get(name)
            if child is None or not _is_list(child.type):
                continue
            item = get_named_type(child.type)
            if name == "edges" and "node" not in (getattr(item, "fields", None) or {}):
                continue
            sized.append(name)
        slicing = tuple(
            name
            for name in ("first", "last")
            if name in field.args and get_named_type(field.args[name].type) is GraphQLInt
        )
        if not sized or not slicing:
            return None
        return slicing, tuple(sized)

    def _slicing_path(
        self,
        coordinate: str,
        field: GraphQLField,
        path: tuple[str, ...],
        defaults: list[Any] | None = None,
    ) -> GraphQLInputType:
        """The type at a slicing argument's path (``input.pagination.first``); the schema
        default of each input field along it is appended to ``defaults`` (NO_VALUE when
        it has none)."""
        arg = field.args.get(path[0])
        if arg is None:
            raise self._error(
                coordinate,
                f"slicing argument {path[0]!r} is not an argument of {coordinate}",
                _suggest(path[0], field.args),
            )
        type_: GraphQLInputType = arg.type
        for depth, part in enumerate(path[1:], start=1):
            named = get_named_type(type_)
            fields = named.fields if isinstance(named, GraphQLInputObjectType) else {}
            if isinstance(type_, GraphQLList) or (
                isinstance(type_, GraphQLNonNull) and isinstance(type_.of_type, GraphQLList)
            ):
                fields = {}
            if part not in fields:
                where = ".".join(path[:depth])
                raise self._error(
                    coordinate,
                    f"slicing argument {'.'.join(path)!r}: {where!r} has no input field {part!r}",
                    _suggest(part, fields),
                )
            type_ = fields[part].type
            if defaults is not None:
                value = argument_default(fields[part])
                defaults.append(NO_VALUE if value is Undefined else value)
        return type_

    def _sized_tree(
        self, coordinate: str, field: GraphQLField, sized: tuple[str, ...]
    ) -> dict[str, Any]:
        """``sizedFields`` as a tree: ``["page", "results { page }"]`` sizes ``page``
        and ``results.page`` (Apollo's selection form; one sized field per entry)."""
        tree: dict[str, Any] = {}
        for entry in sized:
            words = entry.replace("{", " { ").replace("}", " } ").split()
            # (the tree node, its type) of each open "{", innermost last
            stack: list[tuple[dict[str, Any], Any]] = [(tree, get_named_type(field.type))]
            leaves = 0
            for index, word in enumerate(words):
                if not word:
                    continue  # a "{" already read with its field
                node, named = stack[-1]
                following = words[index + 1] if index + 1 < len(words) else None
                if word == "{":
                    raise self._sized_error(coordinate, entry, "a '{' must follow a field")
                if word == "}":
                    if len(stack) == 1:
                        raise self._sized_error(coordinate, entry, "an unmatched '}'")
                    stack.pop()
                    continue
                fields = getattr(named, "fields", None) or {}
                if not word.isidentifier() or word not in fields:
                    raise self._error(
                        coordinate,
                        f"sized field {word!r} is not a field of {named.name}",
                        _suggest(word, fields),
                    )
                if following == "{":
                    below = node.get(word)
                    node[word] = below = below if isinstance(below, dict) else {}
                    stack.append((below, get_named_type(fields[word].type)))
                    words[index + 1] = ""  # consumed
                else:
                    leaves += 1
                    node.setdefault(word, None)
            if len(stack) != 1:
                raise self._sized_error(coordinate, entry, "an unclosed '{'")
            if leaves != 1:
                raise self._sized_error(coordinate, entry, "each entry sizes exactly one field")
        return tree

    def _sized_error(self, coordinate: str, entry: str, reason: str) -> ConfigError:
        return self._error(coordinate, f"sizedFields entry {entry!r}: {reason}", [])

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
        """Every coordinate in ``model.weights`` must name a real type, field or argument,
        and every name in ``model.connections_exclude`` a type."""
        type_map = self.schema.type_map
        for name in sorted(self.model.connections_exclude):
            if name not in type_map:
                raise ConfigError(
                    f"connections_exclude names no type {name!r} of the schema",
                    file=self.model.source,
                    key="cost.connections_exclude",
                )
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


def _introspection_sizes(schema: GraphQLSchema) -> dict[str, float]:
    """The length of each introspection list, from the schema it describes: ``__Schema.types``
    as many as the schema has, and each list of a ``__Type`` (``fields``, ``inputFields``,
    ``enumValues``, ...) the schema's total over its types, divided among them, so that a
    whole introspection query sizes exactly what it returns."""
    types = list(schema.type_map.values())
    fields = [field for t in types for field in (getattr(t, "fields", None) or {}).values()]
    output = [f for f in fields if isinstance(f, GraphQLField)]
    totals = {
        "fields": len(output),
        "inputFields": len(fields) - len(output),
        "enumValues": sum(len(t.values) for t in types if isinstance(t, GraphQLEnumType)),
        "interfaces": sum(len(getattr(t, "interfaces", None) or ()) for t in types),
        "possibleTypes": sum(len(schema.get_possible_types(t)) for t in types
                             if isinstance(t, GraphQLInterfaceType | GraphQLUnionType)),
    }  # fmt: skip
    count = max(len(types), 1)
    sizes = {f"__Type.{name}": total / count for name, total in totals.items()}
    sizes["__Schema.types"] = float(len(types))
    sizes["__Schema.directives"] = float(len(schema.directives))
    sizes["__Field.args"] = sum(len(f.args) for f in output) / max(len(output), 1)
    directive_args = sum(len(d.args) for d in schema.directives)
    sizes["__Directive.args"] = directive_args / max(len(schema.directives), 1)
    return sizes


def _suggest(word: str, candidates: Any) -> list[str]:
    return difflib.get_close_matches(word, list(candidates), n=3, cutoff=0.6)


def _check_slicing_default(value: Any, where: str) -> None:
    """The schema default of a slicing argument must be a size (or null)."""
    if value is not None and list_size_value(value) is None:
        raise ConfigError(f"the default of slicing argument {where} is not a size: {value!r}")


def _field_of(named: Any, name: str) -> GraphQLField:
    return cast("GraphQLField", named.fields[name])


def _is_list(type_: Any) -> bool:
    if isinstance(type_, GraphQLNonNull):
        type_ = type_.of_type
    return isinstance(type_, GraphQLList)


def list_size_value(value: Any) -> float | None:
    """A slicing argument's value as a size: a number, or the length of a list; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list | tuple):
        return float(len(value))
    return None
