"""Validate once, attacked: the graphql-core recipe (``Gate.parse``, ``Gate.validate``).

A document that passed the static pass and validation is kept (per schema object, rules
and ``[cost]`` limits) and is not checked again (issue 23). Each test here is a way that
could serve a document what it must not get: another schema's result, a schema rebuilt, a
request with an extra rule, a shadow-mode or unlimited subject's pass for an enforced one,
the limits before a reload, an invalid document kept; then the work it saves, and a flood
of new documents against an honest client's, measured.

Validations are counted by wrapping graphql-core's ``validate`` where the gate calls it
(``quotaql.gate.documents.validate``), per document text. The Strawberry and Ariadne
versions, on real servers, are tests/adapters/*/test_validate_once.py.
"""

from __future__ import annotations

import collections
import os
import time
from typing import TYPE_CHECKING, Any

import pytest
from graphql import (
    ASTValidationRule,
    DocumentNode,
    FieldNode,
    GraphQLError,
    build_schema,
    specified_rules,
)

from quotaql.config import default_config
from quotaql.cost_analysis import analyzer, validation
from quotaql.gate import Gate, documents

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from graphql import GraphQLSchema

    from quotaql.gate import Operation

SDL = """
type Query { hello: String  node: Node  legacy: String }
type Node { name: String  child: Node }
"""
SCHEMA = build_schema(SDL)
WITHOUT_LEGACY = SDL.replace("legacy: String", "")

LEGACY = "{ legacy }"  # valid against SDL, not without the field
DEEP = "{ node { child { child { name } } } }"  # depth 4 (max_depth: pricing checks it too)
WIDE = "{ hello a: hello b: hello c: hello node { name } }"  # 6 fields: the static pass only
HELLO = "query Honest { hello node { name } }"

TOML = """
[limits]
reload_interval = 0.05
[cost]
max_depth = 3
max_fields = 5
[tiers.free]
capacity = 100
refill_per_second = 0.001
[tiers.trial]
mode = "shadow"
capacity = 100
refill_per_second = 0.001
[tiers.dark]
mode = "off"
capacity = 100
refill_per_second = 0.001
[tenants.t]
tier = "free"
[tenants.newbie]
tier = "trial"
[tenants.lurker]
tier = "dark"
"""


def scope(key: str | None = "t", peer: str = "203.0.113.9") -> dict[str, Any]:
    headers = [] if key is None else [(b"x-api-key", key.encode())]
    return {"type": "http", "client": (peer, 40000), "headers": headers}


class NoHello(ASTValidationRule):
    """An application's own rule: ``hello`` may not be selected."""

    def enter_field(self, node: FieldNode, *_: Any) -> None:
        if node.name.value == "hello":
            self.report_error(GraphQLError("NoHello: hello is not for this client", node))


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """graphql-core validations the gate runs, by document text."""
    counts: collections.Counter[str] = collections.Counter()
    real = documents.validate

    def counting(schema: GraphQLSchema, document: DocumentNode, *args: Any, **kwargs: Any) -> Any:
        counts[text(document)] += 1
        return real(schema, document, *args, **kwargs)

    monkeypatch.setattr(documents, "validate", counting)
    return counts


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "quotaql.toml"
    path.write_text(TOML, encoding="utf-8")
    return path


@pytest.fixture
def gate(config_file: Path) -> Gate:
    return Gate.from_config(config_file)


@pytest.fixture
def fresh_caches() -> Iterator[None]:
    """An empty parse cache (shared by the whole process): measurements start from nothing."""
    analyzer._parsed.clear()
    yield
    analyzer._parsed.clear()


def text(document: DocumentNode) -> str:
    assert document.loc is not None
    return document.loc.source.body


def request(
    gate: Gate,
    schema: Any,
    query: str,
    key: str | None = "t",
    rules: Any = None,
    peer: str = "203.0.113.9",
) -> Operation:
    """One request of the recipe: begin, parse (static pass, validation), admit, finish."""
    op = gate.begin(request=scope(key, peer))
    document = gate.parse(schema, query, rules, op=op)
    op = gate.admit(schema, document, op=op)
    gate.finish(op)
    return op


def reload(gate: Gate, config_file: Path, text: str) -> None:
    """Write ``text`` as the configuration; other requests bring it in (bounded)."""
    config = gate.config
    config_file.write_text(text, encoding="utf-8")
    stamp = os.stat(config_file).st_mtime_ns + 10_000_000
    os.utime(config_file, ns=(stamp, stamp))  # a new stamp even on a coarse clock
    deadline = time.monotonic() + 5.0
    while gate.config is config:
        assert time.monotonic() < deadline, "the new configuration was not loaded"
        request(gate, SCHEMA, "{ hello }", peer="198.51.100.7")
        time.sleep(0.02)


def code(op: Operation) -> str | None:
    assert op.refused, "expected a refusal"
    return (op.errors[0].extensions or {}).get("code")


def remaining(gate: Gate, key: str = "t") -> float:
    op = request(gate, SCHEMA, "{ hello }", key)
    assert op.decision is not None
    return op.decision.remaining + op.charge  # before this probe's own charge


# -- another schema, a schema rebuilt -------------------------------------------------------


def test_a_document_valid_against_one_schema_is_refused_by_another(
    gate: Gate, validations: collections.Counter[str]
) -> None:
    other = build_schema(WITHOUT_LEGACY)
    for _ in range(3):
        assert isinstance(gate.parse(SCHEMA, LEGACY), DocumentNode)
    assert validations[LEGACY] == 1  # kept for SCHEMA
    for _ in range(2):
        refused = gate.parse(other, LEGACY)
        assert isinstance(refused, list)
        assert "Cannot query field 'legacy'" in refused[0].message
    assert validations[LEGACY] == 3  # refused: validated each time, never kept
    assert isinstance(gate.parse(SCHEMA, LEGACY), DocumentNode)  # and SCHEMA's still holds
    assert validations[LEGACY] == 3


def test_a_schema_rebuilt_without_a_field_refuses_what_the_old_one_accepted(
    gate: Gate, validations: collections.Counter[str]
) -> None:
    old = build_schema(SDL)
    request(gate, old, LEGACY)
    assert not request(gate, old, LEGACY).refused
    new = build_schema(WITHOUT_LEGACY)  # a reload: a new object, one field fewer
    op = request(gate, new, LEGACY)
    assert "Cannot query field 'legacy'" in op.errors[0].message
    assert op.charge == 1.0  # the refusal pays the minimum
    # Rebuilt the same, it is still another schema: validated again, not served the old one.
    same = build_schema(SDL)
    assert not request(gate, same, LEGACY).refused
    assert validations[LEGACY] == 3


def test_gate_validate_with_the_applications_validator_is_per_schema_too(gate: Gate) -> None:
    calls: list[GraphQLSchema] = []

    def validator(schema: GraphQLSchema, document: DocumentNode, rules: Any) -> Any:
        calls.append(schema)
        return documents.validate(schema, document, rules)

    other = build_schema(WITHOUT_LEGACY)
    document = gate.parse_document(LEGACY)
    assert gate.validate(None, SCHEMA, document, None, validator) == []
    assert gate.validate(None, SCHEMA, document, None, validator) == []
    errors = gate.validate(None, other, document, None, validator)
    assert "Cannot query field 'legacy'" in errors[0].message
    assert calls == [SCHEMA, other]


# -- extra rules ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rules",
    [
        pytest.param([*specified_rules, NoHello], id="list"),
        pytest.param((*specified_rules, NoHello), id="tuple"),
        pytest.param((NoHello,), id="the-rule-alone"),
    ],
)
def test_a_request_with_an_extra_rule_is_not_served_the_default_rules_result(
    gate: Gate, validations: collections.Counter[str], rules: Any
) -> None:
    for _ in range(2):
        assert not request(gate, SCHEMA, HELLO).refused
    assert validations[HELLO] == 1
    for _ in range(2):
        op = request(gate, SCHEMA, HELLO, rules=rules)
        assert op.errors[0].message == "NoHello: hello is not for this client"
    assert validations[HELLO] == 3
    # The same rules given as graphql-core's own tuple are the default rules: kept.
    assert not request(gate, SCHEMA, HELLO, rules=specified_rules).refused
    assert validations[HELLO] == 3


def test_a_document_kept_under_fewer_rules_is_refused_under_the_default_rules(
    gate: Gate, validations: collections.Counter[str]
) -> None:
    query = "{ hello nope }"  # no rule checks fields here: every field is "fine"
    for _ in range(2):
        assert isinstance(gate.parse(SCHEMA, query, ()), DocumentNode)
    refused = gate.parse(SCHEMA, query)
    assert isinstance(refused, list)
    assert "Cannot query field 'nope'" in refused[0].message
    assert validations[query] == 2


# -- no way around the static pass ------------------------------------------------------------


# Over max_fields, a document is refused by the static pass alone (pricing checks max_depth,
# max_aliases, max_root_fields and max_cost again; not max_fields, max_repeated_fields,
# max_directives, max_field_pairs): kept by mistake, it would run.
OVER = [
    pytest.param(DEEP, "QUERY_TOO_DEEP", id="deep"),
    pytest.param(WIDE, "TOO_MANY_FIELDS", id="wide"),
]
RELOADS = [
    pytest.param("max_depth = 3", "max_depth = 5", DEEP, "QUERY_TOO_DEEP", id="deep"),
    pytest.param("max_fields = 5", "max_fields = 10", WIDE, "TOO_MANY_FIELDS", id="wide"),
]


@pytest.mark.parametrize(("query", "refusal"), OVER)
@pytest.mark.parametrize("first", ["newbie", "lurker"], ids=["shadow", "off"])
def test_a_document_over_a_limit_let_through_for_one_subject_is_refused_for_another(
    gate: Gate, validations: collections.Counter[str], first: str, query: str, refusal: str
) -> None:
    for _ in range(3):  # let through: shadow mode logs it, mode "off" does not look
        op = request(gate, SCHEMA, query, key=first)
        assert not op.refused
        assert op.runs
    assert validations[query] == 3  # never kept: validated each time
    before = remaining(gate)
    for _ in range(2):
        op = request(gate, SCHEMA, query, key="t")
        assert code(op) == refusal
        assert op.charge == 1.0
    assert validations[query] == 3  # refused by the static pass, before validation
    assert remaining(gate) == pytest.approx(before - 1 - 2, abs=0.01)


@pytest.mark.parametrize(("lower", "higher", "query", "refusal"), RELOADS)
def test_a_reload_with_a_lower_limit_refuses_a_document_kept_under_the_old_one(
    config_file: Path,
    validations: collections.Counter[str],
    lower: str,
    higher: str,
    query: str,
    refusal: str,
) -> None:
    config_file.write_text(TOML.replace(lower, higher), encoding="utf-8")
    gate = Gate.from_config(config_file)
    for _ in range(3):
        assert not request(gate, SCHEMA, query).refused
    assert validations[query] == 1  # kept under the higher limit
    reload(gate, config_file, TOML)
    op = request(gate, SCHEMA, query)
    assert code(op) == refusal
    assert validations[query] == 1


def test_a_reload_with_other_limits_checks_kept_documents_again(
    config_file: Path, validations: collections.Counter[str]
) -> None:
    gate = Gate.from_config(config_file)
    for _ in range(2):
        assert not request(gate, SCHEMA, HELLO).refused
    assert validations[HELLO] == 1
    reload(gate, config_file, TOML.replace("max_depth = 3", "max_depth = 3\nmax_aliases = 1"))
    for _ in range(2):
        assert not request(gate, SCHEMA, HELLO).refused
    assert validations[HELLO] == 2  # checked once under the new limits, then kept


# -- invalid documents are never kept ---------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "validated", "code"),
    [
        ("{ nope }", 5, None),  # graphql-core's error: validated every time
        ("{ hello(x: 1) }", 5, None),
        (DEEP, 0, "QUERY_TOO_DEEP"),  # the static pass: never validated at all
        (WIDE, 0, "TOO_MANY_FIELDS"),
        ("{ hello", 0, "GRAPHQL_PARSE_FAILED"),
    ],
)
def test_an_invalid_document_is_checked_and_charged_every_time(
    gate: Gate, validations: collections.Counter[str], query: str, validated: int, code: str
) -> None:
    before = remaining(gate)
    for _ in range(5):
        op = request(gate, SCHEMA, query)
        assert op.refused
        assert (op.errors[0].extensions or {}).get("code") == code
        assert (op.charge, op.outcome) == (1.0, "rejected")
    assert validations[query] == validated
    assert remaining(gate) == pytest.approx(before - 1 - 5, abs=0.01)


# -- the work saved ---------------------------------------------------------------------------


def test_a_valid_repeated_document_is_validated_once(
    gate: Gate, validations: collections.Counter[str]
) -> None:
    ops = [request(gate, SCHEMA, HELLO) for _ in range(20)]
    assert all(op.runs for op in ops)
    assert validations[HELLO] == 1
    assert [op.charge for op in ops] == [1.0] * 20  # kept or not, each pays (cost 1 < min)


# -- the flood, measured ----------------------------------------------------------------------


def _flood_document(i: int, size: int = 0) -> str:
    """A new valid document; ``size``: padded with spaces to that many characters."""
    query = f"query Flood{i} {{ hello }}"
    return query.ljust(size)


@pytest.mark.usefixtures("fresh_caches")
def test_a_flood_of_new_documents_leaves_a_repeated_one_known(
    validations: collections.Counter[str],
) -> None:
    schema = build_schema(SDL)
    gate = Gate()
    flood = 10 * validation.CHECKED_DOCUMENTS
    for i in range(flood):  # each different, each valid, each sent once
        if i % 100 == 0:
            assert isinstance(gate.parse(schema, HELLO), DocumentNode)
        assert isinstance(gate.parse(schema, _flood_document(i)), DocumentNode)
    assert validations[HELLO] == 1
    assert sum(validations.values()) == flood + 1
    assert len(validation.checked(schema)) <= validation.CHECKED_DOCUMENTS


def _kept(gate: Gate, schema: Any, query: str, document: DocumentNode) -> bool:
    """Whether ``document`` (``query`` parsed) is in both caches; looks without touching."""
    limits = gate.config.cost.limits
    parsed = (query, limits.max_tokens, limits.max_length) in analyzer._parsed
    return parsed and (id(document), validation.rules_key(None)) in validation.checked(schema)


def _push_out(size: int, attackers: int = 50) -> tuple[int, float, Gate, Any, DocumentNode]:
    """Requests and points an attacker (``attackers`` addresses, default config) spends
    sending new documents of ``size`` characters, each twice, until an honest document
    (sent twice, then ~200 other new documents) is out of the caches; bounded."""
    schema = build_schema(SDL)
    gate = Gate()  # default_config(): min_charge 1, chars_per_point 1,000
    honest = request(gate, schema, HELLO, peer="192.0.2.1")
    assert not request(gate, schema, HELLO, peer="192.0.2.1").refused
    document = honest.document
    assert isinstance(document, DocumentNode)
    for i in range(200):  # others' documents, once each: the honest one now protected
        request(gate, schema, f"query Other{i} {{ hello }}", peer="192.0.2.2")
    assert _kept(gate, schema, HELLO, document)
    requests, points = 0, 0.0
    for i in range(3_000):
        for _ in range(2):
            peer = f"203.0.113.{requests % attackers + 1}"
            op = request(gate, schema, _flood_document(i, size), key=None, peer=peer)
            assert op.runs, "the attacker was refused: more addresses"
            requests += 1
            points += op.charge
        if not _kept(gate, schema, HELLO, document):
            break
    return requests, points, gate, schema, document


@pytest.mark.usefixtures("fresh_caches")
@pytest.mark.parametrize("size", [0, 1_000, 10_000])
def test_pushing_a_known_document_out_takes_each_flood_document_twice(
    validations: collections.Counter[str], size: int
) -> None:
    config = default_config()
    min_charge, per_point = config.limits.min_charge, config.cost.chars_per_point
    assert per_point is not None
    requests, points, gate, schema, document = _push_out(size)
    refill = config.tiers["free"].quota.refill_per_second
    print(
        f"\nflood of {size or 'small'}-character documents, each sent twice: the honest"
        f" document is out after {requests} requests ({requests // 2} documents),"
        f" {points:g} points at min_charge {min_charge:g} and chars_per_point {per_point};"
        f" at the default tier's refill ({refill:g}/s) that is {points / refill:.1f} s of"
        " one address's points"
    )
    assert not _kept(gate, schema, HELLO, document)
    # Each flood document twice, until the kept documents (small ones: their number) or
    # their characters (large ones) are filled with them: the probation's and the
    # protected part's, less a margin.
    if size == 0:
        assert requests >= 0.95 * 2 * validation.CHECKED_DOCUMENTS
    else:
        assert requests >= 0.9 * 2 * validation.CHECKED_SIZE / size
    # Each request paid its size (chars_per_point) or the minimum; the whole push, at any
    # size, about twice the kept characters' worth of points.
    assert points == pytest.approx(requests * max(min_charge, size / per_point))
    assert points >= 0.9 * 2 * validation.CHECKED_SIZE / per_point
    # The honest client's next request checks it again (and it is kept again).
    assert validations[HELLO] == 1
    assert not request(gate, schema, HELLO, peer="192.0.2.1").refused
    assert validations[HELLO] == 2
