# The two commands a newcomer needs: `make run` and `make test`. Both set up .venv first.
.PHONY: setup setup-test run test lint lock e2e e2e-build e2e-down sandbox

# .venv from the locks (scripts/setup.sh): `setup` what serving needs, `setup-test` the test extras too.
setup: .venv/.installed
setup-test: .venv/.installed-test

.venv/.installed: requirements.lock pyproject.toml scripts/setup.sh
	bash scripts/setup.sh serve
	touch $@

.venv/.installed-test: requirements-test.lock pyproject.toml scripts/setup.sh
	bash scripts/setup.sh test
	touch .venv/.installed $@

# make run PORT=9000 ARGS="--state my-manifests/"
PORT ?= 8888
run: setup
	.venv/bin/dra-extender serve --port $(PORT) $(ARGS)

lint: setup-test
	.venv/bin/ruff check .
	.venv/bin/mypy

test: setup-test lint
	.venv/bin/python -m pytest -q

# Refreshes requirements.lock and requirements-test.lock from pyproject.toml (scripts/lock.sh).
lock:
	bash scripts/lock.sh

# The extender between a real kube-scheduler, kube-apiserver and kube-controller-manager of
# release $(K8S), built once from the Go module proxy into ~/.cache/dra-extender-e2e
# (scripts/e2e/build.sh; tens of minutes cold, seconds warm). docs/deploy.md lists the releases run.
K8S ?= 1.37.2
e2e: setup-test
	@bin=$$(bash scripts/e2e/build.sh $(K8S)) && .venv/bin/python -m tests.e2e --version $(K8S) --bin "$$bin" $(E2E_ARGS)

e2e-build:
	bash scripts/e2e/build.sh $(K8S)

# Stops, by PID, whatever an interrupted `make e2e` left running.
e2e-down: setup-test
	.venv/bin/python -m tests.e2e --down

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
	tests/cel/upstream_cases.yaml tests/cel/celspec_cases.yaml tests/cel/release_cases.yaml

# RELEASE=1.34 answers with 1.34's released allocator instead of 1.37's (docs/upstream.md).
oracle:
	$(PYTHON) -m extender.tools.oracle $(if $(RELEASE),--release $(RELEASE)) $(ORACLE_CASES)

differential:
	$(PYTHON) -m extender.tools.differential --count $(COUNT) $(if $(SEED),--seed $(SEED))

differential-cel:
	$(PYTHON) -m extender.tools.differential --cel --count $(COUNT) $(if $(SEED),--seed $(SEED))

# A real control plane with the extender and fake GPU nodes, left running until Ctrl-C: it
# prints a KUBECONFIG to `kubectl apply -k manifests/example/` with (README, "Try it").
sandbox: setup-test
	@bin=$$(bash scripts/e2e/build.sh $(K8S)) && .venv/bin/python -m tests.e2e.sandbox --version $(K8S) --bin "$$bin"

# `helm lint --strict` of charts/dra-extender, with a helm built once from the Go module proxy
# into ~/.cache/dra-extender-helm (scripts/helm/build.sh). tests/manifests/test_helm.py renders
# the chart against manifests/ with the same binary.
.PHONY: helm-lint
helm-lint:
	@helm=$$(bash scripts/helm/build.sh) && "$$helm" lint --strict --namespace dra-system charts/dra-extender

# Mutation testing of the safety-critical modules (bind, settle, in-use accounting, the
# allocator's constraint and counter checks, CEL's order functions) with mutmut, each module
# against its own tests (scripts/mutation.py; minutes per target). Fails on any mutant that is
# neither killed nor explained in scripts/mutation_equivalent.txt. `make mutation MUTATION=bind`
# runs one target; `python scripts/mutation.py --list` names them.
.PHONY: mutation
MUTATION ?=
mutation: setup-test
	$(PYTHON) scripts/mutation.py $(MUTATION)
