"""Editing ``quotaql.toml``: the proposed sizes written into its text, nothing else moved.

tomlkit reads the file into a document that keeps every comment, blank line and spelling
of it; a change sets one value there, or adds one key or one table, and the document is
written back as it was read but for that.
"""

from __future__ import annotations

import copy
import difflib
import tomllib
from typing import TYPE_CHECKING, Any, TypeGuard

import tomlkit
from tomlkit.container import Container
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import AoT, Comment, InlineTable, Table, Whitespace

from quotaql.tune.proposal import DEFAULT_LIST_SIZE, WEIGHT

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tomlkit.items import Item, Key

    from quotaql.tune.proposal import Change


class _Unsupported(Exception):
    """A layout tune does not edit (the change is then left to the user)."""


def _entries(
    parents: Sequence[Container | Table], name: str
) -> list[tuple[Container | Table, Key, Item]]:
    """Every item named ``name`` in ``parents``: ``(parent, key, item)``. A table that
    other headers split (``[cost]`` ... ``[limits]`` ... ``[cost.weights]``) is several
    parents, and so is a table that dotted keys name (``weights."Q.a" = 2``)."""
    found: list[tuple[Container | Table, Key, Item]] = []
    for parent in parents:
        body = parent.body if isinstance(parent, Container) else parent.value.body
        found.extend(
            (parent, key, item) for key, item in body if key is not None and key.key == name
        )
    return found


def _tables(parents: Sequence[Container | Table], name: str) -> list[tuple[Key, Table]]:
    """The tables named ``name`` in ``parents``: ``[name]``, the parts of it, and the
    tables dotted keys make."""
    tables = []
    for _, key, item in _entries(parents, name):
        if not isinstance(item, Table):  # cost = { ... }, weights = { ... }
            raise _Unsupported(f"{name} is not a table of its own")
        tables.append((key, item))
    return tables


def _is_header(item: Item, key: Key) -> TypeGuard[Table]:
    """Whether ``item`` is a table with a header of its own (not the part of a dotted
    header's path, ``cost`` of ``[cost.weights]``, nor the table of dotted keys)."""
    return isinstance(item, Table) and not key.is_dotted() and not item.is_super_table()


def _is_pair(item: Item, key: Key) -> bool:
    """Whether ``item`` is written ``key = value`` (dotted keys included), not under a
    header."""
    return not isinstance(item, Table | AoT) or key.is_dotted()


def _header(tables: Sequence[tuple[Key, Table]]) -> Table | None:
    return next((table for key, table in tables if _is_header(table, key)), None)


def _insert(table: Table, key: str, item: Item) -> None:
    """``key = item`` (or the table ``item``) right after the last pair of ``table``: before
    the comments and the sub-tables that follow its pairs (right under its header if it
    has no pair)."""
    body = table.value.body
    pairs = [i for i, (k, v) in enumerate(body) if k is not None and _is_pair(v, k)]
    if pairs and not isinstance(item, Table):
        item.trivia.indent = body[pairs[-1]][1].trivia.indent  # the pairs' indentation
    _insert_at(table, pairs[-1] + 1 if pairs else 0, key, item)


def _insert_at(table: Table, index: int, key: str, item: Item) -> None:
    """``key = item`` (or the table ``item``) at ``index`` of ``table``'s items.

    tomlkit's public ``append`` puts a pair after the comments that end a table's pairs,
    and a table after its sub-tables; it has no public call that puts an item at a place
    (python-poetry/tomlkit#7). ``Container._insert_at`` does, as ``_insert_after`` does
    for poetry, tomlkit's own project, when it edits pyproject.toml. tests/test_tune.py
    holds the placement, so a tomlkit that changes it fails there.
    """
    if index < len(table.value.body):
        table.value._insert_at(index, key, item)
    else:
        table.raw_append(key, item)  # append would indent it once more, as its header


def _detach_end(table: Table) -> list[Comment | Whitespace]:
    """The comments and blank lines that end ``table``, taken off it: they belong to the
    header after them."""
    body = table.value.body
    end = len(body)
    while end and body[end - 1][0] is None and isinstance(body[end - 1][1], Comment | Whitespace):
        end -= 1
    tail = [item for _, item in body[end:] if isinstance(item, Comment | Whitespace)]
    del body[end:]  # keyless items at the end: nothing indexes them
    return tail


def _line(value: str, newline: str) -> Item:
    """The item of a pair whose value is written ``value``, its line ending ``newline``."""
    item = tomlkit.value(value)
    item.trivia.trail = newline
    return item


def _new_table(key: str, item: Item, newline: str, *, indent: str = "") -> Table:
    """A table holding ``key = item``; ``indent`` goes before its header (a blank line)."""
    table = tomlkit.table()
    table.trivia.indent = indent
    table.trivia.trail = newline
    table.append(key, item)
    return table


def _appended(text: str, path: Sequence[str], key: str, item: Item, newline: str) -> str:
    """``text`` followed by a blank line and the table ``path`` holding ``key = item``."""
    block = tomlkit.document()
    table = _new_table(key, item, newline)
    for name in reversed(path[1:]):
        parent = tomlkit.table(is_super_table=True)
        parent.append(name, table)
        table = parent
    block.append(path[0], table)
    return text + (newline if text.strip() else "") + block.as_string()


def number_text(value: float) -> str:
    """``value`` as TOML writes it: a whole number without its ``.0``."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _set_field(text: str, coordinate: str, setting: str, size: float, newline: str) -> str:
    """``text`` with ``coordinate``'s ``setting`` (``assumed_size``, ``weight``) set to
    ``size``."""
    value = number_text(size)
    document = tomlkit.parse(text)
    costs = _tables([document], "cost")
    weights = _tables([table for _, table in costs], "weights")
    # [cost.weights."Query.products"] before the parts of [cost.weights."Query.products".x]
    entries = sorted(
        _entries([table for _, table in weights], coordinate),
        key=lambda entry: isinstance(entry[2], Table) and not _is_header(entry[2], entry[1]),
    )
    if entries:
        parent, key, current = entries[0]
        if isinstance(current, Table | AoT) and not _is_header(current, key):
            # "Query.products".weight = 2, [cost.weights."Query.products".more]
            raise _Unsupported(f"{coordinate} is set with dotted keys or sub-tables")
        if isinstance(current, Table):  # [cost.weights."Query.products"]
            if setting in current:
                current[setting] = tomlkit.value(value)
            else:
                _insert(current, setting, _line(value, newline))
        elif isinstance(current, InlineTable):  # "Query.products" = { ... }
            _set_inline(parent, coordinate, current, setting, value)
        elif setting == WEIGHT:  # "Query.products" = 3: its weight
            parent[coordinate] = _commented(current, tomlkit.value(value))
        else:
            inline = f"{{ weight = {current.as_string()}, {setting} = {value} }}"
            parent[coordinate] = _commented(current, tomlkit.value(inline))
        return document.as_string()
    pair = _line(f"{{ {setting} = {value} }}", newline)
    header = _header(weights)
    fields = [  # the [cost.weights."Type.field"] tables
        (parent, index, item)
        for _, parent in weights
        for index, (key, item) in enumerate(parent.value.body)
        if key is not None and _is_header(item, key)
    ]
    cost = _header(costs)
    if header is not None:  # [cost.weights]: one more line there
        _insert(header, coordinate, pair)
    elif fields:  # one more table after the last
        parent, index, table = fields[-1]
        new = _new_table(setting, _line(value, newline), newline, indent=newline)
        for end in _detach_end(table):
            new.add(end)
        _insert_at(parent, index + 1, coordinate, new)
    elif cost is not None:  # after the [cost] table's keys
        _insert(cost, "weights", _new_table(coordinate, pair, newline, indent=newline))
    else:
        return _appended(text, ("cost", "weights"), coordinate, pair, newline)
    return document.as_string()


def _set_inline(
    parent: Container | Table, coordinate: str, inline: InlineTable, setting: str, value: str
) -> None:
    if setting in inline:
        inline[setting] = tomlkit.value(value)
    elif not inline:  # {}
        parent[coordinate] = _commented(inline, tomlkit.value(f"{{ {setting} = {value} }}"))
    else:  # the new pair goes before the space that closes it: { a = 1, assumed_size = 3 }
        body = inline.value.body
        closing = body.pop()[1] if body[-1][0] is None else None
        inline.append(setting, tomlkit.value(value))
        if closing is not None:
            inline.append(None, closing)


def _commented(old: Item, new: Item) -> Item:
    """``new`` with the comment and the line end of ``old``."""
    new.trivia.comment_ws = old.trivia.comment_ws
    new.trivia.comment = old.trivia.comment
    new.trivia.trail = old.trivia.trail
    return new


def _set_default_list_size(text: str, size: float, newline: str) -> str:
    document = tomlkit.parse(text)
    costs = _tables([document], "cost")
    entries = _entries([table for _, table in costs], DEFAULT_LIST_SIZE)
    cost = _header(costs)
    if entries:
        parent, _, _ = entries[0]
        parent[DEFAULT_LIST_SIZE] = tomlkit.value(number_text(size))
    elif cost is not None:
        _insert(cost, DEFAULT_LIST_SIZE, _line(number_text(size), newline))
    else:
        line = _line(number_text(size), newline)
        return _appended(text, ("cost",), DEFAULT_LIST_SIZE, line, newline)
    return document.as_string()


def _edited(text: str, change: Change, newline: str) -> str:
    """``text`` with ``change`` made (not checked yet)."""
    # A file whose last line has no newline is read with one (tomlkit would end that line
    # with "\n" to put a line after it, whatever the file's newline), and given it only
    # when a line was added after that last line.
    padded = text if not text or text.endswith("\n") else text + newline
    if change.coordinate is None:
        edited = _set_default_list_size(padded, change.new, newline)
    else:
        edited = _set_field(padded, change.coordinate, change.setting, change.new, newline)
    if padded != text:
        last = padded[padded.rfind("\n", 0, -1) + 1 :]
        if edited.count("\n") == padded.count("\n") or edited.endswith(last):
            edited = edited.removesuffix(newline)
    return edited


def _kept(old: str, new: str) -> bool:
    """Whether ``new`` holds the lines of ``old`` in their order, but for one (the line of
    a value replaced): tomlkit moves some tables of a file it reads (an array of tables
    between the parts of another table), and an edit must move nothing."""
    lines = old.splitlines()
    matcher = difflib.SequenceMatcher(None, lines, new.splitlines(), autojunk=False)
    return sum(block.size for block in matcher.get_matching_blocks()) >= len(lines) - 1


def _expected(data: dict[str, Any], change: Change) -> dict[str, Any]:
    """What the file's data must be after ``change``."""
    expected = copy.deepcopy(data)
    cost = expected.setdefault("cost", {})
    new = tomllib.loads(f"v = {number_text(change.new)}")["v"]  # as the file will read it
    if change.coordinate is None:
        cost[DEFAULT_LIST_SIZE] = new
        return expected
    weights = cost.setdefault("weights", {})
    current = weights.get(change.coordinate)
    setting = change.setting
    if isinstance(current, dict):
        current[setting] = new
    elif current is None:
        weights[change.coordinate] = {setting: new}
    elif setting == WEIGHT:
        weights[change.coordinate] = new
    else:
        weights[change.coordinate] = {WEIGHT: current, setting: new}
    return expected


def edit(text: str, changes: Sequence[Change]) -> tuple[str, list[Change]]:
    """``text`` (a ``quotaql.toml``) with ``changes`` made, and the changes it could not make.

    The text is edited, not re-serialised: a value is replaced in place, a missing key is
    added to its table (or its table added after ``[cost]``), and nothing else moves. Each
    change is checked by parsing the result: its data must be the file's with exactly that
    change; a change that would come out otherwise is not made, and is returned.
    """
    data = tomllib.loads(text)
    newline = "\r\n" if "\r\n" in text else "\n"
    skipped = []
    for change in changes:
        try:
            edited = _edited(text, change, newline)
            if not _kept(text, edited):
                raise _Unsupported("the edit would move other lines")
            expected = _expected(data, change)
            if tomllib.loads(edited) != expected:
                raise _Unsupported("the edit would change something else")
        except (_Unsupported, TOMLKitError, tomllib.TOMLDecodeError):
            skipped.append(change)
            continue
        text, data = edited, expected
    return text, skipped
