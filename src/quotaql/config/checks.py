"""The checks of single values of ``quotaql.toml``: each takes the document, the key path and
the raw value, and returns the value as the configuration holds it or raises an error that
names the file, the key and its line."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Final, Literal, TypeVar

from quotaql.config.document import describe_value
from quotaql.config.values import HEADER_NAME, RESERVED_HEADER_NAMES

if TYPE_CHECKING:
    from collections.abc import Callable, Collection
    from typing import TypeAlias

    from quotaql.config.document import Document
    from quotaql.config.locator import KeyPath

__all__ = [
    "boolean",
    "default",
    "fraction",
    "header_names",
    "integer",
    "listing",
    "names",
    "non_negative_number",
    "number",
    "one_of",
    "positive_number",
    "seconds",
    "size",
    "size_or_off",
    "string",
    "warn_at",
    "within",
]

T = TypeVar("T")
S = TypeVar("S", bound=str)

if TYPE_CHECKING:
    #: A check of one value: given the document, the key path and the raw value, the value
    #: as the configuration holds it.
    Check: TypeAlias = Callable[[Document, KeyPath, object], T]


def integer(low: int, high: int | None = None, *, expected: str | None = None) -> Check[int]:
    """A check that the value is an integer >= ``low`` (and <= ``high``, when given); an
    error begins with ``expected``, by default the range in words."""
    if expected is None:
        expected = (
            f"expected an integer >= {low}"
            if high is None
            else f"expected an integer from {low} to {high}"
        )

    def check(doc: Document, path: KeyPath, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise doc.error(path, f"{expected}, got {describe_value(value)}")
        if value < low or (high is not None and value > high):
            raise doc.error(path, f"{expected}, got {value}")
        return value

    return check


def within(
    low: float, high: float, *, expected: str, low_in: bool = True, high_in: bool = True
) -> Check[float]:
    """A check that the value is a finite number from ``low`` to ``high`` (each bound
    included if ``low_in`` or ``high_in``, else excluded); an error begins with ``expected``."""

    def check(doc: Document, path: KeyPath, value: object) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise doc.error(path, f"{expected}, got {describe_value(value)}")
        above = value >= low if low_in else value > low
        below = value <= high if high_in else value < high
        if not (above and below):
            raise doc.error(path, f"{expected}, got {value}")
        return float(value)

    return check


size: Final = integer(0)
_SIZE_OR_OFF: Final = integer(0, expected="expected an integer >= 0, or false for no limit")
number: Final = within(-math.inf, math.inf, expected="expected a finite number")
non_negative_number: Final = within(0.0, math.inf, expected="expected a finite number >= 0")
positive_number: Final = within(
    0.0, math.inf, expected="expected a finite number > 0", low_in=False
)


def seconds(low: float, high: float, *, low_in: bool) -> Check[float]:
    """A check that the value is a number of seconds from ``low`` (``low_in``: included,
    else above it) to ``high``."""
    expected = (
        f"expected a number of seconds from {low:g} to {high:g}"
        if low_in
        else f"expected a number of seconds above {low:g} and at most {high:g}"
    )
    return within(low, high, expected=expected, low_in=low_in)


def size_or_off(doc: Document, path: KeyPath, value: object) -> int | Literal[False]:
    return False if value is False else _SIZE_OR_OFF(doc, path, value)


def fraction(doc: Document, path: KeyPath, value: object) -> float:
    share = non_negative_number(doc, path, value)
    if share > 1:
        raise doc.error(path, f"expected a number from 0 to 1, got {value}")
    return share


def names(doc: Document, path: KeyPath, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise doc.error(path, f"expected an array of strings, got {describe_value(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise doc.error((*path, index), f"expected a string, got {describe_value(item)}")
    return tuple(value)


def boolean(doc: Document, path: KeyPath, value: object) -> bool:
    if not isinstance(value, bool):
        raise doc.error(path, f"expected true or false, got {describe_value(value)}")
    return value


def string(doc: Document, path: KeyPath, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise doc.error(path, f"expected a non-empty string, got {describe_value(value)}")
    return value


def one_of(choices: tuple[S, ...]) -> Check[S]:
    """A check that the value is one of ``choices`` (strings), listing them if not."""

    def check(doc: Document, path: KeyPath, value: object) -> S:
        for choice in choices:
            if value == choice:
                return choice
        raise doc.error(path, f"expected one of {listing(choices)}, got {describe_value(value)}")

    return check


def default(value: T | None, default: T) -> T:
    """``value``, or ``default`` when the key was absent (``None``)."""
    return default if value is None else value


def listing(names: Collection[str]) -> str:
    """``names`` as a TOML list would show them: ``"a", "b"``."""
    return ", ".join(json.dumps(name, ensure_ascii=False) for name in names)


def warn_at(doc: Document, path: KeyPath, value: object) -> float | None:
    """A warning's threshold: a share of a quota above 0 and below 1, or false (none)."""
    if value is False:
        return None
    share = non_negative_number(doc, path, value)
    if not 0 < share < 1:
        raise doc.error(path, f"expected a number above 0 and below 1, or false, got {value}")
    return share


def header_names(doc: Document, path: KeyPath, value: object) -> dict[str, str]:
    """``{ estimated = "...", actual = "..." }``: two response headers' names."""
    if not isinstance(value, dict):
        raise doc.error(
            path,
            'expected a table { estimated = "X-Cost-Estimated", actual = "X-Cost-Actual" },'
            f" got {describe_value(value)}",
        )
    names: dict[str, str] = {}
    for key in ("estimated", "actual"):
        name = value.get(key)
        if name is None:
            raise doc.error(path, f"missing {key} (both estimated and actual are named)")
        if not isinstance(name, str) or not HEADER_NAME.fullmatch(name):
            raise doc.error(
                (*path, key),
                f"expected a header name (letters, digits and -), got {describe_value(name)}",
            )
        if name.lower() in RESERVED_HEADER_NAMES:
            raise doc.error(
                (*path, key),
                f"{name!r} is a header quotaql or HTTP itself sets (quotaql replaces or"
                " removes the cost headers on every response): name one of your own,"
                " such as X-Cost-Estimated",
            )
        names[key] = name
    for key in value:
        if key not in names:
            raise doc.error((*path, key), f"unknown key {key!r}: expected estimated or actual")
    if names["estimated"].lower() == names["actual"].lower():
        raise doc.error(path, "estimated and actual must be two different headers")
    return names
