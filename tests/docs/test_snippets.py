"""Every Python snippet in the README and docs/ runs, so the docs cannot rot."""

from __future__ import annotations

import pytest

from tests.support.docs import FILE, NEEDS, new_module, run, snippets

ALL = snippets()
# The ones this environment runs; tests/adapters/graphene3 runs those that need Graphene.
SNIPPETS = [snippet for snippet in ALL if snippet.needs is None]


def test_the_docs_have_python_snippets():
    assert len(SNIPPETS) >= 2


def test_every_snippet_needs_something_a_test_environment_has():
    # A misspelt fence (```python grapehne) would otherwise be run by no environment.
    assert [
        snippet.where
        for snippet in ALL
        if snippet.needs not in NEEDS and not (snippet.needs or "").startswith(FILE)
    ] == []


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[snippet.where for snippet in SNIPPETS])
def test_snippet_runs(snippet, monkeypatch):
    run(snippet.code, snippet.where, new_module(snippet.where, monkeypatch))
