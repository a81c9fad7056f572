"""``quotaql tune``: list sizes from the tuning metrics of real prometheus-client registries,
read from their /metrics text and from a real Prometheus server scraping them."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import tomllib
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest, start_http_server

from quotaql.cli import app
from quotaql.config import load_config
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.tune import Change, edit
from tests.support.servers import PrometheusServer, free_port, scrape_config

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

CONFIG = """\
# The shop's configuration.
[cost]
max_depth = 8   # deep enough
default_list_size = 10

[cost.weights]
"Customer" = 3
"Product.tags" = { weight = 1, assumed_size = 100 }  # tags are few

[limits]
mode = "enforce"
"""


def shop_traffic(metrics: PrometheusMetrics, operations: range) -> None:
    """What the gate would record for ``operations`` of the shop, deterministically.

    Each operation: ``products(first: 20)`` (every tenth returns 25: a resolver that does
    not enforce ``first``), three products each with ``reviews`` (20..45 items, priced at
    the default 10), ``related`` (0..2, the default 10) and ``tags`` (0..3, priced at the
    file's assumed_size 100); its cost estimated 500 and actually 100..600. The operations
    come from 40 tenants in turn.
    """
    for i in operations:
        lists = [("Query.products", 20, 25 if i % 10 == 0 else 20, True)]
        for k in range(3):
            lists.append(("Product.reviews", 10, (3 * i + k) % 26 + 20, False))
            lists.append(("Product.related", 10, k, False))
            lists.append(("Product.tags", 100, (i + k) % 4, False))
        metrics.list_sizes(lists, f"key:tenant-{i % 40}")
        metrics.estimate("query", "free", 500, 100 + (i % 6) * 100)
    metrics.flush(final=True)  # the subjects' minute is over: the worker stops


def registry_with(operations: range) -> CollectorRegistry:
    registry = CollectorRegistry()
    shop_traffic(PrometheusMetrics(registry), operations)
    return registry


def dump(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def invoke(*args: str, stdin: str | None = None) -> Any:
    return CliRunner().invoke(
        app, ["tune", *args], input=stdin, catch_exceptions=False, prog_name="quotaql"
    )


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "quotaql.toml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


@pytest.fixture
def metrics_file(tmp_path: Path) -> Path:
    path = tmp_path / "metrics.txt"
    path.write_text(dump(registry_with(range(400))), encoding="utf-8")
    return path


def report_and_diff(output: str) -> tuple[list[str], str]:
    """The ``#`` lines (without ``# ``) and the diff after them."""
    lines = output.splitlines(keepends=True)
    comments = [line for line in lines if line.startswith("#")]
    assert lines[: len(comments)] == comments, "the report comes first, then the diff"
    return [line[2:].rstrip("\n") for line in comments], "".join(lines[len(comments) :])


EXPECTED_DIFF = "".join(
    f"{line}\n"
    for line in (
        "--- {path}",
        "+++ {path}",
        "@@ -5,7 +5,9 @@",
        " ",
        " [cost.weights]",
        ' "Customer" = 3',
        '-"Product.tags" = {{ weight = 1, assumed_size = 100 }}  # tags are few',
        '+"Product.tags" = {{ weight = 1, assumed_size = {tags} }}  # tags are few',
        '+"Product.related" = {{ assumed_size = {related} }}',
        '+"Product.reviews" = {{ assumed_size = {reviews} }}',
        " ",
        " [limits]",
        ' mode = "enforce"',
    )
)


def expected_diff(path: Path, reviews: int, *, allow_decrease: bool = False) -> str:
    """The diff of the shop's file: reviews raised to ``reviews``; tags (0..3) and related
    (0..2) lowered all the way with ``allow_decrease``, else by a factor 2 at most."""
    tags, related = (3, 2) if allow_decrease else (50, 5)
    return EXPECTED_DIFF.format(path=path, reviews=reviews, tags=tags, related=related)


# The evidence of Product.reviews: 1,200 lists of 20..45 items, priced at 10; 50 is the
# smallest bucket edge holding p99 of them (the buckets are ... 30, 50 ...), and 45, the
# longest list, is below it: every list had at most 45 items.
REVIEWS_EVIDENCE = [
    "Product.reviews: assumed_size 10 -> 45 (its lists were longer than assumed)",
    "  the servers assumed 10 items, from default_list_size (default_list_size = 10)",
    "  lists seen: 1,200 in 400 sampled operations",
    "  items per list: p50 31 to 45, p95 31 to 45, p99 31 to 45, max 45",
    "  mean items per list: 32.5",
    "  subjects: 40 subject-minutes (each subject, an address by its network, counts once a"
    " minute); their longest lists: p50 31 to 45, p99 31 to 45",
    "  lists longer than the size (under-estimated): 1,200 at 10 now, 0 at 45",
    # At most 9 items: none (8 and 10 are edges, both 0). At most 49: between the counts at
    # the edges 30 (sizes 20..30: residues 0..10 of n mod 26 for n < 1200, 4 x 47 + 7 x 46)
    # and 50 (all).
    "  lists shorter than the size (over-estimated): 0 at 10 now, between 510 and 1,200 at 45",
    "  operations with a list of this field longer than the size: 400 at 10 now, 0 at 45 (of 400)",
]


def test_the_diff_and_its_evidence_from_a_metrics_dump(config: Path, metrics_file: Path) -> None:
    result = invoke("--config", str(config), "--metrics", str(metrics_file))
    all_the_way = invoke(
        "--config", str(config), "--metrics", str(metrics_file), "--allow-decrease"
    )

    assert result.exit_code == 0, result.output
    report, diff = report_and_diff(result.stdout)
    assert diff == expected_diff(config, 45)
    start = report.index(REVIEWS_EVIDENCE[0])
    assert report[start : start + len(REVIEWS_EVIDENCE)] == REVIEWS_EVIDENCE
    # The tags lists say 3, and so do the subjects: halved at most without --allow-decrease.
    start = report.index(
        "Product.tags: assumed_size 100 -> 50 (its lists were much shorter than assumed)"
    )
    assert report[start + 1 : start + 7] == [
        "  the servers assumed 100 items, from assumed_size in the file (assumed_size = 100)",
        "  lists seen: 1,200 in 400 sampled operations",
        "  items per list: p50 1, p95 3, p99 3, max 3",  # 0..3, as often each
        "  mean items per list: 1.5",
        "  subjects: 40 subject-minutes (each subject, an address by its network, counts once"
        " a minute); their longest lists: p50 3, p99 3",
        "  lowered by at most a factor 2: to 50, where the evidence says 3 (--allow-decrease"
        " lowers it all the way)",
    ]
    assert (
        "Product.related: assumed_size 10 -> 5 (its lists were much shorter than assumed)" in report
    )
    all_report, all_diff = report_and_diff(all_the_way.stdout)
    assert all_diff == expected_diff(config, 45, allow_decrease=True)
    assert "Product.tags: assumed_size 100 -> 3 (its lists were much shorter than assumed)" in (
        all_report
    )
    assert not any("lowered by at most" in line for line in all_report)
    assert (
        "Product.related: assumed_size 10 -> 2 (its lists were much shorter than assumed)"
        in all_report
    )
    # Lists shorter than 2 items (at most 1): 1 is an edge, exact.
    assert "  lists shorter than the size (over-estimated): 1,200 at 10 now, 800 at 2" in (
        all_report
    )
    # One field on the default too small, one too large: the default is not systematically off.
    assert not any(line.startswith("default_list_size") for line in report)
    # A tenth of the products lists returned 25 where first: 20 asked for 20.
    assert any(
        "Query.products: 40 of 400 lists sized by a slicing argument returned more items" in line
        for line in report
    )
    # Ratios 0.2, 0.4, ... 1.2 (i % 6): 1.2 for 66 operations; 0.2 to 0.8 for 4 x 67 (0.9
    # is an edge: exact).
    assert (
        "  query / free: 400 operations; actual cost above the estimate: 66; at most 90% of it:"
        " 268; median actual / estimate: 0.5 to 0.75"
    ) in report
    assert config.read_text(encoding="utf-8") == CONFIG  # no --write: untouched


def test_the_diff_applies_with_patch_and_write_gives_the_same_file(
    config: Path, metrics_file: Path, tmp_path: Path
) -> None:
    result = invoke("--config", str(config), "--metrics", str(metrics_file))
    patched = tmp_path / "patched"
    patched.mkdir()
    (patched / config.name).write_text(CONFIG, encoding="utf-8")
    _, diff = report_and_diff(result.stdout)
    applied = subprocess.run(
        ["patch", "-p0", "--batch", "--silent", "-o", "-", str(patched / config.name)],
        input=result.stdout,  # the # lines before the diff are skipped
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    os.chmod(config, 0o640)

    written = invoke("--config", str(config), "--metrics", str(metrics_file), "--write")

    assert applied.returncode == 0, applied.stderr
    assert written.exit_code == 0, written.output
    assert written.stdout == result.stdout
    assert f"wrote {config}" in written.stderr
    assert config.read_text(encoding="utf-8") == applied.stdout
    assert oct(config.stat().st_mode & 0o777) == "0o640"
    load_config(config)  # still a valid configuration
    weights = tomllib.loads(config.read_text(encoding="utf-8"))["cost"]["weights"]
    assert weights == {
        "Customer": 3,
        "Product.tags": {"weight": 1, "assumed_size": 50},
        "Product.related": {"assumed_size": 5},
        "Product.reviews": {"assumed_size": 45},
    }
    # The same metrics again (servers that have not reloaded yet): nothing more to change,
    # and no second halving of what the servers still assume.
    again = invoke("--config", str(config), "--metrics", str(metrics_file))
    report, diff = report_and_diff(again.stdout)
    assert diff == ""
    assert "no change proposed" in report
    assert any(
        "the servers assumed 10 items, the file says assumed_size = 45" in line for line in report
    )
    assert (
        "  Product.tags: the file says 50 already, as low as one run goes from the 100 the"
        " servers assumed (--max-decrease 2): run tune again once they have reloaded it"
    ) in report


def test_several_workers_dumps_are_summed(config: Path, tmp_path: Path) -> None:
    """Two workers' pages concatenated in one file, a third in another: as one server."""
    first, second, third = (
        dump(registry_with(range(start, start + 133))) for start in (0, 133, 266)
    )
    together = tmp_path / "two-workers.txt"
    together.write_text(first + second, encoding="utf-8")
    alone = tmp_path / "third.txt"
    alone.write_text(third, encoding="utf-8")

    result = invoke("--config", str(config), "--metrics", str(together), "--metrics", str(alone))

    assert result.exit_code == 0, result.output
    report, diff = report_and_diff(result.stdout)
    assert "  lists seen: 1,197 in 399 sampled operations" in report
    assert diff == expected_diff(config, 45)


def test_the_metrics_can_come_from_stdin(config: Path, metrics_file: Path) -> None:
    result = invoke("--config", str(config), "--metrics", "-", stdin=metrics_file.read_text())

    assert result.exit_code == 0, result.output
    assert report_and_diff(result.stdout)[1] == expected_diff(config, 45)


def test_too_few_lists_propose_nothing(config: Path, tmp_path: Path) -> None:
    path = tmp_path / "few.txt"
    path.write_text(dump(registry_with(range(30))), encoding="utf-8")  # 90 lists per field

    result = invoke("--config", str(config), "--metrics", str(path))
    fewer = invoke("--config", str(config), "--metrics", str(path), "--min-lists", "90")

    report, diff = report_and_diff(result.stdout)
    assert (result.exit_code, diff) == (0, "")
    assert "no change proposed" in report
    assert any(
        "fewer than 100 lists seen, no change proposed: Product.related (90)," in line
        for line in report
    )
    assert "Product.reviews" in report_and_diff(fewer.stdout)[1]


def on_the_default(config: Path, tmp_path: Path, *args: str) -> Any:
    """Three list fields on the default (10), all much shorter: 0..3, 0..2 and 0..1 items,
    from 20 tenants."""
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    for i in range(200):
        metrics.list_sizes(
            [
                ("Order.items", 10, i % 4, False),
                ("Order.notes", 10, i % 3, False),
                ("Order.refunds", 10, i % 2, False),
            ],
            f"key:tenant-{i % 20}",
        )
    metrics.flush(final=True)
    path = tmp_path / "orders.txt"
    path.write_text(dump(registry), encoding="utf-8")
    return invoke("--config", str(config), "--metrics", str(path), *args)


def test_a_default_systematically_off_is_halved_at_most(config: Path, tmp_path: Path) -> None:
    result = on_the_default(config, tmp_path)

    assert result.exit_code == 0, result.output
    report, diff = report_and_diff(result.stdout)
    assert "-default_list_size = 10\n+default_list_size = 5\n" in diff
    assert "Order." not in diff  # Order.refunds, at 1, waits for the next run
    assert (
        "  lowered by at most a factor 2: to 5, where the evidence says 3 (--allow-decrease"
        " lowers it all the way)"
    ) in report
    assert (
        "  Order.refunds: the file says 5 already, as low as one run goes from the 10 the"
        " servers assumed (--max-decrease 2): run tune again once they have reloaded it"
    ) in report


def test_a_default_systematically_off_is_changed_and_the_outliers_get_their_own(
    config: Path, tmp_path: Path
) -> None:
    result = on_the_default(config, tmp_path, "--allow-decrease")

    assert result.exit_code == 0, result.output
    report, diff = report_and_diff(result.stdout)
    # p99 of all 600 lists is 3: the new default; Order.refunds (0..1) is still more than
    # twice too large at 3, and gets its own size.
    assert "-default_list_size = 10\n+default_list_size = 3\n" in diff
    assert '+"Order.refunds" = { assumed_size = 1 }\n' in diff
    assert "Order.items" not in diff
    assert "Order.notes" not in diff
    start = report.index(
        "default_list_size 10 -> 3: 3 of the 3 list fields on the default with 100+ lists need"
        " a smaller size"
    )
    assert report[start + 1 : start + 4] == [
        "  fields on the default: Order.items, Order.notes, Order.refunds",
        "  lists seen: 600",
        "  items per list: p50 1, p95 3, p99 3, max 3",
    ]
    assert "  lists longer than the size (under-estimated): 0 at 10 now, 0 at 3" in report


LAYOUTS = {
    "no [cost] at all": (
        '[limits]\nmode = "shadow"\n',
        '[limits]\nmode = "shadow"\n\n[cost.weights]\n"Q.a" = { assumed_size = 5 }\n',
    ),
    "[cost] without weights, comments kept": (
        "[cost]  # pricing\nmax_depth = 8 # deep\n\n# Budgets\n[limits]\nmode = 'shadow'\n",
        "[cost]  # pricing\nmax_depth = 8 # deep\n\n[cost.weights]\n"
        "\"Q.a\" = { assumed_size = 5 }\n\n# Budgets\n[limits]\nmode = 'shadow'\n",
    ),
    "a table per field: its key replaced": (
        '[cost.weights."Q.a"]\nweight = 2\nassumed_size = 40   # a guess\n',
        '[cost.weights."Q.a"]\nweight = 2\nassumed_size = 5   # a guess\n',
    ),
    "a table per field without the key": (
        "[cost.weights.'Q.a']\nweight = 2\n\n[limits]\n",
        "[cost.weights.'Q.a']\nweight = 2\nassumed_size = 5\n\n[limits]\n",
    ),
    "tables per field: one more": (
        '[cost.weights."B.c"]\nweight = 2\n# the end\n',
        '[cost.weights."B.c"]\nweight = 2\n\n[cost.weights."Q.a"]\nassumed_size = 5\n# the end\n',
    ),
    "a weight as a number becomes a table": (
        '[cost.weights]\n"Q.a" = 2.5  # slow\n',
        '[cost.weights]\n"Q.a" = { weight = 2.5, assumed_size = 5 }  # slow\n',
    ),
    "an empty inline table": (
        "[cost.weights]\n'Q.a' = {}\n",
        "[cost.weights]\n'Q.a' = { assumed_size = 5 }\n",
    ),
    "an inline table with an array": (
        '[cost.weights]\n"Q.a" = { slicing_arguments = ["first", "last"], weight = 1 }\n',
        '[cost.weights]\n"Q.a" = { slicing_arguments = ["first", "last"], weight = 1,'
        " assumed_size = 5 }\n",
    ),
    "CRLF line ends": (
        "[cost]\r\nmax_depth = 8\r\n",
        '[cost]\r\nmax_depth = 8\r\n\r\n[cost.weights]\r\n"Q.a" = { assumed_size = 5 }\r\n',
    ),
    "no newline at the end": (
        '[cost.weights]\n"B.c" = 1',
        '[cost.weights]\n"B.c" = 1\n"Q.a" = { assumed_size = 5 }\n',
    ),
    "strings that look like tables": (
        '[cost]\nslicing_arguments = ["[cost.weights]", """\n[x]\n"""]\n',
        '[cost]\nslicing_arguments = ["[cost.weights]", """\n[x]\n"""]\n\n[cost.weights]\n'
        '"Q.a" = { assumed_size = 5 }\n',
    ),
    "[cost.weights] apart from [cost]": (
        '[cost]\nmax_depth = 8\n\n[limits]\nmode = "shadow"\n\n[cost.weights]\n"B.c" = 1\n',
        '[cost]\nmax_depth = 8\n\n[limits]\nmode = "shadow"\n\n[cost.weights]\n"B.c" = 1\n'
        '"Q.a" = { assumed_size = 5 }\n',
    ),
    "the comment above a sub-table stays there": (
        '[cost.weights]\n"B.c" = 1\n# one field:\n[cost.weights."D.e"]\nweight = 2\n',
        '[cost.weights]\n"B.c" = 1\n"Q.a" = { assumed_size = 5 }\n# one field:\n'
        '[cost.weights."D.e"]\nweight = 2\n',
    ),
    "indented keys": (
        '[cost.weights]\n  "B.c" = 1\n',
        '[cost.weights]\n  "B.c" = 1\n  "Q.a" = { assumed_size = 5 }\n',
    ),
}


@pytest.mark.parametrize(("before", "after"), list(LAYOUTS.values()), ids=list(LAYOUTS))
def test_the_edit_keeps_the_layout(before: str, after: str) -> None:
    change = Change("Q.a", 10, 5, ())

    edited, skipped = edit(before, [change])

    assert (edited, skipped) == (after, [])


def test_default_list_size_is_replaced_or_added() -> None:
    default = Change(None, 10, 3, ())

    assert edit("[cost]\ndefault_list_size = 10 # x\n", [default])[0] == (
        "[cost]\ndefault_list_size = 3 # x\n"
    )
    assert edit("[cost]\nmax_depth = 8\n[limits]\n", [default])[0] == (
        "[cost]\nmax_depth = 8\ndefault_list_size = 3\n[limits]\n"
    )
    assert edit("[limits]\n", [default])[0] == "[limits]\n\n[cost]\ndefault_list_size = 3\n"
    assert edit("[cost]\nmax_depth = 8\n# weights:\n[cost.weights]\n", [default])[0] == (
        "[cost]\nmax_depth = 8\ndefault_list_size = 3\n# weights:\n[cost.weights]\n"
    )


@pytest.mark.parametrize(
    "text",
    [
        "cost = { max_depth = 8 }\n",  # an inline [cost]: the edit would redefine it
        '[cost.weights]\n"Q.a".weight = 2\n',  # dotted keys
        '[cost]\nweights = { "Q.a" = 2 }\n',
        '[cost]\nweights."B.c" = 2\n',
    ],
)
def test_layouts_tune_does_not_edit_are_left_to_the_user(text: str, tmp_path: Path) -> None:
    changes = [Change("Q.a", 10, 5, ())]

    edited, skipped = edit(text, changes)

    assert (edited, skipped) == (text, changes)


def test_an_array_of_tables_between_the_parts_of_the_weights_is_never_moved() -> None:
    # tomlkit before 0.13 moved the [[x]] array when editing "Q.a": tune then leaves the
    # file to the user; later ones edit it in place. Either way nothing else changes.
    text = '[cost.weights."B.c"]\nweight = 1\n[[x]]\ny = 1\n[cost.weights]\n"Q.a" = 3\n'
    changes = [Change("Q.a", 10, 5, ())]

    edited, skipped = edit(text, changes)

    in_place = text.replace('"Q.a" = 3', '"Q.a" = { weight = 3, assumed_size = 5 }')
    assert (edited, skipped) in ((text, changes), (in_place, []))


def test_a_layout_tune_does_not_edit_is_reported_without_a_diff(
    tmp_path: Path, metrics_file: Path
) -> None:
    config = tmp_path / "inline.toml"
    config.write_text("cost = { max_depth = 8 }\n", encoding="utf-8")

    result = invoke("--config", str(config), "--metrics", str(metrics_file))

    report, diff = report_and_diff(result.stdout)
    assert result.exit_code == 0, result.output
    assert diff == ""
    assert (
        f'not edited (its layout in {config} is not one tune edits): set [cost.weights."Product.reviews"]'
        " assumed_size = 45 by hand"
    ) in report


# -- hostile and malformed input ------------------------------------------------------------

GOOD = dump(registry_with(range(5)))
BUCKET = 'quotaql_list_returned_items_bucket{coordinate="Query.a",le="%s"} %s\n'


def histogram(*points: tuple[str, str]) -> str:
    return "# TYPE quotaql_list_returned_items histogram\n" + "".join(
        BUCKET % point for point in points
    )


MALFORMED = {
    "garbage": ("this is not a metrics page\n", "not the Prometheus text format"),
    "a TOML file": (CONFIG, "not the Prometheus text format"),
    "binary": ("\x00\x01\x02\x03", "not the Prometheus text format"),
    "empty": ("", "no quotaql metric in it"),
    "another app's metrics": ("# TYPE up gauge\nup 1\n", "no quotaql metric in it"),
    "NaN count": (histogram(("1.0", "NaN"), ("+Inf", "1")), "nan is not a count"),
    "negative count": (histogram(("1.0", "-1"), ("+Inf", "1")), "-1.0 is not a count"),
    "huge count": (histogram(("1.0", "1e300"), ("+Inf", "1e300")), "1e+300 is not a count"),
    "infinite count": (histogram(("1.0", "+Inf"), ("+Inf", "1")), "inf is not a count"),
    "fractional count": (histogram(("1.0", "0.5"), ("+Inf", "1")), "0.5 is not a whole count"),
    "decreasing buckets": (histogram(("1.0", "5"), ("+Inf", "3")), "is below the one before it"),
    "no +Inf bucket": (
        histogram(
            ("1.0", "5"),
        ),
        "has no +Inf bucket",
    ),
    "a non-numeric le": (histogram(("one", "5"), ("+Inf", "5")), "no numeric le label"),
    "no coordinate": (
        'quotaql_list_returned_items_bucket{le="+Inf"} 1\n',
        "has no coordinate label",
    ),
    "a huge assumed size": (
        'quotaql_list_assumed_items{coordinate="Query.a"} 1e300\n',
        "1e+300 is not a list size",
    ),
    "a NaN maximum": (
        'quotaql_list_max_returned_items{coordinate="Query.a"} NaN\n',
        "nan is not a list size",
    ),
    "a second dump cut short": (
        histogram(("1.0", "1"), ("+Inf", "1"), ("1.0", "1")),
        "has no +Inf bucket",
    ),
    "dumps of different buckets": (
        histogram(("1.0", "1"), ("+Inf", "1"), ("2.0", "1"), ("+Inf", "1")),
        "its buckets differ from those of the other series",
    ),
}


@pytest.mark.parametrize(("text", "message"), list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_dumps_exit_2_naming_the_file(
    text: str, message: str, config: Path, tmp_path: Path
) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(text, encoding="utf-8")

    result = invoke("--config", str(config), "--metrics", str(path))

    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {path}")
    assert message in result.stderr


def test_a_dump_that_is_not_utf8_or_not_a_file(config: Path, tmp_path: Path) -> None:
    latin = tmp_path / "latin1.txt"
    latin.write_bytes(b"quotaql_x 1 # caf\xe9\n")

    for path, message in (
        (latin, "not UTF-8 text"),
        (tmp_path / "missing.txt", "cannot read"),
        (tmp_path, "cannot read"),
    ):
        result = invoke("--config", str(config), "--metrics", str(path))
        assert result.exit_code == 2, result.output
        assert str(path) in result.stderr
        assert message in result.stderr


def test_hostile_label_values_never_reach_the_toml(config: Path, tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    evil = 'Query.a"]\n[tiers.free]\ncapacity = 1e9\n#'
    for _ in range(200):
        metrics.list_sizes(
            [(evil, 10, 40, False), ("Query.ok", 10, 40, False), ("\x1b[2J", 1, 9, False)]
        )
    path = tmp_path / "evil.txt"
    path.write_text(dump(registry), encoding="utf-8")

    result = invoke("--config", str(config), "--metrics", str(path))

    assert result.exit_code == 0, result.output
    report, diff = report_and_diff(result.stdout)
    assert '+"Query.ok" = { assumed_size = 40 }' in diff  # every list had 40 items
    assert "tiers" not in diff
    assert "\x1b" not in result.stdout
    assert any("2 coordinate label(s) that are not field coordinates" in line for line in report)


def test_huge_and_odd_values_that_are_valid_are_reported_not_crashed_on(
    config: Path, tmp_path: Path
) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    for i in range(150):  # lists far beyond the largest bucket (10,000)
        metrics.list_sizes([("Query.log", 10, 10**15 + i, False)])
    metrics.estimate("query", "free", 0, 5)  # an estimate of 0: the ratio cap
    path = tmp_path / "huge.txt"
    path.write_text(dump(registry), encoding="utf-8")

    result = invoke("--config", str(config), "--metrics", str(path))

    assert result.exit_code == 0, result.output
    report, diff = report_and_diff(result.stdout)
    assert diff == ""
    assert any(
        "Query.log: p99 of its lists is above 10,000 items, the largest bucket (the longest"
        " seen: 1,000,000,000,000,149): set its assumed_size by hand" in line
        for line in report
    )
    assert any("actual cost above the estimate: 1" in line for line in report)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give either --metrics FILE"),
        (("--metrics", "x", "--prometheus", "http://127.0.0.1:1"), "give either --metrics FILE"),
        (("--metrics", "x", "--window", "1h"), "--window and --selector go with --prometheus"),
        (("--prometheus", "http://127.0.0.1:1", "--window", "a week"), "not a Prometheus duration"),
        (("--prometheus", "http://127.0.0.1:1", "--selector", "{job='x'}"), "without braces"),
        (("--prometheus", "ftp://example.org"), "not an http:// or https:// URL"),
        (("--prometheus", "http://127.0.0.1:1", "--quantile", "0"), "--quantile"),
    ],
)
def test_usage_errors_exit_2(args: tuple[str, ...], message: str, config: Path) -> None:
    result = invoke("--config", str(config), *args)

    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_a_bad_config_exits_2_naming_it(tmp_path: Path, metrics_file: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[cost]\ndefault_list_size = -1\n", encoding="utf-8")

    for path in (broken, tmp_path / "missing.toml"):
        result = invoke("--config", str(path), "--metrics", str(metrics_file))
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"error: {path}")


def test_the_command_prints_no_traceback_through_the_interpreter(
    config: Path, tmp_path: Path
) -> None:
    garbage = tmp_path / "garbage.txt"
    garbage.write_bytes(os.urandom(4096))

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "quotaql.cli",
            "tune",
            "--config",
            str(config),
            "--metrics",
            str(garbage),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )

    assert done.returncode == 2
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert str(garbage) in done.stderr


def test_the_request_path_imports_neither_tune_nor_tomlkit() -> None:
    """tune is an offline tool: a server imports none of it, nor the TOML editor it uses."""
    body = (
        "import sys\n"
        "import quotaql, quotaql.gate, quotaql.plugin, quotaql.asgi, quotaql.cli\n"
        "import quotaql.storage.redis, quotaql.instrumentation.metrics\n"
        "print(sorted(m for m in sys.modules if m.startswith(('quotaql.tune', 'tomlkit'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", body], capture_output=True, text=True, check=False, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# -- a real Prometheus -----------------------------------------------------------------------

JOB = "quotaql-tune"
REVIEWS_COUNT = "quotaql_list_returned_items_count"
REVIEWS = 'coordinate="Product.reviews"'


def prometheus_config(*ports: int) -> str:
    return scrape_config(JOB, *(f"127.0.0.1:{port}" for port in ports))


def eventually(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.25)


@pytest.fixture
def two_instances() -> Iterator[tuple[list[CollectorRegistry], list[int]]]:
    """Two real /metrics endpoints (prometheus-client's HTTP server), the shop's traffic
    split between them."""
    registries = [registry_with(range(0, 200)), registry_with(range(200, 400))]
    servers = []
    ports = []
    try:
        for registry in registries:
            port = free_port()
            server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
            servers.append((server, thread))
            ports.append(port)
        yield registries, ports
    finally:
        for server, thread in servers:
            server.shutdown()
            server.server_close()
            thread.join(10)


def scraped(prometheus: PrometheusServer, name: str, total: float, matchers: str = "") -> bool:
    """Prometheus has the instances' sum of ``name`` at ``total``."""
    selector = ", ".join(filter(None, (f'job="{JOB}"', matchers)))
    return prometheus.holds(f"sum({name}{{{selector}}})", total)


def test_a_real_prometheus_scraping_two_instances_gives_the_dumps_diff(
    two_instances: tuple[list[CollectorRegistry], list[int]], config: Path, tmp_path: Path
) -> None:
    registries, ports = two_instances
    both = tmp_path / "both.txt"
    both.write_text("".join(dump(registry) for registry in registries), encoding="utf-8")
    from_dumps = invoke("--config", str(config), "--metrics", str(both))

    with PrometheusServer(prometheus_config(*ports)) as prometheus:
        eventually(
            lambda: (
                scraped(prometheus, REVIEWS_COUNT, 1200, REVIEWS)
                and scraped(prometheus, "quotaql_cost_estimate_ratio_count", 400)
            ),
            30,
            "both instances scraped",
        )
        result = invoke(
            "--config", str(config), "--prometheus", prometheus.url, "--selector", f'job="{JOB}"'
        )
        # Counted over a window: increase() of what the instances recorded while scraped.
        windowed = invoke(
            "--config", str(config), "--prometheus", prometheus.url + "/", "--window", "5m"
        )
        refused = invoke(
            "--config", str(config), "--prometheus", prometheus.url, "--selector", 'job=~"("'
        )

    assert result.exit_code == 0, result.output
    report, diff = report_and_diff(result.stdout)
    assert diff == expected_diff(config, 45)
    assert report[2:] == report_and_diff(from_dumps.stdout)[0][2:]  # the same evidence
    assert f"quotaql tune: {config}, from {prometheus.url}" in report[0]
    assert "  lists seen: 1,200 in 400 sampled operations" in report  # both instances
    assert windowed.exit_code == 0, windowed.output
    assert "Prometheus increase() over 5m" in windowed.stdout
    assert refused.exit_code == 2
    assert f"error: {prometheus.url} refused" in refused.stderr


def test_a_real_prometheus_counts_increase_over_a_window(tmp_path: Path, config: Path) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    shop_traffic(metrics, range(1))  # the series exist from the first scrape on
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        with PrometheusServer(prometheus_config(port)) as prometheus:
            eventually(lambda: scraped(prometheus, REVIEWS_COUNT, 3, REVIEWS), 30, "a scrape")
            shop_traffic(metrics, range(1, 400))  # then the traffic, seen by later scrapes
            eventually(
                lambda: scraped(prometheus, REVIEWS_COUNT, 1200, REVIEWS), 30, "the traffic scraped"
            )
            result = invoke(
                "--config", str(config), "--prometheus", prometheus.url, "--window", "10m"
            )
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)

    assert result.exit_code == 0, result.output
    report, diff = report_and_diff(result.stdout)
    assert "Prometheus increase() over 10m (extrapolated, rounded)" in report[1]
    # Extrapolated counts: the proportions decide, and the longest list (a gauge since each
    # process started) bounds nothing over a window: the bucket edge, 50.
    assert diff == expected_diff(config, 50)


# -- endpoints that are not a Prometheus -------------------------------------------------------


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def test_a_url_that_does_not_answer_times_out(config: Path, silent_port: int) -> None:
    start = time.monotonic()

    result = invoke(
        "--config", str(config), "--prometheus", f"http://127.0.0.1:{silent_port}", "--timeout", "1"
    )

    assert result.exit_code == 2, result.output
    assert f"error: http://127.0.0.1:{silent_port} did not answer within 1 s" in result.stderr
    assert time.monotonic() - start < 10


def test_a_closed_port_cannot_be_reached(config: Path) -> None:
    port = free_port()

    result = invoke("--config", str(config), "--prometheus", f"http://127.0.0.1:{port}")

    assert result.exit_code == 2, result.output
    assert f"error: cannot reach http://127.0.0.1:{port}" in result.stderr


class _Answers(http.server.BaseHTTPRequestHandler):
    body = b""
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[Any]:
    """Start an HTTP server answering every request with a given body and status."""
    started = []

    def start(body: bytes, status: int = 200) -> str:
        handler = type("Handler", (_Answers,), {"body": body, "status": status})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        started.append((server, thread))
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server, thread in started:
        server.shutdown()
        server.server_close()
        thread.join(10)


def vector(*samples: tuple[dict[str, str], str]) -> bytes:
    result = [{"metric": labels, "value": [1.0, value]} for labels, value in samples]
    return json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": result}}
    ).encode()


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"<html>not json</html>", 200, "not a Prometheus API answer (not JSON)"),
        (b"[]", 200, "not a Prometheus API answer"),
        (
            b'{"status": "success", "data": {"resultType": "matrix", "result": []}}',
            200,
            "did not answer a vector",
        ),
        (vector(({"coordinate": "Query.a", "le": "+Inf"}, "NaN")), 200, "nan is not a count"),
        (vector(({"coordinate": "Query.a", "le": "+Inf"}, "1e400")), 200, "inf is not a count"),
        (vector(({"coordinate": "Query.a", "le": "+Inf"}, "many")), 200, "'many' is not a number"),
        (
            b'{"status": "success", "data": {"resultType": "vector", "result": [7]}}',
            200,
            "a malformed sample",
        ),
        (b'{"status": "error", "errorType": "bad_data", "error": "boom"}', 400, "refused"),
        (b"gateway down", 502, "HTTP 502"),
    ],
)
def test_answers_that_are_not_the_prometheus_api_exit_2(
    body: bytes, status: int, message: str, answering: Any, config: Path
) -> None:
    url = answering(body, status)

    result = invoke("--config", str(config), "--prometheus", url, "--timeout", "5")

    assert result.exit_code == 2, result.output
    assert url in result.stderr
    assert message in result.stderr


def test_a_server_that_speaks_no_http_exits_2(config: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]

        def garbage() -> None:
            connection, _ = sock.accept()
            with connection:
                connection.sendall(b"\x00\x01 hello, not HTTP\r\n\r\n")

        thread = threading.Thread(target=garbage, daemon=True)
        thread.start()
        result = invoke(
            "--config", str(config), "--prometheus", f"http://127.0.0.1:{port}", "--timeout", "5"
        )
        thread.join(10)

    assert result.exit_code == 2, result.output
    assert f"cannot read from http://127.0.0.1:{port}" in result.stderr


def test_an_empty_prometheus_proposes_nothing(config: Path, answering: Any) -> None:
    url = answering(vector())

    result = invoke("--config", str(config), "--prometheus", url)

    assert result.exit_code == 0, result.output
    report, diff = report_and_diff(result.stdout)
    assert diff == ""
    assert any("no tuning metric found" in line for line in report)
