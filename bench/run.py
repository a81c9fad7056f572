"""Run the benchmarks: every bench/bench_*.py module's main(), or the modules named as arguments.

Usage: ``.venv/bin/python bench/run.py [cost | bench_cost | bench/bench_cost.py ...]``
(``QUOTAQL_BENCH_QUICK=1 .venv/bin/python bench/run.py http``: the wrk bench's smoke run).

A benchmark module's ``main()`` prints its tables and returns the targets it checked (a sequence of
``_harness.Target``, or None). Missing a target does not fail the run: the figures are a report.
The exit status is 1 when a module raised (it could not produce its figures), 2 for an unknown name.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
# The modules import `_harness` as a top-level module, which works when this file runs as a script.
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import _harness  # noqa: E402

# Modules named bench_*.py that are not benchmarks: the apps bench_http.py and bench_attacks.py
# serve.
HELPERS = frozenset({"bench_http_app", "bench_attacks_app"})


def available() -> list[str]:
    return sorted(path.stem for path in BENCH_DIR.glob("bench_*.py") if path.stem not in HELPERS)


def module_name(arg: str) -> str:
    """Accept 'cost', 'bench_cost', 'bench_cost.py' and 'bench/bench_cost.py' alike."""
    stem = Path(arg).stem
    return stem if stem.startswith("bench_") else f"bench_{stem}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="benchmark modules to run (default: all)")
    args = parser.parse_args(argv)

    known = available()
    names = [module_name(arg) for arg in args.modules] or known
    unknown = [name for name in names if name not in known]
    if unknown:
        print(f"unknown benchmark module(s): {', '.join(unknown)}; available: {', '.join(known)}")
        return 2

    started = time.monotonic()
    print(_harness.environment())
    print()
    targets: list[_harness.Target] = []
    raised: list[str] = []
    for name in names:
        print(f"=== {name} ===")
        _harness.restart_budget()
        try:
            module = importlib.import_module(name)
            targets.extend(module.main() or ())
        except Exception:
            traceback.print_exc()
            print(f"{name}: raised; its figures are missing or incomplete\n")
            raised.append(name)

    counts = {
        status: sum(t.status == status for t in targets) for status in ("PASS", "FAIL", "SKIP")
    }
    failed = [
        f"{t.name} = {'no figure' if t.value is None else _harness.fmt_ratio(t.value)}"
        f" (target {t.bound})"
        for t in targets
        if t.status == "FAIL"
    ]
    summary = (
        f"SUMMARY: targets {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['SKIP']} SKIP"
        f" | modules {len(names) - len(raised)} ran, {len(raised)} raised"
        f"{' (' + ', '.join(raised) + ')' if raised else ''}"
        f" | {time.monotonic() - started:.0f} s"
        f"{' | FAILED: ' + '; '.join(failed) if failed else ''}"
    )
    print(summary)
    return 1 if raised else 0


if __name__ == "__main__":
    sys.exit(main())
