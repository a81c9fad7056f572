"""Editing ``quotaql.toml``: the proposed sizes written into its text, nothing else moved."""

from __future__ import annotations

import copy
import json
import re
import tomllib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from quotaql.tune.proposal import ASSUMED_SIZE, DEFAULT_LIST_SIZE

if TYPE_CHECKING:
    from collections.abc import Sequence

    from quotaql.tune.proposal import Change


class _Unsupported(Exception):
    """A layout the text editor does not handle (the change is then left to the user)."""


@dataclass(frozen=True, slots=True)
class _Statement:
    kind: Literal["table", "array", "pair"]
    path: tuple[str, ...]
    """A header's table, or a pair's full key (its table's path and its own key)."""
    start: int
    end: int
    """After the statement's line (its newline included)."""
    value: tuple[int, int] = (0, 0)
    """A pair's value, as offsets into the text."""


_WS: Final = " \t"
_BARE: Final = re.compile(r"[A-Za-z0-9_-]+")
_DATE_TIME_SPACE: Final = re.compile(r"\d{4}-\d{2}-\d{2} \d")


class _Scanner:
    """The statements of a TOML document, with where each is in the text (TOML 1.0)."""

    def __init__(self, text: str, pos: int = 0) -> None:
        self.text = text
        self.pos = pos

    def statements(self) -> list[_Statement]:
        """Every table header and key/value pair of the document."""
        text = self.text
        statements = []
        table: tuple[str, ...] = ()
        while True:
            self._skip(_WS)
            if self.pos >= len(text):
                break
            char = text[self.pos]
            if char in "\r\n":
                self._newline()
                continue
            if char == "#":
                self._comment()
                continue
            start = self._line_start(self.pos)
            if char == "[":
                array = text.startswith("[[", self.pos)
                self.pos += 2 if array else 1
                table = self._key()
                closing = "]]" if array else "]"
                if not text.startswith(closing, self.pos):
                    raise self._error("expected ] after a table name")
                self.pos += len(closing)
                self._end_of_line()
                statements.append(_Statement("array" if array else "table", table, start, self.pos))
                continue
            key = self._key()
            if not text.startswith("=", self.pos):
                raise self._error("expected = after a key")
            self.pos += 1
            self._skip(_WS)
            value_start = self.pos
            self._value()
            value_end = self.pos
            self._end_of_line()
            statements.append(
                _Statement("pair", (*table, *key), start, self.pos, (value_start, value_end))
            )
        return statements

    def _error(self, what: str) -> _Unsupported:
        line = self.text.count("\n", 0, self.pos) + 1
        return _Unsupported(f"line {line}: {what}")

    def _line_start(self, pos: int) -> int:
        return self.text.rfind("\n", 0, pos) + 1

    def _skip(self, chars: str) -> None:
        text = self.text
        while self.pos < len(text) and text[self.pos] in chars:
            self.pos += 1

    def _newline(self) -> None:
        if self.text.startswith("\r\n", self.pos):
            self.pos += 2
        elif self.text[self.pos] == "\n":
            self.pos += 1
        else:
            raise self._error("a carriage return without a line feed")

    def _comment(self) -> None:
        end = self.text.find("\n", self.pos)
        self.pos = len(self.text) if end < 0 else end

    def _end_of_line(self) -> None:
        self._skip(_WS)
        if self.pos < len(self.text) and self.text[self.pos] == "#":
            self._comment()
        if self.pos < len(self.text):
            if self.text[self.pos] not in "\r\n":
                raise self._error("expected the end of the line")
            self._newline()

    def _key(self) -> tuple[str, ...]:
        parts = []
        while True:
            self._skip(_WS)
            parts.append(self._simple_key())
            self._skip(_WS)
            if self.text.startswith(".", self.pos):
                self.pos += 1
                continue
            return tuple(parts)

    def _simple_key(self) -> str:
        text = self.text
        start = self.pos
        if text.startswith('"', start):
            self._basic_string()
        elif text.startswith("'", start):
            self._literal_string()
        else:
            match = _BARE.match(text, start)
            if match is None:
                raise self._error("expected a key")
            self.pos = match.end()
            return match.group()
        raw = text[start : self.pos]
        try:
            key: str = tomllib.loads(f"k = {raw}")["k"]  # TOML's own unescaping
        except tomllib.TOMLDecodeError as exc:  # pragma: no cover  (the file loaded)
            raise self._error(f"a key that does not parse: {exc}") from exc
        return key

    def _basic_string(self) -> None:
        text = self.text
        if text.startswith('"""', self.pos):
            self.pos += 3
            while self.pos < len(text):
                char = text[self.pos]
                if char == "\\":
                    self.pos += 2
                    continue
                if text.startswith('"""', self.pos):
                    run = 3
                    while text.startswith('"', self.pos + run) and run < 5:
                        run += 1
                    self.pos += run
                    return
                self.pos += 1
            raise self._error("an unterminated string")
        self.pos += 1
        while self.pos < len(text):
            char = text[self.pos]
            if char == "\\":
                self.pos += 2
                continue
            if char in "\r\n":
                break
            self.pos += 1
            if char == '"':
                return
        raise self._error("an unterminated string")

    def _literal_string(self) -> None:
        text = self.text
        if text.startswith("'''", self.pos):
            end = text.find("'''", self.pos + 3)
            if end < 0:
                raise self._error("an unterminated string")
            run = 3
            while text.startswith("'", end + run) and run < 5:
                run += 1
            self.pos = end + run
            return
        end = text.find("'", self.pos + 1)
        newline = text.find("\n", self.pos + 1)
        if end < 0 or 0 <= newline < end:
            raise self._error("an unterminated string")
        self.pos = end + 1

    def _gap(self) -> None:
        """Whitespace, newlines and comments (inside an array)."""
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char in _WS:
                self.pos += 1
            elif char in "\r\n":
                self._newline()
            elif char == "#":
                self._comment()
            else:
                return

    def _value(self) -> None:
        text = self.text
        if self.pos >= len(text):
            raise self._error("expected a value")
        char = text[self.pos]
        if char == '"':
            self._basic_string()
        elif char == "'":
            self._literal_string()
        elif char == "[":
            self.pos += 1
            while True:
                self._gap()
                if text.startswith("]", self.pos):
                    self.pos += 1
                    return
                self._value()
                self._gap()
                if text.startswith(",", self.pos):
                    self.pos += 1
                elif not text.startswith("]", self.pos):
                    raise self._error("expected , or ] in an array")
        elif char == "{":
            self.inline_pairs()
        else:
            start = self.pos
            while self.pos < len(text) and text[self.pos] not in " \t\r\n,]}#":
                self.pos += 1
            if _DATE_TIME_SPACE.match(text, start) and self.pos - start == 10:
                self.pos += 1  # "1979-05-27 07:32:00": the space between date and time
                while self.pos < len(text) and text[self.pos] not in " \t\r\n,]}#":
                    self.pos += 1
            if self.pos == start:
                raise self._error("expected a value")

    def inline_pairs(self) -> list[tuple[tuple[str, ...], int, int]]:
        """Read the inline table at ``pos``: its pairs ``(key, value start, value end)``."""
        text = self.text
        self.pos += 1  # {
        pairs: list[tuple[tuple[str, ...], int, int]] = []
        self._gap()
        if text.startswith("}", self.pos):
            self.pos += 1
            return pairs
        while True:
            self._gap()
            key = self._key()
            if not text.startswith("=", self.pos):
                raise self._error("expected = in an inline table")
            self.pos += 1
            self._skip(_WS)
            start = self.pos
            self._value()
            pairs.append((key, start, self.pos))
            self._gap()
            if text.startswith(",", self.pos):
                self.pos += 1
                self._gap()
                if text.startswith("}", self.pos):  # TOML 1.1's trailing comma
                    self.pos += 1
                    return pairs
            elif text.startswith("}", self.pos):
                self.pos += 1
                return pairs
            else:
                raise self._error("expected , or } in an inline table")


def _inline(text: str, start: int) -> tuple[list[tuple[tuple[str, ...], int, int]], int]:
    scanner = _Scanner(text, start)
    pairs = scanner.inline_pairs()
    return pairs, scanner.pos


def _newline_of(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _table_end(statements: Sequence[_Statement], header: int) -> int:
    """Where a line goes to be the last of the table whose header is ``statements[header]``:
    after its last pair (comments before the next header stay with that header)."""
    end = statements[header].end
    for statement in statements[header + 1 :]:
        if statement.kind != "pair":
            break
        end = statement.end
    return end


def _insert(text: str, at: int, lines: Sequence[str]) -> str:
    newline = _newline_of(text)
    before = text[:at]
    if before and not before.endswith("\n"):
        before += newline
    return before + "".join(line + newline for line in lines) + text[at:]


def _append_block(text: str, lines: Sequence[str]) -> str:
    newline = _newline_of(text)
    if text and not text.endswith("\n"):
        text += newline
    if text.strip():
        text += newline  # a blank line before the new table
    return text + "".join(line + newline for line in lines)


def _header(statements: Sequence[_Statement], path: tuple[str, ...]) -> int | None:
    for index, statement in enumerate(statements):
        if statement.kind == "table" and statement.path == path:
            return index
    return None


def _set_assumed_size(text: str, coordinate: str, size: int) -> str:
    statements = _Scanner(text).statements()
    table = ("cost", "weights", coordinate)
    quoted = json.dumps(coordinate)
    header = _header(statements, table)
    if header is not None:  # [cost.weights."Query.products"]
        for statement in statements[header + 1 :]:
            if statement.kind != "pair":
                break
            if statement.path == (*table, ASSUMED_SIZE):
                start, end = statement.value
                return text[:start] + str(size) + text[end:]
        return _insert(text, _table_end(statements, header), [f"{ASSUMED_SIZE} = {size}"])
    for statement in statements:
        if statement.kind != "pair":
            continue
        if statement.path == table:  # "Query.products" = { ... } or = 3
            start, end = statement.value
            if text.startswith("{", start):
                return _edit_inline(text, start, size)
            weight = text[start:end]
            return text[:start] + f"{{ weight = {weight}, {ASSUMED_SIZE} = {size} }}" + text[end:]
        if statement.path[: len(table)] == table or (
            len(statement.path) < len(table) and table[: len(statement.path)] == statement.path
        ):
            # Dotted keys ("Query.products".weight = 2) or weights = { ... }: not by hand here.
            raise _Unsupported(f"{coordinate} is set with dotted keys or an inline table")
    weights = _header(statements, ("cost", "weights"))
    if weights is not None:  # [cost.weights]: one more line there
        return _insert(
            text, _table_end(statements, weights), [f"{quoted} = {{ {ASSUMED_SIZE} = {size} }}"]
        )
    tables = [
        i
        for i, s in enumerate(statements)
        if s.kind == "table" and len(s.path) == 3 and s.path[:2] == ("cost", "weights")
    ]
    block = [f"[cost.weights.{quoted}]", f"{ASSUMED_SIZE} = {size}"]
    if tables:  # [cost.weights."Type.field"] tables: one more after the last
        return _insert(text, _table_end(statements, tables[-1]), ["", *block])
    new_weights = ["[cost.weights]", f"{quoted} = {{ {ASSUMED_SIZE} = {size} }}"]
    cost = _header(statements, ("cost",))
    if cost is not None:  # after the [cost] table's keys
        return _insert(text, _table_end(statements, cost), ["", *new_weights])
    return _append_block(text, new_weights)


def _edit_inline(text: str, start: int, size: int) -> str:
    pairs, end = _inline(text, start)
    for key, value_start, value_end in pairs:
        if key == (ASSUMED_SIZE,):
            return text[:value_start] + str(size) + text[value_end:]
    if not pairs:
        return text[:start] + f"{{ {ASSUMED_SIZE} = {size} }}" + text[end:]
    last_end = pairs[-1][2]
    return text[:last_end] + f", {ASSUMED_SIZE} = {size}" + text[last_end:]


def _set_default_list_size(text: str, size: int) -> str:
    statements = _Scanner(text).statements()
    for statement in statements:
        if statement.kind == "pair" and statement.path == ("cost", DEFAULT_LIST_SIZE):
            start, end = statement.value
            return text[:start] + str(size) + text[end:]
    cost = _header(statements, ("cost",))
    if cost is not None:
        return _insert(text, _table_end(statements, cost), [f"{DEFAULT_LIST_SIZE} = {size}"])
    return _append_block(text, ["[cost]", f"{DEFAULT_LIST_SIZE} = {size}"])


def _expected(data: dict[str, Any], change: Change) -> dict[str, Any]:
    """What the file's data must be after ``change``."""
    expected = copy.deepcopy(data)
    cost = expected.setdefault("cost", {})
    if change.coordinate is None:
        cost[DEFAULT_LIST_SIZE] = change.new
        return expected
    weights = cost.setdefault("weights", {})
    current = weights.get(change.coordinate)
    if isinstance(current, dict):
        current[ASSUMED_SIZE] = change.new
    elif current is None:
        weights[change.coordinate] = {ASSUMED_SIZE: change.new}
    else:
        weights[change.coordinate] = {"weight": current, ASSUMED_SIZE: change.new}
    return expected


def edit(text: str, changes: Sequence[Change]) -> tuple[str, list[Change]]:
    """``text`` (a ``quotaql.toml``) with ``changes`` made, and the changes it could not make.

    The text is edited, not re-serialised: a value is replaced in place, a missing key is
    added to its table (or its table added after ``[cost]``), and nothing else moves. Each
    change is checked by parsing the result: its data must be the file's with exactly that
    change; a change that would come out otherwise is not made, and is returned.
    """
    data = tomllib.loads(text)
    skipped = []
    for change in changes:
        try:
            if change.coordinate is None:
                edited = _set_default_list_size(text, change.new)
            else:
                edited = _set_assumed_size(text, change.coordinate, change.new)
            expected = _expected(data, change)
            if tomllib.loads(edited) != expected:
                raise _Unsupported("the edit would change something else")
        except (_Unsupported, tomllib.TOMLDecodeError):
            skipped.append(change)
            continue
        text, data = edited, expected
    return text, skipped
