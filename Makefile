# The two commands a newcomer needs: `make run` and `make test`. Both set up .venv first.
.PHONY: setup run test lint e2e e2e-build e2e-down

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

# `helm lint --strict` of charts/dra-extender, with a helm built once from the Go module proxy
# into ~/.cache/dra-extender-helm (scripts/helm/build.sh). tests/manifests/test_helm.py renders
# the chart against manifests/ with the same binary.
.PHONY: helm-lint
helm-lint:
	@helm=$$(bash scripts/helm/build.sh) && "$$helm" lint --strict --namespace dra-system charts/dra-extender
