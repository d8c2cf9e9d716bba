# The two commands a newcomer needs: `make run` and `make test`. Both set up .venv first.
.PHONY: setup run test lint

setup: .venv/.installed

.venv/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $@

# make run PORT=9000 ARGS="--state my-manifests/"
PORT ?= 8888
run: setup
	.venv/bin/dra-extender serve --port $(PORT) $(ARGS)

lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy

test: setup lint
	.venv/bin/python -m pytest -q

# Differential testing against the released upstream code (tests/oracle, needs Go; the oracle
# binary is cached under ~/.cache/dra-extender-oracle). `make oracle` runs every case file
# through it; `make differential SEED=S COUNT=N` runs N random cases (a fresh seed if SEED is
# empty, printed) and writes each disagreement to build/differential/ as a case file;
# `make differential-cel` does the same for CEL selectors on both engines.
.PHONY: oracle differential differential-cel
PYTHON ?= .venv/bin/python
SEED ?=
COUNT ?= 300
ORACLE_CASES = tests/conformance/cases tests/conformance/upstream tests/cel/cases.yaml \
	tests/cel/upstream_cases.yaml tests/cel/celspec_cases.yaml

oracle:
	$(PYTHON) -m extender.tools.oracle $(ORACLE_CASES)

differential:
	$(PYTHON) -m extender.tools.differential --count $(COUNT) $(if $(SEED),--seed $(SEED))

differential-cel:
	$(PYTHON) -m extender.tools.differential --cel --count $(COUNT) $(if $(SEED),--seed $(SEED))
