"""``--schema SPEC`` of the ``quotaql`` command: an SDL file, or ``MODULE:ATTR``."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphql import (
    DirectiveDefinitionNode,
    DocumentNode,
    GraphQLError,
    GraphQLSchema,
    Source,
    build_ast_schema,
    parse,
    validate_schema,
)
from graphql.validation.validate import validate_sdl

from quotaql.cost_analysis._compile import graphql_schema
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import ModuleType

__all__ = ["SDL_SUFFIXES", "SchemaSpecError", "load_schema"]

SDL_SUFFIXES = (".graphql", ".graphqls", ".gql")

_COST_DIRECTIVES = parse(COST_DIRECTIVES_SDL)


class SchemaSpecError(Exception):
    """A ``--schema`` value that does not lead to a schema (reported as a usage error)."""


def load_schema(spec: str) -> GraphQLSchema:
    """The schema named by ``spec``: an SDL file, or ``MODULE:ATTR`` in an importable module.

    ``ATTR`` may be a dotted path (``pkg.app:api.schema``); it names a
    ``graphql.GraphQLSchema``, a ``strawberry.Schema``, or a function without arguments
    that returns one. The working directory is importable, as with ``python -m``.

    Raises:
        SchemaSpecError: the file or module cannot be read, or does not hold a valid schema.
    """
    if spec.endswith(SDL_SUFFIXES):
        schema = _schema_from_sdl(Path(spec))
    elif ":" in spec:
        schema = _schema_from_object(spec)
    else:
        raise SchemaSpecError(
            f"{spec!r} is neither MODULE:ATTR nor a schema file ({', '.join(SDL_SUFFIXES)})"
        )
    errors = validate_schema(schema)
    if errors:
        raise SchemaSpecError(f"{spec}: invalid schema: {_join(e.message for e in errors)}")
    return schema


def _schema_from_sdl(path: Path) -> GraphQLSchema:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise SchemaSpecError(f"cannot read {path}: {reason}") from exc
    try:
        document = _with_cost_directives(parse(Source(text, str(path))))
    except GraphQLError as exc:
        raise SchemaSpecError(_located(path, exc)) from exc
    errors = validate_sdl(document)
    if errors:
        raise SchemaSpecError(_join(_located(path, error) for error in errors))
    return build_ast_schema(document, assume_valid_sdl=True)


def _with_cost_directives(document: DocumentNode) -> DocumentNode:
    """Declare ``@cost`` and ``@listSize`` unless the SDL does, keeping its line numbers."""
    declared = _directive_names(document)
    missing = [
        definition
        for definition in _COST_DIRECTIVES.definitions
        if isinstance(definition, DirectiveDefinitionNode) and definition.name.value not in declared
    ]
    return DocumentNode(definitions=(*missing, *document.definitions), loc=document.loc)


def _directive_names(document: DocumentNode) -> set[str]:
    return {
        definition.name.value
        for definition in document.definitions
        if isinstance(definition, DirectiveDefinitionNode)
    }


def _located(path: Path, error: GraphQLError) -> str:
    where = "".join(f":{loc.line}:{loc.column}" for loc in (error.locations or ())[:1])
    return f"{path}{where}: {error.message}"


def _schema_from_object(spec: str) -> GraphQLSchema:
    module_name, _, attribute = spec.partition(":")
    if not _is_dotted_name(module_name) or not _is_dotted_name(attribute):
        raise SchemaSpecError(f"{spec!r} is not MODULE:ATTR (like 'myapp.schema:schema')")
    target: Any = _import(module_name, spec)
    owner = f"module {module_name!r}"
    for name in attribute.split("."):
        try:
            target = getattr(target, name)
        except AttributeError:
            raise SchemaSpecError(f"{spec}: {owner} has no attribute {name!r}") from None
        owner = repr(name)
    if not _is_schema(target) and callable(target):
        target = target()
    if not _is_schema(target):
        raise SchemaSpecError(
            f"{spec} is of type {type(target).__name__!r}, not a graphql.GraphQLSchema or a"
            " strawberry.Schema (or a function returning one)"
        )
    return graphql_schema(target)


def _import(module_name: str, spec: str) -> ModuleType:
    # Like `python -m` and uvicorn: modules in the working directory are importable.
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only the module named by the spec (or a parent package) is the user's mistake;
        # a missing import inside their module keeps its traceback.
        if exc.name is None or not f"{module_name}.".startswith(f"{exc.name}."):
            raise
        raise SchemaSpecError(f"{spec}: no module named {exc.name!r}") from None


def _is_dotted_name(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def _is_schema(value: object) -> bool:
    try:
        graphql_schema(value)
    except TypeError:
        return False
    return True


def _join(messages: Iterable[str]) -> str:
    return "; ".join(messages)
