#!/usr/bin/env bash
# Builds a real control plane for `make e2e` from the Go module proxy, once per version:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl   k8s.io/kubernetes v$K8S
#   etcd                                                               go.etcd.io/etcd/server/v3 $ETCD
# into $CACHE/kubernetes-v$K8S/bin and $CACHE/etcd-$ETCD/bin, outside the work tree. A finished
# build leaves a `complete` stamp beside its bin/; with the stamp present this script only prints
# the path. Prints the bin directory of the control plane on its last line.
#
#   scripts/e2e/build.sh 1.37.2            (K8S)
# Env: DRA_E2E_CACHE (default ~/.cache/dra-extender-e2e), ETCD_VERSION, GO (default: go on PATH).
set -euo pipefail
K8S=${1:-1.37.2}
K8S=${K8S#v}
ETCD_VERSION=${ETCD_VERSION:-v3.6.10}
CACHE=${DRA_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dra-extender-e2e}
GO=${GO:-$(command -v go || true)}
[ -x "$GO" ] || { echo "build.sh: no Go toolchain on PATH (set GO=...)" >&2; exit 2; }
[[ $K8S =~ ^1\.[0-9]+\.[0-9]+$ ]] || { echo "build.sh: K8S must look like 1.37.2, not '$K8S'" >&2; exit 2; }

# Module and build caches of their own, so a warm run needs no download and no recompilation.
export GOPATH=$CACHE/go GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
K8S_DIR=$CACHE/kubernetes-v$K8S
ETCD_DIR=$CACHE/etcd-$ETCD_VERSION
mkdir -p "$K8S_DIR/module" "$K8S_DIR/bin" "$ETCD_DIR/module" "$ETCD_DIR/bin"

build_kubernetes() {
  # k8s.io/kubernetes requires its staging modules (k8s.io/api, k8s.io/client-go, ...) at
  # v0.0.0 and replaces them with ./staging/src/k8s.io/<name>, a path only its own repository
  # has. A consumer replaces each with the published v0.<minor>.<patch> of the same release;
  # the list is read from upstream's go.mod of that release, so it follows new staging modules.
  cd "$K8S_DIR/module"
  local gomod staging
  gomod=$(cd /tmp && "$GO" mod download -json "k8s.io/kubernetes@v$K8S" |
          python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])')
  staging=$(grep -oE '^[[:space:]]*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$gomod" |
            awk '{print $1}' | sort -u)
  {
    printf 'module dra-extender/e2e/kubernetes\n\ngo 1.24\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$K8S"
    for m in $staging; do printf '\t%s => %s v0.%s\n' "$m" "$m" "${K8S#1.}"; done
    printf ')\n'
  } > go.mod
  # `go mod tidy` keeps only what is imported: the four commands' packages, named here.
  cat > tools.go <<'EOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubectl/pkg/cmd"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
)
EOF
  "$GO" mod tidy
  # What /version reports, as a release build sets it (hack/lib/version.sh upstream).
  local ldflags="-s -w" minor
  minor=$(echo "$K8S" | cut -d. -f2)
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=v$K8S -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  "$GO" build -trimpath -ldflags "$ldflags" -o "$K8S_DIR/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
  echo "kubernetes v$K8S etcd $ETCD_VERSION $(date -u +%FT%TZ)" > "$K8S_DIR/complete"
}

build_etcd() {
  # A module of its own: built beside Kubernetes, etcd's server would move shared dependencies
  # (grpc, otel) to versions Kubernetes was not released with.
  cd "$ETCD_DIR/module"
  printf 'module dra-extender/e2e/etcd\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > go.mod
  cat > main.go <<'EOF'
// etcd's own entry point, built from its published server module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
  "$GO" mod tidy
  "$GO" build -trimpath -ldflags "-s -w" -o "$ETCD_DIR/bin/etcd" .
  echo "etcd $ETCD_VERSION $(date -u +%FT%TZ)" > "$ETCD_DIR/complete"
}

start=$(date +%s)
[ -f "$ETCD_DIR/complete" ] || { echo "build.sh: building etcd $ETCD_VERSION (once)" >&2; build_etcd >&2; }
[ -f "$K8S_DIR/complete" ] || { echo "build.sh: building Kubernetes v$K8S (once; tens of minutes cold)" >&2; build_kubernetes >&2; }
ln -sf "$ETCD_DIR/bin/etcd" "$K8S_DIR/bin/etcd"
echo "build.sh: control plane v$K8S ready in $(( $(date +%s) - start )) s" >&2
echo "$K8S_DIR/bin"
