"""A ``quotaql.toml`` as read: its tables, the line of each key, and errors that blame them."""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, time
from typing import TYPE_CHECKING, Any, Final, TypeVar

from quotaql.config.locator import KeyPath, locate, render_key
from quotaql.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator, Mapping

__all__ = ["Document", "Table", "describe_value", "read_document"]

T = TypeVar("T")

_DECODE_ERROR: Final = re.compile(
    r"(?P<reason>.*) \(at (?:line (?P<line>\d+), column \d+|end of document)\)", re.DOTALL
)


@dataclass(frozen=True, slots=True)
class Document:
    """A parsed file with the line of each key, so that any value can be blamed precisely.

    ``problems`` is ``None`` (the default) to raise at the first error, as loading does; a
    list to collect every error into it instead (``quotaql check-config``): a check that
    fails then reports its error and the reading goes on with the key left out, as if the
    file did not give it.
    """

    file: str
    data: Mapping[str, object]
    lines: Mapping[KeyPath, int]
    problems: list[ConfigError] | None = field(default=None, compare=False)
    #: When collecting: each key reported, and each of its parents.
    _blamed: set[str] = field(default_factory=set, compare=False, repr=False)

    def report(self, error: ConfigError) -> None:
        """Raise ``error``, or (when collecting) add it to ``problems``.

        An error about a key at or above one already reported (or about the whole file,
        once any is) is left out: it follows from the first (a tier whose capacity is
        wrong also lacks a capacity). A set of the keys blamed keeps this linear in the
        errors: a file of thousands of wrong keys is read as fast as one.
        """
        if self.problems is None:
            raise error
        key = error.key
        if (key is None and self.problems) or key in self._blamed:
            return
        self.problems.append(error)
        if key is not None:  # a quoted part may hold dots: extra prefixes match no key
            parts = key.split(".")
            self._blamed.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))

    def fail(self, path: KeyPath, reason: str) -> None:
        """Report the error ``reason`` at ``path`` (raise it, unless collecting)."""
        self.report(self.error(path, reason))

    @contextmanager
    def attempt(self) -> Iterator[None]:
        """Report a ``ConfigError`` raised in the block: raised as is, unless collecting,
        when it is added to ``problems`` and the code after the block runs on."""
        try:
            yield
        except ConfigError as error:
            self.report(error)

    def line(self, path: KeyPath) -> int | None:
        """The line that defines ``path``, else that of its closest located parent."""
        for end in range(len(path), 0, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None

    def error(self, path: KeyPath, reason: str) -> ConfigError:
        return ConfigError(
            reason, file=self.file, key=render_key(path) if path else None, line=self.line(path)
        )


@dataclass(frozen=True, slots=True)
class Table:
    """One table of the document and where it is."""

    doc: Document
    path: KeyPath
    data: Mapping[str, object]

    def get(self, key: str, check: Callable[[Document, KeyPath, object], T]) -> T | None:
        """``check`` the value of ``key``; ``None`` when the key is absent."""
        if key not in self.data:
            return None
        try:
            return check(self.doc, (*self.path, key), self.data[key])
        except ConfigError as error:
            self.doc.report(error)  # raises, unless collecting: then the key is left out
            return None

    def read(
        self, checks: Mapping[str, Callable[[Document, KeyPath, object], object]]
    ) -> dict[str, Any]:
        """Each key of ``checks`` that the table has, with its value checked by its check, in
        the order of ``checks`` (so that of two wrong values, the first is the one blamed).
        When collecting errors, a wrong value is reported and left out."""
        values: dict[str, Any] = {}
        for key, check in checks.items():
            if key in self.data:
                with self.doc.attempt():
                    values[key] = check(self.doc, (*self.path, key), self.data[key])
        return values

    def table(self, key: str) -> Table:
        """The subtable ``key``; an empty one when the key is absent."""
        return _table(self.doc, (*self.path, key), self.data.get(key, {}))

    def check_keys(self, known: Collection[str], what: str = "key") -> None:
        """Reject the first key not in ``known`` (each of them, when collecting errors),
        suggesting the closest known one."""
        for key in self.data:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = (
                    f"did you mean {close[0]!r}?"
                    if close
                    else "expected one of: " + ", ".join(repr(k) for k in known)
                )
                self.doc.fail((*self.path, key), f"unknown {what}; {hint}")

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


def read_document(file: str) -> Document:
    """Read and parse ``file``, locating each of its keys."""
    try:
        with open(file, "rb") as stream:
            raw = stream.read()
    except OSError as exc:
        reason = f"cannot read the file ({exc.strerror or exc})"
        if not os.path.isabs(file):  # say where a relative path was looked for
            reason += f"; {file} is relative to the working directory: {os.path.abspath(file)}"
        raise ConfigError(reason, file=file) from exc
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
    except RecursionError as exc:  # tomllib recurses into nested arrays and inline tables
        raise ConfigError("invalid TOML: values nested too deep", file=file) from exc
    return Document(file, data, locate(text))


def _table(doc: Document, path: KeyPath, value: object) -> Table:
    """The table at ``path``, or an error if the value there is not one (an empty table
    when collecting errors)."""
    if not isinstance(value, dict):
        doc.fail(path, f"expected a table, got {describe_value(value)}")
        return Table(doc, path, {})
    return Table(doc, path, value)


#: The TOML types as an error names them, each with how its value shows (if it does); a
#: bool is an int and a datetime a date, so they come first.
_TOML_TYPES: Final[tuple[tuple[type, str, Callable[[Any], str] | None], ...]] = (
    (bool, "a boolean", lambda value: "true" if value else "false"),
    (int, "an integer", format),
    (float, "a float", repr),
    (str, "a string", lambda value: json.dumps(value, ensure_ascii=False)),
    (list, "an array", None),
    (dict, "a table", None),
    (datetime, "a date-time", datetime.isoformat),
    (date, "a date", date.isoformat),
    (time, "a time", time.isoformat),
)


def describe_value(value: object) -> str:
    """Name a TOML value's type and show it as TOML would (``a string ("10")``)."""
    for kind, name, show in _TOML_TYPES:
        if isinstance(value, kind):
            return name if show is None else f"{name} ({show(value)})"
    return type(value).__name__
