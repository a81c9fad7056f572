"""The static pass: a parsed document's shape checked before graphql-core validates it.

Validation is where a small hostile document costs a server most: graphql-core's
overlapping-fields rule compares every pair of fields that share a response name, so a
few kilobytes of conflicting aliases keep a worker busy for a second. :func:`screen`
walks the document once, fragments expanded where they are spread, and stops at the
first limit crossed: the work it does is bounded by the limits themselves, whatever the
document (a fragment spread a thousand times costs at most ``max_fields`` visits).

It needs no schema and no variables: it counts what the document writes (a field under
``@skip(if: true)`` counts too), so it is an upper bound of what the analyzer measures
later with the variables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    OperationDefinitionNode,
)

from quotaql.errors import (
    QueryTooDeep,
    TooManyAliases,
    TooManyDirectives,
    TooManyFields,
    TooManyRootFields,
)

if TYPE_CHECKING:
    from graphql import ExecutableDefinitionNode, SelectionNode, SelectionSetNode

    from quotaql.cost_analysis.model import CostLimits

__all__ = ["screen"]

# Per response name of a merged selection set: how many fields answer under it, and the
# merged selection set of their children.
_Names = dict[str, list[Any]]

_UNLIMITED = 1 << 62


def screen(document: DocumentNode, limits: CostLimits) -> None:
    """Check the shape of every operation and fragment of ``document`` against ``limits``.

    Example:
        >>> from graphql import parse
        >>> from quotaql.cost_analysis.model import CostLimits
        >>> screen(parse("{ a b c }"), CostLimits(max_fields=3))
        >>> screen(parse("{ a b c d }"), CostLimits(max_fields=3))
        Traceback (most recent call last):
        ...
        quotaql.errors.TooManyFields: The document selects more than 3 fields

    Raises:
        LimitExceeded: ``QueryTooDeep``, ``TooManyAliases``, ``TooManyRootFields``,
            ``TooManyFields`` (``max_fields``, ``max_repeated_fields``) or
            ``TooManyDirectives``, with the location where the limit was crossed.
    """
    _Screen(document, limits).run()


class _Screen:
    __slots__ = (
        "aliases",
        "fields",
        "fragments",
        "max_aliases",
        "max_depth",
        "max_directives",
        "max_fields",
        "max_repeated",
        "max_root",
        "operations",
        "reached",
    )

    def __init__(self, document: DocumentNode, limits: CostLimits) -> None:
        self.operations: list[OperationDefinitionNode] = []
        self.fragments: dict[str, FragmentDefinitionNode] = {}
        for definition in document.definitions:
            if isinstance(definition, OperationDefinitionNode):
                self.operations.append(definition)
            elif isinstance(definition, FragmentDefinitionNode):
                self.fragments[definition.name.value] = definition
        self.reached: set[str] = set()
        self.fields = 0
        self.aliases = 0
        self.max_depth = _limit(limits.max_depth)
        self.max_aliases = _limit(limits.max_aliases)
        self.max_root = _limit(limits.max_root_fields)
        self.max_fields = _limit(limits.max_fields)
        self.max_repeated = _limit(limits.max_repeated_fields)
        self.max_directives = _limit(limits.max_directives)

    def run(self) -> None:
        for definition in self.operations:
            self._directives(definition)
            names: _Names = {}
            self._merge(definition.selection_set, 1, (), names)
            if len(names) > self.max_root:  # response names: merged fields are one
                raise TooManyRootFields(len(names), self.max_root, locations=_at(definition))
        # Fragments no operation spreads are still validated: each once, as a root.
        for name, fragment in self.fragments.items():
            if name not in self.reached:
                self.reached.add(name)
                self._directives(fragment)
                self._merge(fragment.selection_set, 1, (name,), {})

    def _merge(
        self,
        selection_set: SelectionSetNode,
        depth: int,
        stack: tuple[str, ...],
        names: _Names,
    ) -> None:
        """Count the selections of one selection set, merged with the fragments it spreads.

        As graphql-core's overlapping-fields rule merges them: the fields that share a
        response name are one field whose selections are all theirs together, so that
        ``{ a { b } a { b } }`` repeats ``b`` twice in one merged selection set (25 copies
        of a field, each repeating a child 19 times, are 475 repeats of that child).
        """
        for selection in selection_set.selections:
            if selection.directives:
                self._directives(selection)
            if isinstance(selection, FieldNode):
                self.fields += 1
                if self.fields > self.max_fields:
                    raise TooManyFields(
                        self.fields, self.max_fields, partial=True, locations=_at(selection),
                        message=f"The document selects more than {self.max_fields} fields",
                    )  # fmt: skip
                alias = selection.alias
                if alias is not None:
                    self.aliases += 1
                    if self.aliases > self.max_aliases:
                        raise TooManyAliases(
                            self.aliases, self.max_aliases, partial=True, locations=_at(selection)
                        )
                key = (alias or selection.name).value
                merged = names.get(key)
                if merged is None:
                    merged = names[key] = [0, {}]
                count = merged[0] = merged[0] + 1
                if count > self.max_repeated:
                    raise TooManyFields(
                        count, self.max_repeated, partial=True, locations=_at(selection),
                        message=f"One selection set selects {key!r} more than"
                        f" {self.max_repeated} times",
                    )  # fmt: skip
                if depth > self.max_depth:
                    raise QueryTooDeep(
                        depth, self.max_depth, partial=True, locations=_at(selection)
                    )
                if selection.selection_set is not None:  # merged with its namesakes'
                    self._merge(selection.selection_set, depth + 1, stack, merged[1])
            elif isinstance(selection, InlineFragmentNode):
                self._merge(selection.selection_set, depth, stack, names)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                fragment = self.fragments.get(name)
                if fragment is None or name in stack:
                    continue  # unknown, or a cycle: validation reports both
                if name not in self.reached:
                    self.reached.add(name)
                    self._directives(fragment)
                self._merge(fragment.selection_set, depth, (*stack, name), names)

    def _directives(self, node: SelectionNode | ExecutableDefinitionNode) -> None:
        count = len(node.directives or ())
        if count > self.max_directives:
            raise TooManyDirectives(count, self.max_directives, locations=_at(node))


def _limit(value: int | None) -> int:
    return _UNLIMITED if value is None else value


def _at(node: object) -> tuple[tuple[int, int], ...]:
    loc = getattr(node, "loc", None)
    start = getattr(loc, "start_token", None)
    if start is None:
        return ()
    return ((start.line, start.column),)
