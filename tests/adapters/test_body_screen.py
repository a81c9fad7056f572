"""The request body screen (``quotaql.asgi.read_body``) every adapter parses through: its
bounds are exact, measured before anything is parsed, and cheap on the bodies that made the
old Python bracket loop slow."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaql.asgi import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_VALUES,
    InvalidBody,
    read_body,
    screen_body,
)

# JSON values whose strings hold what confuses a bracket count: brackets, quotes,
# backslashes, escapes.
TRICKY = st.text(alphabet='[]{}"\\,:/aé\n', max_size=8)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TRICKY,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TRICKY, inner, max_size=3),
    max_leaves=40,
)


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


def counted(value: Any) -> int:
    """What the screen counts: each container, and each item or member after its first (a
    comma before it); never more than the values the body holds."""
    if isinstance(value, dict | list):
        items = list(value.values()) if isinstance(value, dict) else value
        return 1 + max(len(items) - 1, 0) + sum(map(counted, items))
    return 0


@settings(max_examples=400, deadline=None)
@given(value=VALUES, limit=st.integers(min_value=0, max_value=8), ascii_only=st.booleans())
def test_the_nesting_bound_is_exact_whatever_the_strings_hold(
    value: Any, limit: int, ascii_only: bool
) -> None:
    body = json.dumps({"query": "{ a { b } }", "variables": {"v": value}}, ensure_ascii=ascii_only)
    expected = "too_deep" if depth(value) + 2 > limit else None
    assert screen_body(body.encode(), limit) == expected


@settings(max_examples=300, deadline=None)
@given(value=VALUES, limit=st.integers(min_value=1, max_value=60))
def test_the_value_bound_counts_containers_and_commas_outside_strings(
    value: Any, limit: int
) -> None:
    body = json.dumps({"v": value})
    expected = "too_many_values" if counted({"v": value}) >= limit else None
    assert screen_body(body.encode(), 64, limit) == expected


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        # A NUL in its first bytes: json.loads(bytes) would read it as UTF-16.
        ('{"query":"x"}'.encode("utf-16-le"), "not_json"),
        (b"\xef\xbb\xbf{}", "not_json"),  # a UTF-8 byte order mark is no JSON
        (b'{"query": "\\"[[[[[[[[", "a": 1}', None),  # an escaped quote ends no string
        (b'{"query": "\\\\", "a": ' + b"[" * 9 + b"]" * 9 + b"}", "too_deep"),
        (b'[{"query": "x"}, {"query": "y"}]', None),
        (b"[ \n {}]", None),
        (b"[{}, 1]", "not_an_operation"),
        (b'{"a": 1} {"b": 2}', "not_json"),
    ],
)
def test_edge_cases(body: bytes, reason: str | None) -> None:
    assert screen_body(body, 8) == reason


def test_a_get_parameter_may_be_an_object_or_null_only() -> None:
    assert read_body("null", parameter=True) is None
    assert read_body('{"a": [1]}', parameter=True) == {"a": [1]}
    for text in ("[1]", "5", '"a"', "[{}]"):
        with pytest.raises(InvalidBody) as refused:
            read_body(text, parameter=True)
        assert refused.value.reason == "not_an_object"


def test_the_refusal_names_the_bound_it_crossed() -> None:
    with pytest.raises(InvalidBody) as deep:
        read_body(b"[" * 10 + b"]" * 10, 4)
    with pytest.raises(InvalidBody) as many:
        read_body(b'{"a": [' + b"1," * 50 + b"1]}", max_values=20)
    assert deep.value.message == "The request body nests deeper than 4 levels."
    assert many.value.message == "The request body holds more than 20 JSON values."
    assert many.value.payload() == {
        "data": None,
        "errors": [
            {
                "message": "The request body holds more than 20 JSON values.",
                "extensions": {"code": "INVALID_REQUEST_BODY", "reason": "too_many_values"},
            }
        ],
    }


def test_the_default_bounds_leave_room_for_an_honest_bulk_mutation() -> None:
    rows = [{f"field{i}": f"value {i}" for i in range(14)} for _ in range(1_000)]
    body = json.dumps({"query": "mutation ($rows: [Row!]!) { load(rows: $rows) }",
                       "variables": {"rows": rows}})  # fmt: skip
    assert read_body(body)["variables"]["rows"] == rows


def wide(unit: bytes, size: int = 537_000) -> bytes:
    """``{"query": ..., "variables": {"a": [unit, unit, ...]}}`` of about ``size`` bytes."""
    head, tail = b'{"query": "{ hello }", "variables": {"a": [', b"]}}"
    units = (size - len(head) - len(tail)) // (len(unit) + 1)
    return head + b",".join([unit] * units) + tail


def thread_ms(body: bytes, **bounds: int) -> float:
    """The screen's thread CPU time on ``body``, best of five (a busy machine adds to wall
    time, not to this thread's CPU time)."""
    best = float("inf")
    for _ in range(5):
        start = time.thread_time()
        screen_body(body, **bounds)
        best = min(best, time.thread_time() - start)
    return best * 1_000


@pytest.mark.parametrize(
    ("unit", "reason"),
    [
        (b"[]", "too_many_values"),  # 179,000 empty lists
        (b'"[{"', "too_many_values"),  # brackets in strings
        (b"[" * 59 + b"]" * 59, "too_many_values"),  # 266,000 brackets 59 deep
    ],
    ids=["empty lists", "bracket strings", "lists 59 deep"],
)
def test_a_wide_537_kb_body_is_screened_in_a_few_milliseconds(unit: bytes, reason: str) -> None:
    """The Python loop over the brackets took 23-90 ms of CPU on these (and json.loads as
    much again, or 100 ms for the deep lists); the screen refuses them before parsing."""
    body = wide(unit)
    assert screen_body(body) == reason
    assert thread_ms(body) < 20


def test_a_wide_body_within_the_bounds_costs_no_more_than_its_parse() -> None:
    body = wide(b"[" * 59 + b"]" * 59, size=38_000)  # 19,000 counted, 61 deep
    assert screen_body(body, DEFAULT_MAX_DEPTH, DEFAULT_MAX_VALUES) is None
    start = time.thread_time()
    json.loads(body)
    parse = (time.thread_time() - start) * 1_000
    assert thread_ms(body) < 2 * parse + 5


def test_a_body_nested_50000_deep_is_refused_in_one_pass() -> None:
    body = b'{"query": "{ hello }", "variables": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    assert screen_body(body) == "too_deep"
    assert thread_ms(body) < 5


def test_a_megabyte_list_variable_is_refused_before_it_is_parsed() -> None:
    """500,000 integers in a list variable, just under BodyLimit's 1 MiB: the variables'
    own bound ([cost] max_variable_values) refused it after the framework parsed it (25-60
    ms over HTTP); the body screen refuses it first."""
    body = json.dumps({"query": "query($v: [Int!]!) { count(values: $v) }",
                       "variables": {"v": [1] * 500_000}}, separators=(",", ":")).encode()  # fmt: skip
    assert 1_000_000 < len(body) < 1_048_576
    assert screen_body(body) == "too_many_values"
    start = time.thread_time()
    json.loads(body)
    parse = (time.thread_time() - start) * 1_000
    assert thread_ms(body) < min(10.0, parse)
