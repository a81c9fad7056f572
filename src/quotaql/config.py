"""Read ``quotaql.toml`` into frozen values, with errors that name the file, line and key."""

from __future__ import annotations

import bisect
import difflib
import itertools
import json
import math
import os
import re
import tomllib
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import date, datetime, time
from typing import TYPE_CHECKING, Final, Literal, TypeVar

from quotaql.cost_analysis.model import CostLimits, CostModel, FieldCost
from quotaql.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator, Mapping

__all__ = ["CostConfig", "load_cost_config"]

T = TypeVar("T")

#: A key path into the document: table and key names, and indexes into arrays.
KeyPath = tuple[str | int, ...]

_NAME = r"[_A-Za-z][_0-9A-Za-z]*"
_COORDINATE: Final = re.compile(
    rf"(?P<type>{_NAME})(?:\.(?P<field>{_NAME})(?:\((?P<arg>{_NAME}):\))?)?"
)
_BARE_KEY: Final = re.compile(r"[A-Za-z0-9_-]+")
_SCALAR: Final = re.compile(r"[^,\]}#\n]*")  # a number, boolean or date-time, and trailing blanks
_DECODE_ERROR: Final = re.compile(
    r"(?P<reason>.*) \(at (?:line (?P<line>\d+), column \d+|end of document)\)", re.DOTALL
)

_INTROSPECTION_MODES: Final[tuple[Literal["free", "counted"], ...]] = ("free", "counted")
_OPERATION_TYPES: Final = ("query", "mutation", "subscription")
_MODEL_KEYS: Final = (
    "default_list_size",
    "slicing_arguments",
    "operation_weights",
    "introspection",
    "weights",
)
_LIMIT_KEYS: Final = (
    "max_cost",
    "max_depth",
    "max_aliases",
    "max_root_fields",
    "max_tokens",
    "max_length",
)
_FIELD_COST_KEYS: Final = (
    "weight",
    "assumed_size",
    "slicing_arguments",
    "sized_fields",
    "require_one_slicing_argument",
)


@dataclass(frozen=True, slots=True)
class CostConfig:
    """The ``[cost]`` table of ``quotaql.toml``.

    Attributes:
        model: weights, list sizes and operation weights that price an operation.
        limits: static limits checked before any resolver runs.
    """

    model: CostModel = field(default_factory=CostModel)
    limits: CostLimits = field(default_factory=CostLimits)


def load_cost_config(path: str | os.PathLike[str]) -> CostConfig:
    """Read and check ``path``, and return its ``[cost]`` table.

    The whole file is checked, not only ``[cost]``: an unknown top-level table is an error.
    A missing ``[cost]`` table, or a missing key in it, gives the default value.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "quotaql.toml"
        >>> _ = path.write_text("cost = { max_depth = 12 }")
        >>> load_cost_config(path).limits.max_depth
        12

    Args:
        path: the ``quotaql.toml`` file.

    Returns:
        The cost model (its ``source`` is ``path``, its ``locations`` give the line of each
        weight) and the static limits.

    Raises:
        ConfigError: the file cannot be read, is not TOML, or holds an unknown key or a
            value of the wrong type or range; the error names the file, the dotted key and
            the line.
    """
    tables = _load_tables(_read(os.fspath(path)))
    config = tables["cost"]
    if not isinstance(config, CostConfig):  # the registry guarantees it; this tells mypy
        raise TypeError(f"the 'cost' table parser returned {type(config).__name__}")
    return config


# --- the document ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Document:
    """A parsed file with the line of each key, so that any value can be blamed precisely."""

    file: str
    data: Mapping[str, object]
    lines: Mapping[KeyPath, int]

    def line(self, path: KeyPath) -> int | None:
        """The line that defines ``path``, else that of its closest located parent."""
        for end in range(len(path), 0, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None

    def error(self, path: KeyPath, reason: str) -> ConfigError:
        return ConfigError(
            reason, file=self.file, key=_render_key(path) if path else None, line=self.line(path)
        )


@dataclass(frozen=True, slots=True)
class _Table:
    """One table of the document and where it is."""

    doc: _Document
    path: KeyPath
    data: Mapping[str, object]

    def get(self, key: str, check: Callable[[_Document, KeyPath, object], T]) -> T | None:
        """``check`` the value of ``key``; ``None`` when the key is absent."""
        if key not in self.data:
            return None
        return check(self.doc, (*self.path, key), self.data[key])

    def table(self, key: str) -> _Table:
        """The subtable ``key``; an empty one when the key is absent."""
        return _table(self.doc, (*self.path, key), self.data.get(key, {}))

    def check_keys(self, known: Collection[str], what: str = "key") -> None:
        """Reject the first key not in ``known``, suggesting the closest known one."""
        for key in self.data:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = (
                    f"did you mean {close[0]!r}?"
                    if close
                    else "expected one of: " + ", ".join(repr(k) for k in known)
                )
                raise self.doc.error((*self.path, key), f"unknown {what}; {hint}")

    @contextmanager
    def blame(self) -> Iterator[None]:
        """Give a location to a ``ConfigError`` that a value class raises on its own.

        Every value is checked here before it is constructed, so this only matters if the
        value classes grow a check that this module does not know about yet.
        """
        try:
            yield
        except ConfigError as exc:
            if exc.file is not None:
                raise
            raise self.doc.error(self.path, exc.reason) from exc


def _read(file: str) -> _Document:
    try:
        with open(file, "rb") as stream:
            raw = stream.read()
    except OSError as exc:
        raise ConfigError(f"cannot read the file ({exc.strerror or exc})", file=file) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})",
            file=file,
            line=line,
        ) from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = _DECODE_ERROR.fullmatch(str(exc))
        reason = match["reason"] if match else str(exc)
        lineno = getattr(exc, "lineno", None)  # Python 3.14+
        if not isinstance(lineno, int):
            # "(at line N, column M)", or "(at end of document)": the last line
            lineno = int(match["line"]) if match and match["line"] else text.count("\n") + 1
        raise ConfigError(f"invalid TOML: {reason}", file=file, line=lineno) from exc
    return _Document(file, data, _locate(text))


# --- the tables --------------------------------------------------------------------------


def _parse_cost(cost: _Table) -> CostConfig:
    cost.check_keys(_MODEL_KEYS + _LIMIT_KEYS)
    weights, locations = _parse_weights(cost.table("weights"))
    defaults = CostModel()
    default_list_size = cost.get("default_list_size", _size)
    slicing_arguments = cost.get("slicing_arguments", _names)
    introspection = cost.get("introspection", _introspection)
    with cost.blame():
        model = CostModel(
            default_list_size=_default(default_list_size, defaults.default_list_size),
            slicing_arguments=_default(slicing_arguments, defaults.slicing_arguments),
            operation_weights=_parse_operation_weights(cost.table("operation_weights")),
            introspection=_default(introspection, defaults.introspection),
            weights=weights,
            source=cost.doc.file,
            locations=locations,
        )
        limits = CostLimits(
            max_cost=cost.get("max_cost", _non_negative_number),
            max_depth=cost.get("max_depth", _size),
            max_aliases=cost.get("max_aliases", _size),
            max_root_fields=cost.get("max_root_fields", _size),
            max_tokens=cost.get("max_tokens", _size),
            max_length=cost.get("max_length", _size),
        )
    return CostConfig(model=model, limits=limits)


def _parse_operation_weights(table: _Table) -> dict[str, float]:
    table.check_keys(_OPERATION_TYPES, what="operation type")
    return {
        name: _number(table.doc, (*table.path, name), value) for name, value in table.data.items()
    }


def _parse_weights(table: _Table) -> tuple[dict[str, float | FieldCost], dict[str, int]]:
    weights: dict[str, float | FieldCost] = {}
    locations: dict[str, int] = {}
    for coordinate, value in table.data.items():
        path = (*table.path, coordinate)
        match = _COORDINATE.fullmatch(coordinate)
        if match is None:
            raise table.doc.error(
                path,
                "expected a schema coordinate ('Type', 'Type.field' or 'Type.field(arg:)'),"
                f" got {json.dumps(coordinate, ensure_ascii=False)}",
            )
        if isinstance(value, dict):
            if match["field"] is None or match["arg"] is not None:
                raise table.doc.error(
                    path,
                    "expected a number (a table of settings is only for a 'Type.field'"
                    " coordinate), got a table",
                )
            weights[coordinate] = _parse_field_cost(table.table(coordinate))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            weights[coordinate] = _number(table.doc, path, value)
        else:
            raise table.doc.error(path, f"expected a number or a table, got {_describe(value)}")
        line = table.doc.line(path)
        if line is not None:
            locations[coordinate] = line
    return weights, locations


def _parse_field_cost(table: _Table) -> FieldCost:
    table.check_keys(_FIELD_COST_KEYS)
    weight = table.get("weight", _number)
    assumed_size = table.get("assumed_size", _size)
    slicing_arguments = table.get("slicing_arguments", _names)
    sized_fields = table.get("sized_fields", _names)
    require_one = table.get("require_one_slicing_argument", _boolean)
    with table.blame():
        return FieldCost(
            weight=weight,
            assumed_size=assumed_size,
            slicing_arguments=slicing_arguments,
            sized_fields=sized_fields,
            require_one_slicing_argument=require_one,
        )


#: Every known top-level table and its parser, called with an empty table when the file
#: has none (so that defaults come from one place). Adding a table is adding a line here.
_TABLES: Final[Mapping[str, Callable[[_Table], object]]] = {
    "cost": _parse_cost,
}


def _load_tables(doc: _Document) -> dict[str, object]:
    root = _Table(doc, (), doc.data)
    root.check_keys(_TABLES, what="table")
    return {name: parse(root.table(name)) for name, parse in _TABLES.items()}


# --- value checks: each takes the document, the key path and the raw value ---------------


def _table(doc: _Document, path: KeyPath, value: object) -> _Table:
    if not isinstance(value, dict):
        raise doc.error(path, f"expected a table, got {_describe(value)}")
    return _Table(doc, path, value)


def _size(doc: _Document, path: KeyPath, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise doc.error(path, f"expected an integer >= 0, got {_describe(value)}")
    if value < 0:
        raise doc.error(path, f"expected an integer >= 0, got {value}")
    return value


def _number(doc: _Document, path: KeyPath, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise doc.error(path, f"expected a finite number, got {_describe(value)}")
    return float(value)


def _non_negative_number(doc: _Document, path: KeyPath, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise doc.error(path, f"expected a finite number >= 0, got {_describe(value)}")
    if value < 0:
        raise doc.error(path, f"expected a finite number >= 0, got {value}")
    return float(value)


def _names(doc: _Document, path: KeyPath, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise doc.error(path, f"expected an array of strings, got {_describe(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise doc.error((*path, index), f"expected a string, got {_describe(item)}")
    return tuple(value)


def _boolean(doc: _Document, path: KeyPath, value: object) -> bool:
    if not isinstance(value, bool):
        raise doc.error(path, f"expected true or false, got {_describe(value)}")
    return value


def _introspection(doc: _Document, path: KeyPath, value: object) -> Literal["free", "counted"]:
    for mode in _INTROSPECTION_MODES:
        if value == mode:
            return mode
    raise doc.error(path, f'expected "free" or "counted", got {_describe(value)}')


def _default(value: T | None, default: T) -> T:
    return default if value is None else value


def _describe(value: object) -> str:
    """Name a TOML value's type and show it as TOML would (``a string ("10")``)."""
    if isinstance(value, bool):
        return f"a boolean ({'true' if value else 'false'})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a float ({value!r})"
    if isinstance(value, str):
        return f"a string ({json.dumps(value, ensure_ascii=False)})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, datetime):
        return f"a date-time ({value.isoformat()})"
    if isinstance(value, date):
        return f"a date ({value.isoformat()})"
    if isinstance(value, time):
        return f"a time ({value.isoformat()})"
    return type(value).__name__


def _render_key(path: KeyPath) -> str:
    """``("cost", "weights", "User.followers")`` -> ``cost.weights."User.followers"``."""
    rendered = ""
    for part in path:
        if isinstance(part, int):
            rendered += f"[{part}]"
            continue
        name = part if _BARE_KEY.fullmatch(part) else json.dumps(part, ensure_ascii=False)
        rendered += f".{name}" if rendered else name
    return rendered


# --- the line locator --------------------------------------------------------------------


class _UnlocatableError(Exception):
    """The text is not what the locator expects; keep what was located so far."""


def _locate(text: str) -> dict[KeyPath, int]:
    """Map each key path that ``text`` defines to its 1-based line.

    ``text`` is valid TOML (``tomllib`` has read it), so this is a scanner, not a parser: it
    follows headers, keys, strings, arrays and inline tables well enough to know where each
    key starts, and skips every other value. A path defined only implicitly (``a`` in
    ``[a.b]`` or ``a.b = 1``) gets the line of its first mention, until it is defined
    explicitly.
    """
    locator = _Locator(text)
    # tomllib accepted the text, so this can only be a locator bug: keep the lines found so far.
    with suppress(_UnlocatableError):
        locator.run()
    return locator.lines


class _Locator:
    __slots__ = ("_array_tables", "_implicit", "_newlines", "lines", "pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.lines: dict[KeyPath, int] = {}
        self._implicit: set[KeyPath] = set()
        self._array_tables: dict[KeyPath, int] = {}  # [[name]] -> elements so far
        self._newlines = [index for index, char in enumerate(text) if char == "\n"]

    def run(self) -> None:
        table: KeyPath = ()
        while True:
            self._skip(newlines=True)
            if self.pos >= len(self.text):
                return
            start = self.pos
            if self.text.startswith("[[", start):
                self.pos += 2
                key = self._key()
                array = (*self._resolve(key[:-1]), key[-1])
                index = self._array_tables.get(array, 0)
                self._array_tables[array] = index + 1
                table = (*array, index)
                self._expect("]]")
            elif self.text.startswith("[", start):
                self.pos += 1
                table = self._resolve(self._key())
                self._expect("]")
            else:
                key = self._key()
                self._expect("=")
                table_key = (*table, *key)
                self._define(table_key, start)
                self._value(table_key)
                continue
            self._define(table, start)

    def _define(self, path: KeyPath, pos: int) -> None:
        line = bisect.bisect_left(self._newlines, pos) + 1
        for end in range(1, len(path)):
            parent = path[:end]
            if parent not in self.lines:
                self.lines[parent] = line
                self._implicit.add(parent)
        if path not in self.lines or path in self._implicit:
            self.lines[path] = line
            self._implicit.discard(path)

    def _resolve(self, key: tuple[str, ...]) -> KeyPath:
        """A header's path, through the last element of each array of tables on the way."""
        path: KeyPath = ()
        for part in key:
            path = (*path, part)
            if path in self._array_tables:
                path = (*path, self._array_tables[path] - 1)
        return path

    def _skip(self, *, newlines: bool) -> None:
        """Skip spaces, tabs, comments, and line breaks when ``newlines``."""
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char in " \t\r" or (newlines and char == "\n"):
                self.pos += 1
            elif char == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            else:
                return

    def _expect(self, token: str) -> None:
        self._skip(newlines=False)
        if not self.text.startswith(token, self.pos):
            raise _UnlocatableError(f"expected {token!r} at offset {self.pos}")
        self.pos += len(token)

    def _key(self) -> tuple[str, ...]:
        """A dotted key (``a."b.c".'d'``), its quoted parts decoded."""
        parts: list[str] = []
        while True:
            self._skip(newlines=False)
            start = self.pos
            if self.text.startswith(('"', "'"), start):
                self._string()
                # tomllib decodes the escapes exactly as it did when it read the key.
                parts.append(tomllib.loads("k = " + self.text[start : self.pos])["k"])
            else:
                match = _BARE_KEY.match(self.text, start)
                if match is None:
                    raise _UnlocatableError(f"expected a key at offset {start}")
                parts.append(match.group())
                self.pos = match.end()
            self._skip(newlines=False)
            if not self.text.startswith(".", self.pos):
                return tuple(parts)
            self.pos += 1

    def _string(self) -> None:
        """Skip any of the four kinds of string; the cursor is on its first quote."""
        text = self.text
        quote = text[self.pos]
        delimiter = quote * 3 if text.startswith(quote * 3, self.pos) else quote
        index = self.pos + len(delimiter)
        while index < len(text):
            if quote == '"' and text[index] == "\\":
                index += 2
            elif text.startswith(delimiter, index):
                index += len(delimiter)
                # A multi-line string may end with up to two quotes of its own: """a"""""
                extra = 0
                while len(delimiter) == 3 and extra < 2 and text.startswith(quote, index):
                    index += 1
                    extra += 1
                self.pos = index
                return
            else:
                index += 1
        raise _UnlocatableError("unterminated string")

    def _value(self, path: KeyPath) -> None:
        """Skip a value, defining the keys of inline tables and the elements of arrays."""
        self._skip(newlines=False)
        text = self.text
        char = text[self.pos : self.pos + 1]
        if char in ('"', "'"):
            self._string()
        elif char == "[":
            self.pos += 1
            for index in itertools.count():
                self._skip(newlines=True)
                if text.startswith("]", self.pos):
                    self.pos += 1
                    return
                self._define((*path, index), self.pos)
                self._value((*path, index))
                self._skip(newlines=True)
                if text.startswith(",", self.pos):
                    self.pos += 1
        elif char == "{":
            self.pos += 1
            while True:
                self._skip(newlines=True)  # TOML 1.1 lets an inline table span lines
                if text.startswith("}", self.pos):
                    self.pos += 1
                    return
                start = self.pos
                key = (*path, *self._key())
                self._expect("=")
                self._define(key, start)
                self._value(key)
                self._skip(newlines=True)
                if text.startswith(",", self.pos):
                    self.pos += 1
        else:  # number, boolean or date-time: up to the next delimiter
            match = _SCALAR.match(text, self.pos)
            if match is None or not match.group().strip():
                raise _UnlocatableError(f"expected a value at offset {self.pos}")
            self.pos = match.end()
