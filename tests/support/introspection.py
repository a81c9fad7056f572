"""The introspection queries that tools send, which the default limits must let through.

- ``strawberry``: what ``strawberry.Schema.introspect()`` runs (graphql-core's
  ``get_introspection_query()``, defaults), and graphql-core's query with every option on
  (the deepest ``TypeRef``: nine ``ofType`` levels).
- ``graphiql``: the shape GraphiQL sends (graphql-js 16's ``getIntrospectionQuery`` with
  ``inputValueDeprecation``: a ``TypeRef`` seven ``ofType`` levels deep).
- ``apollo``: the shape Apollo's tools send (Sandbox and Rover: deprecated arguments and
  input fields included, ``specifiedByURL``, ``isOneOf``, ``isRepeatable``).
"""

from __future__ import annotations

from graphql import get_introspection_query


def _type_ref(levels: int) -> str:
    inner = "kind name"
    for _ in range(levels):
        inner = f"kind name ofType {{ {inner} }}"
    return f"fragment TypeRef on __Type {{ {inner} }}"


def _query(schema_fields: str, type_fields: str, directive_fields: str, levels: int) -> str:
    """A full introspection query: what the tool adds to ``__schema``, to ``__Type`` and to
    ``__Directive``, and how deep its ``TypeRef`` goes."""
    return f"""
query IntrospectionQuery {{
  __schema {{
    {schema_fields}
    queryType {{ name }}
    mutationType {{ name }}
    subscriptionType {{ name }}
    types {{ ...FullType }}
    directives {{
      name
      description
      {directive_fields}
      locations
      args(includeDeprecated: true) {{ ...InputValue }}
    }}
  }}
}}
fragment FullType on __Type {{
  kind
  name
  description
  {type_fields}
  fields(includeDeprecated: true) {{
    name
    description
    args(includeDeprecated: true) {{ ...InputValue }}
    type {{ ...TypeRef }}
    isDeprecated
    deprecationReason
  }}
  inputFields(includeDeprecated: true) {{ ...InputValue }}
  interfaces {{ ...TypeRef }}
  enumValues(includeDeprecated: true) {{ name description isDeprecated deprecationReason }}
  possibleTypes {{ ...TypeRef }}
}}
fragment InputValue on __InputValue {{
  name
  description
  type {{ ...TypeRef }}
  defaultValue
  isDeprecated
  deprecationReason
}}
{_type_ref(levels)}
"""


GRAPHIQL = _query("", "", "", 7)
APOLLO = _query("description", "specifiedByURL isOneOf", "isRepeatable", 9)

INTROSPECTION_QUERIES = {
    "strawberry": get_introspection_query(),
    "graphql-core-all-options": get_introspection_query(
        descriptions=True,
        specified_by_url=True,
        directive_is_repeatable=True,
        schema_description=True,
        input_value_deprecation=True,
    ),
    "graphiql": GRAPHIQL,
    "apollo": APOLLO,
}
