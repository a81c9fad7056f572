# quotaql developer commands. `make test` and `make demo` work from a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test lint typecheck pytest alerts-check bench demo stack system-deps artifacts clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "quotaql needs Python >= 3.11 (set PYTHON=python3.11)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"

# Reinstall when the project metadata changes; pip >= 25.1 understands --group.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[all]' --group dev
	@touch $@

system-deps:
	@scripts/ensure-system-deps.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict src

pytest: $(STAMP) system-deps
	$(BIN)/pytest

# The generated alert rules are valid and their promtool unit tests pass (promtool comes
# from the prometheus package that system-deps installs).
alerts-check: system-deps
	@command -v promtool >/dev/null 2>&1 || { echo "error: promtool not found: install the prometheus package (scripts/ensure-system-deps.sh)" >&2; exit 1; }
	promtool check rules alerts/quotaql.rules.yml
	promtool test rules alerts/quotaql.rules.test.yml

test: lint typecheck alerts-check pytest

bench: $(STAMP)
	$(BIN)/python bench/run.py

demo: $(STAMP)
	$(BIN)/quotaql demo

# Regenerate the committed dashboards and alert rules (tests fail when they are stale).
artifacts: $(STAMP)
	$(BIN)/quotaql dashboards --out dashboards
	$(BIN)/quotaql alerts --out alerts

# Redis, the shop API and Prometheus from local binaries (examples/stack/README.md).
stack: $(STAMP) system-deps
	$(BIN)/python examples/stack/stack.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
