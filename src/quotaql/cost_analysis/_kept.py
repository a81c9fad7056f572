"""A bounded map that a flood of new keys cannot empty of the keys in use.

The parse cache and the validation cache keep what repeated requests reuse. A client that
sends a new document on every request must not be able to push the documents of honest
clients out of them (they would be parsed and validated again on every request): a
first-in-first-out map of 512 entries is emptied by 512 new documents.

:class:`Kept` is a segmented map. A new entry enters **probation**, a quarter of the room; an
entry found again while there is **protected** when probation lets it go (an entry never
found again is dropped). The protected part is swept with a second chance: its oldest entry
is dropped unless it was found since the last sweep went past it. So documents seen once
only ever replace each other; to push a protected entry out, a client must send each of its
documents at least twice, paying each time, and more often than an honest client uses its
own (measured in tests/cost_analysis/test_kept.py: 1,024 requests of small documents, or
20 of 10,000 characters, for 200 points: the weight bound fills first with large ones).

Finding a key is one dictionary look-up and a flag set, without a lock; adding one takes the
lock. What the map holds is bounded in entries and in weight (the caller's measure of an
entry: a document's characters).
"""

from __future__ import annotations

import threading
from typing import Any, Generic, TypeVar

__all__ = ["Kept"]

K = TypeVar("K")
V = TypeVar("V")

# An entry: [value, weight, found since the last look at it].
_VALUE, _WEIGHT, _FOUND = 0, 1, 2


class Kept(Generic[K, V]):
    """At most ``entries`` values weighing ``weight`` in all, a quarter of each for the
    entries on probation; thread-safe."""

    __slots__ = (
        "_entries",
        "_lock",
        "_probation",
        "_protected",
        "_weights",
        "probation_entries",
        "probation_weight",
    )

    def __init__(self, entries: int, weight: int) -> None:
        if entries < 1 or weight < 1:
            raise ValueError(f"Kept needs room: entries={entries}, weight={weight}")
        self._entries = entries
        self.probation_entries = max(1, entries // 4)
        self.probation_weight = max(1, weight // 4)
        # What the protected part may hold: the rest.
        self._weights = [0, 0, weight - self.probation_weight]  # probation, protected, room
        self._probation: dict[K, list[Any]] = {}
        self._protected: dict[K, list[Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value kept for ``key``, or None."""
        entry = self._protected.get(key)
        if entry is None:
            entry = self._probation.get(key)
            if entry is None:
                return None
        entry[_FOUND] = True
        value: V = entry[_VALUE]
        return value

    def put(self, key: K, value: V, weight: int) -> None:
        """Keep ``value`` for ``key`` (a new key on probation, making room; a key kept
        already keeps its place and weight, and takes the new value); a new one heavier
        than the probation's room is not kept."""
        with self._lock:
            entry = self._protected.get(key) or self._probation.get(key)
            if entry is not None:
                entry[_VALUE] = value  # never a stale value, whatever the weight given
                return
            if not 0 <= weight <= self.probation_weight:
                return
            self._probation[key] = [value, weight, False]
            self._weights[0] += weight
            self._make_room()

    def _make_room(self) -> None:
        probation, protected, weights = self._probation, self._protected, self._weights
        while probation and (
            len(probation) > self.probation_entries or weights[0] > self.probation_weight
        ):
            key = next(iter(probation))
            entry = probation.pop(key)
            weights[0] -= entry[_WEIGHT]
            if entry[_FOUND]:  # found again on probation: protected
                entry[_FOUND] = False
                protected[key] = entry
                weights[1] += entry[_WEIGHT]
        room = self._entries - self.probation_entries
        # Each turn drops an entry or clears a flag: at most twice the entries in all.
        while protected and (len(protected) > room or weights[1] > weights[2]):
            key = next(iter(protected))
            entry = protected.pop(key)
            if entry[_FOUND]:  # a second chance: last in line, not found since
                entry[_FOUND] = False
                protected[key] = entry
            else:
                weights[1] -= entry[_WEIGHT]

    def __len__(self) -> int:
        return len(self._probation) + len(self._protected)

    def __contains__(self, key: object) -> bool:
        return key in self._protected or key in self._probation

    @property
    def weight(self) -> int:
        """The weight of what is kept."""
        return self._weights[0] + self._weights[1]

    @property
    def protected(self) -> int:
        """How many entries were found again and are protected."""
        return len(self._protected)

    def clear(self) -> None:
        with self._lock:
            self._probation = {}
            self._protected = {}
            self._weights[0] = self._weights[1] = 0
