"""The checks of single values of ``quotaql.toml``: each takes the document, the key path and
the raw value, and returns the value as the configuration holds it or raises an error that
names the file, the key and its line."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Literal, TypeVar

from quotaql.config.document import describe_value

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from quotaql.config.document import Document
    from quotaql.config.locator import KeyPath

__all__ = [
    "boolean",
    "count",
    "default",
    "fraction",
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
]

T = TypeVar("T")
S = TypeVar("S", bound=str)


def size(doc: Document, path: KeyPath, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise doc.error(path, f"expected an integer >= 0, got {describe_value(value)}")
    if value < 0:
        raise doc.error(path, f"expected an integer >= 0, got {value}")
    return value


def count(low: int) -> Callable[[Document, KeyPath, object], int]:
    """A check that the value is an integer >= ``low`` (a count of operations)."""

    def check(doc: Document, path: KeyPath, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise doc.error(path, f"expected an integer >= {low}, got {describe_value(value)}")
        if value < low:
            raise doc.error(path, f"expected an integer >= {low}, got {value}")
        return value

    return check


def seconds(
    low: float, high: float, *, low_in: bool
) -> Callable[[Document, KeyPath, object], float]:
    """A check that the value is a number of seconds from ``low`` (``low_in``: included,
    else above it) to ``high``."""
    expected = (
        f"expected a number of seconds from {low:g} to {high:g}"
        if low_in
        else f"expected a number of seconds above {low:g} and at most {high:g}"
    )

    def check(doc: Document, path: KeyPath, value: object) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise doc.error(path, f"{expected}, got {describe_value(value)}")
        if not ((low <= value) if low_in else (low < value)) or value > high:
            raise doc.error(path, f"{expected}, got {value}")
        return float(value)

    return check


def size_or_off(doc: Document, path: KeyPath, value: object) -> int | Literal[False]:
    if value is False:
        return False
    expected = "expected an integer >= 0, or false for no limit, got"
    if isinstance(value, bool) or not isinstance(value, int):
        raise doc.error(path, f"{expected} {describe_value(value)}")
    if value < 0:
        raise doc.error(path, f"{expected} {value}")
    return value


def fraction(doc: Document, path: KeyPath, value: object) -> float:
    number = non_negative_number(doc, path, value)
    if number > 1:
        raise doc.error(path, f"expected a number from 0 to 1, got {value}")
    return number


def number(doc: Document, path: KeyPath, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise doc.error(path, f"expected a finite number, got {describe_value(value)}")
    return float(value)


def non_negative_number(doc: Document, path: KeyPath, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise doc.error(path, f"expected a finite number >= 0, got {describe_value(value)}")
    if value < 0:
        raise doc.error(path, f"expected a finite number >= 0, got {value}")
    return float(value)


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


def positive_number(doc: Document, path: KeyPath, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise doc.error(path, f"expected a finite number > 0, got {describe_value(value)}")
    if value <= 0:
        raise doc.error(path, f"expected a finite number > 0, got {value}")
    return float(value)


def string(doc: Document, path: KeyPath, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise doc.error(path, f"expected a non-empty string, got {describe_value(value)}")
    return value


def one_of(choices: tuple[S, ...]) -> Callable[[Document, KeyPath, object], S]:
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
