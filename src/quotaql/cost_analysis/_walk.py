"""The walk of a plan against the ``data`` an execution returned: the actual cost.

The walk reads the response by the plan's response keys, counts the items each list
returned, and charges what an error erased (null or missing where an error's path goes)
as the plan estimated it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from quotaql.cost_analysis._compile import NO_VALUE
from quotaql.cost_analysis._nodes import MAX_NESTING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from quotaql.cost_analysis._nodes import Field, Selection

__all__ = ["ListSize", "Walker", "error_paths"]

#: One list of a response, for tuning: its coordinate, the size the pricing assumed, the
#: items it returned, and whether a slicing argument of the operation gave the assumed size.
ListSize = tuple[str, float, int, bool]

_MISSING: Any = NO_VALUE  # a key the data does not have

# The errors' paths as a tree: the keys and indexes that some error's path goes through.
_Trie = dict[str | int, "_Trie"]


def error_paths(errors: Sequence[Any]) -> _Trie | None:
    """The paths of ``errors`` as a tree of keys and indexes; None when none has a path.

    Built once, in time linear in the paths: each object of the data then looks up its
    keys in the subtree it was handed, and an object no error's path goes through has
    none (the walk below it is the walk without errors).
    """
    root: _Trie = {}
    found = False
    for error in errors:
        path = error.get("path") if isinstance(error, Mapping) else getattr(error, "path", None)
        if not isinstance(path, list | tuple):
            continue  # a request error (nothing ran), or no path to read
        found = True
        node = root
        for key in path:
            if key.__class__ is not str and key.__class__ is not int:
                break  # no key of the data: the path stops being followed here
            node = node.setdefault(key, {})
    return root if found else None


class Walker:
    """One walk of the data against the plan; ``tc`` accumulates the IBM type cost."""

    __slots__ = ("seen", "sizes", "tc")

    def __init__(self, sizes: list[ListSize] | None) -> None:
        self.tc = 0.0
        self.sizes = sizes
        # What an object costs under an interface's or a union's selection, when read
        # without __typename: the same object may be read under it from several possible
        # types of its parent (fragments on each), once is enough.
        self.seen: dict[tuple[int, int], tuple[float, float]] = {}

    def objects(
        self,
        selection: Selection,
        items: Iterable[Any],
        level: int,
        total: float = 0.0,
        errs: _Trie | None = None,
        memo: dict[int, tuple[float, float]] | None = None,
    ) -> float:
        """``total`` plus what each object of ``items`` costs under ``selection``, added
        object by object (an item that is not an object adds nothing: the field that
        returned it counted it). One call walks all the items of a list.

        ``errs`` (the errors' paths below the object) and ``memo`` are given for one
        object only. ``memo`` (one object read as several possible types) keeps each
        field's cost, so that the fields the types share are read once: nested
        interfaces without ``__typename`` stay linear."""
        if selection.by_type is not None:
            for item in items:
                if item.__class__ is dict or (item is not None and isinstance(item, Mapping)):
                    total += self._abstract(selection, item, errs, level)
            return total
        if level > MAX_NESTING:  # data nested deeper than any plan: not this plan's data
            return total
        fields = selection.fields
        sizes = self.sizes
        for obj in items:
            if obj.__class__ is not dict and (obj is None or not isinstance(obj, Mapping)):
                continue
            cost = 0.0
            for planned in fields:
                if planned.weightless:
                    continue
                if memo is not None:
                    known = memo.get(id(planned))
                    if known is not None:
                        cost += known[0]
                        self.tc += known[1]
                        continue
                    before = self.tc
                value = obj.get(planned.key, _MISSING)
                below = errs.get(planned.key) if errs is not None else None
                if below is not None:  # an error's path goes through this field
                    fc = self._erased(planned, value, below, level)
                elif value is _MISSING:
                    fc = 0.0
                else:
                    list_depth = planned.list_depth
                    inner: Sequence[Any]
                    if list_depth == 0:
                        count = 1
                        inner = (value,)
                    elif list_depth == 1 and value.__class__ is list:
                        inner = value
                        count = len(value)
                    else:
                        inner = _items(value, list_depth)
                        count = len(inner)
                    if sizes is not None and list_depth:
                        sizes.append((planned.coordinate, planned.n, count, planned.sliced))
                    # The field's own part, clamped, then what its objects cost.
                    fc = count * planned.a + planned.b
                    if not fc > 0.0:  # also NaN (0 × inf)
                        fc = 0.0
                    if planned.t:
                        self.tc += count * planned.t
                    child = planned.child
                    if child is not None and not child.weightless:
                        fc = self.objects(child, inner, level + 1, fc)
                if memo is not None:
                    memo[id(planned)] = (fc, self.tc - before)
                cost += fc
            total += cost
        return total

    def _abstract(
        self, selection: Selection, obj: Mapping[str, Any], errs: _Trie | None, level: int
    ) -> float:
        by_type = cast("dict[str, Selection]", selection.by_type)
        for key in selection.typename_keys:
            name = obj.get(key)
            if name.__class__ is str:
                found = by_type.get(name)
                if found is not None:
                    return self.objects(found, (obj,), level, 0.0, errs)
        # No __typename to read: the most any possible type makes of the object.
        seen = (id(selection), id(obj))
        if errs is None:
            known = self.seen.get(seen)
            if known is not None:
                self.tc += known[1]
                return known[0]
        best = best_tc = 0.0
        start = self.tc
        memo: dict[int, tuple[float, float]] = {}
        for variant in selection.variants:
            self.tc = start
            cost = self.objects(variant, (obj,), level, 0.0, errs, memo)
            tc = self.tc - start
            if cost > best:  # noqa: PLR1730  (max() without its call)
                best = cost
            if tc > best_tc:  # noqa: PLR1730
                best_tc = tc
        self.tc = start + best_tc
        if errs is None:
            self.seen[seen] = (best, best_tc)
        return best

    def _erased(self, planned: Field, value: Any, errs: _Trie, level: int) -> float:
        """A field some error's path goes through (``errs``: the paths below it).

        Null or missing, the error erased it: its estimate (never less than a null
        costs). Otherwise walked as usual, but a null item an error erased costs the
        item's estimate, and a field with an erased inner list (``[[T]]``) its estimate.
        """
        if value is _MISSING or value is None:
            self.tc += planned.tc
            ran = planned.a + planned.b if value is None else 0.0
            return max(planned.erased, ran)
        list_depth = planned.list_depth
        entries: list[tuple[Any, _Trie | None]]
        erased_inner = False
        if list_depth == 0 or not isinstance(value, list | tuple):
            entries = [(value, errs)]
        else:
            entries = [(item, errs.get(index)) for index, item in enumerate(value)]
            for _ in range(list_depth - 1):
                flat: list[tuple[Any, _Trie | None]] = []
                for item, below in entries:
                    if isinstance(item, list | tuple):
                        if below is None:
                            flat.extend((inner, None) for inner in item)
                        else:
                            flat.extend((inner, below.get(i)) for i, inner in enumerate(item))
                    else:
                        # Not a list: one item. Null by an error, it held items nobody
                        # can count: the field costs its estimate.
                        erased_inner |= item is None and below is not None
                        flat.append((item, None if item is None else below))
                entries = flat
        count = len(entries)
        own = count * planned.a + planned.b
        cost = own if own > 0.0 else 0.0
        self.tc += count * planned.t
        child = planned.child
        for item, below in entries:
            if child is not None and (
                item.__class__ is dict or (item is not None and isinstance(item, Mapping))
            ):
                cost = self.objects(child, (item,), level + 1, cost, below)
            elif item is None and below is not None and child is not None:
                cost += child.erased  # the item's own weight is in `own` already
                self.tc += child.tc
        if erased_inner and planned.erased > cost:
            cost = planned.erased
        return cost


def _items(value: Any, depth: int) -> Sequence[Any]:
    """The items of a list field's value, inner lists flattened down to ``depth`` lists.

    A value that is not a list where one is expected (null included) is one item; lists
    nested deeper than the type are items too (not objects: they cost ``own``).
    """
    if not isinstance(value, list | tuple):
        return (value,)
    items: Sequence[Any] = value
    for _ in range(depth - 1):
        flat: list[Any] = []
        for item in items:
            if isinstance(item, list | tuple):
                flat.extend(item)
            else:
                flat.append(item)
        items = flat
    return items
