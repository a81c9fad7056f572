"""The proposal: which list sizes the evidence supports changing, and why (the module
docstring of :mod:`quotaql.tune` says what each number means)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

from quotaql.cost_analysis.model import FieldCost
from quotaql.instrumentation import names
from quotaql.tune._show import count_range, count_text, edge_text, percent, printable, size_text
from quotaql.tune.evidence import Buckets, Evidence, ListEvidence, TuneError

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from quotaql.cost_analysis.model import CostModel

DEFAULT_LIST_SIZE: Final = "default_list_size"
ASSUMED_SIZE: Final = "assumed_size"
WEIGHT: Final = "weight"


@dataclass(frozen=True, slots=True)
class Options:
    """How strong the evidence must be.

    Attributes:
        quantile: a proposed size holds at least this share of the lists seen.
        min_lists: the fewest lists of a field (or of all fields on the default) that
            support a change.
        over_factor: lower a size only when it is more than this many times what the
            lists need (raising needs no factor: any size that misses ``quantile`` of the
            lists is raised).
        max_decrease: a size is lowered to no less than itself divided by this, whatever
            the evidence says (unless ``allow_decrease``): a tune run can at most halve a
            size by default, so that poisoned metrics cannot take a size to nothing at once.
        allow_decrease: lower a size as far as the evidence supports.

    Lowering a size also needs the per-subject evidence (``quotaql_list_subject_max_items``):
    it goes no lower than the ``quantile`` (at least the median) of the subjects' longest
    lists, so that a few subjects sending many short lists cannot drag it down.
    """

    quantile: float = 0.99
    min_lists: int = 100
    over_factor: float = 2.0
    max_decrease: float = 2.0
    allow_decrease: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.quantile <= 1:
            raise ValueError(f"quantile must be in (0, 1], got {self.quantile}")
        if self.min_lists < 1:
            raise ValueError(f"min_lists must be >= 1, got {self.min_lists}")
        if not self.over_factor >= 1:
            raise ValueError(f"over_factor must be >= 1, got {self.over_factor}")
        if not 1 <= self.max_decrease < math.inf:
            raise ValueError(f"max_decrease must be a number >= 1, got {self.max_decrease}")

    @property
    def subject_quantile(self) -> float:
        """The quantile of the subjects' longest lists below which no size is lowered: the
        ``quantile``, and never below the median (what an honest majority returns)."""
        return max(self.quantile, 0.5)


@dataclass(frozen=True, slots=True)
class Change:
    """One edit of ``quotaql.toml``: ``coordinate``'s ``assumed_size`` (or its ``weight``,
    by ``setting``; for ``None``, ``[cost] default_list_size``) becomes ``new``;
    ``evidence`` says why."""

    coordinate: str | None
    old: float | None
    """The size the servers assumed (for the default: the file's, or its default 10), or
    the weight the file gives (None: none, the schema's)."""
    new: float
    evidence: tuple[str, ...]
    setting: str = ASSUMED_SIZE
    """``assumed_size`` or ``weight`` (:data:`WEIGHT`)."""

    @property
    def key(self) -> str:
        if self.coordinate is None:
            return f"[cost] {DEFAULT_LIST_SIZE}"
        return f'[cost.weights."{self.coordinate}"] {self.setting}'


@dataclass(slots=True)
class Proposal:
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Findings that change nothing (too little evidence, sizes beyond the buckets, lists
    longer than their slicing argument, servers that disagree)."""
    estimates: list[str] = field(default_factory=list)
    """How the operations' estimates compare with their actual cost."""


_Direction = Literal["raise", "lower"]


@dataclass(frozen=True, slots=True)
class _Field:
    """One list field's sizes, as the proposal sees them."""

    coordinate: str
    lists: ListEvidence
    returned: Buckets
    source: Literal["file", "default", "schema"]
    current: int
    """The size the servers assumed for these lists."""
    in_file: int | None
    """Its ``assumed_size`` in the file."""

    @property
    def subjects(self) -> Buckets | None:
        """The subjects' longest lists, when any subject was counted."""
        subjects = self.lists.subjects
        return subjects if subjects is not None and subjects.total > 0 else None


def propose(evidence: Evidence, model: CostModel, options: Options | None = None) -> Proposal:
    """The changes of list sizes that ``evidence`` supports for the file ``model`` was read
    from (see the module docstring for what each number means)."""
    options = options or Options()
    proposal = Proposal(notes=list(evidence.ignored))
    default = model.default_list_size
    fields: list[_Field] = []
    for coordinate in sorted(evidence.lists):
        lists = evidence.lists[coordinate]
        found = _field(coordinate, lists, model, proposal.notes)
        if found is not None:
            fields.append(found)
    on_default = [f for f in fields if f.source == "default"]
    new_default = _propose_default(on_default, default, evidence, options, proposal)
    few = []
    for found in fields:
        # Decided against what the file will make the servers assume: the new default, the
        # file's assumed_size (which the servers may not have reloaded yet), else theirs.
        if found.source == "default" and new_default is not None:
            decided_at = new_default
        elif found.in_file is not None:
            decided_at = found.in_file
        else:
            decided_at = found.current
        if found.returned.total < options.min_lists:
            few.append(f"{found.coordinate} ({count_text(found.returned.total)})")
            continue
        target = _target(found.returned, options.quantile, _exact_max(evidence, [found]))
        if target is None:
            proposal.notes.append(_beyond_buckets(found, options.quantile))
            continue
        direction = _direction(found.returned, decided_at, target, options)
        if direction is None:
            continue
        limits: tuple[str, ...] = ()
        if direction == "lower":
            lowered = _lowered(
                found.coordinate,
                found.current,
                decided_at,
                target,
                [found],
                evidence,
                options,
                proposal.notes,
            )
            if lowered is None:
                continue
            target, limits = lowered
        proposal.changes.append(
            Change(
                found.coordinate,
                found.current,
                target,
                tuple(
                    _field_evidence(found, target, direction, evidence, options, default, limits)
                ),
            )
        )
    if few:
        proposal.notes.append(
            f"fewer than {options.min_lists} lists seen, no change proposed: {', '.join(few)}"
        )
    proposal.notes.extend(_sliced_notes(evidence, options))
    proposal.estimates.extend(_estimate_lines(evidence))
    if not evidence.lists and not evidence.estimates and not evidence.resolvers:
        proposal.notes.append(
            "no tuning metric found: do the servers sample operations for tuning, and run a"
            " quotaql that records them?"
        )
    return proposal


def _field(
    coordinate: str, lists: ListEvidence, model: CostModel, notes: list[str]
) -> _Field | None:
    if lists.returned is None or lists.returned.total <= 0:
        return None
    settings = model.weights.get(coordinate)
    in_file = settings.assumed_size if isinstance(settings, FieldCost) else None
    if lists.assumed is not None:
        low, high = lists.assumed
        if low != high:
            notes.append(
                f"{coordinate}: the servers assumed different sizes ({size_text(low)} to"
                f" {size_text(high)}): a configuration still rolling out? No change proposed."
            )
            return None
        if not high.is_integer():
            notes.append(f"{coordinate}: the servers assumed {high!r} items: not a list size")
            return None
        current = int(high)
    elif in_file is not None:
        current = in_file
    else:
        notes.append(
            f"{coordinate}: no {names.LIST_ASSUMED_ITEMS} series, and no assumed_size in the"
            " file: what the lists were priced at is unknown. No change proposed."
        )
        return None
    if in_file is not None:
        source: Literal["file", "default", "schema"] = "file"
        if current != in_file:
            notes.append(
                f"{coordinate}: the servers assumed {current} items, the file says"
                f" assumed_size = {in_file} (not reloaded yet, or another file?); the evidence"
                f" is at {current}."
            )
    elif current == model.default_list_size:
        source = "default"
    else:
        source = "schema"
    return _Field(coordinate, lists, lists.returned, source, current, in_file)


def _target(buckets: Buckets, quantile: float, longest: float | None) -> int | None:
    """The smallest finite edge holding ``quantile`` of the lists, or ``longest`` (the
    longest list, when the counts are exact) where it is below that edge: every list had at
    most that many items. None: the quantile is above the largest finite edge."""
    index = buckets.quantile_index(quantile)
    if index is None:
        return None
    edge = buckets.edges[index]
    if edge == math.inf:
        return None
    below = buckets.edges[index - 1] if index > 0 else -1.0
    if longest is not None and below < longest < edge:
        return math.ceil(longest)
    return int(edge)


def _direction(buckets: Buckets, current: int, target: int, options: Options) -> _Direction | None:
    """``raise`` when ``current`` certainly holds less than ``quantile`` of the lists,
    ``lower`` when it is more than ``over_factor`` times ``target``."""
    _, at_most_high = buckets.at_most(current)
    if current < target and at_most_high < options.quantile * buckets.total:
        return "raise"
    if current > target and current > options.over_factor * target:
        return "lower"
    return None


def _lowered(
    what: str,
    assumed: int,
    current: int,
    target: int,
    fields: Sequence[_Field],
    evidence: Evidence,
    options: Options,
    notes: list[str],
) -> tuple[int, tuple[str, ...]] | None:
    """How far ``current`` (the size the file gives) may go down towards ``target`` (what
    the lists say): no lower than the subjects' ``subject_quantile`` longest list, nor than
    ``assumed`` (what the servers priced the lists at) divided by ``max_decrease`` (without
    ``allow_decrease``: running tune again before the servers reload lowers no further);
    the size and the lines that say why. None: it stays (a note says why)."""
    pooled = [f.subjects for f in fields]
    if any(subjects is None for subjects in pooled):
        notes.append(
            f"{what}: its lists say {target} items (assumed {current}), but no subject was"
            f" counted ({names.LIST_SUBJECT_MAX_ITEMS}): a size is lowered only as far as"
            " most subjects allow, so it stays (servers of an older quotaql?)"
        )
        return None
    subjects = _pool([s for s in pooled if s is not None])
    q = options.subject_quantile
    by_subjects = _target(subjects, q, _exact_max(evidence, fields))
    count = f"{count_text(subjects.total)} subject-minutes"
    if by_subjects is None or not current > options.over_factor * max(target, by_subjects):
        most = "more than the largest bucket" if by_subjects is None else str(by_subjects)
        notes.append(
            f"{what}: its lists alone say {target} items (assumed {current}), but p{percent(q)}"
            f" of its subjects' longest lists is {most} ({count}): many short lists of a few"
            " subjects do not lower a size; it stays"
        )
        return None
    lines = []
    new = max(target, by_subjects)
    if by_subjects > target:
        lines.append(
            f"  lowered no further than p{percent(q)} of the subjects' longest lists,"
            f" {by_subjects} ({count}; the lists alone say {target})"
        )
    least = math.ceil(assumed / options.max_decrease)
    if not options.allow_decrease and new < least:
        lines.append(
            f"  lowered by at most a factor {options.max_decrease:g}: to {least}, where the"
            f" evidence says {new} (--allow-decrease lowers it all the way)"
        )
        new = least
    if new >= current:
        notes.append(
            f"{what}: the file says {current} already, as low as one run goes from the"
            f" {assumed} the servers assumed (--max-decrease {options.max_decrease:g}):"
            " run tune again once they have reloaded it"
        )
        return None
    return new, tuple(lines)


def _propose_default(
    on_default: list[_Field], default: int, evidence: Evidence, options: Options, proposal: Proposal
) -> int | None:
    """A new ``default_list_size`` when most fields on the default (at least two with
    ``min_lists`` lists each) are off the same way, and all their lists together agree."""
    supported = [f for f in on_default if f.returned.total >= options.min_lists]
    if len(supported) < 2:
        return None
    directions = []
    for found in supported:
        target = _target(found.returned, options.quantile, _exact_max(evidence, [found]))
        directions.append(
            None if target is None else _direction(found.returned, default, target, options)
        )
    for wanted in ("raise", "lower"):
        agreeing = [f for f, d in zip(supported, directions, strict=True) if d == wanted]
        if 2 * len(agreeing) <= len(supported):
            continue
        pooled = _pool([f.returned for f in on_default])
        target = _target(pooled, options.quantile, _exact_max(evidence, on_default))
        if target is None or _direction(pooled, default, target, options) != wanted:
            return None
        limits: tuple[str, ...] = ()
        if wanted == "lower":
            lowered = _lowered(
                DEFAULT_LIST_SIZE,
                default,
                default,
                target,
                on_default,
                evidence,
                options,
                proposal.notes,
            )
            if lowered is None:
                return None
            target, limits = lowered
        lines = [
            f"default_list_size {default} -> {target}: {len(agreeing)} of the"
            f" {len(supported)} list fields on the default with {options.min_lists}+ lists"
            f" need a {'larger' if wanted == 'raise' else 'smaller'} size",
            f"  fields on the default: {', '.join(f.coordinate for f in on_default)}",
            *_size_lines(pooled, None, evidence, options.quantile, max_of=on_default),
            *_subject_lines(on_default, evidence, options),
            *limits,
            *_at_lines(pooled, None, default, target, evidence, on_default),
            "  it also sizes every list field the sampled operations did not return, and"
            " those whose schema gives no size: review them with quotaql cost",
        ]
        proposal.changes.append(Change(None, default, target, tuple(lines)))
        return target
    return None


def _pool(all_buckets: Sequence[Buckets]) -> Buckets:
    edges = all_buckets[0].edges
    cumulative = [0.0] * len(edges)
    total_sum = 0.0
    for buckets in all_buckets:
        if buckets.edges != edges:  # pragma: no cover  (the evidence refuses mixed edges)
            raise TuneError("the list histograms have different buckets")
        for index, count in enumerate(buckets.cumulative):
            cumulative[index] += count
        total_sum += buckets.total_sum
    return Buckets(edges, tuple(cumulative), total_sum)


def _field_evidence(
    found: _Field,
    target: int,
    direction: _Direction,
    evidence: Evidence,
    options: Options,
    default: int,
    limits: Sequence[str] = (),
) -> Iterator[str]:
    source = {
        "file": f"assumed_size in the file (assumed_size = {found.in_file})",
        "default": f"default_list_size (default_list_size = {default})",
        "schema": "the schema (@listSize(assumedSize:), or a slicing argument's default value)",
    }[found.source]
    why = "longer" if direction == "raise" else "much shorter"
    yield (
        f"{found.coordinate}: assumed_size {found.current} -> {target}"
        f" (its lists were {why} than assumed)"
    )
    yield f"  the servers assumed {found.current} items, from {source}"
    if found.source == "schema":
        yield (
            "  an assumed_size in quotaql.toml overrides @listSize(assumedSize:), not a"
            " slicing argument's default value: if that is what sizes this field, change it"
            " in the schema instead"
        )
    yield from _size_lines(found.returned, found.lists, evidence, options.quantile)
    yield from _subject_lines([found], evidence, options)
    yield from limits
    yield from _at_lines(
        found.returned, found.lists.per_operation, found.current, target, evidence, [found]
    )


def _size_lines(
    buckets: Buckets,
    lists: ListEvidence | None,
    evidence: Evidence,
    quantile: float,
    *,
    max_of: Sequence[_Field] = (),
) -> Iterator[str]:
    longest = lists.max_returned if lists is not None else None
    if max_of:
        maxima = [f.lists.max_returned for f in max_of if f.lists.max_returned is not None]
        longest = max(maxima) if len(maxima) == len(max_of) else None
    operations = ""
    if lists is not None and lists.per_operation is not None:
        operations = f" in {count_text(lists.per_operation.total)} sampled operations"
    yield f"  lists seen: {count_text(buckets.total)}{operations}"
    percentiles = [
        f"p{percent(q)} {_quantile_text(buckets, q, longest)}"
        for q in sorted({0.5, 0.95, quantile})
    ]
    maximum = f", max {size_text(longest)}" if longest is not None else ""
    yield f"  items per list: {', '.join(percentiles)}{maximum}"
    if buckets.total > 0:
        yield f"  mean items per list: {buckets.total_sum / buckets.total:.3g}"


def _subject_lines(fields: Sequence[_Field], evidence: Evidence, options: Options) -> Iterator[str]:
    """How many subjects the lists came from, and their longest lists."""
    pooled = [f.subjects for f in fields]
    if any(subjects is None for subjects in pooled):
        yield f"  subjects: none counted ({names.LIST_SUBJECT_MAX_ITEMS})"
        return
    subjects = _pool([s for s in pooled if s is not None])
    longest = _known_max(fields)
    percentiles = [
        f"p{percent(q)} {_quantile_text(subjects, q, longest)}"
        for q in sorted({0.5, options.subject_quantile})
    ]
    yield (
        f"  subjects: {count_text(subjects.total)} subject-minutes (each subject, an address by"
        f" its network, counts once a minute); their longest lists: {', '.join(percentiles)}"
    )


def _at_lines(
    buckets: Buckets,
    per_operation: Buckets | None,
    now: int,
    target: int,
    evidence: Evidence,
    fields: Sequence[_Field],
) -> Iterator[str]:
    longest = _exact_max(evidence, fields)
    yield (
        f"  lists longer than the size (under-estimated): {_longer(buckets, now, longest)} at"
        f" {now} now, {_longer(buckets, target, longest)} at {target}"
    )
    yield (
        f"  lists shorter than the size (over-estimated): {_shorter(buckets, now)} at {now} now,"
        f" {_shorter(buckets, target)} at {target}"
    )
    if per_operation is not None:
        yield (
            "  operations with a list of this field longer than the size:"
            f" {_longer(per_operation, now, longest)} at {now} now,"
            f" {_longer(per_operation, target, longest)} at {target}"
            f" (of {count_text(per_operation.total)})"
        )


def _exact_max(evidence: Evidence, fields: Sequence[_Field]) -> float | None:
    """The longest list of ``fields``, where it bounds the counts: totals since each process
    started, as the maximum gauge is (a window's counts may come from processes that are
    gone, whose maximum no longer counts)."""
    return _known_max(fields) if evidence.exact else None


def _known_max(fields: Sequence[_Field]) -> float | None:
    maxima = [f.lists.max_returned for f in fields]
    if not maxima or any(m is None for m in maxima):
        return None
    return max(m for m in maxima if m is not None)


def _longer(buckets: Buckets, size: int, longest: float | None) -> str:
    """Observations above ``size``: exact at an edge (or when the maximum is within it)."""
    if longest is not None and longest <= size:
        return "0"
    low, high = buckets.at_most(size)
    return count_range(buckets.total - high, buckets.total - low)


def _shorter(buckets: Buckets, size: int) -> str:
    """Observations below ``size`` (whole numbers: at most ``size - 1``)."""
    if size <= 0:
        return "0"
    low, high = buckets.at_most(size - 1)
    return count_range(low, high)


def _quantile_text(buckets: Buckets, q: float, longest: float | None) -> str:
    index = buckets.quantile_index(q)
    if index is None:
        return "-"
    edges = buckets.edges
    upper = edges[index]
    lower = edges[index - 1] + 1 if index > 0 else 0.0
    if upper == math.inf:
        if longest is not None and longest >= lower:
            return f"{size_text(lower)} to {size_text(longest)}"
        return f"more than {size_text(lower - 1)}"
    if longest is not None and lower <= longest < upper:
        upper = longest
    return size_text(upper) if lower >= upper else f"{size_text(lower)} to {size_text(upper)}"


def _beyond_buckets(found: _Field, quantile: float) -> str:
    top = found.returned.edges[-2] if len(found.returned.edges) > 1 else 0
    longest = found.lists.max_returned
    seen = f" (the longest seen: {size_text(longest)})" if longest is not None else ""
    return (
        f"{found.coordinate}: p{percent(quantile)} of its lists is above {size_text(top)} items,"
        f" the largest bucket{seen}: set its assumed_size by hand"
    )


def _sliced_notes(evidence: Evidence, options: Options) -> Iterator[str]:
    for coordinate in sorted(evidence.lists):
        sliced = evidence.lists[coordinate].sliced
        if sliced is None or sliced.total <= 0:
            continue
        _, at_most_one = sliced.at_most(1.0)
        more = sliced.total - at_most_one
        if more > 0:
            yield (
                f"{coordinate}: {count_text(more)} of {count_text(sliced.total)} lists sized by a"
                " slicing argument returned more items than it asked for: the resolver does not"
                " enforce the argument, or it is not a limit (slicing_arguments); quotaql"
                " under-estimates those operations"
            )
        elif sliced.total >= options.min_lists:
            index = sliced.quantile_index(0.5)
            if index is not None and sliced.edges[index] <= 0.25:
                yield (
                    f"{coordinate}: clients ask for much more than they get (half of"
                    f" {count_text(sliced.total)} sliced lists returned at most"
                    f" {sliced.edges[index]:g} of what their argument asked for): their"
                    " estimates are pessimistic; quotaql.toml cannot change what clients ask"
                )


def _estimate_lines(evidence: Evidence) -> Iterator[str]:
    for (operation_type, tier), buckets in sorted(evidence.estimates.items()):
        if buckets.total <= 0:
            continue
        _, at_most_one = buckets.at_most(1.0)
        low, high = buckets.at_most(0.9)
        index = buckets.quantile_index(0.5)
        median = "-"
        if index is not None:
            upper = buckets.edges[index]
            lower = buckets.edges[index - 1] if index > 0 else None
            median = f"{edge_text(upper)}" if lower is None else f"{lower:g} to {edge_text(upper)}"
        yield (
            f"{printable(operation_type)} / {printable(tier)}: {count_text(buckets.total)}"
            " operations; actual cost above the estimate:"
            f" {count_text(buckets.total - at_most_one)};"
            f" at most 90% of it: {count_range(low, high)}; median actual / estimate: {median}"
        )
