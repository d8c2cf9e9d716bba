#!/usr/bin/env bash
# Build the upstream oracle (tests/oracle, a Go program importing the released
# k8s.io/dynamic-resource-allocation) and print the binary's path.
#
#   scripts/oracle/build.sh [RELEASE]
#
# RELEASE is the Kubernetes release whose released code answers: 1.37 (the default:
# tests/oracle/go.mod, v0.37.2) or 1.34 (tests/oracle/release-1.34/go.mod, v0.34.4, built
# with -tags k8s134: features_134.go stands in for features.go).
#
# The binary is a build output kept outside the work tree, keyed by its inputs:
#   ${DRA_ORACLE_CACHE:-~/.cache/dra-extender-oracle}/<sha256 of the release, its go.mod and
#   go.sum and *.go>/oracle
# so a second call with unchanged sources only prints the path. Go's own caches default to
# the ones the e2e tests share (~/.cache/dra-extender-e2e/go) unless GOMODCACHE, GOCACHE or
# GOPATH are set.
set -euo pipefail
cd "$(dirname "$0")/../../tests/oracle"

release="${1:-1.37}"
case "$release" in
  1.37) modfile=go.mod; tags="" ;;
  1.34) modfile=release-1.34/go.mod; tags=k8s134 ;;
  *) echo "build.sh: no oracle for Kubernetes $release (1.37 or 1.34)" >&2; exit 2 ;;
esac
sumfile="${modfile%.mod}.sum"

command -v go >/dev/null || { echo "build.sh: go is not on PATH" >&2; exit 3; }

cache_root="${DRA_ORACLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dra-extender-oracle}"
key="$( { echo "$release"; cat "$modfile" "$sumfile" $(ls *.go | LC_ALL=C sort); } | sha256sum | cut -c1-16)"
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
nice -n 10 go build -p 1 -trimpath -modfile="$modfile" -tags="$tags" -o "$tmp" . >&2
mv "$tmp" "$out"
trap - EXIT
echo "$out"
