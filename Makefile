# One command per habit. Every target bootstraps .venv on a fresh machine, installing the
# versions pinned in constraints.txt (every dependency, direct or not).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)

.PHONY: setup demo test check lint types unit integration crash bench bench-poll bench-console clean
.PHONY: console-screenshots

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

## Play the example repo's tour (examples/acme/demo/tour.remit) on fakes, and print what happened.
demo: setup
	$(BIN)/remit --app examples/acme demo --script examples/acme/demo/tour.remit

# The tests run in JOBS parallel processes: most of their time is spent waiting on workers,
# servers and polls, so more processes than cores pay (BENCHMARKS.md, "Test suite").
JOBS ?= 6
# SHUFFLE=1 runs the tests in a random order (pytest-randomly prints its seed; SEED=N replays it).
ORDER := $(if $(SHUFFLE),-p randomly $(if $(SEED),--randomly-seed=$(SEED)),)
PARALLEL := -n $(JOBS) --dist loadgroup $(ORDER)

## Lint (ruff, import contracts), types, every benchmark at its smallest, then every test on
## SQLite and Postgres: the `serial` ones alone, then the rest in parallel (~20 min on 2 cores).
test: setup lint types
	$(MAKE) --no-print-directory bench SMOKE=1
	$(BIN)/pytest -m serial -p no:xdist --durations=10 $(ORDER)
	$(BIN)/pytest -m "not serial" $(PARALLEL) --durations=25

## The fast inner loop (at most 3 min): lint, types, the unit tests, and the integration and hostile
## tests on SQLite but for the crash tests and those marked `slow`. The e2e and browser tests,
## which start the command line and servers, are left to `make test`.
check: setup lint types
	REMIT_TEST_BACKENDS=sqlite $(BIN)/pytest tests/unit tests/integration tests/hostile tests/apps \
		-m "not serial and not crash and not slow" $(PARALLEL) --durations=10

lint: setup
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench
	$(BIN)/lint-imports --no-cache

types: setup
	$(BIN)/mypy src

unit: setup
	$(BIN)/pytest tests/unit

## The crash tests at full size (the crash matrix: 600 runs, 3 minutes of kills per database).
crash: setup
	REMIT_CRASH_SCALE=full $(BIN)/pytest -m crash

## Measure remit against bare DBOS, approvals and the reconciler, and write BENCHMARKS.md and the core figures to bench/baseline.json, which bench/compare.py checks against (QUICK=1: 3 to 5 min; SMOKE=1: every benchmark, console and poll too, at its smallest, checked to print its figures, writing nothing, ~1 min).
bench: setup
	$(BIN)/python bench/bench.py $(if $(SMOKE),--smoke,--write $(if $(QUICK),--quick,))

## Queue polling: latency against idle CPU per interval (BENCHMARKS.md).
bench-poll: setup
	$(BIN)/python bench/poll.py --write

## The web console: server time of the runs page (100k runs) and of a 200-step run's page.
bench-console: setup
	$(BIN)/python bench/console.py --write

## The web console's browser tests, saving a screenshot of each page to docs/console/.
console-screenshots: setup
	REMIT_CONSOLE_SCREENSHOTS=1 $(BIN)/pytest tests/browser -m browser

clean:
	rm -rf $(VENV) examples/*/.remit .mypy_cache .ruff_cache .pytest_cache
