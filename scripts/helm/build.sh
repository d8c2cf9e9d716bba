#!/usr/bin/env bash
# Builds `helm` (cmd/helm of helm.sh/helm/v3, from the Go module proxy) once per version, for
# charts/dra-extender's tests and `make helm-lint`, into $CACHE/$VERSION/helm outside the work
# tree. A finished build leaves a `complete` stamp beside the binary; with the stamp present this
# script only prints the path. Prints the path of the binary on its last line. Cold (empty module
# and build caches): about 4 minutes on 2 busy cores, most of it compiling; warm: milliseconds.
#
#   scripts/helm/build.sh            (the pinned version)
#   scripts/helm/build.sh v3.21.4
# Env: DRA_HELM_CACHE (default ~/.cache/dra-extender-helm), DRA_E2E_CACHE (whose go/ module and
# build caches are shared with scripts/e2e/build.sh; default ~/.cache/dra-extender-e2e),
# GO (default: go on PATH).
set -euo pipefail
VERSION=${1:-v3.21.4}
[[ $VERSION =~ ^v3\.[0-9]+\.[0-9]+$ ]] || { echo "helm/build.sh: VERSION must look like v3.21.4, not '$VERSION'" >&2; exit 2; }
CACHE=${DRA_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dra-extender-helm}
E2E_CACHE=${DRA_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dra-extender-e2e}
GO=${GO:-$(command -v go || true)}
DIR=$CACHE/$VERSION

if [ ! -f "$DIR/complete" ] || [ ! -x "$DIR/helm" ]; then
  [ -x "$GO" ] || { echo "helm/build.sh: no Go toolchain on PATH (set GO=...)" >&2; exit 2; }
  export GOPATH=$E2E_CACHE/go GOMODCACHE=$E2E_CACHE/go/mod GOCACHE=$E2E_CACHE/go/build
  export CGO_ENABLED=0 GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
  unset GOFLAGS
  start=$(date +%s)
  echo "helm/build.sh: building helm $VERSION (once)" >&2
  mkdir -p "$DIR"
  cd /tmp
  # What a release build sets (helm's Makefile): its version, and the Kubernetes release that
  # `helm template` and `helm lint` assume without a cluster (.Capabilities.KubeVersion), the
  # minor of the client-go it was built with.
  gomod=$("$GO" mod download -json "helm.sh/helm/v3@$VERSION" |
          python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])')
  minor=$(awk '$1 == "k8s.io/client-go" {print $2}' "$gomod" | cut -d. -f2)
  [[ $minor =~ ^[0-9]+$ ]] || { echo "helm/build.sh: no k8s.io/client-go in $gomod" >&2; exit 1; }
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
  done
  rm -f "$DIR/complete"
  GOBIN=$DIR "$GO" install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$VERSION" >&2
  echo "helm $VERSION $(date -u +%FT%TZ)" > "$DIR/complete"
  echo "helm/build.sh: helm $VERSION built in $(( $(date +%s) - start )) s" >&2
fi
echo "$DIR/helm"
