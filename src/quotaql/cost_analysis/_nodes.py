"""The nodes of a plan: a :class:`Field` per response key, a :class:`Selection` per selection set.

Each node is built bottom-up, once, and holds what its subtree costs: the field cost
``fc``, the IBM type cost ``tc``, the estimate of what may have run below an error that
erased it, its depth and its aliases.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graphql import FieldNode

    from quotaql.cost_analysis._compile import CompiledField

__all__ = ["EMPTY", "MAX_NESTING", "Field", "Selection", "free_selection"]

# Selection sets nested deeper than this (fields, inline fragments and fragment spreads
# together) are refused whatever the limits say: planning recurses once per level.
MAX_NESTING = 256


class Field:
    """One response key of a selection set: the field nodes ``CollectFields`` merges."""

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

    def __init__(
        self,
        key: str,
        node: FieldNode,
        compiled: CompiledField,
        n: float,
        sliced: bool,
        args: float,
        child: Selection | None,
        aliased: bool,
    ) -> None:
        self.key = key
        self.node = node  # for error locations only
        self.coordinate = compiled.coordinate
        # own(k items) = max(0, k × a + b); type cost k × t (t is 0 under apollo).
        self.a = compiled.a
        self.b = compiled.b + args
        self.t = compiled.t
        self.n = n
        self.sliced = sliced
        self.list_depth = compiled.list_depth
        self.child = child
        own = n * self.a + self.b
        if not own > 0.0:  # also NaN (0 × inf)
            own = 0.0
        self.own = own  # its own part, clamped: what by_coordinate attributes to it
        child_fc = child.fc if child is not None else 0.0
        child_tc = child.tc if child is not None else 0.0
        # 0 × an overflowing (infinite) subtree is NaN: nothing runs, it costs 0.
        below = n * child_fc if child_fc else 0.0
        self.fc = own + below if below >= 0.0 else own
        # What may have run below an error that erased this field: as fc, but a list
        # sized 0 may still have returned null (one item, its own weight).
        erased = self.fc
        if child is not None and child.erased != child_fc:
            below = n * child.erased
            erased = own + below if below >= 0.0 else own
        if self.list_depth and n < 1.0:
            erased += max(0.0, self.a + self.b - own)
        self.erased = erased
        if self.t or child_tc:
            types = n * (self.t + child_tc)
            self.tc = 0.0 if math.isnan(types) else types
        else:
            self.tc = 0.0
        self.depth = 1 + (child.depth if child is not None else 0)
        self.aliases = (1 if aliased else 0) + (child.aliases if child is not None else 0)
        self.weightless = (
            not self.a and not self.b and not self.t and (child is None or child.weightless)
        )


class Selection:
    """What a selection set runs on one parent type.

    ``fields`` when every possible type runs the same fields; on an interface or a union
    whose fragments narrow by type, ``by_type`` gives each possible type its own
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
    fc: float
    erased: float
    tc: float
    depth: int
    aliases: int
    weightless: bool

    def __init__(
        self,
        fields: tuple[Field, ...],
        by_type: dict[str, Selection] | None = None,
        typename_keys: tuple[str, ...] = (),
        leaves: int = 0,
        leaf_aliases: int = 0,
    ) -> None:
        """``leaves`` and ``leaf_aliases``: fields that cost nothing whatever they return
        (``__typename``, scalars of weight 0 without costed arguments), left out of
        ``fields`` but counted for depth and aliases."""
        self.fields = fields
        self.by_type = by_type
        self.typename_keys = typename_keys
        if by_type is None:
            self.variants: tuple[Selection, ...] = ()
            fc = tc = erased = 0.0
            depth = 1 if leaves else 0
            aliases = leaf_aliases
            weightless = True
            for planned in fields:
                fc += planned.fc
                erased += planned.erased
                tc += planned.tc
                depth = max(depth, planned.depth)
                aliases += planned.aliases
                weightless = weightless and planned.weightless
            self.fc, self.tc, self.depth, self.erased = fc, tc, depth, erased
            self.aliases, self.weightless = aliases, weightless
        else:
            variants = self.variants = tuple({id(v): v for v in by_type.values()}.values())
            self.fc = max((v.fc for v in variants), default=0.0)
            self.erased = max((v.erased for v in variants), default=0.0)
            self.tc = max((v.tc for v in variants), default=0.0)
            self.depth = max((v.depth for v in variants), default=0)
            self.aliases = max((v.aliases for v in variants), default=0)
            self.weightless = all(v.weightless for v in variants)


EMPTY = Selection(())
# Selections of free fields only, by their counts (they differ in nothing else): shared.
_FREE: dict[tuple[int, int], Selection] = {}


def free_selection(leaves: int, aliases: int) -> Selection:
    """The selection of ``leaves`` fields that cost nothing, ``aliases`` of them aliased."""
    if not leaves:
        return EMPTY
    found = _FREE.get((leaves, aliases))
    if found is None:
        found = Selection((), leaves=leaves, leaf_aliases=aliases)
        if len(_FREE) < 1_024:
            _FREE[leaves, aliases] = found
    return found
