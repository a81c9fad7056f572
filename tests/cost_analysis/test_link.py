"""@cost / @listSize named through ``@link`` (Apollo Federation forms), Strawberry's federation
directives, and Hot Chocolate's ``slicingArgumentDefaultValue``.

The naming rules are apollo-federation's (apollographql/router ``apollo-federation/src/link/``:
``mod.rs`` ``Link::directive_name_in_schema`` and ``Import::from_value``,
``cost_spec_definition.rs`` ``cost_directive_name``, ``federation_spec_definition.rs``: the
cost directives are in federation from v2.9 on). The tests named ``test_e2e_*`` price whole
operations with ``analyze``; the others call :func:`directive_names`, :func:`read_cost` and
:func:`read_list_size` directly. Strawberry's forms are in
test_link_strawberry.py (the graphql-core 3.2 run has no Strawberry).
"""

import pytest
from graphql import (
    GraphQLField,
    GraphQLInt,
    GraphQLObjectType,
    GraphQLSchema,
    build_schema,
    extend_schema,
    parse,
    print_schema,
    specified_directives,
)

from quotaql.cost_analysis import analyze
from quotaql.cost_analysis.directives import (
    COST_DIRECTIVE,
    COST_DIRECTIVES_SDL,
    LIST_SIZE_DIRECTIVE,
    DirectiveNames,
    ListSizeValues,
    directive_names,
    read_cost,
    read_list_size,
)
from quotaql.errors import ConfigError

# As Apollo's fixtures declare it (custom_cost_schema_with_renamed_directives.graphql).
LINK_SDL = """
directive @link(url: String, as: String, import: [link__Import], for: link__Purpose) repeatable on SCHEMA
scalar link__Import
enum link__Purpose { SECURITY EXECUTION }
"""
COST = "https://specs.apollo.dev/cost/v0.1"
FEDERATION = "https://specs.apollo.dev/federation/v2.9"
TYPES = """
type Item { id: ID }
type Query { expensive: Int @{cost}(weight: 20) items: [Item] @{list_size}(assumedSize: 3) }
"""
QUERY = "{ expensive items { id } }"


def definitions(cost: str, list_size: str) -> str:
    """Apollo's definitions of the two directives, under the given names."""
    return (
        f"directive @{cost}(weight: Int!) on ARGUMENT_DEFINITION | ENUM | FIELD_DEFINITION"
        " | INPUT_FIELD_DEFINITION | OBJECT | SCALAR\n"
        f"directive @{list_size}(assumedSize: Int, slicingArguments: [String!],"
        " sizedFields: [String!], requireOneSlicingArgument: Boolean = true) on FIELD_DEFINITION\n"
    )


def linked(schema: str, cost: str = "cost", list_size: str = "listSize") -> GraphQLSchema:
    """A schema with ``schema`` (its ``schema`` / ``extend schema`` part), the link and the
    directives declared, and :data:`TYPES` using the two names."""
    types = TYPES.replace("{cost}", cost).replace("{list_size}", list_size)
    return build_schema(LINK_SDL + definitions(cost, list_size) + schema + types)


def names_of(schema: str, cost: str = "cost", list_size: str = "listSize") -> DirectiveNames:
    return directive_names(linked(schema, cost, list_size))


def field(schema: GraphQLSchema, name: str) -> GraphQLField:
    assert schema.query_type is not None
    return schema.query_type.fields[name]


# --- no link: today's names --------------------------------------------------------------


def test_a_schema_without_a_link_keeps_the_ibm_names():
    schema = build_schema(COST_DIRECTIVES_SDL + 'type Query { a: Int @cost(weight: "2") }')
    assert directive_names(schema) == DirectiveNames("cost", "listSize")
    assert directive_names(schema) == ("cost", "listSize")  # a NamedTuple
    assert read_cost(field(schema, "a"), "Query.a") == 2.0


def test_a_schema_definition_without_directives_keeps_the_ibm_names():
    schema = build_schema(COST_DIRECTIVES_SDL + "schema { query: Q } type Q { a: Int }")
    assert directive_names(schema) == ("cost", "listSize")


def test_a_code_first_schema_keeps_the_ibm_names():
    query = GraphQLObjectType("Query", {"a": GraphQLField(GraphQLInt)})
    schema = GraphQLSchema(
        query=query, directives=[*specified_directives, COST_DIRECTIVE, LIST_SIZE_DIRECTIVE]
    )
    assert directive_names(schema) == ("cost", "listSize")


# --- the cost spec -----------------------------------------------------------------------


def test_cost_link_imports_with_an_alias_and_plainly():
    schema = f'schema @link(url: "{COST}", import: [{{name: "@cost", as: "@myCost"}}, "@listSize"]) {{ query: Query }}'
    names = names_of(schema, "myCost", "listSize")
    assert names == DirectiveNames(cost="myCost", list_size="listSize")


def test_cost_link_renames_both_as_apollos_fixture_does():
    # custom_cost_schema_with_renamed_directives.graphql: both aliased, and the not imported
    # default name @cost__listSize declared too.
    schema = (
        'schema @link(url: "https://specs.apollo.dev/link/v1.0")'
        f' @link(url: "{COST}", import: [{{ name: "@cost", as: "@renamedCost" }}'
        ' { name: "@listSize", as: "@renamedListSize" }]) { query: Query }\n'
        "directive @cost__listSize(assumedSize: Int) on FIELD_DEFINITION\n"
    )
    sdl = linked(schema, "renamedCost", "renamedListSize")
    names = directive_names(sdl)
    assert names == ("renamedCost", "renamedListSize")
    assert read_cost(field(sdl, "expensive"), "Query.expensive", names.cost) == 20.0
    assert read_list_size(field(sdl, "items"), "Query.items", names.list_size) == ListSizeValues(
        assumed_size=3
    )


def test_cost_link_without_imports_keeps_cost_and_prefixes_list_size():
    # link/mod.rs directive_name_in_schema: the directive named like the spec is not prefixed.
    schema = f'schema @link(url: "{COST}") {{ query: Query }}'
    assert names_of(schema, "cost", "cost__listSize") == ("cost", "cost__listSize")


def test_cost_link_importing_only_list_size_as_apollos_custom_cost_schema():
    # custom_cost_schema.graphql: import: ["@listSize"], and @cost used unprefixed.
    schema = f'schema @link(url: "{COST}", import: ["@listSize"]) {{ query: Query }}'
    assert names_of(schema) == ("cost", "listSize")


def test_cost_link_as_renames_the_namespace():
    schema = f'schema @link(url: "{COST}", as: "price") {{ query: Query }}'
    assert names_of(schema, "price", "price__listSize") == ("price", "price__listSize")


def test_cost_link_of_another_version_is_read_the_same_way():
    schema = 'schema @link(url: "https://specs.apollo.dev/cost/v0.2", import: [{name: "@cost", as: "@c"}]) { query: Query }'
    assert names_of(schema, "c", "cost__listSize") == ("c", "cost__listSize")


def test_the_renamed_directive_is_read_and_the_plain_one_is_not():
    sdl = build_schema(
        LINK_SDL
        + definitions("myCost", "cost__listSize")
        + COST_DIRECTIVES_SDL
        + f'schema @link(url: "{COST}", import: [{{name: "@cost", as: "@myCost"}}]) {{ query: Query }}'
        + 'type Query { a: Int @myCost(weight: 5) b: Int @cost(weight: "7") }'
    )
    names = directive_names(sdl)
    assert names.cost == "myCost"
    assert read_cost(field(sdl, "a"), "Query.a", names.cost) == 5.0
    assert read_cost(field(sdl, "b"), "Query.b", names.cost) is None
    assert read_cost(field(sdl, "b"), "Query.b") == 7.0  # the default name still reads @cost


# --- federation --------------------------------------------------------------------------


def test_federation_link_on_extend_schema_with_plain_imports():
    schema = (
        "directive @key(fields: String!) repeatable on OBJECT\n"
        f'extend schema @link(url: "{FEDERATION}", import: ["@key", "@cost", "@listSize"])\n'
    )
    assert names_of(schema) == ("cost", "listSize")


@pytest.mark.parametrize("version", ["v2.9", "v2.10", "v2.11", "v2.12"])
def test_federation_link_without_imports_prefixes_both(version):
    schema = f'extend schema @link(url: "https://specs.apollo.dev/federation/{version}", import: ["@key"])\n'
    schema += "directive @key(fields: String!) repeatable on OBJECT\n"
    names = names_of(schema, "federation__cost", "federation__listSize")
    assert names == ("federation__cost", "federation__listSize")


def test_federation_link_as_renames_the_namespace():
    schema = f'extend schema @link(url: "{FEDERATION}", as: "fed")\n'
    assert names_of(schema, "fed__cost", "fed__listSize") == ("fed__cost", "fed__listSize")


def test_federation_link_imports_with_an_alias():
    schema = (
        f'extend schema @link(url: "{FEDERATION}", import: [{{name: "@cost", as: "@fedCost"}}])\n'
    )
    names = names_of(schema, "fedCost", "federation__listSize")
    assert names == ("fedCost", "federation__listSize")


@pytest.mark.parametrize("version", ["v1.0", "v2.0", "v2.5", "v2.8"])
def test_federation_before_2_9_has_no_cost_directives_and_changes_nothing(version):
    url = f"https://specs.apollo.dev/federation/{version}"
    assert names_of(f'extend schema @link(url: "{url}")\n') == ("cost", "listSize")
    # a plain import of them is not valid federation, but means the same name
    assert names_of(f'extend schema @link(url: "{url}", import: ["@cost"])\n') == (
        "cost",
        "listSize",
    )


def test_federation_before_2_9_importing_an_alias_is_a_config_error():
    schema = 'extend schema @link(url: "https://specs.apollo.dev/federation/v2.8", import: [{name: "@cost", as: "@c"}])\n'
    with pytest.raises(
        ConfigError, match=r"imports @cost as @c, but federation has @cost from v2\.9 on"
    ):
        names_of(schema, "c")


def test_a_link_added_by_extend_schema_is_read():
    base = build_schema(
        LINK_SDL
        + definitions("federation__cost", "federation__listSize")
        + TYPES.replace("{cost}", "federation__cost").replace("{list_size}", "federation__listSize")
    )
    assert directive_names(base) == ("cost", "listSize")
    extended = extend_schema(base, parse(f'extend schema @link(url: "{FEDERATION}")'))
    assert directive_names(extended) == ("federation__cost", "federation__listSize")


def test_the_cost_link_comes_before_the_federation_link():
    # cost_spec_definition.rs cost_directive_name: the cost spec's link, else federation's.
    schema = (
        f'schema @link(url: "{COST}", import: ["@listSize"]) {{ query: Query }}\n'
        f'extend schema @link(url: "{FEDERATION}", import: ["@key"])\n'
        "directive @key(fields: String!) repeatable on OBJECT\n"
    )
    assert names_of(schema) == ("cost", "listSize")


def test_the_cost_and_federation_links_importing_one_name_agree():
    schema = (
        f'schema @link(url: "{COST}", import: [{{name: "@cost", as: "@c"}}]) {{ query: Query }}\n'
        f'extend schema @link(url: "{FEDERATION}", import: [{{name: "@cost", as: "@c"}}])\n'
    )
    assert names_of(schema, "c", "cost__listSize") == ("c", "cost__listSize")


def test_a_federation_import_contradicting_the_cost_link_is_a_config_error():
    schema = (
        f'schema @link(url: "{COST}", import: [{{name: "@cost", as: "@c"}}]) {{ query: Query }}\n'
        f'extend schema @link(url: "{FEDERATION}", import: ["@cost"])\n'
    )
    with pytest.raises(
        ConfigError, match=r"imports @cost as @cost, but .*cost/v0\.1.* names it @c"
    ):
        names_of(schema, "c")


# --- contradictions and hostile input ----------------------------------------------------


def test_two_links_to_the_cost_spec_read_as_one():
    schema = (
        f'schema @link(url: "{COST}", import: ["@cost"]) {{ query: Query }}\n'
        f'extend schema @link(url: "{COST}", import: ["@cost", "@listSize"])\n'
    )
    assert names_of(schema) == ("cost", "listSize")
    # an import in either names the directive
    schema = (
        f'schema @link(url: "{COST}", import: [{{name: "@cost", as: "@c"}}]) {{ query: Query }}\n'
        f'extend schema @link(url: "{COST}", import: [{{name: "@listSize", as: "@ls"}}])\n'
    )
    assert names_of(schema, "c", "ls") == ("c", "ls")


def test_two_cost_links_with_different_namespaces_are_a_config_error():
    schema = (
        f'schema @link(url: "{COST}", as: "a") {{ query: Query }}\n'
        f'extend schema @link(url: "{COST}", as: "b")\n'
    )
    with pytest.raises(ConfigError, match=r"names @cost @a, but .* names it @b: keep one link"):
        names_of(schema, "a", "a__listSize")


def test_two_cost_links_naming_cost_differently_are_a_config_error():
    schema = (
        f'schema @link(url: "{COST}", import: [{{name: "@cost", as: "@a"}}]) {{ query: Query }}\n'
        f'extend schema @link(url: "{COST}", import: [{{name: "@cost", as: "@b"}}])\n'
    )
    with pytest.raises(ConfigError, match=r"names @cost @a, but .* names it @b"):
        names_of(schema, "a")


def test_one_link_importing_cost_twice_under_two_names_is_a_config_error():
    schema = f'schema @link(url: "{COST}", import: [{{name: "@cost", as: "@a"}}, "@cost"]) {{ query: Query }}'
    with pytest.raises(ConfigError, match=r"imports @cost twice, as @a and as @cost"):
        names_of(schema, "a")


def test_both_directives_under_one_name_is_a_config_error():
    schema = f'schema @link(url: "{COST}", import: [{{name: "@listSize", as: "@cost"}}]) {{ query: Query }}'
    with pytest.raises(ConfigError, match=r"name both @cost and @listSize @cost"):
        directive_names(
            build_schema(LINK_SDL + COST_DIRECTIVES_SDL + schema + "type Query { a: Int }")
        )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('{name: "@cost", as: "myCost"}', r'imports @cost as \'myCost\': the alias must be "@"'),
        ('{name: "@cost", as: 5}', r"imports @cost as 5"),
        ('{name: "@cost", as: "@my-cost"}', r"imports @cost as '@my-cost'"),
        ('{name: "@listSize", as: ["@a"]}', r"imports @listSize as \['@a'\]"),
    ],
)
def test_a_broken_alias_of_a_cost_directive_is_a_config_error(entry, message):
    schema = f'schema @link(url: "{COST}", import: [{entry}]) {{ query: Query }}'
    with pytest.raises(ConfigError, match=message):
        names_of(schema)


def test_garbage_import_entries_that_name_neither_directive_are_ignored():
    schema = (
        f'schema @link(url: "{COST}", import: [5, null, {{}}, {{name: 5}}, {{foo: "@cost"}},'
        ' ["@cost"], true, "@key", "Import", "cost", {name: "listSize", as: "x"},'
        ' {name: "@listSize", as: "@ls", extra: 1}]) { query: Query }'
    )
    # "cost" / {name: "listSize"} without "@" would import types, not the directives
    assert names_of(schema, "cost", "ls") == ("cost", "ls")


def test_a_single_import_not_in_a_list_counts_as_a_list_of_one():
    schema = f'schema @link(url: "{COST}", import: {{name: "@cost", as: "@c"}}) {{ query: Query }}'
    assert names_of(schema, "c", "cost__listSize") == ("c", "cost__listSize")


@pytest.mark.parametrize("url", ["5", "null", "[1]", '{url: "x"}', "true", "COST"])
def test_a_link_whose_url_is_not_a_string_is_ignored(url):
    schema = f'schema @link(url: {url}, import: [{{name: "@cost", as: "@c"}}]) {{ query: Query }}'
    assert names_of(schema) == ("cost", "listSize")


def test_a_link_without_url_is_ignored():
    schema = 'schema @link(import: [{name: "@cost", as: "@c"}]) { query: Query }'
    assert names_of(schema) == ("cost", "listSize")


@pytest.mark.parametrize(
    "url",
    [
        "https://specs.apollo.dev/tag/v0.3",
        "https://specs.apollo.dev/join/v0.5",
        "https://example.com/cost/v0.1",
        "https://specs.apollo.dev.evil.example/cost/v0.1",
        "https://specs.apollo.dev/other/cost/v0.1",
        "ftp://specs.apollo.dev/cost/v0.1",
        "not a url",
        "http://[::1",  # urlsplit: invalid IPv6 URL
        "",
    ],
)
def test_a_link_to_an_unrelated_spec_is_ignored(url):
    schema = f'schema @link(url: "{url}", import: [{{name: "@cost", as: "@c"}}, "@listSize"]) {{ query: Query }}'
    assert names_of(schema) == ("cost", "listSize")


@pytest.mark.parametrize(
    "url",
    [
        "https://specs.apollo.dev/cost",
        "https://specs.apollo.dev/cost/",
        "https://specs.apollo.dev/cost/v0.1/",
        "https://specs.apollo.dev/cost/latest",
        "https://specs.apollo.dev/federation/v2",
        "https://specs.apollo.dev/federation/2.9",
    ],
)
def test_a_cost_or_federation_url_without_a_version_is_a_config_error(url):
    schema = f'schema @link(url: "{url}") {{ query: Query }}'
    with pytest.raises(ConfigError, match=r"spec URL does not end in a version"):
        names_of(schema)


def test_a_cost_link_as_that_is_not_a_name_is_a_config_error():
    schema = f'schema @link(url: "{COST}", as: "my-cost") {{ query: Query }}'
    with pytest.raises(ConfigError, match=r"as is not a GraphQL name"):
        names_of(schema)


def test_a_cost_link_as_that_is_not_a_string_is_ignored():
    schema = f'schema @link(url: "{COST}", as: 5) {{ query: Query }}'
    assert names_of(schema, "cost", "cost__listSize") == ("cost", "cost__listSize")


def test_an_unrelated_link_never_raises():
    schema = (
        'schema @link(url: "https://specs.apollo.dev/tag/v0.3", as: "not-a-name",'
        ' import: [{name: "@cost", as: 5}, {name: "@listSize", as: "noAt"}]) { query: Query }'
    )
    assert names_of(schema) == ("cost", "listSize")


def test_http_urls_and_upper_case_hosts_are_read():
    schema = 'schema @link(url: "http://SPECS.apollo.dev/cost/v0.1?x=1", import: [{name: "@cost", as: "@c"}]) { query: Query }'
    assert names_of(schema, "c", "cost__listSize") == ("c", "cost__listSize")


def test_the_link_directive_renamed_by_the_link_spec_is_followed():
    sdl = build_schema(
        "directive @mylink(url: String, as: String, import: [link__Import], for: link__Purpose)"
        " repeatable on SCHEMA\n"
        "scalar link__Import\nenum link__Purpose { SECURITY EXECUTION }\n"
        + definitions("c", "listSize")
        + 'schema @mylink(url: "https://specs.apollo.dev/link/v1.0", as: "mylink")'
        f' @mylink(url: "{COST}", import: [{{name: "@cost", as: "@c"}}, "@listSize"]) {{ query: Query }}'
        + TYPES.replace("{cost}", "c").replace("{list_size}", "listSize")
    )
    assert directive_names(sdl) == ("c", "listSize")


def test_a_name_the_schema_does_not_declare_falls_back_to_the_declared_plain_name():
    # federation__cost is not declared: no element can carry it, @cost (declared) is read.
    schema = (
        f'extend schema @link(url: "{FEDERATION}", import: ["@key"])\n'
        "directive @key(fields: String!) repeatable on OBJECT\n"
    )
    assert names_of(schema) == ("cost", "listSize")


def test_names_that_nothing_declares_stay_as_the_link_gives_them():
    sdl = build_schema(
        LINK_SDL + f'extend schema @link(url: "{FEDERATION}") type Query {{ a: Int }}'
    )
    assert directive_names(sdl) == ("federation__cost", "federation__listSize")


# --- reading the values ------------------------------------------------------------------


def weighted(weight: str) -> GraphQLSchema:
    return build_schema(
        LINK_SDL
        + "directive @myCost(weight: String) on FIELD_DEFINITION\n"
        + f'schema @link(url: "{COST}", import: [{{name: "@cost", as: "@myCost"}}]) {{ query: Query }}'
        + f" type Query {{ a: Int @myCost(weight: {weight}) }}"
    )


@pytest.mark.parametrize(
    ("weight", "expected"),
    [("20", 20.0), ('"2.0"', 2.0), ('"2.5"', 2.5), ("-3", -3.0), ("1.5", 1.5)],
)
def test_read_cost_reads_apollo_ints_and_ibm_strings(weight, expected):
    schema = weighted(weight)
    assert read_cost(field(schema, "a"), "Query.a", directive_names(schema).cost) == expected


@pytest.mark.parametrize(
    ("weight", "message"),
    [
        ('"heavy"', r"@myCost\(weight: 'heavy'\) on Query\.a is not a number"),
        ("true", r"@myCost\(weight: True\) on Query\.a is not a number"),
        ("[1]", r"@myCost\(weight: \[1\]\) on Query\.a is not a number"),
        ("{w: 1}", r"is not a number"),
        ('"inf"', r"is not a finite number"),
        ('"nan"', r"is not a finite number"),
    ],
)
def test_read_cost_refuses_what_is_not_a_number_naming_the_element(weight, message):
    schema = weighted(weight)
    with pytest.raises(ConfigError, match=message):
        read_cost(field(schema, "a"), "Query.a", "myCost")


def test_read_cost_of_a_null_weight_is_none():
    assert read_cost(field(weighted("null"), "a"), "Query.a", "myCost") is None


HOT_CHOCOLATE_SDL = """
type Query {
  books(first: Int, last: Int): BooksConnection
    @cost(weight: "10")
    @listSize(assumedSize: 50, slicingArguments: ["first", "last"], slicingArgumentDefaultValue: 10,
              sizedFields: ["edges", "nodes"], requireOneSlicingArgument: false)
}
type BooksConnection { nodes: [Book] totalCount: Int! @cost(weight: "10") }
type Book { title: String }
"""


def test_hot_chocolates_printed_list_size_builds_and_is_read():
    schema = build_schema(COST_DIRECTIVES_SDL + HOT_CHOCOLATE_SDL)
    assert read_list_size(field(schema, "books"), "Query.books") == ListSizeValues(
        assumed_size=50,
        slicing_arguments=("first", "last"),
        sized_fields=("edges", "nodes"),
        require_one_slicing_argument=False,
        slicing_argument_default_value=10,
    )
    assert read_cost(field(schema, "books"), "Query.books") == 10.0


def test_the_code_first_list_size_declares_slicing_argument_default_value():
    schema = GraphQLSchema(
        query=GraphQLObjectType("Query", {"a": GraphQLField(GraphQLInt)}),
        directives=[*specified_directives, COST_DIRECTIVE, LIST_SIZE_DIRECTIVE],
    )
    assert "slicingArgumentDefaultValue: Int" in print_schema(schema)
    assert "slicingArgumentDefaultValue: Int" in COST_DIRECTIVES_SDL


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", r"@listSize\(slicingArgumentDefaultValue: -1\) on Query\.a is negative"),
        ('"5"', r"@listSize\(slicingArgumentDefaultValue: '5'\) on Query\.a is not an integer"),
        ("true", r"slicingArgumentDefaultValue: True\) on Query\.a is not an integer"),
        ("2.5", r"is not an integer"),
    ],
)
def test_slicing_argument_default_value_must_be_a_non_negative_int(value, message):
    schema = build_schema(
        "directive @listSize(slicingArgumentDefaultValue: String) on FIELD_DEFINITION\n"
        f"type Query {{ a: [Int] @listSize(slicingArgumentDefaultValue: {value}) }}"
    )
    with pytest.raises(ConfigError, match=message):
        read_list_size(field(schema, "a"), "Query.a")


def test_read_list_size_errors_name_the_renamed_directive():
    schema = build_schema(
        LINK_SDL
        + "directive @cost__listSize(assumedSize: String) on FIELD_DEFINITION\n"
        + f'schema @link(url: "{COST}") {{ query: Query }}'
        + ' type Query { a: [Int] @cost__listSize(assumedSize: "x") }'
    )
    names = directive_names(schema)
    with pytest.raises(ConfigError, match=r"@cost__listSize\(assumedSize: 'x'\) on Query\.a"):
        read_list_size(field(schema, "a"), "Query.a", names.list_size)


# --- end to end: analyze (needs directive_names wired into the schema compiler) ----------


def test_e2e_cost_link_with_an_alias_prices_the_renamed_directive():
    schema = build_schema(
        LINK_SDL
        + definitions("myCost", "listSize")
        + f'schema @link(url: "{COST}", import: [{{name: "@cost", as: "@myCost"}}, "@listSize"]) {{ query: Query }}'
        + "type Item { id: ID }"
        + " type Query { expensive: Int @myCost(weight: 20) items: [Item] @listSize(assumedSize: 3) }"
    )
    assert analyze(schema, QUERY).cost == 23


def test_e2e_federation_prefixed_directives_are_priced():
    schema = build_schema(
        LINK_SDL
        + definitions("federation__cost", "federation__listSize")
        + f'extend schema @link(url: "{FEDERATION}", import: ["@key"])\n'
        + "directive @key(fields: String!) repeatable on OBJECT\n"
        + "type Item { id: ID }"
        + " type Query { expensive: Int @federation__cost(weight: 20)"
        + " items: [Item] @federation__listSize(assumedSize: 3) }"
    )
    assert analyze(schema, QUERY).cost == 23


def test_e2e_federation_imported_directives_are_priced():
    schema = linked(f'extend schema @link(url: "{FEDERATION}", import: ["@cost", "@listSize"])\n')
    assert analyze(schema, QUERY).cost == 23


def test_e2e_apollos_renamed_fixture_form_is_priced():
    schema = linked(
        f'schema @link(url: "{COST}", import: [{{ name: "@cost", as: "@renamedCost" }}'
        ' { name: "@listSize", as: "@renamedListSize" }]) { query: Query }\n',
        "renamedCost",
        "renamedListSize",
    )
    assert analyze(schema, QUERY).cost == 23
