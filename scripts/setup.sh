#!/usr/bin/env bash
# Sets up .venv from the lock files, every version pinned and every file's hash checked:
#   bash scripts/setup.sh         what serving needs (requirements.lock): make run
#   bash scripts/setup.sh test    plus the test and loadtest extras (requirements-test.lock): make test, CI
# The project itself is then installed editable, without dependencies and without build isolation
# (setuptools comes from the lock). `make lock` refreshes the locks (scripts/lock.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# `make run` and `make test` started together in a fresh clone both set up .venv: one at a time,
# or two pips write into one environment at once.
exec 9>.venv-setup.lock
flock 9
PY="${PYTHON:-python3}"
case "${1:-serve}" in
  serve) lock=requirements.lock ;;
  test) lock=requirements-test.lock ;;
  *) echo "usage: $0 [serve|test]" >&2; exit 2 ;;
esac
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --require-hashes --no-deps -r "$lock"
.venv/bin/python -m pip install -q --no-deps --no-build-isolation -e .
