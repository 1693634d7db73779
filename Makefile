# olstream: `make test` works on a fresh Debian machine with Java 17 and Maven (and installs what is
# missing); `make lint` runs ruff and strict mypy; `make demo` runs the end-to-end demo, asking only for
# what the demo uses (Java 17, Maven; Graphviz for its picture), in one line when it cannot install it.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.olstream-installed
PYTEST_ARGS ?=

.PHONY: help setup system-deps demo-deps venv tools test test-unit lint demo kafka-up kafka-down clean

help:
	@echo "make test     create .venv, install, run unit + integration tests (starts and stops Kafka, PostgreSQL)"
	@echo "make lint     ruff check . and mypy --strict on the olstream package"
	@echo "make demo     Java 17, Maven (and Graphviz for the picture), .venv, then 'olstream demo'"
	@echo "make test-unit  only the unit tests (no services)"

# what `make test` needs (PostgreSQL, Prometheus, ...), and only what `make demo` needs
system-deps:
	@infra/system-deps.sh test

demo-deps:
	@infra/system-deps.sh demo

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "olstream needs Python >= 3.11: set PYTHON=...")'
	@$(PYTHON) -c 'import ensurepip' 2>/dev/null || { v=$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	  echo "Python $$v cannot create a virtualenv (no ensurepip): sudo apt-get install -y python$$v-venv" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

setup: system-deps venv

# helm for the chart's tests: built once with Go into ~/.cache/olstream (infra/tools/helm.sh); when
# it cannot be (no Go), the chart's tests skip and say why
tools:
	@infra/tools/helm.sh >/dev/null || echo "helm unavailable: tests/integration/deploy/test_helm_*.py will skip" >&2

# the suite starts at once; helm builds beside it (niced; a few minutes on a fresh machine), and the
# chart's tests wait for that build (infra/tools/helm.sh holds a lock while it builds)
test: setup
	@infra/tools/helm.sh >/dev/null 2>&1 &
	infra/run-tests.sh $(or $(PYTEST_ARGS),tests)

test-unit: venv
	infra/run-tests.sh tests/unit

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

demo: demo-deps venv
	$(BIN)/olstream demo

kafka-up: venv
	$(BIN)/olstream kafka up

kafka-down: venv
	$(BIN)/olstream kafka down

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache build dist *.egg-info
