"""IBM GraphQL Cost Directives ``@cost`` and ``@listSize``, and how the analyzer reads them.

SDL-first schemas declare the directives with :data:`COST_DIRECTIVES_SDL`; code-first
graphql-core schemas add :data:`COST_DIRECTIVE` and :data:`LIST_SIZE_DIRECTIVE` to
``GraphQLSchema(directives=...)``; Strawberry schemas use :class:`Cost` and :class:`ListSize`
(imported lazily, so this module needs Strawberry only when those two are used)::

    from quotaql.cost_analysis.directives import Cost, ListSize

    @strawberry.type
    class Query:
        @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])
        def users(self, first: int = 10) -> list[User]: ...

Strawberry's own Apollo Federation directives (``strawberry.federation.schema_directives``
``Cost`` / ``ListSize``, in the Strawberry versions that have them) are read too, so a
``strawberry.federation.Schema`` needs no quotaql classes. ``@listSize`` also takes Hot
Chocolate's ``slicingArgumentDefaultValue: Int``, so the SDL Hot Chocolate prints builds.

Schemas that come from Apollo (subgraphs, supergraphs) name the directives through
``@link`` on ``schema`` or ``extend schema``; :func:`directive_names` reads the names from
those links, following the Apollo Federation rules (``apollo-federation/src/link/``)::

    # the cost spec: imports and their aliases; `@cost` not imported keeps the spec's name
    # (`cost`, or the link's `as:`); others not imported are prefixed: `@cost__listSize`
    schema @link(url: "https://specs.apollo.dev/cost/v0.1",
                 import: [{name: "@cost", as: "@myCost"}, "@listSize"]) { query: Query }

    # Federation 2.9 and later carry both; not imported: `@federation__cost`,
    # `@federation__listSize` (or `@<as>__cost` with the link's `as:`)
    extend schema @link(url: "https://specs.apollo.dev/federation/v2.9",
                        import: ["@key", "@cost", "@listSize"])

Without such a link the names are ``cost`` and ``listSize``. Every name the analyzer uses
still has to be declared by the schema (``directive @myCost(weight: Int!) on ...``); Apollo's
``weight: Int!`` and the IBM spec's ``weight: String!`` are both read.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

from graphql import (
    DirectiveLocation,
    GraphQLArgument,
    GraphQLBoolean,
    GraphQLDirective,
    GraphQLInt,
    GraphQLList,
    GraphQLNonNull,
    GraphQLString,
    value_from_ast_untyped,
)

from quotaql._graphql_compat import argument_with_default
from quotaql.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from graphql import GraphQLSchema
    from graphql.language import ConstDirectiveNode, Node

    from quotaql.cost_analysis._strawberry import Cost, ListSize

__all__ = [
    "COST_DIRECTIVE",
    "COST_DIRECTIVES_SDL",
    "DEFAULT_NAMES",
    "LIST_SIZE_DIRECTIVE",
    "Cost",
    "DirectiveNames",
    "ListSize",
    "ListSizeValues",
    "directive_names",
    "read_cost",
    "read_list_size",
]

COST_DIRECTIVES_SDL = """\
directive @cost(weight: String!) on \
ARGUMENT_DEFINITION | ENUM | FIELD_DEFINITION | INPUT_FIELD_DEFINITION | OBJECT | SCALAR

directive @listSize(\
assumedSize: Int, slicingArguments: [String!], sizedFields: [String!], \
requireOneSlicingArgument: Boolean = true, slicingArgumentDefaultValue: Int) on FIELD_DEFINITION
"""

_COST_LOCATIONS = (
    DirectiveLocation.ARGUMENT_DEFINITION,
    DirectiveLocation.ENUM,
    DirectiveLocation.FIELD_DEFINITION,
    DirectiveLocation.INPUT_FIELD_DEFINITION,
    DirectiveLocation.OBJECT,
    DirectiveLocation.SCALAR,
)

COST_DIRECTIVE = GraphQLDirective(
    name="cost",
    locations=_COST_LOCATIONS,
    args={"weight": GraphQLArgument(GraphQLNonNull(GraphQLString))},
    description="The relative cost of resolving this element (IBM GraphQL Cost Directives).",
)

_NAMES = GraphQLList(GraphQLNonNull(GraphQLString))
LIST_SIZE_DIRECTIVE = GraphQLDirective(
    name="listSize",
    locations=(DirectiveLocation.FIELD_DEFINITION,),
    args={
        "assumedSize": GraphQLArgument(GraphQLInt),
        "slicingArguments": GraphQLArgument(_NAMES),
        "sizedFields": GraphQLArgument(_NAMES),
        "requireOneSlicingArgument": argument_with_default(GraphQLBoolean, True),
        # Hot Chocolate's: the size when no slicing argument is given.
        "slicingArgumentDefaultValue": GraphQLArgument(GraphQLInt),
    },
    description="How many items a list field returns (IBM GraphQL Cost Directives).",
)

# Strawberry directive classes carry this attribute so that reading them needs no
# Strawberry import: cost_analysis stays graphql-core only.
MARKER = "__quotaql_directive__"


@dataclass(frozen=True, slots=True)
class ListSizeValues:
    """The arguments of one ``@listSize`` use.

    ``slicing_argument_default_value`` is Hot Chocolate's argument: the size when the
    operation gives none of the slicing arguments.
    """

    assumed_size: int | None = None
    slicing_arguments: tuple[str, ...] | None = None
    sized_fields: tuple[str, ...] | None = None
    require_one_slicing_argument: bool = True
    slicing_argument_default_value: int | None = None


# --- the names: @link --------------------------------------------------------------------


class DirectiveNames(NamedTuple):
    """The names a schema gives the cost directives, without the ``@``.

    Attributes:
        cost: the name of ``@cost`` (``"cost"``, ``"myCost"``, ``"federation__cost"``).
        list_size: the name of ``@listSize`` (``"listSize"``, ``"cost__listSize"``).
    """

    cost: str
    list_size: str


#: The names without any ``@link``: the IBM spec's.
DEFAULT_NAMES = DirectiveNames(cost="cost", list_size="listSize")

_APOLLO_SPECS_HOST = "specs.apollo.dev"
_COST_SPEC = "cost"
_FEDERATION_SPEC = "federation"
_LINK_SPEC = "link"
# apollo-federation federation_spec_definition.rs: the cost spec's directives are part of
# the federation spec from v2.9 on.
_FEDERATION_WITH_COST = (2, 9)
_ELEMENTS = ("cost", "listSize")
_GRAPHQL_NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]*\Z")
_VERSION = re.compile(r"v(\d+)\.(\d+)\Z")


@dataclass(frozen=True, slots=True)
class _Link:
    """One ``@link`` to the cost or the federation spec, reduced to what names the directives."""

    url: str
    spec: str  # the spec's own name: "cost" or "federation"
    namespace: str  # the link's `as:`, else the spec's name
    imports: dict[str, str]  # "cost" / "listSize" -> the name imported under

    def name_of(self, element: str) -> tuple[str, bool]:
        """The name ``element`` has in the schema through this link, and whether imported.

        apollo-federation ``Link::directive_name_in_schema`` (link/mod.rs): an import's
        alias or own name; else the spec's namespace for the directive named like the
        spec (``@cost`` of the cost spec); else ``<namespace>__<element>``.
        """
        imported = self.imports.get(element)
        if imported is not None:
            return imported, True
        if element == self.spec:
            return self.namespace, False
        return f"{self.namespace}__{element}", False


def directive_names(schema: GraphQLSchema) -> DirectiveNames:
    """The names of ``@cost`` and ``@listSize`` in ``schema``, as its ``@link``s give them.

    The ``@link`` directives are read from the schema definition and its extensions
    (``schema.ast_node``, ``schema.extension_ast_nodes``: the SDL ``schema`` and
    ``extend schema``). A link to ``https://specs.apollo.dev/cost/vX.Y`` names both
    directives; else a link to ``https://specs.apollo.dev/federation/v2.9`` or later does
    (an earlier federation version has no cost directives and changes nothing); else the
    names are ``cost`` and ``listSize``. Within a link, an import (``"@cost"`` or
    ``{name: "@cost", as: "@c"}``) gives the name; a directive not imported is
    ``<namespace>__<name>`` (``cost__listSize``, ``federation__cost``), the namespace being
    the link's ``as:`` or the spec's name, except the cost spec's eponymous ``@cost``,
    which is just ``<namespace>`` (``cost``). The ``@link`` directive itself is ``@link``,
    or the name the link spec's own ``@link(url: ".../link/v1.0", as: ...)`` gives it.

    Links to other specs, links whose ``url`` is not a string, and import entries that name
    neither directive are ignored. A name that the schema declares no directive for, where
    the schema declares the plain ``@cost`` / ``@listSize``, falls back to the plain name:
    no element can carry an undeclared directive (a Strawberry federation schema prints an
    ``@link`` that does not import quotaql's own ``@cost``).

    Unlike Apollo, no ``@link(url: ".../link/v1.0")`` bootstrap is required, ``http://``
    URLs and any cost spec version are read, and a single import that is not in a list
    counts as a list of one (GraphQL input coercion).

    Raises:
        ConfigError: the cost links contradict each other or cannot be read: two links
            (or one link's imports) give one directive two names, a cost or federation
            URL without a ``vMAJOR.MINOR`` version, an alias or ``as:`` that is not a
            GraphQL name (or an alias without the ``@`` of the imported directive), an
            alias imported from a federation version without the cost directives, or
            both directives under one name.

    >>> from graphql import build_schema
    >>> directive_names(build_schema("type Query { a: Int }"))
    DirectiveNames(cost='cost', list_size='listSize')
    """
    directives = [
        directive
        for node in (schema.ast_node, *(schema.extension_ast_nodes or ()))
        if node is not None
        for directive in node.directives or ()
    ]
    if not directives:
        return DEFAULT_NAMES
    link_name = _link_directive_name(directives)
    links = [
        link
        for directive in directives
        if directive.name.value == link_name
        if (link := _read_link(directive)) is not None
    ]
    if not links:
        return DEFAULT_NAMES
    cost = _resolve(schema, links, "cost")
    list_size = _resolve(schema, links, "listSize")
    if cost == list_size:
        raise ConfigError(f"the schema's @link directives name both @cost and @listSize @{cost}")
    return DirectiveNames(cost=cost, list_size=list_size)


def _link_directive_name(directives: Iterable[ConstDirectiveNode]) -> str:
    # The link spec's own link (apollo-federation database.rs is_bootstrap_directive) may
    # rename @link: @mylink(url: "https://specs.apollo.dev/link/v1.0", as: "mylink").
    for directive in directives:
        args = _arguments(directive)
        url = args.get("url")
        spec = _apollo_spec(url) if isinstance(url, str) else None
        alias = args.get("as")
        expected = alias if isinstance(alias, str) else _LINK_SPEC
        if spec is not None and spec[0] == _LINK_SPEC and directive.name.value == expected:
            return expected
    return _LINK_SPEC


def _apollo_spec(url: str) -> tuple[str, str] | None:
    """``(spec name, version segment)`` of a ``https://specs.apollo.dev/<spec>/<version>`` URL."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or host != _APOLLO_SPECS_HOST:
        return None
    spec, _, version = parts.path.removeprefix("/").partition("/")
    return spec, version


def _read_link(directive: ConstDirectiveNode) -> _Link | None:
    args = _arguments(directive)
    url = args.get("url")
    if not isinstance(url, str):
        return None
    spec = _apollo_spec(url)
    if spec is None or spec[0] not in (_COST_SPEC, _FEDERATION_SPEC):
        return None
    name, version_text = spec
    match = _VERSION.match(version_text)
    if match is None:
        raise ConfigError(
            f'@link(url: "{url}"): the {name} spec URL does not end in a version '
            f'like "/v{"0.1" if name == _COST_SPEC else "2.9"}"'
        )
    version = (int(match[1]), int(match[2]))
    imports = _read_imports(args.get("import"), url)
    if name == _FEDERATION_SPEC and version < _FEDERATION_WITH_COST:
        # Federation before 2.9 has no @cost / @listSize: a plain import of one of them
        # changes nothing (the name stays the IBM spec's); an alias would be lost.
        renamed = {element: alias for element, alias in imports.items() if element != alias}
        if renamed:
            element, alias = next(iter(renamed.items()))
            raise ConfigError(
                f'@link(url: "{url}") imports @{element} as @{alias}, but federation has '
                f"@{element} from v2.9 on: link federation/v2.9 or later, or the cost spec "
                '"https://specs.apollo.dev/cost/v0.1"'
            )
        return None
    namespace = args.get("as")
    if not isinstance(namespace, str):
        namespace = name
    elif not _GRAPHQL_NAME.match(namespace):
        raise ConfigError(f'@link(url: "{url}", as: {namespace!r}): as is not a GraphQL name')
    return _Link(url=url, spec=name, namespace=namespace, imports=imports)


def _read_imports(value: Any, url: str) -> dict[str, str]:
    """The names ``@cost`` and ``@listSize`` are imported under, from ``@link(import:)``.

    apollo-federation ``Import::from_value`` (link/mod.rs): an entry is ``"@cost"`` or
    ``{name: "@cost", as: "@alias"}``; a directive's alias starts with ``@`` too.
    """
    if value is None:
        return {}
    entries = value if isinstance(value, list) else [value]
    found: dict[str, str] = {}
    for entry in entries:
        element: Any
        alias: Any
        if isinstance(entry, str):
            element, alias = entry, None
        elif isinstance(entry, dict):
            element, alias = entry.get("name"), entry.get("as")
        else:
            continue
        if not isinstance(element, str) or element.removeprefix("@") not in _ELEMENTS:
            continue
        if not element.startswith("@"):
            continue  # "cost" without "@" would import a type, not the directive
        key = element[1:]
        if alias is None:
            imported = key
        elif (
            isinstance(alias, str)
            and alias.startswith("@")
            and _GRAPHQL_NAME.match(alias[1:]) is not None
        ):
            imported = alias[1:]
        else:
            raise ConfigError(
                f'@link(url: "{url}") imports {element} as {alias!r}: the alias must be "@" '
                "and a GraphQL name"
            )
        previous = found.setdefault(key, imported)
        if previous != imported:
            raise ConfigError(
                f'@link(url: "{url}") imports {element} twice, as @{previous} and as @{imported}'
            )
    return found


def _resolve(schema: GraphQLSchema, links: list[_Link], element: str) -> str:
    """The name of ``element`` through ``links`` (the cost spec's before federation's)."""
    default = element
    cost = _agreed(links, _COST_SPEC, element)
    federation = _agreed(links, _FEDERATION_SPEC, element)
    if cost is not None and federation is not None:
        federation_name, imported, federation_url = federation
        if imported and federation_name != cost[0]:
            raise ConfigError(
                f'@link(url: "{federation_url}") imports @{element} as @{federation_name}, '
                f'but @link(url: "{cost[2]}") names it @{cost[0]}: import it under one name'
            )
    chosen = cost or federation
    if chosen is None:
        return default
    name = chosen[0]
    if (
        name != default
        and schema.get_directive(name) is None
        and schema.get_directive(default) is not None
    ):
        return default
    return name


def _agreed(links: list[_Link], spec: str, element: str) -> tuple[str, bool, str] | None:
    """``(name, imported, url)`` that the links to ``spec`` give ``element``, if any.

    Several links to one spec (``schema`` and ``extend schema``) read as one: an import
    in any of them names the directive; without one, their namespaces must agree.
    """
    imported: tuple[str, str] | None = None
    unimported: tuple[str, str] | None = None
    for link in links:
        if link.spec != spec:
            continue
        name, is_import = link.name_of(element)
        first = imported if is_import else unimported
        if first is None:
            if is_import:
                imported = (name, link.url)
            else:
                unimported = (name, link.url)
        elif first[0] != name:
            raise ConfigError(
                f'@link(url: "{first[1]}") names @{element} @{first[0]}, but '
                f'@link(url: "{link.url}") names it @{name}: keep one link to the {spec} spec'
            )
    if imported is not None:
        return imported[0], True, imported[1]
    if unimported is not None:
        return unimported[0], False, unimported[1]
    return None


# --- reading the directives --------------------------------------------------------------

# Strawberry's federation directives (strawberry/federation/schema_directives.py): their
# Python attributes, by the GraphQL argument names.
_FEDERATION_MODULE = "strawberry.federation.schema_directives"
_FEDERATION_LIST_SIZE = (
    ("assumedSize", "assumed_size"),
    ("slicingArguments", "slicing_arguments"),
    ("sizedFields", "sized_fields"),
    ("requireOneSlicingArgument", "require_one_slicing_argument"),
    ("slicingArgumentDefaultValue", "slicing_argument_default_value"),
)


def _ast_directives(element: Any, name: str) -> list[ConstDirectiveNode]:
    nodes: list[Node | None] = [getattr(element, "ast_node", None)]
    nodes.extend(getattr(element, "extension_ast_nodes", None) or ())
    return [
        directive
        for node in nodes
        if node is not None
        for directive in getattr(node, "directives", None) or ()
        if directive.name.value == name
    ]


def _strawberry_directives(element: Any, kind: str) -> list[Any]:
    definition = (getattr(element, "extensions", None) or {}).get("strawberry-definition")
    return [
        directive
        for directive in getattr(definition, "directives", None) or ()
        if _strawberry_kind(directive) == kind
    ]


def _strawberry_kind(directive: Any) -> str | None:
    """``"cost"`` / ``"listSize"`` for quotaql's and Strawberry federation's directives."""
    kind = getattr(directive, MARKER, None)
    if isinstance(kind, str):
        return kind
    # No instance of Strawberry's federation directives exists unless their module is
    # loaded; Strawberry names the one a directive stands for by `imported_from.name`.
    module = sys.modules.get(_FEDERATION_MODULE)
    base = getattr(module, "FederationDirective", None)
    if not isinstance(base, type) or not isinstance(directive, base):
        return None
    name = getattr(getattr(directive, "imported_from", None), "name", None)
    return name if name in _ELEMENTS else None


def _strawberry_list_size(directive: Any) -> dict[str, Any]:
    if getattr(directive, MARKER, None) is not None:
        arguments: dict[str, Any] = directive.arguments()
        return arguments
    from strawberry.types.unset import UNSET  # noqa: PLC0415  (the directive is Strawberry's)

    return {
        graphql_name: value
        for graphql_name, attribute in _FEDERATION_LIST_SIZE
        if (value := getattr(directive, attribute, UNSET)) is not UNSET
    }


def _arguments(directive: ConstDirectiveNode) -> dict[str, Any]:
    return {arg.name.value: value_from_ast_untyped(arg.value) for arg in directive.arguments or ()}


def read_cost(element: Any, where: str, name: str = "cost") -> float | None:
    """The ``@cost(weight:)`` on a schema element (type, field or argument), if any.

    Args:
        element: a graphql-core type, field, argument or input field (from SDL: its AST
            nodes are read; from Strawberry: quotaql's :class:`Cost` and Strawberry's
            federation ``Cost``).
        where: the element, for error messages (``"Query.users"``).
        name: the directive's name in the schema (:func:`directive_names`); Strawberry's
            directive objects are recognised whatever it is.

    Raises:
        ConfigError: the weight is not a number: the IBM spec types it as a String
            (``"2.5"``), Apollo as an ``Int!``; both are read, a boolean or list is not.
    """
    raw: Any = None
    for directive in _ast_directives(element, name):
        raw = _arguments(directive).get("weight")
    for strawberry_directive in _strawberry_directives(element, "cost"):
        raw = strawberry_directive.weight
    if raw is None:
        return None
    shown = f"@{name}(weight: {raw!r}) on {where}"
    if isinstance(raw, bool):
        raise ConfigError(f"{shown} is not a number")
    try:
        weight = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{shown} is not a number") from None
    if not math.isfinite(weight):
        raise ConfigError(f"{shown} is not a finite number")
    return weight


def read_list_size(field: Any, where: str, name: str = "listSize") -> ListSizeValues | None:
    """The ``@listSize`` on a field definition, if any.

    Args:
        field: a graphql-core field (SDL: its AST nodes; Strawberry: quotaql's
            :class:`ListSize` and Strawberry's federation ``ListSize``).
        where: the field's coordinate, for error messages.
        name: the directive's name in the schema (:func:`directive_names`).

    Raises:
        ConfigError: ``assumedSize`` or ``slicingArgumentDefaultValue`` is not a
            non-negative integer, or ``slicingArguments`` / ``sizedFields`` not names.
    """
    values: dict[str, Any] | None = None
    for directive in _ast_directives(field, name):
        values = _arguments(directive)
    for strawberry_directive in _strawberry_directives(field, "listSize"):
        values = _strawberry_list_size(strawberry_directive)
    if values is None:
        return None
    require = values.get("requireOneSlicingArgument")
    return ListSizeValues(
        assumed_size=_size(values.get("assumedSize"), "assumedSize", name, where),
        slicing_arguments=_names(values.get("slicingArguments"), "slicingArguments", name, where),
        sized_fields=_names(values.get("sizedFields"), "sizedFields", name, where),
        require_one_slicing_argument=True if require is None else bool(require),
        slicing_argument_default_value=_size(
            values.get("slicingArgumentDefaultValue"), "slicingArgumentDefaultValue", name, where
        ),
    )


def _size(value: Any, argument: str, name: str, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"@{name}({argument}: {value!r}) on {where} is not an integer")
    if value < 0:
        raise ConfigError(f"@{name}({argument}: {value}) on {where} is negative")
    return value


def _names(value: Any, argument: str, name: str, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]  # GraphQL input coercion turns a single item into a list
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"@{name}({argument}: {value!r}) on {where} is not a list of names")
    return tuple(value)


def __getattr__(name: str) -> Any:
    # Cost / ListSize need Strawberry; import it only when they are asked for.
    if name in ("Cost", "ListSize"):
        from quotaql.cost_analysis import _strawberry  # noqa: PLC0415

        return getattr(_strawberry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
