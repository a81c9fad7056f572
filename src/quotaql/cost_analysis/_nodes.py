"""The nodes of a plan: a :class:`Field` per response key, a :class:`Selection` per selection set.

Each node is built bottom-up, once, and holds what its subtree costs: the field cost
``fc``, the IBM type cost ``tc``, the estimate of what may have run below an error that
erased it, its depth and its aliases. A plan makes one node per field of the operation, so
the nodes have no ``__init__``: :func:`new_field`, :func:`new_selection` and
:func:`abstract_selection` make them and set their slots (one Python frame less each), and
the selections of fields that cost nothing are shared (:data:`FREE`, :func:`free_selection`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from graphql import FieldNode

    from quotaql.cost_analysis._compile import CompiledField

__all__ = [
    "EMPTY",
    "FREE",
    "MAX_NESTING",
    "Field",
    "Selection",
    "abstract_selection",
    "free_selection",
    "new_field",
    "new_selection",
]

# Selection sets nested deeper than this (fields, inline fragments and fragment spreads
# together) are refused whatever the limits say: planning recurses once per level.
MAX_NESTING = 256


class Field:
    """One response key of a selection set: the field nodes ``CollectFields`` merges.

    Made by :func:`new_field` (one call per field planned: no ``__init__`` frame).
    """

    __slots__ = (
        "a",
        "aliases",
        "b",
        "child",
        "coordinate",
        "depth",
        "erased",
        "fc",
        "key",
        "list_depth",
        "n",
        "node",
        "own",
        "sliced",
        "t",
        "tc",
        "weightless",
    )
    key: str
    node: FieldNode
    coordinate: str
    a: float
    b: float
    t: float
    n: float
    sliced: bool
    list_depth: int
    child: Selection | None
    own: float
    fc: float
    erased: float
    tc: float
    depth: int
    aliases: int
    weightless: bool


def new_field(
    key: str,
    node: FieldNode,
    compiled: CompiledField,
    n: float,
    sliced: bool,
    args: float,
    child: Selection | None,
    aliased: bool,
) -> Field:
    """The plan of one response key: ``n`` its list size, ``args`` what its arguments and
    directives cost, ``child`` its selections (None for a leaf)."""
    planned = Field()
    planned.key = key
    planned.node = node  # for error locations only
    planned.coordinate = compiled.coordinate
    # own(k items) = max(0, k × a + b); type cost k × t (t is 0 under apollo).
    planned.a = a = compiled.a
    planned.b = b = compiled.b + args
    planned.t = t = compiled.t
    planned.n = n
    planned.sliced = sliced
    planned.list_depth = list_depth = compiled.list_depth
    planned.child = child
    own = n * a + b
    if not own > 0.0:  # also NaN (0 × inf)
        own = 0.0
    planned.own = own  # its own part, clamped: what by_coordinate attributes to it
    if child is None:
        fc = erased = own
        tc = n * t if t else 0.0
        depth = 1
        aliases = 1 if aliased else 0
        weightless = not a and not b and not t
    else:
        # 0 × an overflowing (infinite) subtree is NaN: nothing runs, it costs 0.
        child_fc = child.fc
        below = n * child_fc if child_fc else 0.0
        fc = own + below if below >= 0.0 else own
        # What may have run below an error that erased this field: as fc, but a list
        # sized 0 may still have returned null (one item, its own weight).
        erased = fc
        child_erased = child.erased
        if child_erased != child_fc:
            below = n * child_erased
            erased = own + below if below >= 0.0 else own
        child_tc = child.tc
        tc = n * (t + child_tc) if t or child_tc else 0.0
        depth = 1 + child.depth
        aliases = (1 if aliased else 0) + child.aliases
        weightless = not a and not b and not t and child.weightless
    if list_depth and n < 1.0:
        erased += max(0.0, a + b - own)
    planned.fc = fc
    planned.erased = erased
    planned.tc = 0.0 if tc != tc else tc  # noqa: PLR0124  (NaN, 0 × inf: nothing runs)
    planned.depth = depth
    planned.aliases = aliases
    planned.weightless = weightless
    return planned


class Selection:
    """What a selection set runs on one parent type.

    ``fields`` when every possible type runs the same fields (made by
    :func:`new_selection`); on an interface or a union whose fragments narrow by type
    (made by :func:`abstract_selection`), ``by_type`` gives each possible type its own
    selection and ``variants`` the distinct ones.
    """

    __slots__ = (
        "aliases",
        "by_type",
        "depth",
        "erased",
        "fc",
        "fields",
        "tc",
        "typename_keys",
        "variants",
        "weightless",
    )
    fields: Sequence[Field]
    by_type: dict[str, Selection] | None
    typename_keys: tuple[str, ...]
    variants: tuple[Selection, ...]
    fc: float
    erased: float
    tc: float
    depth: int
    aliases: int
    weightless: bool


def new_selection(fields: Sequence[Field], leaves: int, leaf_aliases: int) -> Selection:
    """The selection of ``fields``, beside ``leaves`` fields that cost nothing whatever
    they return (``__typename``, scalars of weight 0 without costed arguments), left out
    of ``fields`` but counted for depth and aliases (``leaf_aliases`` of them aliased)."""
    selection = Selection()
    selection.fields = fields
    selection.by_type = None
    selection.typename_keys = ()
    selection.variants = ()
    fc = tc = erased = 0.0
    depth = 1 if leaves else 0
    aliases = leaf_aliases
    weightless = True
    for planned in fields:
        fc += planned.fc
        erased += planned.erased
        tc += planned.tc
        if planned.depth > depth:  # noqa: PLR1730  (hot: no call)
            depth = planned.depth
        aliases += planned.aliases
        weightless = weightless and planned.weightless
    selection.fc = fc
    selection.tc = tc
    selection.depth = depth
    selection.erased = erased
    selection.aliases = aliases
    selection.weightless = weightless
    return selection


def abstract_selection(by_type: dict[str, Selection], typename_keys: tuple[str, ...]) -> Selection:
    """The selection of an interface or a union whose possible types run selections of
    their own (``by_type``); ``typename_keys``: the response keys only ``__typename``
    answers, to tell an object's type by."""
    selection = Selection()
    selection.fields = ()
    selection.by_type = by_type
    selection.typename_keys = typename_keys
    variants = selection.variants = tuple({id(v): v for v in by_type.values()}.values())
    selection.fc = max((v.fc for v in variants), default=0.0)
    selection.erased = max((v.erased for v in variants), default=0.0)
    selection.tc = max((v.tc for v in variants), default=0.0)
    selection.depth = max((v.depth for v in variants), default=0)
    selection.aliases = max((v.aliases for v in variants), default=0)
    selection.weightless = all(v.weightless for v in variants)
    return selection


EMPTY = new_selection((), 0, 0)
# Selections of free fields only, by their counts (they differ in nothing else): shared.
# FREE[n]: n of them, none aliased (the common case, read at once); the others, in _FREE.
FREE = (EMPTY, *(new_selection((), leaves, 0) for leaves in range(1, 64)))
_FREE: dict[tuple[int, int], Selection] = {}


def free_selection(leaves: int, aliases: int) -> Selection:
    """The selection of ``leaves`` fields that cost nothing, ``aliases`` of them aliased."""
    if not aliases and leaves < len(FREE):
        return FREE[leaves]
    found = _FREE.get((leaves, aliases))
    if found is None:
        found = new_selection((), leaves, aliases)
        if len(_FREE) < 1_024:
            _FREE[leaves, aliases] = found
    return found
