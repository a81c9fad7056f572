"""Weights from measured resolver time (``quotaql tune --weights``): each field's weight in
proportion to the time its resolver takes per call, relative to a reference field.

What the numbers are (docs/tuning.md "Weights from measured resolver time" says it for
users):

- ``quotaql_resolver_seconds{coordinate}`` (the sampled operations' calls: its count the
  calls, its sum their seconds) gives a field's mean seconds per call, exact.
- ``quotaql_resolver_subject_seconds{coordinate}`` gives, per subject and minute, that
  subject's mean seconds per call: what most subjects saw. A field's mean is used only when
  it lies within the buckets of the middle half of its subjects (their p25 to p75): when a
  few subjects' calls (slow ones, or very many) pull it outside, no weight is proposed for
  it (a note says why), and when it is the reference's, no weight at all.
- The reference is ``--reference Type.field``, or else the field with the most calls among
  those with a weight above 0 and enough evidence (the first by name of equals); its weight
  is the file's (1 when the file gives none: the weight of a field returning an object
  type). A field's weight is the reference's times its mean per call over the reference's,
  to two significant digits (a whole number from 10 up).
- A weight is proposed where it differs from the file's by more than ``over_factor``
  (either way), or, for a field the file gives no weight, where it is above
  ``over_factor`` points; it is lowered by at most ``max_decrease`` per run (unless
  ``allow_decrease``), as list sizes are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from quotaql.cost_analysis.model import FieldCost
from quotaql.instrumentation import names
from quotaql.tune._show import count_text, printable
from quotaql.tune.evidence import TuneError
from quotaql.tune.proposal import WEIGHT, Change

if TYPE_CHECKING:
    from collections.abc import Iterator

    from quotaql.cost_analysis.model import CostModel
    from quotaql.tune.evidence import Buckets, Evidence, ResolverEvidence
    from quotaql.tune.proposal import Proposal

MIDDLE: Final = (0.25, 0.75)
"""The subjects whose mean per call bounds a field's: the middle half of them."""
_SLACK: Final = 1e-9  # a sum of floats divided by a count may miss an edge by a rounding


@dataclass(frozen=True, slots=True)
class WeightOptions:
    """How strong the evidence for a weight must be.

    Attributes:
        reference: the field whose time per call is worth its weight (``Type.field``);
            None: the field with the most calls (see the module docstring).
        min_calls: the fewest calls of a field (and of the reference) that support a weight.
        min_subjects: the fewest subject-minutes of a field that support a weight.
        over_factor: propose a weight only when it differs from the file's by more than
            this factor (or, without one in the file, is above this many points).
        max_decrease: a weight is lowered to no less than itself divided by this (unless
            ``allow_decrease``).
        allow_decrease: lower a weight as far as the evidence supports.
    """

    reference: str | None = None
    min_calls: int = 100
    min_subjects: int = 10
    over_factor: float = 2.0
    max_decrease: float = 2.0
    allow_decrease: bool = False

    def __post_init__(self) -> None:
        if self.min_calls < 1:
            raise ValueError(f"min_calls must be >= 1, got {self.min_calls}")
        if self.min_subjects < 1:
            raise ValueError(f"min_subjects must be >= 1, got {self.min_subjects}")
        if not self.over_factor >= 1:
            raise ValueError(f"over_factor must be >= 1, got {self.over_factor}")
        if not 1 <= self.max_decrease < math.inf:
            raise ValueError(f"max_decrease must be a number >= 1, got {self.max_decrease}")


@dataclass(frozen=True, slots=True)
class _Timed:
    """One field whose evidence holds: its mean seconds per call, and how it was judged."""

    coordinate: str
    per_call: float
    calls: float
    lines: tuple[str, ...]


def propose_weights(
    evidence: Evidence, model: CostModel, proposal: Proposal, options: WeightOptions | None = None
) -> None:
    """Add to ``proposal`` the weights ``evidence`` supports for the file ``model`` was read
    from (and the notes of the fields it does not)."""
    options = options or WeightOptions()
    notes = proposal.notes
    if not evidence.resolvers:
        notes.append(
            f"no resolver time found ({names.RESOLVER_SECONDS}): do the servers sample"
            " operations for tuning ([cost] tuning_sample), with a quotaql that times them?"
        )
        return
    timed: dict[str, _Timed] = {}
    for coordinate in sorted(evidence.resolvers):
        found = _judged(evidence.resolvers[coordinate], options, notes)
        if found is not None:
            timed[coordinate] = found
    reference = _reference(evidence, model, timed, options, notes)
    if reference is None:
        return
    ref_weight = _weight_of(model, reference.coordinate) or 1.0
    for coordinate, found in timed.items():
        if coordinate == reference.coordinate:
            continue
        change = _change(found, reference, ref_weight, _weight_of(model, coordinate), options)
        if change is not None:
            proposal.changes.append(change)


def _judged(found: ResolverEvidence, options: WeightOptions, notes: list[str]) -> _Timed | None:
    """A field's mean per call, if its calls and subjects support it (else a note)."""
    coordinate, calls, subjects = found.coordinate, found.calls, found.subjects
    if calls is None or calls.total <= 0:
        return None
    per_call = calls.total_sum / calls.total
    if calls.total < options.min_calls:
        notes.append(
            f"{coordinate}: {count_text(calls.total)} calls timed, fewer than"
            f" {options.min_calls}: no weight proposed"
        )
        return None
    if subjects is None or subjects.total < options.min_subjects:
        counted = 0.0 if subjects is None else subjects.total
        notes.append(
            f"{coordinate}: {count_text(counted)} subject-minutes timed"
            f" ({names.RESOLVER_SUBJECT_SECONDS}), fewer than {options.min_subjects}: a weight"
            " is proposed only from what many subjects saw"
        )
        return None
    low, high = _middle(subjects)
    spread = f"{seconds_text(low)} to {seconds_text(high)}"
    if not low * (1 - _SLACK) <= per_call <= high * (1 + _SLACK):  # a mean at an edge is in
        notes.append(
            f"{coordinate}: its calls take {seconds_text(per_call)} each on average, outside what"
            f" the middle half of its subjects saw ({spread} per call, p25 to p75 of"
            f" {count_text(subjects.total)} subject-minutes): a few subjects' calls weigh too"
            " much in it; no weight proposed"
        )
        return None
    lines = (
        f"  calls timed: {count_text(calls.total)}, {seconds_text(per_call)} each on average",
        f"  subjects: {count_text(subjects.total)} subject-minutes (each subject, an address by"
        f" its network, counts once a minute); the middle half of them saw {spread} per call",
    )
    return _Timed(coordinate, per_call, calls.total, lines)


def _middle(subjects: Buckets) -> tuple[float, float]:
    """The lowest and the highest seconds per call of the middle half of the subjects: the
    lower edge of the bucket of their p25, the upper edge of the bucket of their p75."""
    low_index = subjects.quantile_index(MIDDLE[0]) or 0
    high_index = subjects.quantile_index(MIDDLE[1])
    low = subjects.edges[low_index - 1] if low_index > 0 else 0.0
    high = subjects.edges[high_index] if high_index is not None else math.inf
    return low, high


def _reference(
    evidence: Evidence,
    model: CostModel,
    timed: dict[str, _Timed],
    options: WeightOptions,
    notes: list[str],
) -> _Timed | None:
    """The reference field, when its evidence holds (else a note, and no weight at all)."""
    wanted = options.reference
    if wanted is not None:
        if wanted not in evidence.resolvers:
            raise TuneError(
                f"--reference {printable(wanted)}: no resolver time measured for it"
                f" ({names.RESOLVER_SECONDS}); the fields timed are"
                f" {', '.join(sorted(evidence.resolvers)[:10])}"
            )
        if _weight_of(model, wanted) == 0:
            raise TuneError(f"--reference {wanted}: its weight in the file is 0")
        found = timed.get(wanted)
        if found is None:
            notes.append(
                f"the reference {wanted} has too little evidence (above): no weight proposed"
            )
        return found
    candidates = [f for f in timed.values() if _weight_of(model, f.coordinate) != 0]
    if not candidates:
        notes.append("no field has enough evidence to be the reference: no weight proposed")
        return None
    return min(candidates, key=lambda f: (-f.calls, f.coordinate))  # the first of equals


def _weight_of(model: CostModel, coordinate: str) -> float | None:
    """The weight the file gives ``coordinate`` (None: none, the schema's)."""
    settings = model.weights.get(coordinate)
    if isinstance(settings, FieldCost):
        return settings.weight
    return None if settings is None else float(settings)


def _change(
    found: _Timed,
    reference: _Timed,
    ref_weight: float,
    current: float | None,
    options: WeightOptions,
) -> Change | None:
    ratio = found.per_call / reference.per_call if reference.per_call > 0 else math.inf
    if not ratio < math.inf:
        return None
    target = significant(ref_weight * ratio)
    factor = options.over_factor
    if current is None:
        if not target > factor:
            return None
    elif current / factor <= target <= current * factor:
        return None
    new = target
    limits: list[str] = []
    if current is not None and new < current and not options.allow_decrease:
        least = significant(current / options.max_decrease)
        if new < least:
            limits.append(
                f"  lowered by at most a factor {options.max_decrease:g}: to {least:g}, where"
                f" the evidence says {target:g} (--allow-decrease lowers it all the way)"
            )
            new = least
    old = "the schema's" if current is None else f"{current:g}"
    lines = (
        f"{found.coordinate}: weight {old} -> {new:g} (its calls take {_times(ratio)} times the"
        f" reference's)",
        *found.lines,
        f"  reference {reference.coordinate}: weight {ref_weight:g},"
        f" {seconds_text(reference.per_call)} per call ({count_text(reference.calls)} calls)",
        *limits,
    )
    return Change(found.coordinate, current, new, lines, WEIGHT)


def _times(ratio: float) -> str:
    return f"{ratio:,.0f}" if ratio >= 100 else f"{ratio:.3g}"


def significant(value: float) -> float:
    """``value`` to two significant digits (a whole number from 10 up)."""
    if value >= 10:
        return float(round(value))
    return float(f"{value:.2g}") if value > 0 else 0.0


def seconds_text(seconds: float) -> str:
    if seconds == math.inf:
        return "+Inf"
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 0.001:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def weight_lines(proposal: Proposal) -> Iterator[str]:
    """The weight changes of ``proposal``, one line each (for a summary)."""
    for change in proposal.changes:
        if change.setting == WEIGHT:
            yield f"{change.coordinate}: {change.new:g}"
