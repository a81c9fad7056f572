# quotaql developer commands. `make test` and `make demo` work from a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# `make demo`'s environment: the `demo` extra only (not the development group), apart from
# `make test`'s .venv.
DEMO_VENV  := .venv-demo
DEMO_BIN   := $(DEMO_VENV)/bin
DEMO_STAMP := $(DEMO_VENV)/.installed

# A second environment for the suites that need no Strawberry (which needs graphql-core
# 3.3): graphql-core 3.2 with Graphene 3 (which needs graphql-core < 3.3).
GQL32       := .venv-gql32
GQL32_BIN   := $(GQL32)/bin
GQL32_STAMP := $(GQL32)/.installed
# The extras these suites use: not strawberry (nor demo and all, which pull it in), nor
# ariadne, whose tests run in the main environment only. The limiter layer (limiter,
# policy, storage) imports no graphql-core (tests/test_imports.py): its suites run once,
# in the main run.
GQL32_EXTRAS := redis,otel,prometheus,dashboards,cli
# The gate's doctests run there too, and its partial answers (resolvers guarded by graphql-core 3.2).
GQL32_TESTS  := tests/cost_analysis tests/config tests/test_imports.py \
                tests/adapters/graphene3 src/quotaql/cost_analysis src/quotaql/gate \
                tests/gate/test_skip.py
# The Strawberry modules among them (the main run covers them).
GQL32_IGNORE := --ignore=tests/cost_analysis/test_strawberry.py \
                --ignore=tests/cost_analysis/test_link_strawberry.py \
                --ignore=src/quotaql/cost_analysis/_strawberry.py

# The main run's workers (pytest-xdist): the suites mostly wait on servers, sleeps and
# timeouts, so more workers than cores pay off. Each worker starts its own private servers on
# free ports; a module's tests stay on one worker (--dist loadscope), sharing its fixtures.
PYTEST_WORKERS ?= 4
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) --dist loadscope

.PHONY: test lint typecheck pytest pytest-parallel pytest-serial pytest-gql32 alerts-check \
        bench demo stack system-deps artifacts clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "quotaql needs Python >= 3.11 (set PYTHON=python3.11)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"

# Reinstall when the project metadata changes; pip >= 25.1 understands --group.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[all]' --group dev
	@touch $@

# Quick from a fresh clone: a venv without its own pip, filled by $(PYTHON)'s pip (--python,
# pip >= 22.3), and no bytecode compiled ahead (Python compiles what the demo imports):
# about 9 s instead of 23 s on a busy 2-core machine. An older pip: a venv with its own.
DEMO_PIP := install --quiet --disable-pip-version-check --no-compile -e '.[demo]'
$(DEMO_STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "quotaql needs Python >= 3.11 (set PYTHON=python3.11)")'
	@if $(PYTHON) -c 'import pip, sys; sys.exit(tuple(map(int, pip.__version__.split(".")[:2])) < (22, 3))' 2>/dev/null; then \
		set -x; $(PYTHON) -m venv --without-pip $(DEMO_VENV) && \
		$(PYTHON) -m pip --python $(DEMO_BIN)/python $(DEMO_PIP); \
	else \
		set -x; $(PYTHON) -m venv $(DEMO_VENV) && $(DEMO_BIN)/python -m pip $(DEMO_PIP); \
	fi
	@touch $@

$(GQL32_BIN)/python:
	$(PYTHON) -m venv $(GQL32)
	$(GQL32_BIN)/python -m pip install --quiet --upgrade "pip>=25.1"

$(GQL32_STAMP): pyproject.toml | $(GQL32_BIN)/python
	$(GQL32_BIN)/python -m pip install --quiet -e '.[$(GQL32_EXTRAS)]' --group gql32
	@touch $@

system-deps:
	@scripts/ensure-system-deps.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict src

# The tests marked `serial` hold real time to bounds (rates, ttls, stalls): they run alone,
# after the rest.
pytest:
	@$(MAKE) --no-print-directory pytest-parallel
	@$(MAKE) --no-print-directory pytest-serial

pytest-parallel: $(STAMP) system-deps
	$(BIN)/pytest $(PYTEST_PARALLEL) -m "not serial"

pytest-serial: $(STAMP) system-deps
	$(BIN)/pytest -p no:xdist -m serial

# tests/adapters/graphene3 runs here only (pyproject's addopts leave it out of the main run).
pytest-gql32: $(GQL32_STAMP) system-deps
	@$(GQL32_BIN)/python -c 'import graphql, sys; sys.exit(0 if graphql.version_info < (3, 3) \
		else f"$(GQL32) has graphql-core {graphql.__version__}, not 3.2")'
	$(GQL32_BIN)/pytest $(GQL32_IGNORE) $(GQL32_TESTS)

# The generated alert rules are valid and their promtool unit tests pass (promtool comes
# from the prometheus package that system-deps installs).
alerts-check: system-deps
	@command -v promtool >/dev/null 2>&1 || { echo "error: promtool not found: install the prometheus package (scripts/ensure-system-deps.sh)" >&2; exit 1; }
	promtool check rules alerts/quotaql.rules.yml
	promtool test rules alerts/quotaql.rules.test.yml

# Everything that can share the machine runs at once (the two environments are set up side
# by side too), each job's output printed whole when it ends; then the `serial` tests alone.
test:
	@$(MAKE) --no-print-directory -j --output-sync=target \
		lint typecheck alerts-check pytest-parallel pytest-gql32
	@$(MAKE) --no-print-directory pytest-serial

# bench_http drives real uvicorns with wrk (system-deps installs it, and redis-server).
bench: $(STAMP) system-deps
	$(BIN)/python bench/run.py

demo: $(DEMO_STAMP)
	$(DEMO_BIN)/quotaql demo

# Regenerate the committed dashboards and alert rules (tests fail when they are stale).
artifacts: $(STAMP)
	$(BIN)/quotaql dashboards --out dashboards
	$(BIN)/quotaql alerts --out alerts

# Redis, the shop API and Prometheus from local binaries (examples/stack/README.md).
stack: $(STAMP) system-deps
	$(BIN)/python examples/stack/stack.py

clean:
	rm -rf $(VENV) $(GQL32) $(DEMO_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
