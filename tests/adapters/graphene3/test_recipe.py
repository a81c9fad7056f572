"""docs/graphql-core.md on Graphene 3: the recipe, then the snippet that serves a Graphene schema.

The main environment runs each plain snippet of the page (tests/docs/test_snippets.py); the
``python graphene`` snippets continue the page, so they run here after the snippets above
them, in the same namespace.
"""

from __future__ import annotations

from tests.support.docs import ROOT, new_module, run, snippets

PAGE = ROOT / "docs" / "graphql-core.md"


def test_the_page_serves_a_graphene_schema_with_the_recipe(monkeypatch):
    page = snippets([PAGE])
    assert [snippet.needs for snippet in page] == [None, "graphene"]
    module = new_module(str(PAGE), monkeypatch)
    for snippet in page:  # the recipe on plain graphql-core (3.2 here), then on Graphene
        run(snippet.code, snippet.where, module)
    assert module.schema.__class__.__module__.startswith("graphene")
