"""Find the line of each key of a TOML text, so that an error can point at it."""

from __future__ import annotations

import bisect
import itertools
import json
import re
import tomllib
from contextlib import suppress
from typing import Final

__all__ = ["KeyPath", "locate", "render_key"]

#: A key path into the document: table and key names, and indexes into arrays.
KeyPath = tuple[str | int, ...]

_BARE_KEY: Final = re.compile(r"[A-Za-z0-9_-]+")
_SCALAR: Final = re.compile(r"[^,\]}#\n]*")  # a number, boolean or date-time, and trailing blanks


def render_key(path: KeyPath) -> str:
    """``("cost", "weights", "User.followers")`` -> ``cost.weights."User.followers"``."""
    rendered = ""
    for part in path:
        if isinstance(part, int):
            rendered += f"[{part}]"
            continue
        name = part if _BARE_KEY.fullmatch(part) else json.dumps(part, ensure_ascii=False)
        rendered += f".{name}" if rendered else name
    return rendered


class _UnlocatableError(Exception):
    """The text is not what the locator expects; keep what was located so far."""


def locate(text: str) -> dict[KeyPath, int]:
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
