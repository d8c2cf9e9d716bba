#!/usr/bin/env bash
# Build the upstream oracle (tests/oracle, a Go program importing the released
# k8s.io/dynamic-resource-allocation) and print the binary's path.
#
# The binary is a build output kept outside the work tree, keyed by its inputs:
#   ${DRA_ORACLE_CACHE:-~/.cache/dra-extender-oracle}/<sha256 of go.mod, go.sum and *.go>/oracle
# so a second call with unchanged sources only prints the path. Go's own caches default to
# the ones the e2e tests share (~/.cache/dra-extender-e2e/go) unless GOMODCACHE, GOCACHE or
# GOPATH are set.
set -euo pipefail
cd "$(dirname "$0")/../../tests/oracle"

command -v go >/dev/null || { echo "build.sh: go is not on PATH" >&2; exit 3; }

cache_root="${DRA_ORACLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dra-extender-oracle}"
key="$(cat go.mod go.sum $(ls *.go | LC_ALL=C sort) | sha256sum | cut -c1-16)"
out="$cache_root/$key/oracle"
if [ -x "$out" ]; then
  echo "$out"
  exit 0
fi

go_cache="${XDG_CACHE_HOME:-$HOME/.cache}/dra-extender-e2e/go"
export GOPATH="${GOPATH:-$go_cache}"
export GOMODCACHE="${GOMODCACHE:-$go_cache/mod}"
export GOCACHE="${GOCACHE:-$go_cache/build}"
export GOFLAGS="${GOFLAGS:-} -mod=readonly"

mkdir -p "$cache_root/$key"
tmp="$(mktemp "$cache_root/$key/oracle.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
# Modest on a shared machine: one compile job at a time, at low priority.
nice -n 10 go build -p 1 -trimpath -o "$tmp" . >&2
mv "$tmp" "$out"
trap - EXIT
echo "$out"
