# The two commands a newcomer needs: `make run` and `make test`. Both set up .venv first.
.PHONY: setup setup-test run test lint lock e2e e2e-build e2e-down

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
e2e: setup
	@bin=$$(bash scripts/e2e/build.sh $(K8S)) && .venv/bin/python -m tests.e2e --version $(K8S) --bin "$$bin" $(E2E_ARGS)

e2e-build:
	bash scripts/e2e/build.sh $(K8S)

# Stops, by PID, whatever an interrupted `make e2e` left running.
e2e-down: setup
	.venv/bin/python -m tests.e2e --down
