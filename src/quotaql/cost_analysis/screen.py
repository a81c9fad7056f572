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

It also counts the pairs the overlapping-fields rule would compare (``max_field_pairs``):
in each merged selection set, the fields that share a response name pairwise, and its
fragment spreads pairwise and against the fields they are spread beside (the rule
compares every two spreads of a selection set, whatever they select, so 900 one-field
fragments spread side by side are 400,000 comparisons). Spreads are counted where they
are expanded, as fields are: an upper bound of what graphql-core 3.2 and 3.3 compare
(docs/cost-model.md, "Validation work").
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
    TooManyFieldPairs,
    TooManyFields,
    TooManyRootFields,
)

if TYPE_CHECKING:
    from graphql import ExecutableDefinitionNode, SelectionNode, SelectionSetNode

    from quotaql.cost_analysis.model import CostLimits

__all__ = ["screen"]


class _Merged:
    """A merged selection set: per response name, how many fields answer under it and
    the merged selection set of their children (None until one has children); and how
    many items the overlapping-fields rule compares a new fragment spread with (the
    spreads merged here, and the selection sets merged here, whose fields it compares
    with the spread's)."""

    __slots__ = ("items", "names")

    def __init__(self) -> None:
        self.names: dict[str, list[Any]] = {}
        self.items = 0


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
            ``TooManyFields`` (``max_fields``, ``max_repeated_fields``),
            ``TooManyFieldPairs`` (``max_field_pairs``) or ``TooManyDirectives``, with
            the location where the limit was crossed.
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
        "max_pairs",
        "max_repeated",
        "max_root",
        "operations",
        "pairs",
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
        self.pairs = 0
        self.max_depth = _limit(limits.max_depth)
        self.max_aliases = _limit(limits.max_aliases)
        self.max_root = _limit(limits.max_root_fields)
        self.max_fields = _limit(limits.max_fields)
        self.max_repeated = _limit(limits.max_repeated_fields)
        self.max_directives = _limit(limits.max_directives)
        self.max_pairs = _limit(limits.max_field_pairs)

    def run(self) -> None:
        for definition in self.operations:
            self._directives(definition)
            merged = _Merged()
            merged.items = 1  # the operation's own selection set
            self._merge(definition.selection_set, 1, (), merged)
            count = len(merged.names)  # response names: merged fields are one
            if count > self.max_root:
                raise TooManyRootFields(count, self.max_root, locations=_at(definition))
        # Fragments no operation spreads are still validated: each once, as a root.
        for name, fragment in self.fragments.items():
            if name not in self.reached:
                self.reached.add(name)
                self._directives(fragment)
                merged = _Merged()
                merged.items = 1
                self._merge(fragment.selection_set, 1, (name,), merged)

    def _compare(self, count: int, node: SelectionNode) -> None:
        """The overlapping-fields rule compares ``count`` more pairs."""
        self.pairs += count
        if self.pairs > self.max_pairs:
            raise TooManyFieldPairs(
                self.pairs, self.max_pairs, partial=True, locations=_at(node),
                message="Validating the document would compare more than"
                f" {self.max_pairs} pairs of fields and fragments",
            )  # fmt: skip

    def _merge(
        self,
        selection_set: SelectionSetNode,
        depth: int,
        stack: tuple[str, ...],
        merged: _Merged,
    ) -> None:
        """Count the selections of one selection set, merged with the fragments it spreads.

        As graphql-core's overlapping-fields rule merges them: the fields that share a
        response name are one field whose selections are all theirs together, so that
        ``{ a { b } a { b } }`` repeats ``b`` twice in one merged selection set (25 copies
        of a field, each repeating a child 19 times, are 475 repeats of that child).

        The pairs the rule compares: a field with the response name of ``k`` earlier
        ones, ``k`` pairs; a fragment spread, one pair with each spread and each
        selection set merged before it (``{ a { ...F } a { ...G } }`` compares ``F``
        with ``G`` and each with the other ``a``'s fields).
        """
        names = merged.names
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
                entry = names.get(key)
                if entry is None:
                    entry = names[key] = [0, None]
                count = entry[0] = entry[0] + 1
                if count > self.max_repeated:
                    raise TooManyFields(
                        count, self.max_repeated, partial=True, locations=_at(selection),
                        message=f"One selection set selects {key!r} more than"
                        f" {self.max_repeated} times",
                    )  # fmt: skip
                if count > 1:
                    self._compare(count - 1, selection)
                if depth > self.max_depth:
                    raise QueryTooDeep(
                        depth, self.max_depth, partial=True, locations=_at(selection)
                    )
                if selection.selection_set is not None:  # merged with its namesakes'
                    below = entry[1]
                    if below is None:
                        below = entry[1] = _Merged()
                    if below.items:
                        self._compare(below.items, selection)
                    below.items += 1
                    self._merge(selection.selection_set, depth + 1, stack, below)
            elif isinstance(selection, InlineFragmentNode):
                self._merge(selection.selection_set, depth, stack, merged)
            elif isinstance(selection, FragmentSpreadNode):
                # Compared even when unknown (graphql-core 3.2 compares spreads by name).
                self._compare(merged.items, selection)
                merged.items += 1
                name = selection.name.value
                fragment = self.fragments.get(name)
                if fragment is None or name in stack:
                    continue  # unknown, or a cycle: validation reports both
                if name not in self.reached:
                    self.reached.add(name)
                    self._directives(fragment)
                self._merge(fragment.selection_set, depth, (*stack, name), merged)

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
