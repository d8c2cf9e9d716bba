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
