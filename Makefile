# Agent Mesh — developer entry points. Every target works on a fresh clone:
# `install` creates .venv (Python 3.11+) and installs the project with the
# `embedded`, `dev` and `claude` extras (the last for `mesh agent` and its tests);
# it is a no-op while pyproject.toml is unchanged.

SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV  ?= .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# The first Python 3.11+ on PATH (pyenv shims of missing versions fail the check).
PYTHON ?= $(shell for p in python3.11 python3.12 python3.13 python3.14 python3; do \
	if command -v $$p >/dev/null 2>&1 && \
	   $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then \
	   echo $$p; break; fi; done)

# make test ARGS='-k inbox -x'   (extra pytest arguments)
ARGS ?=
# make test ALLOW_NO_TESTS=1     (pytest's "no tests collected" is not a failure)
ALLOW_NO_TESTS ?=
# Set by test-fast; `make test` (and CI, through .ci/run) selects every test.
MARKERS ?=
# Two pytest workers, a file each at a time (pytest-xdist): each worker starts its
# own services (devstack, ephemeral ports), and much of the suite waits on real
# processes, so two halve the wall time even on two cores. WORKERS= runs serially.
WORKERS ?= -n 2 --dist loadfile

.PHONY: help install run services test test-fast test-unit lint bench soak clean

help:
	@echo "make install   create $(VENV) and install agent-mesh[embedded,dev,claude]"
	@echo "make run       embedded Postgres/Redis/Kafka + migrations + every Procfile process"
	@echo "make services  only the embedded services; prints export MESH_... lines"
	@echo "make test      pytest against real services, every test (ARGS='...' for pytest)"
	@echo "make test-fast the same without the fault suite and the slow tests (-m 'not faults and not slow')"
	@echo "make test-unit the pure layer only (tests/unit): no services, a few seconds"
	@echo "make lint      ruff check"
	@echo "make bench     bench/run.py"
	@echo "make soak      bench/soak.py: 30 min under random faults, counted (ARGS='--minutes 3 ...')"
	@echo "make clean     stop leftovers and remove the local data folder .mesh/"

install: $(STAMP)

$(STAMP): pyproject.toml
	@if [ ! -x "$(PY)" ]; then \
	  if [ -z "$(PYTHON)" ]; then \
	    echo "make: Python 3.11 or newer is needed (python3.11, python3.12, ... on PATH)" >&2; \
	    exit 1; \
	  fi; \
	  echo "creating $(VENV) with $$($(PYTHON) --version)"; \
	  $(PYTHON) -m venv "$(VENV)"; \
	fi
	@$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "make: $(VENV) has $$($(PY) --version); Python 3.11+ is needed: rm -rf $(VENV)" >&2; \
	  exit 1; }
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[embedded,dev,claude]'
	@touch "$(STAMP)"

run: install
	$(PY) -m devstack run

services: install
	$(PY) -m devstack services

test: install
	@rc=0; $(PY) -m pytest $(WORKERS) $(MARKERS) $(ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ] && [ -n "$(ALLOW_NO_TESTS)" ]; then \
	  echo "make test: pytest collected no tests (allowed by ALLOW_NO_TESTS)"; rc=0; \
	fi; \
	exit $$rc

# For local work: the tests marked @pytest.mark.faults or @pytest.mark.slow (on the
# tests themselves) are some 30 tests and about 40% of the suite's time. CI runs `make test`.
test-fast: MARKERS = -m "not faults and not slow"
test-fast: test

# The pure layer: no Postgres, Redis or bus is started.
test-unit: install
	$(PY) -m pytest tests/unit -q $(ARGS)

lint: install
	$(PY) -m ruff check .

bench: install
	@if [ -f bench/run.py ]; then \
	  $(PY) bench/run.py $(ARGS); \
	else \
	  echo "make bench: bench/run.py does not exist yet"; \
	fi

# Not in CI (30 minutes); tests/test_soak_short.py is its short version in `make test`.
# make soak ARGS='--minutes 30 --rate 60 --agents 60 --seed 1 --bus kafka --out FILE'
soak: install
	$(PY) bench/soak.py $(ARGS)

clean:
	@if [ -x "$(PY)" ]; then $(PY) -m devstack clean; else rm -rf .mesh; fi
