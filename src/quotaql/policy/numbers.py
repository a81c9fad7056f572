"""Numbers as clients and logs see them: no float noise (``56.65995000000001``) leaves quotaql.

The storage keeps budgets to the millisecond of refill, so what is left of one is rarely a
whole number even where every weight is. What a client reads is rounded once, here, the same
way in headers, ``extensions.cost``, error extensions, messages and logs:

- a cost or a limit (:func:`points`): the integer it is, within float noise, else three
  decimals;
- what is left of a budget (:func:`left`): rounded *down*, to an integer where the cost it
  is weighed against is whole (every weight an integer), else to three decimals: a client
  is never told it has a point it has not;
- a wait (:func:`seconds`): rounded *up* to the millisecond: a client that waits what it is
  told is never early.
"""

from __future__ import annotations

import math
from typing import Final

__all__ = ["is_whole", "left", "points", "seconds"]

_NOISE: Final = 1e-6  # below what any weight, refill or capacity expresses


def is_whole(value: float) -> bool:
    """Whether ``value`` is an integer, within float noise."""
    return math.isfinite(value) and abs(value - round(value)) < _NOISE


def points(value: float) -> int | float:
    """A cost or a limit as answered: ``280`` (not ``280.0``), ``2.5``, ``0.333``; an
    unlimited one (``inf``) as it is."""
    if not math.isfinite(value):
        return value
    whole = round(value)
    if abs(value - whole) < _NOISE:
        return int(whole)
    return round(value, 3)


def left(value: float, whole: bool = True) -> int | float:
    """What is left of a budget, rounded down: to an integer if ``whole`` (the costs it is
    weighed against are), else to three decimals. Never below 0."""
    if value <= 0:
        return 0
    if not math.isfinite(value):
        return value
    if whole:
        return math.floor(value + _NOISE)
    return math.floor(value * 1000 + _NOISE * 1000) / 1000


def seconds(value: float) -> float:
    """A wait in seconds, rounded up to the millisecond: ``7.4780136352716955`` -> ``7.479``."""
    if value <= 0:
        return 0.0
    if not math.isfinite(value):
        return value
    return math.ceil(value * 1000 - _NOISE) / 1000
