# Moirae: `make run` runs the main job, `make test` runs the test suite.
# Both bootstrap .venv (idempotently) and need only Python 3.11+ and Java 17+.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
ARGS   ?=

.PHONY: run test test-quick lint bench bench-quick check-java clean

# the runtime only (make run): no test, lint or benchmark tools
$(RUN_STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "moirae needs Python 3.11+, found " + sys.version.split()[0])'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip >/dev/null
	@$(PY) -m pip install -q -e .
	@touch $(RUN_STAMP)

# the runtime plus the dev and bench extras (make test, lint, bench)
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "moirae needs Python 3.11+, found " + sys.version.split()[0])'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip >/dev/null
	@$(PY) -m pip install -q -e '.[dev,bench]'
	@touch $(STAMP) $(RUN_STAMP)

check-java:
	@command -v java >/dev/null 2>&1 || { echo "moirae: Java 17+ is required by Spark, but no 'java' is on PATH (install a JDK 17, e.g. apt-get install openjdk-17-jre-headless)"; exit 1; }
	@v=$$(java -version 2>&1 | awk -F'"' '/version/ {print $$2}' | cut -d. -f1); \
	  [ "$$v" = "1" ] && v=8; \
	  [ "$$v" -ge 17 ] 2>/dev/null || { echo "moirae: Java 17+ is required by Spark, found Java $$v"; exit 1; }

run: $(RUN_STAMP) check-java
	$(VENV)/bin/moirae run $(ARGS)

test: $(STAMP) check-java
	@sh tests/browser/ensure_chromium.sh
	$(PY) -m tests.run $(ARGS)

# neither Spark nor PostgreSQL: tests/areas.py fails a test that starts either (MOIRAE_TEST_QUICK)
test-quick: $(STAMP)
	MOIRAE_TEST_QUICK=1 $(PY) -m pytest -m "not spark and not postgres and not slow and not browser and not cluster" $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

bench: $(STAMP) check-java
	$(PY) -m bench $(ARGS)

bench-quick: $(STAMP) check-java
	$(PY) -m bench --quick $(ARGS)

clean:
	rm -rf .moirae .moirae-test .pytest_cache .ruff_cache .mypy_cache
